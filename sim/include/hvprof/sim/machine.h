// The simulated machine: physical CPUs with emulated PMUs, domains whose vCPUs a credit-style
// scheduler places on them, and workloads that spend their time in real functions of real
// images. Given a scenario and a seed, everything it does is deterministic, and it keeps the
// exact event counts as ground truth.
//
// Time advances only through RunFor. The caller (hvprof-hv) holds its machine lock around
// RunFor and around every engine operation, so the engine's ops never run while a simulated
// CPU is inside the sample path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hvpmu/engine.h"
#include "hvprof/base/result.h"
#include "hvprof/context/context_event.h"
#include "hvprof/context/domains.h"
#include "hvprof/context/ground_truth.h"
#include "hvprof/hosted/hosted_platform.h"
#include "hvprof/sim/pmu_model.h"
#include "hvprof/sim/rng.h"
#include "hvprof/sim/scenario.h"

namespace hvprof::symbolizer {
class Symbolizer;
}

namespace hvprof::sim {

using hvpmu::CpuidResult;
using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::Engine;
using hvpmu::InterruptedContext;

class SimMachine;

// The engine's view of the simulated machine.
class SimPlatform final : public hosted::HostedPlatform {
 public:
  explicit SimPlatform(SimMachine& machine) : machine_(machine) {}

  uint32_t NumCpus() override;
  CpuidResult Cpuid(uint32_t cpu, uint32_t leaf, uint32_t subleaf) override;
  bool ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) override;
  bool WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) override;
  void SetPmiRouting(uint32_t cpu, bool deliver_as_nmi) override;
  void RearmPmi(uint32_t cpu) override;
  uint64_t NowNs() override;
  bool GetDomainInfo(DomainId domain, DomainInfo* info) override;
  bool GetInterruptedContext(uint32_t cpu, InterruptedContext* context) override;
  bool ReadGuestMemory(DomainId domain, uint16_t vcpu, uint64_t address, void* buffer,
                       uint32_t bytes) override;
  // The engine's sampling timer (TimerSource): a tick every `period_ns` of each CPU's
  // simulated time, busy, idle or halted. Nothing in the simulation masks interrupts, so the
  // timer here has none of the bias it has on real hardware (timer_source.h).
  bool StartSampleTimer(uint64_t period_ns) override;
  void StopSampleTimer() override;

 private:
  SimMachine& machine_;
};

// One row of the ground truth: what one function of one vCPU did, per counter.
struct TruthRow {
  uint64_t events[PmuModel::kMaxCounters] = {};
  uint64_t overflows[PmuModel::kMaxCounters] = {};
  // While the engine's timer samples: the cycles this function ran (halted time included) and
  // the ticks that came due in it.
  uint64_t timer_cycles = 0;
  uint64_t ticks = 0;
};

// Where a ground-truth row belongs.
struct TruthKey {
  DomainId domain;
  uint16_t vcpu;  // the CPU for the idle domain
  Mode mode;
  uint32_t image;     // index into SimMachine::image_names()
  uint32_t function;  // index into SimMachine::function_names()
  uint64_t start;     // the function's runtime address
  uint64_t image_address;  // its address in its image (a report's symbol address): start - bias
};

class SimMachine {
 public:
  // Builds the machine: opens every image through `symbolizer`, resolves function names and
  // automatic picks, and fails with a message naming the scenario field on any problem.
  static hvprof::Result<std::unique_ptr<SimMachine>> Create(
      const Scenario& scenario, hvprof::symbolizer::Symbolizer& symbolizer);
  ~SimMachine();

