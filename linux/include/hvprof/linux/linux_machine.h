// The linux platform for hvprof-hv: this host, sampled with perf_event_open, as the engine's
// machine. LinuxMachine owns the platform (LinuxPlatform), the perf-backed PmuDriver, the
// process table and the domains, and pumps perf's rings into Engine::RecordSample.
//
// Threads and locks (the daemon's side). Everything here runs under the daemon's machine lock
// except WaitForSamples and Wake, which touch only an epoll set and an eventfd that live as
// long as the machine:
//
//   for (;;) {
//     machine.WaitForSamples(50ms);          // no lock: sleeps until a ring fills or Wake()
//     std::lock_guard lock(machine_mutex);
//     machine.DrainSamples();                // side band + samples -> process table, engine
//   }
//
// Drain also while not profiling: the side band (fork, exec, mmap) flows from setup_events to
// release_counters. The engine's stop op drains once more itself, before its final
// notification.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hvpmu/engine.h"
#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/context/domains.h"
#include "hvprof/context/platform_stats.h"
#include "hvprof/hosted/hosted_platform.h"
#include "hvprof/linux/domain_map.h"
#include "hvprof/linux/perf_driver.h"
#include "hvprof/linux/perf_events.h"
#include "hvprof/linux/process_table.h"
#include "hvprof/linux/sample_router.h"

namespace hvpmu {
struct PmuDrivers;
}

namespace hvprof::linux_host {

using hvpmu::CpuidResult;
using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::Engine;
using hvpmu::InterruptedContext;
using hvpmu::PmuDriver;
using hvpmu::PmuDrivers;
using hvpmu::kMaxCounters;

struct LinuxOptions {
  DomainMap domain_map;            // see domain_map.h; ParseDomainMap(--domain-map)
  bool auto_kvm_domains = true;    // number VMM processes without a kvm: entry
  bool force_software = false;     // cpu-clock even where a hardware PMU exists
  uint32_t ring_pages = 128;       // perf data pages per CPU (a power of two; 512 KiB)
  uint32_t callchain_depth = 0;    // perf callchains for the engine's backtraces (0: none)
  std::string kernel_image;        // symbols of the host kernel; default /proc/kallsyms
  double mhz = 0;                  // nominal CPU MHz; 0: NominalFrequency()
  HostPaths paths;
  bool scan_proc = true;           // read /proc at setup_events
  bool read_elf = true;            // read build-ids and segments of mapped files
  bool dry_run = false;            // tests: no perf at all; records come from InjectRecords
};

class LinuxMachine;

// The engine's view of the host.
class LinuxPlatform final : public hosted::HostedPlatform {
 public:
  // The rings are populated: a live host's collector takes no page faults writing samples.
  LinuxPlatform(uint32_t num_cpus, DomainRegistry& domains)
      : hosted::HostedPlatform(true), num_cpus_(num_cpus), domains_(domains) {}

  uint32_t NumCpus() override { return num_cpus_; }
  // The real CPUID of the CPU this runs on (x86), zeros elsewhere.
  CpuidResult Cpuid(uint32_t cpu, uint32_t leaf, uint32_t subleaf) override;
  bool ReadMsr(uint32_t, uint32_t, uint64_t*) override { return false; }  // perf owns the PMU
  bool WriteMsr(uint32_t, uint32_t, uint64_t) override { return false; }
  void SetPmiRouting(uint32_t, bool) override {}
  void RearmPmi(uint32_t) override {}
  // CLOCK_MONOTONIC; while a sample is fed, that sample's perf time (the same clock).
  uint64_t NowNs() override;
  bool GetDomainInfo(DomainId domain, DomainInfo* info) override;
  bool GetInterruptedContext(uint32_t, InterruptedContext*) override { return false; }
  // While a sample is fed: its callchain as a frame-pointer chain at kFrameBase (frame k at
  // kFrameBase + 16k holds {frame k+1 or 0, return address k}), for the engine's walker.
  bool ReadGuestMemory(DomainId domain, uint16_t vcpu, uint64_t address, void* buffer,
                       uint32_t bytes) override;

  static constexpr uint64_t kFrameBase = 0x10000;
  void BeginSample(uint64_t time_ns, std::span<const uint64_t> frames);
  void EndSample();

