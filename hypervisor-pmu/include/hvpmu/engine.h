// The hypervisor-side profiling engine: operation dispatcher and state machine, PMU drivers,
// and the NMI sample path that fills per-domain, per-vCPU rings.
//
// Concurrency contract (the host's side of it):
//  - DoOp and the On* notifications are serialized by the host (one at a time).
//  - HandlePmi runs concurrently with them, on any CPU, once per PMI on that CPU; it takes no
//    lock and never allocates. Ops that change routing call Platform::QuiesceSamplers before
//    they free or reuse anything the sample path might still touch.
#pragma once

#include <cstdint>

#include "hvpmu/abi/errors.h"
#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"
#include "hvpmu/platform.h"
#include "hvpmu/ring_writer.h"

namespace hvpmu {

struct CounterConfig {
  bool enabled = false;
  uint16_t event = 0;
  uint8_t unit_mask = 0;
  bool kernel = false;  // OS bit
  bool user = false;    // USR bit
  uint64_t count = 0;
};

// A PMU driver. Implementations: IntelArchPerfmon, AmdCorePmu (intel_pmu.h, amd_pmu.h).
class PmuDriver {
 public:
  virtual PmuKind kind() const = 0;
  virtual const char* cpu_type() const = 0;
  virtual uint32_t num_counters() const = 0;
  virtual void Describe(InitV2* init) const = 0;
  // Checks that counter `index` can count `config` on this CPU.
  virtual ErrorCode Validate(uint32_t index, const CounterConfig& config) const = 0;
  // Saves the PMU registers of every CPU (restored by Release).
  virtual ErrorCode Reserve() = 0;
  virtual void Release() = 0;
  // Programs all counters on every CPU, disabled.
  virtual ErrorCode Setup(const CounterConfig* counters, uint32_t count) = 0;
  virtual void Start() = 0;
  virtual void Stop() = 0;
  // NMI context: finds the counters of `cpu` that overflowed, reloads and acknowledges them,
  // and returns them as a bitmask of logical counter indexes (0 if the PMI was not ours).
  virtual uint32_t CollectOverflows(uint32_t cpu) = 0;

 protected:
  ~PmuDriver() = default;
};

class Engine {
 public:
  // `driver` may be null (no supported PMU: init answers NoPmu). Both must outlive the engine.
  Engine(Platform& platform, PmuDriver* driver);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs profiling operation `op` for `caller`. `arg` points to the op's argument struct of
  // `arg_size` bytes; the engine reads and writes it in place.
  ErrorCode DoOp(DomainId caller, uint32_t op, void* arg, uint32_t arg_size);

  // NMI context: a performance-counter interrupt on `cpu`.
  void HandlePmi(uint32_t cpu);
  // NMI context, for platforms whose counters live outside the engine: one overflow of
  // logical counter `counter` standing for `period` events, taken in `context`.
  void RecordSample(uint32_t cpu, const InterruptedContext& context, uint8_t counter,
                    uint64_t period);
  // The host's scheduler on `cpu` (never NMI context; no lock, no heap): one scheduling event
  // into the primary's scheduling ring of that CPU, while profiling a session set up with them
  // (kBufferSchedRings). `record` holds everything but kind, slots and pcpu; a time_ns of 0
  // means now. The platform's QuiesceSamplers covers this path as it does the sample path.
  void RecordSched(uint32_t cpu, const ring::SchedRecord& record);
  // Whether RecordSched takes records now: hosts skip building them otherwise.
  bool sched_recording() const { return __atomic_load_n(&sched_routing_, __ATOMIC_ACQUIRE) != 0; }
  // How many scheduling rings the primary took (0: it asked for none): hosts whose scheduler
  // events cost something to collect (linux's tracepoints) set them up only then.
  uint32_t sched_rings() const { return num_sched_rings_; }

  // The consumer of `domain`'s rings went away (its agent died or unmapped everything):
  // deactivate it and unshare its rings, as disable_virq would, even while profiling.
  void OnConsumerGone(DomainId domain);
  // The domain was destroyed: drop it from every list and free its rings.
  void OnDomainDestroyed(DomainId domain);

  // The fullest ring whose consumer is not `except`, as a fraction of its capacity in percent.
  // Hosts with a simulated clock use it to let slow consumers catch up.
  uint32_t FullestRingPercent(DomainId except) const;

  EngineState state() const { return state_; }
  DomainId primary() const { return primary_; }

 private:
  struct DomainSlot;
  struct CpuStats;

  // ops.cpp
  ErrorCode OpInit(DomainId caller, void* arg, uint32_t size, bool v2);
  ErrorCode OpResetActiveList();
  ErrorCode OpResetPassiveList();
  ErrorCode OpSetActive(void* arg, uint32_t size);
  ErrorCode OpSetPassive(DomainId caller, void* arg, uint32_t size, bool v2);
  ErrorCode OpReserveCounters();
  ErrorCode OpCounter(void* arg, uint32_t size);
  ErrorCode OpSetupEvents();
  ErrorCode OpEnableVirq(DomainId caller);
  ErrorCode OpStart();
  ErrorCode OpStop();
  ErrorCode OpDisableVirq(DomainId caller);
  ErrorCode OpReleaseCounters();
  ErrorCode OpShutdown();
  ErrorCode OpGetBuffer(DomainId caller, void* arg, uint32_t size, bool v2);
  ErrorCode OpSetBacktrace(void* arg, uint32_t size);
  ErrorCode OpStatus(DomainId caller, void* arg, uint32_t size);

