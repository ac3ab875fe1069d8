// The engine's PmuDriver on Linux: each logical counter becomes one perf event per online CPU,
// system-wide (pid -1). Where the CPU has a hardware PMU, a counter is the raw event of its
// event code and unit mask (validated by the engine's own driver for that CPU); without one it
// is the cpu-clock software timer, cpu_type "linux/software".
//
// Per CPU there is one ring, owned by a "tracker" (a dummy software event that carries the
// MMAP2/COMM/FORK/EXIT side band from setup_events to release_counters, so processes are
// followed even while profiling is stopped); each counter's event writes its samples into that
// ring (PERF_EVENT_IOC_SET_OUTPUT) and is told apart by PERF_SAMPLE_IDENTIFIER.
//
// With --sched (the engine has scheduling rings when the counters are set up), the scheduler's
// tracepoints (tracepoints.h) are opened on every CPU too, also into the CPU's ring: their
// samples carry PERF_SAMPLE_RAW and no ip, period or callchain (RecordLayout::other_ids).
//
// Cycles on cpu-clock: a CPU_CLK_UNHALTED count of N cycles is a timer period of
// N * 1000 / MHz ns at the CPU's nominal frequency (NominalFrequency), and each sample's period
// is converted back, so sample weights stay in cycles. The kernel times no shorter than 10 us.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hvprof/base/scoped_fd.h"
#include "hvpmu/engine.h"
#include "hvprof/linux/perf_events.h"
#include "hvprof/linux/perf_records.h"
#include "hvprof/linux/perf_ring.h"
#include "hvprof/linux/tracepoints.h"

namespace hvprof::linux_host {

using hvpmu::CounterConfig;
using hvpmu::ErrorCode;
using hvpmu::InitV2;
using hvpmu::PmuDriver;
using hvpmu::PmuKind;

inline constexpr uint32_t kSoftwareCounters = 4;
inline constexpr uint64_t kSoftwareMaxCount = uint64_t{1} << 40;
inline constexpr uint16_t kCpuClockNsEvent = 0x01;  // CPU_CLOCK in the linux/software table

struct PerfDriverOptions {
  EventSource source = EventSource::kSoftware;
  double mhz = 1000;
  uint32_t ring_pages = 128;      // data pages per CPU, a power of two
  uint32_t callchain_depth = 0;   // 0: no PERF_SAMPLE_CALLCHAIN
  std::vector<uint32_t> cpus;     // online CPUs to open events on
  HostPaths paths;
  bool dry_run = false;           // tests: open nothing; ids are still assigned
};

class PerfPmuDriver final : public PmuDriver {
 public:
  struct Counter {
    bool enabled = false;
    CounterConfig config;
    uint32_t type = 0;         // perf_event_attr type
    uint64_t config_bits = 0;  // perf_event_attr config
    uint64_t period = 0;       // perf_event_attr sample_period (ns for cpu-clock)
    double requested_hz = 0;   // per CPU
  };
  struct CpuRing {
    uint32_t cpu = 0;
    hvprof::ScopedFd tracker;
    hvprof::ScopedMmap mapping;
    PerfRing ring;
    std::vector<std::pair<uint32_t, hvprof::ScopedFd>> counters;  // logical counter, fd
    std::vector<std::pair<SchedTracepoint, hvprof::ScopedFd>> tracepoints;  // --sched
  };
  struct TimeReading {
    uint64_t enabled_ns = 0;
    uint64_t running_ns = 0;
  };

  // `hardware` (source kHardware only): the engine's driver for this CPU, whose cpu_type,
  // counters and validation rules apply. `epoll_fd`: where ring fds are registered for
  // readiness (may be -1).
  PerfPmuDriver(PerfDriverOptions options, PmuDriver* hardware, int epoll_fd);
  ~PerfPmuDriver();

  // --- PmuDriver
  PmuKind kind() const override { return PmuKind::kExternal; }
  const char* cpu_type() const override;
  uint32_t num_counters() const override;
  void Describe(InitV2* init) const override;
  ErrorCode Validate(uint32_t index, const CounterConfig& config) const override;
  ErrorCode Reserve() override;
  void Release() override;
  ErrorCode Setup(const CounterConfig* counters, uint32_t count) override;
  void Start() override;
  void Stop() override;
  uint32_t CollectOverflows(uint32_t) override { return 0; }

