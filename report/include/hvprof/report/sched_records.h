// The scheduling records of a session (issue 21), as the report takes them: every record the
// pCPUs' schedulers wrote (hvpmu/abi/ring.h's SchedRecord, docs/abi.md "Scheduling rings"),
// kept compactly (16 bytes a record) per pCPU, with the entities they name interned once.
// views/scheduling.h analyses them and views/timeline.h draws them; docs/sched.md says what the
// numbers mean.
//
// Records may come in any order across pCPUs; those of one pCPU must come in the order its
// ring held them (time order). A record whose time goes back on its pCPU is counted and
// dropped here; the analysis reads them merged in time order (ForEachInTimeOrder), never sorted
// as a whole.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/store/sched_file.h"

namespace hvprof::report {

// SchedRecord's numbers (docs/abi.md), as the store states them (hvprof/store/sched_file.h):
// the report does not include the engine's headers (scripts/check_includes.py).
namespace sched {
inline constexpr uint8_t kTypeRunstate = store::kSchedRunstate;
inline constexpr uint8_t kTypeWakeup = store::kSchedWakeup;
inline constexpr uint8_t kTypeMigrate = store::kSchedMigrate;
inline constexpr uint8_t kTypeLost = store::kSchedLost;
inline constexpr uint8_t kFlagPidValid = store::kSchedFlagTask;
// pCPUs above this are taken for damage (the engine has 256; Linux hosts up to 8192).
inline constexpr uint32_t kMaxPcpus = 8192;
}  // namespace sched

// An entity's state: Xen's runstates (SchedRecord's old_state/new_state), and kUnknown for
// time the records cannot tell (docs/sched.md: before a contradicted claim, in a records-lost
// gap, after being displaced).
enum class SchedState : uint8_t { kRunning = 0, kRunnable = 1, kBlocked = 2, kOffline = 3, kUnknown = 4 };
inline constexpr uint32_t kSchedStates = 5;
const char* SchedStateName(SchedState state);  // "running", "runnable", ..., "unknown"

// One record, the fields the analysis reads (SchedRecord's names and meanings).
struct SchedEvent {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint16_t pcpu = 0;
  uint8_t old_state = 0;
  uint8_t new_state = 0;
  uint64_t time_ns = 0;
  uint16_t domain = 0;
  uint16_t vcpu = 0;
  uint32_t pid = hvprof::kNoPid;
  uint32_t tid = hvprof::kNoPid;
  uint16_t from_pcpu = hvprof::kUnknownPcpu;
  uint16_t to_pcpu = hvprof::kUnknownPcpu;
  uint64_t count = 0;
  uint64_t aux = 0;
};

// Any record with SchedRecord's field names (hvpmu::ring::SchedRecord, or the store's copy of
// it) as a SchedEvent: records.Add(ToSchedEvent(record)).
template <typename Record>
SchedEvent ToSchedEvent(const Record& r) {
  SchedEvent e;
  e.type = r.type;
  e.flags = r.flags;
  e.pcpu = r.pcpu;
  e.old_state = r.old_state;
  e.new_state = r.new_state;
  e.time_ns = r.time_ns;
  e.domain = r.domain;
  e.vcpu = r.vcpu;
  e.pid = r.pid;
  e.tid = r.tid;
  e.from_pcpu = r.from_pcpu;
  e.to_pcpu = r.to_pcpu;
  e.count = r.count;
  e.aux = r.aux;
  return e;
}

// Whom a record is about: a vCPU (domain, vcpu), or with kFlagPidValid a task (domain, pid,
// tid; linux). The idle vCPU of each pCPU is its own entity (domain kIdleDomain, vcpu = pCPU),
// whatever pid it carries.
struct SchedEntity {
  uint16_t domain = 0;
  uint16_t vcpu = 0;  // a task's: the vCPU of its first record
  uint32_t pid = hvprof::kNoPid;
  uint32_t tid = hvprof::kNoPid;
  bool task = false;
  bool idle = false;
};

// A record as ForEachInTimeOrder hands it on.
struct SchedStep {
  uint64_t time_ns = 0;
  uint32_t entity = 0;  // index into SchedRecords::entities(); not for kTypeLost
  uint16_t pcpu = 0;
  uint8_t type = 0;
  uint8_t old_state = 0;
  uint8_t new_state = 0;
  uint16_t to_pcpu = hvprof::kUnknownPcpu;  // kTypeMigrate
  uint64_t lost = 0;                       // kTypeLost: records lost
  uint64_t lost_first_ns = 0;              // kTypeLost: the time of the first (0: unknown)
};

// What Add kept and dropped.
struct SchedInputCounts {
  uint64_t records = 0;        // given to Add
  uint64_t kept = 0;
  uint64_t backwards = 0;      // earlier than the record before it on its pCPU: dropped
  uint64_t unknown_types = 0;  // a type this hvprof does not know: dropped
  uint64_t invalid = 0;        // a state beyond offline, or no valid pCPU: dropped
  uint64_t noop_migrations = 0;  // from_pcpu == to_pcpu: dropped
};

class SchedRecords {
 public:
  void Add(const SchedEvent& event);

