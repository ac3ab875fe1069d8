// The scheduling view (hvprof-report --sched): from a session's scheduling records, the time
// every vCPU (or task) spent running, runnable (waiting for a pCPU), blocked, offline and
// unknown; per domain and per pCPU; its wake-ups and wake-up latencies, its waits, migrations,
// and who ran on the pCPU while it waited. One pass over the records in time order, with memory
// in proportion to the entities and pCPUs, not the records. docs/sched.md defines every number.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/sched_records.h"

namespace hvprof::report {

// Preemptor and interval ids beside entity indexes.
inline constexpr uint32_t kSchedNobody = ~uint32_t{0};       // no entity known on the pCPU
inline constexpr uint32_t kSchedNotKept = kSchedNobody - 1;  // preemptors: before the switches kept per pCPU
inline constexpr uint32_t kSchedIdle = kSchedNobody - 2;     // preemptors: the pCPU's idle vCPU (any pCPU's)
// Switches kept per pCPU for the preemptors of waits still open (docs/sched.md).
inline constexpr size_t kSchedHistory = 4096;

// Wake-up latencies (wake-up to running), nearest-rank percentiles over values kept to 10
// significant bits (each rounded down, by less than 0.1%); `max` and `total_ns` are exact.
struct SchedLatency {
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t p50_ns = 0;
  uint64_t p90_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t max_ns = 0;
};

struct SchedPreemptor {
  uint32_t entity = kSchedNobody;  // index into SchedReport::entities, or kSchedIdle/kSchedNobody/kSchedNotKept
  std::string label;
  uint64_t ns = 0;  // of the victim's waits, the time this one ran on the pCPU the victim then got
};

struct SchedEntityStats {
  SchedEntity entity;
  std::string label;    // SchedEntityLabel, unescaped
  std::string process;  // SchedProcessLabel, unescaped
  std::array<uint64_t, kSchedStates> ns{};  // per SchedState; they add up to the window
  uint64_t wakeups = 0;       // blocked or offline -> runnable (or straight to running)
  uint64_t switches_in = 0;   // times it started running
  uint64_t migrations_recorded = 0;  // kTypeMigrate records
  uint64_t migrations_derived = 0;   // ran on another pCPU than last time with no record of the move
  uint64_t waits = 0;                // runnable intervals
  uint64_t longest_wait_ns = 0;
  SchedLatency latency;
  std::vector<SchedPreemptor> preemptors;  // the top ones, most first
  bool seen = false;  // a record said its state (else its whole window is unknown)
};

struct SchedDomainStats {
  uint16_t domain = 0;
  std::string name;  // store::DomainName, unescaped
  uint32_t entities = 0;
  std::array<uint64_t, kSchedStates> ns{};  // summed over its entities
  uint64_t wakeups = 0;
  uint64_t switches_in = 0;
  uint64_t migrations_recorded = 0;
  uint64_t migrations_derived = 0;
  SchedLatency latency;
};

struct SchedPcpuStats {
  uint16_t pcpu = 0;
  uint64_t busy_ns = 0;     // a non-idle entity ran
  uint64_t idle_ns = 0;     // its idle vCPU ran
  uint64_t unknown_ns = 0;  // no record says who ran; busy + idle + unknown == the window
  uint64_t lost_ns = 0;     // of unknown_ns: in a records-lost gap
  uint64_t lost_records = 0;
  uint64_t switches = 0;    // a new entity ran
};

struct SchedWait {
  uint32_t entity = 0;  // index into SchedReport::entities
  uint64_t start_ns = 0;
  uint64_t ns = 0;
  uint16_t pcpu = kUnknownPcpu;  // where it then ran; kUnknownPcpu: it did not (blocked, window end)
  bool woken = false;            // the wait began with a wake-up (else a preemption or the window start)
};

// Who kept one domain's vCPUs waiting, summed over the preemptors of its entities.
struct SchedDomainPreemption {
  uint16_t victim = 0;
  uint16_t preemptor = 0;  // kSchedNobodyDomain for nobody known / history not kept
  uint64_t ns = 0;
};
inline constexpr uint16_t kSchedNobodyDomain = 0xFFFF;

// What the records said that the analysis could not take as it came (docs/sched.md).
struct SchedCounters {
  SchedInputCounts input;
  uint64_t inconsistent = 0;       // an old_state that disagreed with the tracked state: resynced
  uint64_t displaced = 0;          // of those: an entity still running where another began running
  uint64_t redundant_wakeups = 0;  // a wake-up of a runnable or running entity: no change
  uint64_t outside_window = 0;     // before the window (states taken, nothing counted) or after (dropped)
  uint64_t lost_records = 0;       // Σ count of the records-lost records
  uint64_t lost_gaps = 0;          // records-lost records
};

struct SchedReport {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t pcpus = 0;
  std::vector<SchedEntityStats> entities;  // every entity, by index (SchedRecords::entities())
  std::vector<uint32_t> shown;             // the non-idle ones, by domain then vCPU/pid/tid
  std::vector<SchedDomainStats> domains;   // non-idle domains, by id
  std::vector<SchedPcpuStats> pcpu_stats;  // one per pCPU
  std::vector<SchedWait> longest_waits;    // the top ones, longest first
  std::vector<SchedDomainPreemption> domain_preemptions;  // most first, the top ones
  SchedLatency latency;                    // of every non-idle entity
  SchedCounters counters;
  uint64_t window_ns() const { return end_ns - start_ns; }
  // A domain as the report names it (report.domains' name; "idle"; "domN" for one it lacks).
  std::string DomainName(uint16_t domain) const;
};

// One stretch of a pCPU's time with one occupant, as the analysis closes it (any order
// between pCPUs, in time order on each). entity: an index, or kSchedNobody (unknown).
struct SchedInterval {
  uint16_t pcpu = 0;
  uint32_t entity = kSchedNobody;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  bool lost = false;  // unknown because records were lost
};

// The window the analysis takes: SchedOptions' start and end, else the first and the last
// record's time.
struct SchedWindow {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};
SchedWindow WindowOf(const SchedRecords& records, const SchedOptions& options);

// Fails only when the window is reversed or the pCPUs too many. `on_interval`, when given, receives every
// pCPU interval of positive length: together they cover each pCPU's window exactly once.
Result<SchedReport> AnalyzeSched(const SchedRecords& records, const SchedOptions& options,
                                 const std::function<void(const SchedInterval&)>& on_interval = {});

// --sched -l: each domain's CPU time beside its share of the samples. `samples` holds the
// samples per domain the sample view counted (the idle domain's are left out, as the views leave
// idle samples out); rows are the domains of either side, most running time first.
struct SchedShareRow {
  uint16_t domain = 0;
  std::string name;  // store::DomainName, unescaped
  uint64_t running_ns = 0;
  double running_percent = 0;  // of every non-idle entity's running time
  uint64_t samples = 0;
  double sample_percent = 0;   // of the samples given
};
struct SchedShares {
  uint64_t running_ns = 0;  // Σ non-idle running time
  uint64_t samples = 0;     // Σ samples given, idle left out
  std::vector<SchedShareRow> rows;
};
SchedShares SharesBesideSamples(const SchedReport& report, const std::map<uint16_t, uint64_t>& samples,
                                const SchedOptions& options);

}  // namespace hvprof::report
