// SPDX-License-Identifier: GPL-2.0-or-later
// The engine's side of its host inside Xen: hvpmu::Platform implemented with the C functions of
// hvprof_host.c (hvprof_host.h), the engine and its PMU drivers in static storage, and the
// extern "C" entry points the host calls (hypercall 31, the sample path, domain destruction).
//
// Compiled as the engine is (freestanding C++20: no exceptions, RTTI, heap or std::) with Xen's
// code-generation flags (see the patch series' Makefile). Nothing here runs before the host
// calls hvprof_engine_init: every object is constant-initialized or built in place then, so the
// object has no global constructors (.init_array stays empty; the build checks it).
#include <cstddef>
#include <cstdint>
#include <new>

#include "hvpmu/abi/errors.h"
#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"
#include "hvpmu/abi/xenoprof_legacy.h"
#include "hvpmu/engine.h"
#include "hvpmu/platform.h"
#include "hvpmu/pmu_drivers.h"
#include "hvpmu/timer_source.h"
#include "hvprof_host.h"

namespace hvprof_xen {

using hvpmu::CpuidResult;
using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::DomainType;
using hvpmu::ErrorCode;
using hvpmu::InterruptedContext;
using hvpmu::PmuDriver;
using hvpmu::SharedRegion;

namespace legacy = hvpmu::legacy;

class XenPlatform final : public hvpmu::Platform {
 public:
  constexpr XenPlatform() = default;

  // Whether a hardware PMU samples (PMIs as NMIs), rather than the timer.
  void set_pmu_mode(bool pmu) { pmu_ = pmu; }
  bool pmu_mode() const { return pmu_; }

  uint32_t NumCpus() override { return hvprof_host_num_cpus(); }

  CpuidResult Cpuid(uint32_t cpu, uint32_t leaf, uint32_t subleaf) override {
    (void)cpu;  // every CPU of a host answers alike
    uint32_t regs[4] = {0, 0, 0, 0};
    hvprof_host_cpuid(leaf, subleaf, regs);
    return {regs[0], regs[1], regs[2], regs[3]};
  }

  bool ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) override {
    return hvprof_host_rdmsr(cpu, msr, value);
  }
  bool WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) override {
    return hvprof_host_wrmsr(cpu, msr, value);
  }

  void SetPmiRouting(uint32_t cpu, bool deliver_as_nmi) override {
    if (pmu_) hvprof_host_pmi_route(cpu, deliver_as_nmi);
  }
  void RearmPmi(uint32_t cpu) override {
    if (pmu_) hvprof_host_pmi_rearm(cpu);
  }
  uint64_t NowNs() override { return hvprof_host_now_ns(); }

  bool GetDomainInfo(DomainId domain, DomainInfo* info) override {
    hvprof_domain_info raw{};
    if (!hvprof_host_domain_info(domain, &raw)) return false;
    info->num_vcpus = raw.num_vcpus;
    info->type = ToDomainType(raw.type);
    info->is_hardware_domain = raw.is_hardware_domain != 0;
    return true;
  }
  bool AcquireDomain(DomainId domain) override { return hvprof_host_acquire_domain(domain); }
  void ReleaseDomain(DomainId domain) override { hvprof_host_release_domain(domain); }

  // The timer needs no PMU: only a hardware source claims it (against the vPMU and the NMI
  // watchdog).
  bool ClaimPmu() override { return !pmu_ || hvprof_host_claim_pmu(); }
  void ReleasePmu() override {
    if (pmu_) hvprof_host_release_pmu();
  }

  bool GetInterruptedContext(uint32_t cpu, InterruptedContext* context) override {
    hvprof_context raw{};
    if (!hvprof_host_context(cpu, &raw)) return false;
    context->domain = raw.domain;
    context->vcpu = raw.vcpu;
    context->type = ToDomainType(raw.type);
    context->in_hypervisor = raw.in_hypervisor != 0;
    context->cpl = raw.cpl;
    context->pv_kernel_mode = raw.pv_kernel_mode != 0;
    context->hvm_real_mode = raw.hvm_real_mode != 0;
    context->hvm_vm86 = raw.hvm_vm86 != 0;
    context->hvm_long_mode = raw.hvm_long_mode != 0;
    context->ip = raw.ip;
    context->frame_pointer = raw.frame_pointer;
    context->address_space = raw.address_space;
    context->pid = hvpmu::ring::kNoPid;  // Xen knows vCPUs, not processes
    context->tid = hvpmu::ring::kNoPid;
    return true;
  }
  bool ReadGuestMemory(DomainId domain, uint16_t vcpu, uint64_t address, void* buffer,
                       uint32_t bytes) override {
    return hvprof_host_read(domain, vcpu, address, buffer, bytes);
  }
  // VIRQ_XENOPROF goes to the consumer's vCPU 0 (the only one user space binds), later, from a
  // tasklet: never from the sample path itself.
  void Notify(DomainId consumer, DomainId owner, uint32_t ring_index) override {
    (void)owner;
    (void)ring_index;
    hvprof_host_notify(consumer);
  }

  bool AllocateShared(DomainId owner, uint64_t bytes, SharedRegion* region) override {
    (void)owner;
    void* base = nullptr;
    uint64_t handle = 0;
    if (!hvprof_host_alloc_shared(bytes, &base, &handle)) return false;
    region->base = base;
    region->bytes = bytes;
    region->handle = handle;  // the machine address of the first of contiguous frames
    return true;
  }
  void FreeShared(SharedRegion* region) override {
    if (region->base != nullptr) hvprof_host_free_shared(region->base, region->bytes);
    *region = SharedRegion{};
  }
  bool ShareWith(const SharedRegion& region, DomainId consumer) override {
    return hvprof_host_share(region.base, region.bytes, consumer);
  }
  void Unshare(const SharedRegion& region, DomainId consumer) override {
    hvprof_host_unshare(region.base, region.bytes, consumer);
  }
  void QuiesceSamplers() override { hvprof_host_quiesce(); }

  bool StartSampleTimer(uint64_t period_ns) override { return hvprof_host_timer_start(period_ns); }
  void StopSampleTimer() override { hvprof_host_timer_stop(); }

 private:
  static constexpr DomainType ToDomainType(uint8_t type) {
    return type == HVPROF_DOMAIN_HVM    ? DomainType::kHvm
           : type == HVPROF_DOMAIN_PV32 ? DomainType::kPv32
                                        : DomainType::kPv64;
  }

  bool pmu_ = false;
};