 private:
  uint32_t num_cpus_;
  DomainRegistry& domains_;
  bool in_sample_ = false;
  uint64_t sample_time_ = 0;
  std::span<const uint64_t> frames_;
};

// Per-CPU accounting, for "honest rates".
struct CpuRateStats {
  uint32_t cpu = 0;
  uint64_t samples[kMaxCounters] = {};
  uint64_t throttles = 0;      // PERF_RECORD_THROTTLE
  uint64_t unthrottles = 0;
  uint64_t lost_records = 0;   // PERF_RECORD_LOST records
  uint64_t lost = 0;           // what they say was lost (ring overflow)
  uint64_t lost_samples = 0;   // PERF_RECORD_LOST_SAMPLES
  // Throttled time per counter (from THROTTLE to the next UNTHROTTLE) and the samples the
  // asked rate would have taken in it: what throttling cost, counted as lost ("throttled").
  uint64_t throttled_ns[kMaxCounters] = {};
  uint64_t throttled_since[kMaxCounters] = {};  // 0: not throttled now
  // Throttles no tick ended for longer than a tick's period: the CPU idled without ticks
  // (NOHZ); not counted as lost.
  uint64_t idle_throttled_ns = 0;
};

struct DrainResult {
  uint64_t bytes = 0;
  uint64_t records = 0;
  uint64_t samples = 0;  // fed to the engine
};

class LinuxMachine {
 public:
  // Checks that perf can sample this host system-wide (or says why not and what to change),
  // picks hardware events or cpu-clock, resolves the domain map (pid: roots must be running)
  // and numbers running VMMs.
  static hvprof::Result<std::unique_ptr<LinuxMachine>> Create(const LinuxOptions& options);
  ~LinuxMachine();
  LinuxMachine(const LinuxMachine&) = delete;
  LinuxMachine& operator=(const LinuxMachine&) = delete;

  LinuxPlatform& platform() { return *platform_; }
  PmuDriver* driver();
  PerfPmuDriver& perf_driver() { return *driver_; }
  void AttachEngine(Engine* engine) { engine_ = engine; }
  uint64_t now_ns() const;
  const std::string& machine_name() const { return machine_name_; }

  // Blocks up to `timeout` until a perf ring passes its watermark or Wake() is called.
  // Touches no engine state: call it without the machine lock. True if a ring is ready.
  hvprof::Result<bool> WaitForSamples(std::chrono::milliseconds timeout);
  // Thread-safe: makes a WaitForSamples in progress return.
  void Wake();
  // Reads every perf ring, applies the side band to the process table in time order and feeds
  // each sample to the attached engine (RecordSample). Call with the machine lock held.
  DrainResult DrainSamples();
  // Tests (dry_run): parse `bytes` as if ring `cpu` had produced them.
  DrainResult InjectRecords(uint32_t cpu, std::span<const uint8_t> bytes);

  // The images `domain` runs: the host kernel for a host domain (and as dom0's hypervisor);
  // nothing for a guest, whose kernel is its own.
  context::DomainImages Images(DomainId domain) const;
  // The processes' context events (ProcessTable::TakeEvents, Acknowledge). Drain first.
  ProcessTable::Events TakeContextEvents(uint64_t from, size_t max) const { return processes_->TakeEvents(from, max); }
  void AcknowledgeContextEvents(uint64_t sequence) { processes_->Acknowledge(sequence); }
  // Mapped files' ELF headers are read off the draining thread (ProcessTable::TakeImages): waits
  // up to `timeout` for the reads asked for so far. Any thread, without the machine lock; a
  // drain then takes the answers. Whether every read was answered.
  bool WaitForImages(std::chrono::milliseconds timeout) const { return processes_->WaitForImages(timeout); }
  // WaitForImages, then takes the answers (with the machine lock, as a drain).
  bool SettleImages(std::chrono::milliseconds timeout);
  // Every domain known: its type is "host" or "hvm"; a host domain runs the host kernel.
  std::vector<context::DomainInfo> Domains() const;
  // Requested and achieved rates per CPU, throttling, perf's losses, the kernel's limits.
  // Rates count from setup_events; take it before release_counters, which forgets the counters.
  context::PlatformStats Stats() const;
  // What the machine decided and what went wrong, for people (logs, session notes).
  std::vector<std::string> notes() const;
  // Why the last failed engine operation that reached perf failed (e.g. setup_events).
  const std::string& last_error() const { return driver_->last_error(); }
  // Callchain depth for the next setup_events (follow the set_backtrace op).
  void set_callchain_depth(uint32_t depth) { driver_->set_callchain_depth(depth); }