  // engine.cpp: the domain table
  // Inline: it runs on every sample. Acquire pairs with the release that publishes a new slot.
  DomainSlot* FindSlot(DomainId domain) {
    if (domain > kMaxDomainId) return nullptr;
    const uint16_t index = __atomic_load_n(&slot_of_domain_[domain], __ATOMIC_ACQUIRE);
    return index == 0 ? nullptr : &slots_[index - 1];
  }
  DomainSlot* FindOrCreateSlot(DomainId domain);
  // The slots ever taken, for the loops over every listed domain: a slot is taken lowest first,
  // so all past the highest taken are free. (4,096 slots of which a host uses a few: a full scan
  // per simulated millisecond was a third of the sim's time.)
  template <typename Slot>
  struct SlotRange {
    Slot* first;
    Slot* last;
    Slot* begin() const { return first; }
    Slot* end() const { return last; }
  };
  SlotRange<DomainSlot> TakenSlots() { return {slots_, slots_ + slots_taken_}; }
  SlotRange<const DomainSlot> TakenSlots() const { return {slots_, slots_ + slots_taken_}; }
  void MaybeFreeSlot(DomainSlot* slot);
  void RemoveFromActiveList(DomainSlot* slot);
  void RemoveFromPassiveList(DomainSlot* slot);
  void Deactivate(DomainSlot* slot);
  ErrorCode AllocateRings(DomainSlot* slot, RingFormat format, uint32_t capacity,
                          uint32_t watermark, bool with_pcpu_rings, bool with_sched_rings,
                          DomainId consumer);
  ErrorCode ShareRings(DomainSlot* slot, DomainId consumer);
  void UnshareRings(DomainSlot* slot);
  void FreeRings(DomainSlot* slot);
  void ResetRings(DomainSlot* slot);
  void PublishRouting(DomainSlot* slot);
  void NotifyAllConsumers();
  uint32_t CountActivated() const;
  uint32_t CountListed(DomainRole role) const;

  // sample_path.cpp
  void LogSample(uint32_t cpu, const InterruptedContext& context, uint8_t counter,
                 uint64_t period);
  uint32_t WalkBacktrace(const InterruptedContext& context, ring::Mode mode, uint64_t* frames,
                         uint32_t max_frames);

  Platform& platform_;
  PmuDriver* driver_;
  EngineState state_ = EngineState::kIdle;
  DomainId primary_ = kDomainInvalid;
  uint32_t num_cpus_ = 0;
  uint32_t backtrace_depth_ = 0;  // read by the sample path
  bool pmu_claimed_ = false;
  uint32_t pmu_claims_ = 0;       // slots holding buffers
  CounterConfig counters_[kMaxCounters];
  uint64_t periods_[kMaxCounters] = {};  // read by the sample path

  struct DomainSlot {
    bool in_use = false;
    DomainId id = kDomainInvalid;
    DomainRole role = DomainRole::kIgnored;  // list membership
    bool activated = false;
    bool holds_ref = false;
    uint8_t routing = 0;  // Route, read by the sample path
    uint16_t num_vcpus = 0;
    RingFormat format = RingFormat::kNone;
    SharedRegion region;
    DomainId consumer = kDomainInvalid;  // who the region is shared with, if shared
    bool shared = false;
    uint32_t nbuf = 0;
    uint32_t nbuf_vcpu = 0;
    uint32_t capacity = 0;
    uint32_t watermark = 0;
    uint64_t ring_bytes = 0;
    uint64_t no_ring_losses = 0;  // atomic: samples of vCPUs without a ring
    RingWriter* rings = nullptr;  // nbuf_vcpu writers in ring_pool_; read by the sample path
  };

  struct CpuStats {
    uint64_t samples = 0;
    uint64_t idle_samples = 0;
    uint64_t lost[ring::kLossSlots] = {};
  };

  // engine.cpp: the vCPU ring writers, a contiguous run of ring_pool_ per domain
  RingWriter* TakeRingWriters(uint32_t count);
  void ReturnRingWriters(RingWriter* first, uint32_t count);

  DomainSlot slots_[kMaxListedDomains];
  uint32_t slots_taken_ = 0;  // one past the highest slot ever taken (control path only)
  uint16_t slot_of_domain_[kMaxDomainId + 1];  // slot index + 1, 0 for none; read by sample path
  // The writers of every listed domain's vCPU rings: static, so that a host with thousands of
  // small domains and one with a few large ones both fit without an allocator.
  RingWriter ring_pool_[kMaxVcpuRings];
  bool ring_taken_[kMaxVcpuRings] = {};
  RingWriter pcpu_rings_[kMaxCpus];           // the primary's per-pCPU rings (v2 only)
  uint32_t num_pcpu_rings_ = 0;               // attached pcpu_rings_
  uint32_t pcpu_ring_base_ = 0;               // index of pCPU ring 0 in the primary's region
  uint8_t pcpu_routing_ = 0;                  // idle samples go to pcpu_rings_; sample path
  RingWriter sched_rings_[kMaxCpus];          // the primary's scheduling rings (on request)
  uint32_t num_sched_rings_ = 0;              // attached sched_rings_
  uint32_t sched_ring_base_ = 0;              // index of scheduling ring 0 in the region
  uint8_t sched_routing_ = 0;                 // RecordSched writes: profiling, rings attached
  CpuStats cpu_stats_[kMaxCpus];              // each written only by its own CPU
};

// Mode classification of an interrupted context (Xen's xenoprofile_get_mode, with the HVM CPL
// taken from SS.DPL as in Xen commit be522c69).
ring::Mode ClassifyMode(const InterruptedContext& context);

}  // namespace hvpmu