  // --- for the machine
  std::vector<CpuRing>& rings() { return rings_; }
  RecordLayout layout() const { return layout_; }
  const std::vector<Counter>& counters() const { return counters_; }
  // The logical counter that produced sample `id`, or kTrackerId (the tracker, or unknown),
  // or for a scheduler tracepoint TracepointCounter(kind).
  int CounterOfId(uint64_t id) const;
  static constexpr int kTrackerId = -1;
  static constexpr int TracepointCounter(SchedTracepoint kind) { return -2 - static_cast<int>(kind); }
  static std::optional<SchedTracepoint> TracepointOf(int counter) {
    if (counter > -2 || counter < -1 - static_cast<int>(kSchedTracepoints)) return std::nullopt;
    return static_cast<SchedTracepoint>(-2 - counter);
  }
  // The id samples of `counter` on `cpu` carry (0 if none); dry runs number them too.
  uint64_t IdOf(uint32_t cpu, uint32_t counter) const;
  uint64_t TracepointIdOf(uint32_t cpu, SchedTracepoint kind) const;
  // --sched: asked before each Setup whether to open the scheduler's tracepoints too.
  void set_sched_wanted(std::function<bool()> wanted) { sched_wanted_ = std::move(wanted); }
  // The scheduler's tracepoints as this kernel lays them out, while they are open; else null.
  const SchedTracepoints* sched() const { return sched_ ? &*sched_ : nullptr; }
  // perf's period of a sample of `counter`, in the event's units (cycles for CPU_CLK_UNHALTED).
  uint64_t EnginePeriod(uint32_t counter, uint64_t perf_period) const;
  std::optional<TimeReading> ReadTimes(uint32_t cpu, uint32_t counter) const;

  EventSource source() const { return options_.source; }
  double mhz() const { return options_.mhz; }
  bool profiling() const { return profiling_; }
  bool set_up() const { return set_up_; }
  // Nanoseconds the counters were enabled, over every start/stop.
  uint64_t profiling_ns() const;
  // Why the last Reserve/Setup failed, with advice (the engine only passes an ErrorCode on).
  const std::string& last_error() const { return last_error_; }
  // Called by Stop() once the counters are off, to drain what they wrote.
  void set_on_stop(std::function<void()> on_stop) { on_stop_ = std::move(on_stop); }
  // Called by Setup() once the trackers follow processes (to read /proc after that point).
  void set_on_setup(std::function<void()> on_setup) { on_setup_ = std::move(on_setup); }
  // Callchains for the next Setup (0: none).
  void set_callchain_depth(uint32_t depth) { options_.callchain_depth = depth; }

 private:
  ErrorCode Fail(const hvprof::Error& error);
  hvprof::Result<void> OpenAll();
  void CloseAll();
  void FillAttr(const Counter& counter, struct perf_event_attr* attr) const;

  PerfDriverOptions options_;
  PmuDriver* hardware_;
  int epoll_fd_;
  RecordLayout layout_;
  std::vector<Counter> counters_;
  std::vector<CpuRing> rings_;
  struct IdEntry {
    uint64_t id = 0;
    int counter = kTrackerId;  // or TracepointCounter(kind)
    uint32_t cpu = 0;
  };
  std::vector<IdEntry> ids_;
  std::function<bool()> sched_wanted_;
  std::optional<SchedTracepoints> sched_;
  std::vector<uint64_t> sched_ids_;  // sorted: the layout's other_ids
  bool reserved_ = false;
  bool set_up_ = false;
  bool profiling_ = false;
  uint64_t started_ns_ = 0;
  uint64_t accumulated_ns_ = 0;
  std::string last_error_;
  std::function<void()> on_stop_;
  std::function<void()> on_setup_;
};

// The raw perf config of an engine counter for the hardware driver `kind` (Intel: event and
// unit mask; AMD: also event bits 11:8 at 35:32, as AmdCorePmu::EncodeControl places them).
uint64_t RawEventConfig(PmuKind kind, const CounterConfig& config);

uint64_t MonotonicNs();

}  // namespace hvprof::linux_host