  const std::vector<CpuRateStats>& cpu_stats() const { return cpu_stats_; }
  const RouterStats& router_stats() const { return router_->stats(); }
  ProcessTable& processes() { return *processes_; }
  DomainRegistry& domains() { return *domains_; }
  const std::string& host_kernel() const { return host_kernel_; }
  EventSource source() const { return driver_->source(); }
  double mhz() const { return frequency_.mhz; }

 private:
  struct Applier;

  explicit LinuxMachine(const LinuxOptions& options);
  hvprof::Result<void> Init();
  hvprof::Result<void> InitDomains(uint16_t host_vcpus);
  void OnSetup();
  DrainResult ApplyRecords(const std::vector<std::span<const uint8_t>>& buffers,
                           const std::vector<uint32_t>& ring_cpus);
  // The rings merged in time order (side-band records, or a ring out of order).
  void ApplyMerged(const std::vector<std::span<const uint8_t>>& buffers, const std::vector<RingScan>& scans,
                   const std::vector<uint32_t>& ring_cpus, DrainResult& result);
  void CountParsed(const RecordReader& reader, DrainResult& result);
  void ApplySample(const PerfSample& sample, uint32_t ring_cpu, DrainResult& result);
  void ApplyLost(const PerfLost& lost, uint32_t ring_cpu);
  void ApplyThrottle(const PerfThrottle& throttle, uint32_t ring_cpu);
  void ApplyLostSamples(const PerfLostSamples& lost, uint32_t ring_cpu);
  // A scheduler tracepoint's sample -> the engine's scheduling records on `cpu`.
  void ApplySched(const PerfSample& sample, uint32_t cpu, SchedTracepoint kind);
  CpuRateStats& StatsOf(uint32_t cpu) { return cpu_stats_[cpu < cpu_stats_.size() ? cpu : 0]; }
  void OnThrottle(uint32_t cpu, const PerfThrottle& record);
  // Samples not taken while throttled, per CPU, up to `now_ns` for an interval still open.
  double ThrottledSamples(const CpuRateStats& stats, uint64_t now_ns) const;

  LinuxOptions options_;
  std::string host_kernel_;
  std::string machine_name_;
  uint32_t num_cpus_ = 0;
  std::vector<uint32_t> online_;
  CpuFrequency frequency_;
  PerfProbe probe_;
  std::unique_ptr<DomainRegistry> domains_;
  std::unique_ptr<ProcessTable> processes_;
  std::unique_ptr<LinuxPlatform> platform_;
  std::unique_ptr<PmuDrivers> hardware_drivers_;
  std::unique_ptr<PerfPmuDriver> driver_;
  std::unique_ptr<SampleRouter> router_;
  Engine* engine_ = nullptr;
  hvprof::ScopedFd epoll_;
  hvprof::ScopedFd wake_;
  std::vector<std::string> notes_;
  std::vector<CpuRateStats> cpu_stats_;
  std::vector<std::vector<uint8_t>> buffers_;  // per ring, for records that wrap its end
  std::vector<HeldRecord> heads_;                // per ring, reused from drain to drain
  std::vector<std::vector<HeldRecord>> sorted_;  // per ring, the records of a ring out of order
  uint64_t last_id_ = 0;  // the event id of the last sample applied, and its counter
  int last_counter_ = 0;
  bool last_id_known_ = false;
  uint64_t parse_malformed_ = 0;
  uint64_t parse_unknown_ = 0;
  uint64_t ring_corrupt_ = 0;
  uint64_t unknown_ids_ = 0;
  uint64_t samples_without_engine_ = 0;
  uint64_t sched_samples_ = 0;       // scheduler tracepoint samples read
  uint64_t sched_undecodable_ = 0;   // ... whose raw record did not fit its format
  int64_t max_sample_rate_at_setup_ = -1;
  uint64_t last_time_ = 0;
  uint64_t last_prune_ = 0;
};

}  // namespace hvprof::linux_host