// The driver the engine sees: forwards to the chosen one and keeps, per CPU, which counters the
// last interrupt found overflowed, so that the NMI callback can tell Xen whether the NMI was
// the PMU's (Engine::HandlePmi does not say).
class RecordingDriver final : public PmuDriver {
 public:
  constexpr RecordingDriver() = default;

  void Attach(PmuDriver* inner, bool pmu) {
    inner_ = inner;
    pmu_ = pmu;
  }
  PmuDriver* inner() const { return inner_; }
  // NMI or timer interrupt context, on `cpu` itself.
  void ClearLast(uint32_t cpu) {
    if (cpu < hvpmu::kMaxCpus) last_[cpu] = 0;
  }
  uint32_t Last(uint32_t cpu) const { return cpu < hvpmu::kMaxCpus ? last_[cpu] : 0; }

  hvpmu::PmuKind kind() const override { return inner_->kind(); }
  const char* cpu_type() const override { return inner_->cpu_type(); }
  uint32_t num_counters() const override { return inner_->num_counters(); }
  void Describe(hvpmu::InitV2* init) const override { inner_->Describe(init); }
  ErrorCode Validate(uint32_t index, const hvpmu::CounterConfig& config) const override {
    return inner_->Validate(index, config);
  }
  ErrorCode Reserve() override { return inner_->Reserve(); }
  void Release() override {
    inner_->Release();
    if (pmu_) hvprof_host_pmu_released();
  }
  ErrorCode Setup(const hvpmu::CounterConfig* counters, uint32_t count) override {
    return inner_->Setup(counters, count);
  }
  void Start() override { inner_->Start(); }
  void Stop() override { inner_->Stop(); }
  uint32_t CollectOverflows(uint32_t cpu) override {
    const uint32_t overflowed = inner_->CollectOverflows(cpu);
    if (cpu < hvpmu::kMaxCpus) last_[cpu] = overflowed;
    return overflowed;
  }

 private:
  PmuDriver* inner_ = nullptr;
  bool pmu_ = false;
  uint32_t last_[hvpmu::kMaxCpus] = {};
};

// The largest op argument: the status op's.
constexpr size_t kArgBytes = sizeof(hvpmu::Status) > sizeof(hvpmu::InitV2)
                                 ? sizeof(hvpmu::Status)
                                 : sizeof(hvpmu::InitV2);
static_assert(kArgBytes >= sizeof(hvpmu::BufferV2) && kArgBytes >= sizeof(legacy::Init) &&
              kArgBytes >= sizeof(legacy::Counter) && kArgBytes >= sizeof(legacy::IbsCounter));

