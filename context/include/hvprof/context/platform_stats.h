// What a platform says of its own sampling, below the engine: the source (perf's cpu-clock
// timer or the PMU), the rate each counter asked for and each CPU achieved, the kernel's
// throttling, and what the platform lost or could not place. The linux platform makes it;
// hvprof-hv's PlatformInfo message carries it to dom0's agent, the session keeps it
// (session.json's "platform_stats") and the report's header says the rates. One record, one
// JSON codec, for all of them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/base/json_fields.h"
#include "hvprof/base/result.h"

namespace hvprof::context {

// One counter as the platform set it up.
struct CounterSetup {
  uint32_t counter = 0;  // the engine's logical counter
  uint32_t event = 0;
  uint32_t unit_mask = 0;
  uint64_t count = 0;         // events per sample, as asked
  std::string perf_event;     // cpu-clock, raw
  std::string perf_config;    // perf_event_attr.config, "0x..."
  uint64_t period = 0;        // what perf samples every
  std::string period_unit;    // ns, events
  double requested_hz_per_cpu = 0;
};

// One counter on one CPU.
struct CpuCounterRate {
  uint32_t counter = 0;
  uint64_t samples = 0;
  double requested_hz = 0;
  double achieved_hz = 0;
  // The kernel's own account (perf's time_enabled and time_running); 0 where it was not read.
  uint64_t time_enabled_ns = 0;
  uint64_t time_running_ns = 0;
};

// One CPU.
struct CpuRate {
  uint32_t cpu = 0;
  uint64_t samples = 0;
  double requested_hz = 0;
  double achieved_hz = 0;
  uint64_t throttles = 0;
  uint64_t unthrottles = 0;
  uint64_t lost_records = 0;  // perf's LOST records
  uint64_t lost = 0;          // the records they say were lost
  uint64_t lost_samples = 0;  // PERF_RECORD_LOST_SAMPLES
  uint64_t throttled_ns = 0;
  uint64_t idle_throttled_ns = 0;  // throttled time in tickless idle: no samples were due
  uint64_t throttled = 0;          // samples not taken while throttled (an estimate)
  std::vector<CpuCounterRate> counters;
};

struct PlatformTotals {
  uint64_t samples = 0;
  uint64_t throttles = 0;
  uint64_t lost = 0;
  uint64_t lost_samples = 0;
  uint64_t throttled = 0;
  uint64_t unknown_sample_ids = 0;
  uint64_t samples_without_engine = 0;
  uint64_t sched_samples = 0;
  uint64_t sched_undecodable = 0;
  uint64_t malformed_records = 0;
  uint64_t unknown_records = 0;
  uint64_t corrupt_ring_reads = 0;
};

// Where the samples went, by what the platform saw of them.
struct SampleRouting {
  uint64_t host_user = 0;
  uint64_t host_kernel = 0;
  uint64_t idle = 0;
  uint64_t guest_kernel = 0;
  uint64_t guest_user = 0;
  uint64_t unmapped_guest = 0;
};

// The platform's process table.
struct ProcessTableCounts {
  uint64_t entries = 0;
  uint64_t mappings = 0;
  uint64_t discovered_in_samples = 0;
  uint64_t unreadable_images = 0;
  uint64_t context_events = 0;
  uint64_t context_dropped = 0;
};

struct PlatformStats {
  std::string platform;     // linux
  std::string source;       // cpu-clock, hardware
  std::string cpu_type;
  double nominal_mhz = 0;   // what a rate (-F) becomes a count with
  std::string mhz_source;   // where nominal_mhz came from
  int64_t max_sample_rate = -1;           // kernel.perf_event_max_sample_rate now; -1: unreadable
  int64_t max_sample_rate_at_setup = -1;  // ... when the counters were set up
  int64_t cpu_time_max_percent = -1;      // kernel.perf_cpu_time_max_percent
  uint64_t profiling_ns = 0;
  std::vector<CounterSetup> counters;
  std::vector<CpuRate> cpus;
  PlatformTotals totals;
  SampleRouting routing;
  ProcessTableCounts processes;
  bool throttled = false;  // the kernel throttled sampling on some CPU
  std::vector<std::string> notes;

  // Samples the platform lost below the engine: perf's lost records and lost samples.
  uint64_t Lost() const { return totals.lost + totals.lost_samples; }
};

// What hvprof-hv's platform says of itself when dom0's agent asks (PlatformInfo): its
// sampling statistics (linux), its notes for the session, its last error, and its CPUs'
// nominal clock.
struct PlatformInfo {
  std::optional<PlatformStats> stats;  // linux only
  std::vector<std::string> notes;
  std::string last_error;
  double nominal_mhz = 0;  // what a rate (-F) becomes a count with; 0: unknown
};

// The records as JSON, and back. Reading refuses statistics without their platform, source,
// clock, CPUs or totals (each CPU without its id, samples, rates, throttles and losses; the
// totals without samples, throttles and losses) and says where; the counts added after the
// first version (throttled samples, the idle throttling, the routing, the process table...)
// read as 0 when absent, as sessions written before them have them. Unknown keys are ignored.
nlohmann::json ToJson(const PlatformStats& stats);
Result<PlatformStats> ParsePlatformStats(const json::Node& node);
nlohmann::json ToJson(const PlatformInfo& info);
Result<PlatformInfo> ParsePlatformInfo(const json::Node& node);

}  // namespace hvprof::context