  const std::vector<SchedEntity>& entities() const { return entities_; }
  const SchedInputCounts& counts() const { return counts_; }
  // One past the highest pCPU of a kept record (0 if none).
  uint32_t pcpus() const { return static_cast<uint32_t>(pcpus_.size()); }
  // The times of the first and the last record kept (0 if none).
  uint64_t first_ns() const { return counts_.kept == 0 ? 0 : first_ns_; }
  uint64_t last_ns() const { return last_ns_; }
  // Every kept record in time order: the pCPUs' sequences merged (O(n log pCPUs)), each pCPU's
  // in its own order. At equal times, a record that takes an entity off a pCPU comes before
  // one that puts an entity on a pCPU, then the lower pCPU first.
  void ForEachInTimeOrder(const std::function<void(const SchedStep&)>& on_step) const;

 private:
  struct Event {
    uint64_t time;
    uint32_t entity;  // kTypeLost: index into lost_
    uint8_t type;
    uint8_t states;   // old_state | new_state << 4
    uint16_t extra;   // kTypeMigrate: to_pcpu
  };
  struct Lost {
    uint64_t count;
    uint64_t first_ns;
  };
  struct Pcpu {
    std::deque<Event> events;
    uint64_t last_ns = 0;
  };
  struct Key {
    uint64_t high;  // domain, vcpu, task bit
    uint64_t low;   // pid, tid
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  uint32_t Intern(const SchedEvent& event);

  std::vector<Pcpu> pcpus_;
  std::vector<Lost> lost_;
  std::vector<SchedEntity> entities_;
  std::unordered_map<Key, uint32_t, KeyHash> index_;
  SchedInputCounts counts_;
  uint64_t first_ns_ = UINT64_MAX;
  uint64_t last_ns_ = 0;
};

// What the analysis needs to know besides the records.
struct SchedOptions {
  // The session's window on the platform's clock; unset: the first and the last record.
  std::optional<uint64_t> start_ns;
  std::optional<uint64_t> end_ns;
  // The machine's pCPUs (one without records has only unknown time); 0: as the records say.
  // Records of higher pCPUs add theirs.
  uint32_t pcpus = 0;
  // Domain id -> its name as the session has it (store::DomainName prints "dom3 (web)").
  std::map<uint16_t, std::string> domain_names;
  // A task -> its name (comm), where the session knows it (linux tasks): by domain, process and
  // thread, for a thread id the host gave to another process later is another task.
  struct TaskKey {
    uint16_t domain = 0;
    uint32_t pid = 0;
    uint32_t tid = 0;
    auto operator<=>(const TaskKey&) const = default;
  };
  std::map<TaskKey, std::string> thread_names;
  // How many longest waits, and preemptors per entity, to keep.
  uint32_t top = 10;
  // A domain by its name here (store::DomainName): "dom0", "dom3 (web)", "idle".
  std::string DomainName(uint16_t domain) const;
};

// A session's scheduling: its records and what is known of its window, pCPUs and names.
struct SchedSession {
  SchedRecords records;
  SchedOptions options;
  std::vector<std::string> problems;  // damage met reading (the report warns and exits 3)
};

// Reads `session_dir`'s sched.hvs. Without one: kNotFound, "this session recorded no
// scheduling (run with --sched)".
Result<SchedSession> LoadSchedRecords(const std::string& session_dir);

// An entity as reports name it (unescaped: names are the guests' and processes' choice):
// "dom3 (web) v1"; a task "dom0 sshd[812]" (tid == pid) or "dom0 qemu[1202/1200]" (tid/pid),
// "dom0 [1202/1200]" when its name is unknown; "idle" for an idle vCPU.
std::string SchedEntityLabel(const SchedEntity& entity, const SchedOptions& options);
// What a task belongs to, for colours and legends: its process, "dom0 make[4242]" (named by the
// thread whose tid is the pid; "dom0 [4242]" when its name is unknown, the same for every
// thread); a vCPU's, its domain's name; "idle".
std::string SchedProcessLabel(const SchedEntity& entity, const SchedOptions& options);

}  // namespace hvprof::report