// Static storage, all of it constant-initialized: no constructor runs before
// hvprof_engine_init, and the object has no global constructors.
constinit XenPlatform g_platform;
constinit RecordingDriver g_driver;
constinit hvpmu::TimerSource g_timer{g_platform};
alignas(hvpmu::PmuDrivers) constinit unsigned char g_drivers_storage[sizeof(hvpmu::PmuDrivers)] = {};
alignas(hvpmu::Engine) constinit unsigned char g_engine_storage[sizeof(hvpmu::Engine)] = {};
alignas(16) constinit unsigned char g_arg[kArgBytes] = {};
constinit hvpmu::Engine* g_engine = nullptr;

}  // namespace hvprof_xen

using hvprof_xen::g_engine;

extern "C" {

unsigned int hvprof_engine_init(unsigned int source, bool pmu_counts) {
  using namespace hvprof_xen;
  if (g_engine == nullptr) {
    hvpmu::PmuDriver* chosen = nullptr;
    if (source != HVPROF_SOURCE_TIMER) {
      auto* drivers = new (g_drivers_storage) hvpmu::PmuDrivers(g_platform);
      hvpmu::PmuDriver* hardware = drivers->Detect();
      if (hardware != nullptr && (source == HVPROF_SOURCE_PMU || pmu_counts)) chosen = hardware;
    }
    const bool pmu = chosen != nullptr;
    if (!pmu) chosen = &g_timer;
    g_platform.set_pmu_mode(pmu);
    g_driver.Attach(chosen, pmu);
    g_engine = new (g_engine_storage) hvpmu::Engine(g_platform, &g_driver);
  }
  return static_cast<unsigned int>(g_driver.kind());
}

const char* hvprof_engine_cpu_type(void) {
  return g_engine != nullptr ? hvprof_xen::g_driver.cpu_type() : "";
}

unsigned long hvprof_engine_static_bytes(void) {
  return sizeof hvprof_xen::g_engine_storage + sizeof hvprof_xen::g_drivers_storage +
         sizeof hvprof_xen::g_driver + sizeof hvprof_xen::g_timer + sizeof hvprof_xen::g_arg;
}

long hvprof_engine_arg_size(unsigned int op) {
  namespace legacy = hvpmu::legacy;
  switch (op) {
    case legacy::kOpInit: return sizeof(legacy::Init);
    case legacy::kOpResetActiveList:
    case legacy::kOpResetPassiveList:
    case legacy::kOpReserveCounters:
    case legacy::kOpSetupEvents:
    case legacy::kOpEnableVirq:
    case legacy::kOpStart:
    case legacy::kOpStop:
    case legacy::kOpDisableVirq:
    case legacy::kOpReleaseCounters:
    case legacy::kOpShutdown:
    case legacy::kOpGetIbsCaps:
      return 0;
    case legacy::kOpSetActive: return sizeof(legacy::DomainIdArg);
    case legacy::kOpSetPassive: return sizeof(legacy::Passive);
    case legacy::kOpCounter: return sizeof(legacy::Counter);
    case legacy::kOpGetBuffer: return sizeof(legacy::GetBuffer);
    case legacy::kOpSetBacktrace: return sizeof(legacy::BacktraceDepthArg);
    case legacy::kOpIbsCounter: return sizeof(legacy::IbsCounter);
    case hvpmu::kOpInitV2: return sizeof(hvpmu::InitV2);
    case hvpmu::kOpStatus: return sizeof(hvpmu::Status);
    case hvpmu::kOpGetBufferV2:
    case hvpmu::kOpSetPassiveV2:
      return sizeof(hvpmu::BufferV2);
    default: return -1;
  }
}

void* hvprof_engine_arg_buffer(void) { return hvprof_xen::g_arg; }

int hvprof_engine_op(uint16_t caller, unsigned int op, void* arg, uint32_t size) {
  if (g_engine == nullptr) return -19;  // ENODEV
  const hvpmu::ErrorCode code = g_engine->DoOp(caller, op, arg, size);
  return code == hvpmu::ErrorCode::kOk ? 0 : -static_cast<int>(hvpmu::ErrorErrno(code));
}

unsigned int hvprof_engine_pmi(unsigned int cpu) {
  if (g_engine == nullptr) return 0;
  hvprof_xen::g_driver.ClearLast(cpu);
  g_engine->HandlePmi(cpu);
  return hvprof_xen::g_driver.Last(cpu);
}

void hvprof_engine_domain_destroyed(uint16_t domid) {
  if (g_engine != nullptr) g_engine->OnDomainDestroyed(domid);
}

}  // extern "C"