  // The engine whose HandlePmi receives this machine's PMIs. Must be set before RunFor.
  void AttachEngine(Engine* engine) { engine_ = engine; }
  // Also hands every scheduling record, with the cycle count (the TSC) of its pCPU, to `sink`
  // (empty: to nobody), whether or not the engine records them; and, as Xen traces a vCPU that
  // goes on running, a running -> running record for each pCPU whose vCPU (or idle) stays at a
  // scheduling decision. For Xen's trace buffers (xen_trace_writer.h).
  using SchedSink = std::function<void(uint32_t cpu, uint64_t tsc, const hvpmu::ring::SchedRecord& record)>;
  void SetSchedSink(SchedSink sink) { sched_sink_ = std::move(sink); }
  SimPlatform& platform() { return *platform_; }
  const Scenario& scenario() const { return scenario_; }

  // Advances simulated time by `ns` (rounded to whole cycles).
  void RunFor(uint64_t ns);
  uint64_t now_ns() const;
  uint64_t NsOf(uint64_t cycles) const;  // simulated cycles as nanoseconds
  uint64_t now_cycles() const { return now_; }
  uint64_t pmis_delivered() const { return pmis_; }
  uint64_t ticks_delivered() const { return ticks_; }
  // Whether the engine's timer (rather than the PMU) sampled since the last reset of the ground
  // truth: the truth is then in ns of time and ticks, as counter 0 (GroundTruth).
  bool timer_sampled() const { return timer_sampled_; }

  // Ground truth: exact events and overflows per (domain, vCPU, mode, image, function) and
  // counter, since boot or the last reset (when the engine's timer samples: one counter, TIMER,
  // whose events are ns of the CPU's time and whose overflows are the timer's ticks); and ("sched") the exact time every vCPU spent in
  // each runstate, every pCPU idle and busy, and the wake-ups and migrations.
  context::GroundTruth GroundTruth() const;
  void ResetGroundTruth();
  const std::vector<TruthRow>& truth_rows() const { return truth_; }
  const std::vector<TruthKey>& truth_keys() const { return truth_keys_; }
  const std::vector<std::string>& image_names() const { return image_names_; }
  const std::vector<std::string>& function_names() const { return function_names_; }

  // The truth row of the function of `domain` (kDomainIdle for the idle loop) that contains
  // `ip` in `mode`, for vCPU (or CPU) `vcpu`; -1 if none does.
  int64_t TruthRowAt(DomainId domain, uint16_t vcpu, Mode mode, uint64_t ip) const;

  // The images `domain` runs: its kernel, and for dom0 the hypervisor's.
  context::DomainImages Images(DomainId domain) const;
  // What the platform tells `domain`'s agent of its processes (hvprof/context/context_event.h),
  // from sequence number `from` on, at most `max_events` in one batch (the protocol's
  // ContextEvents). `from` 0 starts over: the scenario's processes (born at time 0, never
  // exiting) and the runs of its churned programs alive now; then each later batch the runs born
  // since, in order of birth, each with its mappings and its exit. `next` is what to ask for next;
  // the batch before can be asked for again (a retry). An unknown `from` starts over, with
  // `first` above it: what came between is not told.
  using ContextBatch = context::ContextEventBatch;
  ContextBatch ContextEvents(DomainId domain, uint64_t from, size_t max_events);
  // What the machine decided while building itself (which kernel symbol source each domain
  // uses and why), for the daemon's log.
  const std::vector<std::string>& notes() const { return notes_; }
  // Where the symbols of each domain's kernel come from, and the hypervisor image.
  const std::string& kernel_source(DomainId domain) const;

 private:
  friend class SimPlatform;
  struct Function;
  struct ModeTable;
  struct Process;
  struct Domain;
  struct Vcpu;
  struct Cpu;
  struct BuildContext;

  SimMachine(const Scenario& scenario);
  hvprof::Result<void> Build(hvprof::symbolizer::Symbolizer& symbolizer);
  hvprof::Result<void> BuildDomain(BuildContext& context, const DomainSpec& spec,
                                   Domain* domain);
  hvprof::Result<void> AddFunctions(BuildContext& context, const DomainSpec& spec, Mode mode,
                                    Domain* domain);
  struct FunctionSource;
  hvprof::Result<FunctionSource> SourceFor(BuildContext& context, Mode mode, Domain* domain, uint32_t pid,
                                           const std::string& image, const std::string& field);
  uint32_t AddTruthRows(DomainId domain, uint16_t vcpus, Mode mode, uint32_t image,
                        uint32_t function, uint64_t start, uint64_t image_address);
  uint32_t InternImage(const std::string& name);
  uint32_t InternFunction(const std::string& name, std::vector<std::string> callers = {});

