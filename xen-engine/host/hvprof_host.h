/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * hvprof_host.h: the calls between Xen's host of hvprof's engine (hvprof_host.c, C, Xen's
 * code) and the engine's adapter (platform_adapter.cpp, freestanding C++). Both sides include
 * it; only plain fixed-width types cross.
 *
 * The adapter implements hvpmu::Platform with the hvprof_host_* functions and exports the
 * hvprof_engine_* entry points; the host calls those from hypercall 31, the NMI callback, the
 * APIC timer interrupt and domain destruction.
 */
#ifndef HVPROF_HOST_H
#define HVPROF_HOST_H

#ifdef __cplusplus
#include <cstdint>
extern "C" {
#else
#include <xen/types.h>
#endif

/* What samples: the boot option hvprof=auto|timer|pmu. */
#define HVPROF_SOURCE_AUTO   0  /* the PMU if the CPU has one hvprof drives and it counts */
#define HVPROF_SOURCE_TIMER  1  /* the sampling timer (TimerSource) */
#define HVPROF_SOURCE_PMU    2  /* the PMU driver CPUID names, unchecked */

/* hvprof_domain_info.type and hvprof_context.type, as hvpmu::DomainType. */
#define HVPROF_DOMAIN_PV64   0
#define HVPROF_DOMAIN_PV32   1
#define HVPROF_DOMAIN_HVM    2

struct hvprof_domain_info {
    uint16_t num_vcpus;
    uint8_t type;
    uint8_t is_hardware_domain;
};

/* The interrupted state, as hvpmu::InterruptedContext (its comments say what each means). */
struct hvprof_context {
    uint64_t ip;
    uint64_t frame_pointer;
    uint64_t address_space;
    uint16_t domain;
    uint16_t vcpu;
    uint8_t type;
    uint8_t in_hypervisor;
    uint8_t cpl;
    uint8_t pv_kernel_mode;
    uint8_t hvm_real_mode;
    uint8_t hvm_vm86;
    uint8_t hvm_long_mode;
    uint8_t pad;
};

/* --- provided by the adapter (platform_adapter.cpp) */

/*
 * Builds the engine (once; later calls return what the first did). Returns the hvpmu::PmuKind
 * it samples with, 0 (kNone) if nothing can sample. pmu_counts says whether the CPU's counters
 * were seen counting (hvprof_host_pmu_counts).
 */
unsigned int hvprof_engine_init(unsigned int source, bool pmu_counts);
/* The engine's cpu_type ("timer", "i386/arch_perfmon"...), "" before init. */
const char *hvprof_engine_cpu_type(void);
/* Bytes of static storage the engine and its drivers take. */
unsigned long hvprof_engine_static_bytes(void);
/* Bytes of op's argument, 0 for none, -1 for an op the engine does not know. */
long hvprof_engine_arg_size(unsigned int op);
/* Where the host copies an op's argument: room for the largest (the status op's). */
void *hvprof_engine_arg_buffer(void);
/* Runs op for caller on arg (size bytes, in place). 0 or -errno. Serialized by the host. */
int hvprof_engine_op(uint16_t caller, unsigned int op, void *arg, uint32_t size);
/*
 * NMI or timer interrupt context: the sample path for this CPU. Returns the counters that
 * overflowed (0: the interrupt was not the PMU's).
 */
unsigned int hvprof_engine_pmi(unsigned int cpu);
/* The domain is being destroyed: the engine drops it (serialized by the host). */
void hvprof_engine_domain_destroyed(uint16_t domid);

/* --- provided by the host (hvprof_host.c) */

unsigned int hvprof_host_num_cpus(void);
void hvprof_host_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t regs[4]);
/* Whether the PMU's first counter counts cycles on this CPU (QEMU's TCG: no). */
bool hvprof_host_pmu_counts(void);
bool hvprof_host_rdmsr(unsigned int cpu, uint32_t msr, uint64_t *value);
bool hvprof_host_wrmsr(unsigned int cpu, uint32_t msr, uint64_t value);
void hvprof_host_pmi_route(unsigned int cpu, bool nmi);
void hvprof_host_pmi_rearm(unsigned int cpu);
/* The PMU driver released its counters: the NMI callback goes. */
void hvprof_host_pmu_released(void);
uint64_t hvprof_host_now_ns(void);

bool hvprof_host_domain_info(uint16_t domid, struct hvprof_domain_info *info);
bool hvprof_host_acquire_domain(uint16_t domid);
void hvprof_host_release_domain(uint16_t domid);
bool hvprof_host_claim_pmu(void);
void hvprof_host_release_pmu(void);

bool hvprof_host_context(unsigned int cpu, struct hvprof_context *ctx);
bool hvprof_host_read(uint16_t domid, uint16_t vcpu, uint64_t address, void *buffer,
                      uint32_t bytes);
void hvprof_host_notify(uint16_t consumer);

bool hvprof_host_alloc_shared(uint64_t bytes, void **base, uint64_t *handle);
void hvprof_host_free_shared(void *base, uint64_t bytes);
bool hvprof_host_share(void *base, uint64_t bytes, uint16_t consumer);
void hvprof_host_unshare(void *base, uint64_t bytes, uint16_t consumer);
void hvprof_host_quiesce(void);

bool hvprof_host_timer_start(uint64_t period_ns);
void hvprof_host_timer_stop(void);

#ifdef __cplusplus
}
#endif

#endif /* HVPROF_HOST_H */

/*
 * Local variables:
 * mode: C
 * c-file-style: "BSD"
 * c-basic-offset: 4
 * indent-tabs-mode: nil
 * End:
 */
