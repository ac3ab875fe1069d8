/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * hvprof_host.c: Xen's host of hvprof's profiling engine (CONFIG_HVPROF).
 *
 * The engine (hvprof's hypervisor-pmu/, freestanding C++) is reached through the adapter in
 * platform_adapter.cpp; this file gives it what only Xen has:
 *  - hypercall 31 (__HYPERVISOR_xenoprof_op): xenoprof's legacy ops 0-17 and hvprof's v2 ops
 *    0x100-0x103, the argument copied in and out of the caller's memory, the caller taken from
 *    current->domain;
 *  - MSRs on a given CPU (rdmsr_safe/wrmsr_safe, through on_selected_cpus outside the sample
 *    path), the LVTPC routed as NMI and Xen's NMI callback, for a hardware PMU;
 *  - the sampling timer, for a CPU whose PMU does not count (QEMU's TCG): Xen's one-shot APIC
 *    timer is never programmed past the next sample time while sampling
 *    (hvprof_timer_deadline, called by reprogram_timer), and the sample is taken at the top of
 *    apic_timer_interrupt from the interrupted frame (hvprof_timer_interrupt);
 *  - the interrupted context, and reads of memory for call chains that cannot fault: Xen's own
 *    stack, bounded to the interrupted stack, and a 64-bit PV guest's memory, walked in
 *    software through the directmap;
 *  - rings in xenheap pages shared with the consumer as xenoprof shared them
 *    (share_xen_page_with_guest), and freed only once no mapping is left;
 *  - domain references, VIRQ_XENOPROF sent from a tasklet (never from NMI or the sample path),
 *    and quiescing the samplers.
 *
 * Boot option: hvprof=auto|timer|pmu (see hvprof_host.h).
 */

#include <xen/cpumask.h>
#include <xen/errno.h>
#include <xen/event.h>
#include <xen/guest_access.h>
#include <xen/hvprof.h>
#include <xen/hypercall.h>
#include <xen/init.h>
#include <xen/irq.h>
#include <xen/lib.h>
#include <xen/mm.h>
#include <xen/param.h>
#include <xen/rcupdate.h>
#include <xen/sched.h>
#include <xen/smp.h>
#include <xen/softirq.h>
#include <xen/spinlock.h>
#include <xen/string.h>
#include <xen/tasklet.h>
#include <xen/time.h>
#include <xen/timer.h>

#include <asm/apic.h>
#include <asm/current.h>
#include <asm/hvm/hvm.h>
#include <asm/msr.h>
#include <asm/nmi.h>
#include <asm/page.h>
#include <asm/processor.h>
#include <asm/regs.h>
#include <asm/vpmu.h>

#include <public/xen.h>

#ifdef HVPROF_HAVE_XSM_PROFILE
#include <public/xenoprof.h>
#include <xsm/xsm.h>
#endif

#include "hvprof_host.h"

#define HVPROF_XEN_AT_LEAST(major, minor)                               \
    (HVPROF_XEN_MAJOR > (major) ||                                      \
     (HVPROF_XEN_MAJOR == (major) && HVPROF_XEN_MINOR >= (minor)))

/* Timer source: how early a tick may be taken, and the nearest a deadline is programmed. */
#define HVPROF_TIMER_EARLY      MICROSECS(5)
#define HVPROF_TIMER_MIN_DELTA  MICROSECS(1)

/* Consumers waiting for VIRQ_XENOPROF, per CPU. */
#define HVPROF_PENDING          16

/* Regions unshared while their consumer still maps them, freed once it no longer does. */
#define HVPROF_ZOMBIES          64

/*
 * The largest region a domain other than the hardware domain gets: any PV domain may ask for
 * its own rings (get_buffer), so it must not make Xen allocate much. (The engine caps a region
 * at 256 MiB; xenoprof shared 32 pages.)
 */
#define HVPROF_GUEST_REGION_MAX MB(16)

struct hvprof_cpu {
    /* The interrupted frame, while this CPU is in the sample path. */
    const struct cpu_user_regs *regs;
    /* Depth of the sample path on this CPU (an NMI may nest in the timer interrupt). */
    unsigned int in_sampler;
    bool in_nmi;
    /* Notifications recorded in NMI context, sent after the NMI continuation. */
    bool nmi_continue;
    /* Notifications recorded in the timer interrupt, sent by the tasklet. */
    bool kick;
    /* The previous NMI found two or more counters overflowed: one more may come. */
    bool nmi_swallow;
    /* LVTPC routing. */
    bool routed;
    uint32_t saved_lvtpc;
    /* Timer source: when this CPU samples next (0: not started on this CPU). */
    s_time_t next_sample;
    unsigned long ticks;
    unsigned long late_ticks;
    /* Consumers to notify, each as domid + 1; 0 is a free slot. */
    uint16_t pending[HVPROF_PENDING];
    unsigned long pending_dropped;
    struct tasklet notify_tasklet;
} __cacheline_aligned;

static struct hvprof_cpu hvprof_cpus[NR_CPUS];

struct hvprof_zombie {
    void *base;
    uint64_t bytes;
};

static struct hvprof_zombie hvprof_zombies[HVPROF_ZOMBIES];

/* Serializes the engine's ops and domain destruction (the engine's contract). */
static DEFINE_SPINLOCK(hvprof_lock);
static bool __read_mostly hvprof_ready;
static unsigned int __read_mostly hvprof_num_cpus;

/* Timer source: the period while sampling, 0 otherwise. */
static s_time_t hvprof_period;

/* Hardware source: whether hvprof's NMI callback is installed. */
static bool hvprof_nmi_on;

static unsigned int __read_mostly opt_source = HVPROF_SOURCE_AUTO;

static int __init cf_check parse_hvprof(const char *s)
{
    if ( !strcmp(s, "auto") )
        opt_source = HVPROF_SOURCE_AUTO;
    else if ( !strcmp(s, "timer") )
        opt_source = HVPROF_SOURCE_TIMER;
    else if ( !strcmp(s, "pmu") )
        opt_source = HVPROF_SOURCE_PMU;
    else
        return -EINVAL;

    return 0;
}
custom_param("hvprof", parse_hvprof);

/* --- the machine */

unsigned int hvprof_host_num_cpus(void)
{
    return hvprof_num_cpus;
}

void hvprof_host_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t regs[4])
{
    cpuid_count(leaf, subleaf, &regs[0], &regs[1], &regs[2], &regs[3]);
}

static int hvprof_rdmsr_local(uint32_t msr, uint64_t *value)
{
#if HVPROF_XEN_AT_LEAST(4, 21)
    return rdmsr_safe(msr, value);
#else
    uint64_t v;
    int rc = rdmsr_safe(msr, v);

    *value = rc ? 0 : v;
    return rc;
#endif
}

struct hvprof_msr_call {
    uint32_t msr;
    bool write;
    uint64_t value;
    int rc;
};

static void cf_check hvprof_msr_on_cpu(void *data)
{
    struct hvprof_msr_call *call = data;

    if ( call->write )
        call->rc = wrmsr_safe(call->msr, call->value);
    else
        call->rc = hvprof_rdmsr_local(call->msr, &call->value);
}

/* An MSR access on cpu: here if this is the CPU (the sample path's case), else by IPI. */
static bool hvprof_msr(unsigned int cpu, struct hvprof_msr_call *call)
{
    call->rc = -EINVAL;
    if ( cpu == smp_processor_id() )
        hvprof_msr_on_cpu(call);
    else if ( cpu < nr_cpu_ids && cpu_online(cpu) && local_irq_is_enabled() &&
              !in_irq() )
        on_selected_cpus(cpumask_of(cpu), hvprof_msr_on_cpu, call, 1);

    return call->rc == 0;
}

bool hvprof_host_rdmsr(unsigned int cpu, uint32_t msr, uint64_t *value)
{
    struct hvprof_msr_call call = { .msr = msr };
    bool ok = hvprof_msr(cpu, &call);

    *value = ok ? call.value : 0;
    return ok;
}

bool hvprof_host_wrmsr(unsigned int cpu, uint32_t msr, uint64_t value)
{
    struct hvprof_msr_call call = { .msr = msr, .write = true, .value = value };

    return hvprof_msr(cpu, &call);
}

/*
 * Whether the first counter counts: cycles, user and kernel, over a short spin. QEMU's TCG
 * accepts the MSRs (or refuses them) and counts nothing; the timer must sample there.
 */
bool hvprof_host_pmu_counts(void)
{
    uint32_t sel, ctr, event, eax, ebx, ecx, edx;
    uint64_t saved_sel, saved_ctr, saved_global = 0, value = 0;
    bool global = false, ok;
    unsigned long flags;
    unsigned int i;

    switch ( boot_cpu_data.x86_vendor )
    {
    case X86_VENDOR_INTEL:
        if ( boot_cpu_data.cpuid_level < 0xa )
            return false;
        cpuid(0xa, &eax, &ebx, &ecx, &edx);
        if ( (eax & 0xff) == 0 || ((eax >> 8) & 0xff) == 0 )
            return false;
        global = (eax & 0xff) >= 2;
        sel = MSR_P6_EVNTSEL(0);
        ctr = MSR_P6_PERFCTR(0);
        event = 0x3c;
        break;

    case X86_VENDOR_AMD:
    case X86_VENDOR_HYGON:
        sel = MSR_K7_EVNTSEL0;
        ctr = MSR_K7_PERFCTR0;
        event = 0x76;
        break;

    default:
        return false;
    }

    local_irq_save(flags);
    ok = !hvprof_rdmsr_local(sel, &saved_sel) && !hvprof_rdmsr_local(ctr, &saved_ctr);
    if ( ok && global )
        ok = !hvprof_rdmsr_local(MSR_CORE_PERF_GLOBAL_CTRL, &saved_global) &&
             !wrmsr_safe(MSR_CORE_PERF_GLOBAL_CTRL, saved_global | 1);
    if ( ok )
        ok = !wrmsr_safe(sel, 0) && !wrmsr_safe(ctr, 0) &&
             /* USR | OS | EN */
             !wrmsr_safe(sel, event | (1u << 16) | (1u << 17) | (1u << 22));
    if ( ok )
    {
        for ( i = 0; i < 100000; i++ )
            cpu_relax();
        ok = !hvprof_rdmsr_local(ctr, &value);
        wrmsr_safe(sel, 0);
        wrmsr_safe(ctr, saved_ctr);
        wrmsr_safe(sel, saved_sel);
        if ( global )
            wrmsr_safe(MSR_CORE_PERF_GLOBAL_CTRL, saved_global);
    }
    local_irq_restore(flags);

    return ok && value != 0;
}

static void cf_check hvprof_lvtpc_on_cpu(void *data)
{
    struct hvprof_cpu *c = &hvprof_cpus[smp_processor_id()];

    if ( data )
    {
        if ( !c->routed )
        {
            c->saved_lvtpc = apic_read(APIC_LVTPC);
            c->routed = true;
        }
        apic_write(APIC_LVTPC, APIC_DM_NMI);
    }
    else if ( c->routed )
    {
        apic_write(APIC_LVTPC, c->saved_lvtpc);
        c->routed = false;
    }
}

static int cf_check hvprof_nmi(const struct cpu_user_regs *regs, int cpu);

void hvprof_host_pmi_route(unsigned int cpu, bool nmi)
{
    if ( cpu >= nr_cpu_ids || !cpu_online(cpu) )
        return;

    if ( nmi && !hvprof_nmi_on )
    {
        set_nmi_callback(hvprof_nmi);
        hvprof_nmi_on = true;
    }

    on_selected_cpus(cpumask_of(cpu), hvprof_lvtpc_on_cpu, nmi ? (void *)1 : NULL, 1);
}

/* NMI context: Intel masks the LVT entry when it delivers a PMI. */
void hvprof_host_pmi_rearm(unsigned int cpu)
{
    if ( cpu == smp_processor_id() && hvprof_cpus[cpu].routed )
        apic_write(APIC_LVTPC, APIC_DM_NMI);
}

/*
 * The counters are released: the NMI callback goes. (Not at stop: an overflow already on its
 * way would arrive as an unknown NMI, which Xen may take as fatal.)
 */
void hvprof_host_pmu_released(void)
{
    if ( hvprof_nmi_on )
    {
        unset_nmi_callback();
        hvprof_nmi_on = false;
    }
}

uint64_t hvprof_host_now_ns(void)
{
    return NOW();
}

/* --- domains */

bool hvprof_host_domain_info(uint16_t domid, struct hvprof_domain_info *info)
{
    struct domain *d;
    bool ok;

    if ( domid >= DOMID_FIRST_RESERVED || !(d = rcu_lock_domain_by_id(domid)) )
        return false;

    ok = !d->is_dying && d->max_vcpus;
    info->num_vcpus = min_t(unsigned int, d->max_vcpus, UINT16_MAX);
    info->type = is_hvm_domain(d) ? HVPROF_DOMAIN_HVM
                 : is_pv_32bit_domain(d) ? HVPROF_DOMAIN_PV32 : HVPROF_DOMAIN_PV64;
    info->is_hardware_domain = is_hardware_domain(d);
    rcu_unlock_domain(d);

    return ok;
}

bool hvprof_host_acquire_domain(uint16_t domid)
{
    struct domain *d;

    if ( domid >= DOMID_FIRST_RESERVED || !(d = get_domain_by_id(domid)) )
        return false;
    if ( d->is_dying )
    {
        put_domain(d);
        return false;
    }

    return true;
}

void hvprof_host_release_domain(uint16_t domid)
{
    struct domain *d;

    /* The reference taken by hvprof_host_acquire_domain keeps the domain findable. */
    if ( domid >= DOMID_FIRST_RESERVED || !(d = rcu_lock_domain_by_id(domid)) )
        return;
    put_domain(d);
    rcu_unlock_domain(d);
}

/*
 * A hardware PMU is hvprof's only while no guest is offered a vPMU and no NMI watchdog counts
 * with it. (A check when buffers are first given out: the vPMU mode can still be changed at
 * run time, XENPF_set_pmu_mode, and Xen's vPMU asks nobody.)
 */
bool hvprof_host_claim_pmu(void)
{
    return vpmu_mode == XENPMU_MODE_OFF && nmi_watchdog == NMI_NONE;
}

void hvprof_host_release_pmu(void)
{
}

/* --- the sample path */

static void hvprof_sampler_enter(struct hvprof_cpu *c,
                                 const struct cpu_user_regs *regs)
{
    c->in_sampler++;
    smp_mb(); /* Seen by hvprof_host_quiesce() before we look at the engine's routing. */
    c->regs = regs;
}

static void hvprof_sampler_exit(struct hvprof_cpu *c,
                                const struct cpu_user_regs *regs)
{
    c->regs = regs; /* The frame of a sample path this one interrupted, if any. */
    smp_mb();
    c->in_sampler--;
}

bool hvprof_host_context(unsigned int cpu, struct hvprof_context *ctx)
{
    const struct cpu_user_regs *regs;
    struct vcpu *v = current;
    const struct domain *d = v->domain;

    if ( cpu != smp_processor_id() || !(regs = hvprof_cpus[cpu].regs) )
        return false;

    memset(ctx, 0, sizeof(*ctx));
    ctx->ip = regs->rip;
    ctx->frame_pointer = regs->rbp;
    ctx->vcpu = v->vcpu_id;
    ctx->type = HVPROF_DOMAIN_PV64;

    if ( is_idle_vcpu(v) )
    {
        ctx->domain = DOMID_IDLE;
        ctx->in_hypervisor = 1;
        return true;
    }

    ctx->domain = d->domain_id;
    ctx->in_hypervisor = !guest_mode(regs);

    if ( is_hvm_vcpu(v) )
    {
        ctx->type = HVPROF_DOMAIN_HVM;
        ctx->address_space = v->arch.hvm.guest_cr[3];
        if ( !ctx->in_hypervisor )
        {
            int mode = hvm_guest_x86_mode(v);

            ctx->hvm_real_mode = mode == 0;
            ctx->hvm_vm86 = mode == 1;
            ctx->cpl = hvm_get_cpl(v);
            ctx->hvm_long_mode = hvm_long_mode_active(v);
        }
    }
    else
    {
        bool kernel;

        ctx->cpl = regs->cs & 3;
        if ( is_pv_32bit_domain(d) )
        {
            ctx->type = HVPROF_DOMAIN_PV32;
            kernel = ring_1(regs);
        }
        else
            kernel = v->arch.flags & TF_kernel_mode;
        ctx->pv_kernel_mode = kernel;
        ctx->address_space = pagetable_get_paddr(kernel || is_pv_32bit_domain(d)
                                                 ? v->arch.guest_table
                                                 : v->arch.guest_table_user);
    }

    return true;
}

/*
 * Xen's own memory, for hypervisor call chains: only the stack the interrupted code ran on,
 * from its stack pointer up to the top of that stack, so that no read can fault.
 */
static bool hvprof_read_xen(const struct cpu_user_regs *regs, uint64_t address,
                            void *buffer, uint32_t bytes)
{
    unsigned long sp = regs->rsp, top;

    if ( guest_mode(regs) )
        return false;

    switch ( get_stack_page(sp) )
    {
    case 6: case 7: /* The primary stack, with struct cpu_info at its top. */
        top = (sp | (STACK_SIZE - 1)) + 1 - sizeof(struct cpu_info);
        break;

    case 1: case 2: case 3: case 4: /* An IST stack: one page. */
        top = (sp | (PAGE_SIZE - 1)) + 1;
        break;

    default: /* Shadow stacks: not a frame. */
        return false;
    }

    if ( address < sp || address >= top || bytes > top - address )
        return false;
    memcpy(buffer, (const void *)(unsigned long)address, bytes);

    return true;
}

/* A frame the domain owns and the directmap maps: readable without a fault. */
static const void *hvprof_frame(const struct domain *d, unsigned long mfn)
{
    if ( !mfn_valid(_mfn(mfn)) || !arch_mfns_in_directmap(mfn, 1) ||
         page_get_owner(mfn_to_page(_mfn(mfn))) != d )
        return NULL;

    return mfn_to_virt(mfn);
}

static intpte_t hvprof_pte(const void *table, unsigned int slot)
{
    return read_atomic((const intpte_t *)table + slot);
}

/*
 * The frame that maps va in a 64-bit PV vCPU's current page tables, found in software through
 * the directmap: no fault, no lock, so NMI-safe. Every table and the frame itself must belong
 * to the domain. The walk may race the guest's own updates of its tables, as a hardware walk
 * would: a frame it finds is not reused before this CPU, which runs the vCPU with interrupts
 * off, has taken the TLB flush that precedes its reuse.
 */
static const void *hvprof_pv_page(const struct vcpu *v, uint64_t va)
{
    const struct domain *d = v->domain;
    unsigned int slot = l4_table_offset(va);
    pagetable_t root = (v->arch.flags & TF_kernel_mode) ? v->arch.guest_table
                                                         : v->arch.guest_table_user;
    const void *table;
    intpte_t e;

    if ( !is_canonical_address(va) ||
         (slot >= ROOT_PAGETABLE_FIRST_XEN_SLOT && slot <= ROOT_PAGETABLE_LAST_XEN_SLOT) ||
         pagetable_is_null(root) )
        return NULL;

    if ( !(table = hvprof_frame(d, pagetable_get_pfn(root))) )
        return NULL;
    e = hvprof_pte(table, slot);
    if ( !(e & _PAGE_PRESENT) )
        return NULL;

    if ( !(table = hvprof_frame(d, l4e_get_pfn(l4e_from_intpte(e)))) )
        return NULL;
    e = hvprof_pte(table, l3_table_offset(va));
    if ( (e & (_PAGE_PRESENT | _PAGE_PSE)) != _PAGE_PRESENT )
        return NULL;

    if ( !(table = hvprof_frame(d, l3e_get_pfn(l3e_from_intpte(e)))) )
        return NULL;
    e = hvprof_pte(table, l2_table_offset(va));
    if ( (e & (_PAGE_PRESENT | _PAGE_PSE)) != _PAGE_PRESENT )
        return NULL;

    if ( !(table = hvprof_frame(d, l2e_get_pfn(l2e_from_intpte(e)))) )
        return NULL;
    e = hvprof_pte(table, l1_table_offset(va));
    if ( !(e & _PAGE_PRESENT) )
        return NULL;

    return hvprof_frame(d, l1e_get_pfn(l1e_from_intpte(e)));
}

static bool hvprof_read_pv(const struct vcpu *v, uint64_t address, void *buffer,
                           uint32_t bytes)
{
    uint8_t *out = buffer;

    while ( bytes )
    {
        unsigned int offset = address & ~PAGE_MASK;
        unsigned int chunk = min_t(unsigned int, bytes, PAGE_SIZE - offset);
        const uint8_t *page = hvprof_pv_page(v, address);

        if ( !page )
            return false;
        memcpy(out, page + offset, chunk);
        out += chunk;
        address += chunk;
        bytes -= chunk;
    }

    return true;
}

/*
 * Sample path: memory for call chains, of the interrupted context only. Guest frames are read
 * for 64-bit PV vCPUs; an HVM guest's would need its p2m, which is not NMI-safe.
 */
bool hvprof_host_read(uint16_t domid, uint16_t vcpu, uint64_t address, void *buffer,
                      uint32_t bytes)
{
    const struct cpu_user_regs *regs = hvprof_cpus[smp_processor_id()].regs;
    const struct vcpu *v = current;

    if ( !regs || !bytes )
        return false;
    if ( domid == DOMID_XEN )
        return hvprof_read_xen(regs, address, buffer, bytes);
    if ( is_idle_vcpu(v) || v->domain->domain_id != domid || v->vcpu_id != vcpu ||
         !guest_mode(regs) || !is_pv_vcpu(v) || is_pv_32bit_vcpu(v) )
        return false;

    return hvprof_read_pv(v, address, buffer, bytes);
}

/* Sample path (or an op): remembers that consumer has work; the tasklet tells it. */
void hvprof_host_notify(uint16_t consumer)
{
    unsigned int cpu = smp_processor_id(), i;
    struct hvprof_cpu *c = &hvprof_cpus[cpu];
    uint16_t want = consumer + 1;

    if ( consumer >= DOMID_FIRST_RESERVED )
        return;

    for ( i = 0; i < HVPROF_PENDING; i++ )
    {
        uint16_t seen = read_atomic(&c->pending[i]);

        if ( seen == want )
            break;
        if ( !seen && (seen = cmpxchg(&c->pending[i], 0, want)) == 0 )
            break;
        if ( seen == want )
            break;
    }
    if ( i == HVPROF_PENDING )
    {
        c->pending_dropped++;
        return;
    }

    if ( c->in_nmi )
        c->nmi_continue = true;
    else if ( c->in_sampler )
        c->kick = true;
    else
        tasklet_schedule_on_cpu(&c->notify_tasklet, cpu);
}

static void cf_check hvprof_notify_tasklet(void *data)
{
    struct hvprof_cpu *c = &hvprof_cpus[(unsigned long)data];
    unsigned int i;

    for ( i = 0; i < HVPROF_PENDING; i++ )
    {
        uint16_t id = xchg(&c->pending[i], 0);
        struct domain *d;

        if ( !id || !(d = rcu_lock_domain_by_id(id - 1)) )
            continue;
        if ( !d->is_dying && d->vcpu && d->vcpu[0] )
            send_guest_vcpu_virq(d->vcpu[0], VIRQ_XENOPROF);
        rcu_unlock_domain(d);
    }
}

/* After the NMI, in the continuation's interrupt: the notifications the NMI recorded. */
bool hvprof_nmi_continuation(void)
{
    unsigned int cpu = smp_processor_id();
    struct hvprof_cpu *c = &hvprof_cpus[cpu];

    if ( !test_and_clear_bool(c->nmi_continue) )
        return false;
    tasklet_schedule_on_cpu(&c->notify_tasklet, cpu);

    return true;
}

static int cf_check hvprof_nmi(const struct cpu_user_regs *regs, int cpu)
{
    struct hvprof_cpu *c = &hvprof_cpus[cpu];
    const struct cpu_user_regs *outer = c->regs;
    unsigned int overflowed;

    c->in_nmi = true;
    hvprof_sampler_enter(c, regs);
    overflowed = hvprof_engine_pmi(cpu);
    hvprof_sampler_exit(c, outer);
    c->in_nmi = false;

    if ( c->nmi_continue )
        trigger_nmi_continuation();

    if ( overflowed )
    {
        /* Two counters may have raised two NMIs, the first handling both. */
        c->nmi_swallow = overflowed & (overflowed - 1);
        return 1;
    }

    return test_and_clear_bool(c->nmi_swallow);
}

/* --- the timer source */

static void cf_check hvprof_timer_start_cpu(void *unused)
{
    struct hvprof_cpu *c = &hvprof_cpus[smp_processor_id()];

    c->ticks = c->late_ticks = 0;
    c->next_sample = NOW() + read_atomic(&hvprof_period);
    /* The timer softirq reprograms the APIC timer through hvprof_timer_deadline(). */
    raise_softirq(TIMER_SOFTIRQ);
}

bool hvprof_host_timer_start(uint64_t period_ns)
{
    if ( !period_ns || period_ns > STIME_MAX )
        return false;

    write_atomic(&hvprof_period, (s_time_t)period_ns);
    smp_mb();
    on_selected_cpus(&cpu_online_map, hvprof_timer_start_cpu, NULL, 1);
    printk(XENLOG_INFO "hvprof: sampling timer on, one sample every %"PRIu64" ns per CPU\n",
           period_ns);

    return true;
}

void hvprof_host_timer_stop(void)
{
    unsigned long ticks = 0, late = 0;
    unsigned int cpu;

    write_atomic(&hvprof_period, 0);
    smp_mb();
    /* A deadline still programmed fires once more: hvprof_timer_interrupt() ignores it. */
    for_each_online_cpu ( cpu )
    {
        ticks += hvprof_cpus[cpu].ticks;
        late += hvprof_cpus[cpu].late_ticks;
        hvprof_cpus[cpu].next_sample = 0;
    }
    printk(XENLOG_INFO "hvprof: sampling timer off: %lu ticks, %lu of them late\n",
           ticks, late);
}

/*
 * Called by reprogram_timer() with the deadline Xen's timers want (0: none), interrupts off:
 * never later than this CPU's next sample while sampling.
 */
s_time_t hvprof_timer_deadline(s_time_t timeout)
{
    const struct hvprof_cpu *c = &hvprof_cpus[smp_processor_id()];
    s_time_t next = c->next_sample, soon;

    if ( !read_atomic(&hvprof_period) || !next || (timeout && timeout <= next) )
        return timeout;

    soon = NOW() + HVPROF_TIMER_MIN_DELTA;

    return next > soon ? next : soon;
}

/*
 * The top of apic_timer_interrupt(), interrupts off. A tick that is due samples the interrupted
 * context; an interrupt for one of Xen's own timers does not. Xen's timer softirq then runs as
 * usual and programs the next deadline through hvprof_timer_deadline().
 */
void hvprof_timer_interrupt(void)
{
    unsigned int cpu = smp_processor_id();
    struct hvprof_cpu *c = &hvprof_cpus[cpu];
    const struct cpu_user_regs *regs = get_irq_regs(), *outer;
    s_time_t period = read_atomic(&hvprof_period), now, next;

    if ( !period || !c->next_sample || !regs )
        return;
    now = NOW();
    if ( now + HVPROF_TIMER_EARLY < c->next_sample )
        return;

    outer = c->regs;
    hvprof_sampler_enter(c, regs);
    hvprof_engine_pmi(cpu);
    hvprof_sampler_exit(c, outer);

    c->ticks++;
    next = c->next_sample + period;
    if ( next <= now )
    {
        /* Ticks missed (interrupts were off that long): the rate stays fixed. */
        c->late_ticks++;
        next = now + period - (now - c->next_sample) % period;
    }
    c->next_sample = next;

    if ( test_and_clear_bool(c->kick) )
        tasklet_schedule_on_cpu(&c->notify_tasklet, cpu);
}

/* --- shared memory */

static void hvprof_reap(void);

bool hvprof_host_alloc_shared(uint64_t bytes, void **base, uint64_t *handle)
{
    unsigned int order, i;
    void *p;

    if ( !bytes || bytes > (1ULL << (MAX_ORDER + PAGE_SHIFT)) ||
         (bytes > HVPROF_GUEST_REGION_MAX && !is_hardware_domain(current->domain)) )
        return false;

    /*
     * While every slot for regions still mapped is taken, no new region: what a consumer that
     * never unmaps can keep from Xen stays bounded.
     */
    for ( i = 0; i < HVPROF_ZOMBIES && hvprof_zombies[i].base; i++ )
        continue;
    if ( i == HVPROF_ZOMBIES )
    {
        hvprof_reap();
        for ( i = 0; i < HVPROF_ZOMBIES && hvprof_zombies[i].base; i++ )
            continue;
        if ( i == HVPROF_ZOMBIES )
            return false;
    }
    order = get_order_from_bytes(bytes);
    if ( !(p = alloc_xenheap_pages(order, 0)) )
        return false;
    for ( i = 0; i < (1u << order); i++ )
        clear_page(p + i * PAGE_SIZE);

    *base = p;
    /* Contiguous frames: the consumer maps PFN_UP(bytes) frames from this one on. */
    *handle = virt_to_maddr(p);

    return true;
}

/* Frees a region no mapping refers to any more; false while one does. */
static bool hvprof_try_free(void *base, uint64_t bytes)
{
    struct page_info *pg = virt_to_page(base);
    unsigned long i, n = PFN_UP(bytes);

    for ( i = 0; i < n; i++ )
        if ( pg[i].count_info & (PGC_allocated | PGC_count_mask) )
            return false;
    for ( i = 0; i < n; i++ )
        page_set_owner(&pg[i], NULL);
    free_xenheap_pages(base, get_order_from_bytes(bytes));

    return true;
}

static void hvprof_reap(void)
{
    unsigned int i;

    for ( i = 0; i < HVPROF_ZOMBIES; i++ )
        if ( hvprof_zombies[i].base &&
             hvprof_try_free(hvprof_zombies[i].base, hvprof_zombies[i].bytes) )
            hvprof_zombies[i].base = NULL;
}

void hvprof_host_free_shared(void *base, uint64_t bytes)
{
    unsigned int i;

    if ( hvprof_try_free(base, bytes) )
        return;

    /* Still mapped by its old consumer: freed by a later op once it is not. */
    for ( i = 0; i < HVPROF_ZOMBIES; i++ )
        if ( !hvprof_zombies[i].base )
        {
            hvprof_zombies[i].base = base;
            hvprof_zombies[i].bytes = bytes;
            return;
        }

    printk(XENLOG_WARNING "hvprof: %"PRIu64" bytes of rings still mapped, leaked\n", bytes);
}

bool hvprof_host_share(void *base, uint64_t bytes, uint16_t consumer)
{
    struct page_info *pg = virt_to_page(base);
    unsigned long i, n = PFN_UP(bytes);
    struct domain *d;
    bool ok = false;

    if ( consumer >= DOMID_FIRST_RESERVED || !(d = rcu_lock_domain_by_id(consumer)) )
        return false;

    /*
     * The consumer maps the frames by machine address, as xenoprof's did: PV only. Frames an
     * earlier share left mapped stay unshareable until the mappings go.
     */
    if ( d->is_dying || paging_mode_translate(d) )
        goto out;
    for ( i = 0; i < n; i++ )
        if ( pg[i].count_info & (PGC_allocated | PGC_count_mask) )
            goto out;

    for ( i = 0; i < n; i++ )
    {
        page_set_owner(&pg[i], NULL);
        share_xen_page_with_guest(&pg[i], d, SHARE_rw);
    }
    ok = true;

 out:
    rcu_unlock_domain(d);

    return ok;
}

void hvprof_host_unshare(void *base, uint64_t bytes, uint16_t consumer)
{
    struct page_info *pg = virt_to_page(base);
    unsigned long i, n = PFN_UP(bytes);

    /* Drops the allocation references; the consumer's mappings keep theirs until unmapped. */
    for ( i = 0; i < n; i++ )
        put_page_alloc_ref(&pg[i]);
}

void hvprof_host_quiesce(void)
{
    unsigned int cpu;

    smp_mb();
    for_each_online_cpu ( cpu )
        while ( read_atomic(&hvprof_cpus[cpu].in_sampler) )
            cpu_relax();
}

/* --- hypercall 31 */

#ifdef HVPROF_HAVE_XSM_PROFILE
/* The xenoprof op XSM (flask) sees: a v2 op is checked as its legacy counterpart. */
static int hvprof_xsm_op(int op)
{
    switch ( op )
    {
    case 0x100: /* init_v2 */
    case 0x101: /* status */
        return XENOPROF_init;
    case 0x102: /* get_buffer_v2 */
        return XENOPROF_get_buffer;
    case 0x103: /* set_passive_v2 */
        return XENOPROF_set_passive;
    default:
        return op;
    }
}
#endif

long do_xenoprof_op(int op, XEN_GUEST_HANDLE_PARAM(void) arg)
{
    struct domain *d = current->domain;
    long size;
    uint8_t *buffer;
    int rc;

    if ( !hvprof_ready )
        return -ENODEV;

#ifdef HVPROF_HAVE_XSM_PROFILE
    rc = xsm_profile(XSM_HOOK, d, hvprof_xsm_op(op));
    if ( rc )
        return rc;
#endif

    /* An op the engine does not know goes in without argument: it answers -EINVAL. */
    size = hvprof_engine_arg_size(op);
    if ( size < 0 )
        size = 0;

    spin_lock(&hvprof_lock);
    hvprof_reap();
    buffer = hvprof_engine_arg_buffer();
    if ( size && copy_from_guest(buffer, arg, size) )
        rc = -EFAULT;
    else
    {
        rc = hvprof_engine_op(d->domain_id, op, size ? buffer : NULL, size);
        if ( !rc && size && __copy_to_guest(arg, buffer, size) )
            rc = -EFAULT;
    }
    if ( size )
        memset(buffer, 0, size);
    spin_unlock(&hvprof_lock);

    /* Notifications the op recorded (stop's final flush) go now. */
    if ( test_and_clear_bool(hvprof_cpus[smp_processor_id()].kick) )
        tasklet_schedule_on_cpu(&hvprof_cpus[smp_processor_id()].notify_tasklet,
                                smp_processor_id());

    return rc;
}

/* From domain_kill(): the engine lets go of the domain and frees what it held for it. */
void hvprof_domain_destroyed(struct domain *d)
{
    if ( !hvprof_ready )
        return;

    spin_lock(&hvprof_lock);
    hvprof_engine_domain_destroyed(d->domain_id);
    hvprof_reap();
    spin_unlock(&hvprof_lock);
}

static int __init cf_check hvprof_init(void)
{
    static const char *const kinds[] = {
        "none", "intel-arch-perfmon", "amd-legacy", "amd-core", "external", "timer",
    };
    unsigned int cpu, kind;
    bool counts = false;

    for ( cpu = 0; cpu < NR_CPUS; cpu++ )
        softirq_tasklet_init(&hvprof_cpus[cpu].notify_tasklet, hvprof_notify_tasklet,
                             (void *)(unsigned long)cpu);

    hvprof_num_cpus = cpumask_last(&cpu_online_map) + 1;
    if ( opt_source == HVPROF_SOURCE_AUTO )
        counts = hvprof_host_pmu_counts();
    kind = hvprof_engine_init(opt_source, counts);
    hvprof_ready = kind != 0;

    printk(XENLOG_INFO "hvprof: engine %s: %s (cpu_type %s), %u CPUs, %lu KiB static\n",
           hvprof_ready ? "ready" : "unavailable",
           kind < ARRAY_SIZE(kinds) ? kinds[kind] : "?", hvprof_engine_cpu_type(),
           hvprof_num_cpus, hvprof_engine_static_bytes() >> 10);

    return 0;
}
__initcall(hvprof_init);

/*
 * Local variables:
 * mode: C
 * c-file-style: "BSD"
 * c-basic-offset: 4
 * tab-width: 4
 * indent-tabs-mode: nil
 * End:
 */