  void Schedule();
  // Scheduling records for the engine (while it records them) and the truth of time in state.
  void AccountSchedTruth();
  void EmitSched(uint32_t cpu, hvpmu::ring::SchedType type, DomainId domain, uint16_t vcpu,
                 hvpmu::ring::Runstate from, hvpmu::ring::Runstate to, uint16_t from_cpu = 0xFFFF,
                 uint16_t to_cpu = 0xFFFF);
  void EmitSnapshot();
  void RunCpu(uint32_t cpu_index, uint64_t until);
  void StartBurst(Cpu& cpu);
  void Execute(Cpu& cpu, uint64_t cycles);
  void DeliverPmi(Cpu& cpu);
  void DeliverTick(Cpu& cpu);
  // The context of what `cpu` is running, as the engine reads it in its interrupt.
  void CaptureContext(Cpu& cpu);
  Domain* FindDomain(DomainId id);
  const Domain* FindDomain(DomainId id) const;

  Scenario scenario_;
  std::unique_ptr<SimPlatform> platform_;
  Engine* engine_ = nullptr;
  Rng rng_;
  uint64_t now_ = 0;  // cycles since boot
  uint64_t slice_cycles_ = 0;
  uint64_t slice_end_ = 0;
  uint32_t slices_ = 0;
  uint64_t pmis_ = 0;
  uint64_t ticks_ = 0;
  uint64_t tick_cycles_ = 0;  // the sampling timer's period while it runs, 0 when stopped
  bool timer_sampled_ = false;
  std::vector<std::unique_ptr<Domain>> domains_;
  std::unique_ptr<Domain> idle_;
  std::vector<Vcpu> vcpus_;
  std::vector<int> runnable_;  // Schedule's scratch: indexes of runnable vCPUs
  // Time in state, in cycles, since the last reset of the ground truth.
  struct SchedTruth {
    uint64_t cycles[hvpmu::ring::kRunstateCount] = {};
    uint64_t wakeups = 0;
    uint64_t migrations = 0;
  };
  std::vector<SchedTruth> vcpu_truth_;  // per vCPU, as vcpus_
  std::vector<uint64_t> idle_truth_;    // per pCPU: cycles with no vCPU
  uint64_t sched_accounted_to_ = 0;     // cycles: the truth covers time up to here
  uint64_t sched_truth_since_ = 0;      // cycles: the last reset
  std::vector<int> previous_vcpu_;      // Schedule's scratch: each pCPU's vCPU before
  bool was_recording_sched_ = false;
  SchedSink sched_sink_;
  std::vector<std::unique_ptr<Cpu>> cpus_;
  std::vector<TruthRow> truth_;
  // Per domain, where its agent's context events are (ContextEvents).
  struct ContextCursor {
    uint64_t sequence = 0;          // what the next batch continues from
    std::vector<uint64_t> next_run;  // per process of the domain: its first run not yet told
    uint64_t retry_sequence = 0;     // the batch before: asked again, it is made again
    std::vector<uint64_t> retry_next_run;
  };
  std::map<DomainId, ContextCursor> context_cursors_;
  std::vector<TruthKey> truth_keys_;
  std::vector<std::string> image_names_;
  std::vector<std::string> function_names_;
  std::vector<std::vector<std::string>> function_callers_;  // per function: its stack's callers
  std::vector<std::string> notes_;
  int nmi_cpu_ = -1;  // the CPU whose PMI the engine is handling
};

}  // namespace hvprof::sim
