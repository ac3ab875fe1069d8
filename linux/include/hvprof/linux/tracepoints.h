// The kernel's scheduler tracepoints, as tracefs describes them: each event's id and the layout
// of its raw record (events/<system>/<event>/format), parsed at setup rather than assumed, since
// ids and layouts change between kernels (sched_migrate_task's comm became a __data_loc string).
//
// hvprof --sched on linux opens sched_switch, sched_waking (sched_wakeup on kernels before
// 4.3, which lack it), sched_wakeup_new and sched_migrate_task on every CPU, as perf sched
// record does, and decodes each PERF_SAMPLE_RAW record with the offsets read here.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/linux/perf_events.h"

namespace hvprof::linux_host {

// One `field:TYPE NAME; offset:N; size:N; signed:N;` line of a format file.
struct TracepointField {
  std::string name;
  uint32_t offset = 0;
  uint32_t size = 0;
  bool is_signed = false;
  bool data_loc = false;  // __data_loc: a u32 of (length << 16 | offset) into the record
};

struct TracepointFormat {
  std::string name;
  uint32_t id = 0;
  std::vector<TracepointField> fields;
  const TracepointField* Find(std::string_view field) const;
};

// Parses a tracefs format file; `origin` names it in errors.
hvprof::Result<TracepointFormat> ParseTracepointFormat(std::string_view text, std::string_view origin);

// Where tracefs is: <sys>/kernel/tracing, else <sys>/kernel/debug/tracing (older mounts). Where
// neither is mounted and <sys> is the host's /sys, mounts it at /sys/kernel/tracing as perf does
// (root only); the error says how to mount it otherwise.
hvprof::Result<std::string> FindTracefs(const HostPaths& paths);
// events/<system>/<event>/format under `tracefs`.
hvprof::Result<TracepointFormat> ReadTracepoint(const std::string& tracefs, std::string_view system,
                                                std::string_view event);

// The scheduler tracepoints hvprof records, by what they mean.
enum class SchedTracepoint : uint8_t {
  kSwitch = 0,     // sched_switch: prev leaves the CPU (in prev_state), next runs
  kWaking = 1,     // sched_waking (or sched_wakeup): a task is woken, by whoever runs
  kWakeupNew = 2,  // sched_wakeup_new: a new task is runnable for the first time
  kMigrate = 3,    // sched_migrate_task: a task moves from orig_cpu to dest_cpu
};
inline constexpr uint32_t kSchedTracepoints = 4;

// What a raw record says, by its tracepoint's kind (fields of other kinds stay 0).
struct SchedTracepointRecord {
  SchedTracepoint kind = SchedTracepoint::kSwitch;
  uint32_t tid = 0;         // switch: prev_pid; waking, wakeup_new, migrate: pid
  int64_t prev_state = 0;   // switch
  uint32_t next_tid = 0;    // switch
  int32_t target_cpu = -1;  // waking, wakeup_new (-1: the kernel does not say)
  int32_t orig_cpu = -1;    // migrate
  int32_t dest_cpu = -1;    // migrate
};

// A task's state as sched_switch's prev_state reports it, in the terms of hvprof's runstates:
// 0 (or only the "preempted" flag above the state bits): still runnable; X or Z (exiting):
// offline; any other state bit (S, D, T, t, P, I): blocked.
enum class SwitchedOut : uint8_t { kRunnable, kBlocked, kOffline };
SwitchedOut ClassifyPrevState(int64_t prev_state);

class SchedTracepoints {
 public:
  // Reads the four events' formats from tracefs. Fails with advice where tracefs is missing or
  // unreadable, or sched_switch lacks a field hvprof needs.
  static hvprof::Result<SchedTracepoints> Read(const HostPaths& paths);
  // From formats already parsed (tests, fuzzers); `wakeup_new` and `migrate` may be absent.
  static hvprof::Result<SchedTracepoints> FromFormats(const TracepointFormat& switch_format,
                                                      const TracepointFormat& waking,
                                                      const std::optional<TracepointFormat>& wakeup_new,
                                                      const std::optional<TracepointFormat>& migrate);

  // The tracepoint id of `kind`, or 0 where this kernel has none.
  uint32_t id(SchedTracepoint kind) const { return events_[static_cast<uint32_t>(kind)].id; }
  // "sched_switch", ...: the event's name on this kernel (sched_wakeup where sched_waking is missing).
  const std::string& name(SchedTracepoint kind) const { return events_[static_cast<uint32_t>(kind)].name; }

  // Decodes one PERF_SAMPLE_RAW record of `kind`; nullopt if it is too short for its fields or
  // its common_type is not that event's id.
  std::optional<SchedTracepointRecord> Decode(SchedTracepoint kind, std::span<const uint8_t> raw) const;

 private:
  // Where a needed field is: offset, size (1, 2, 4 or 8), signedness; size 0: absent.
  struct Slot {
    uint32_t offset = 0;
    uint32_t size = 0;
    bool is_signed = false;
  };
  struct Event {
    std::string name;
    uint32_t id = 0;
    Slot common_type, a, b, c;  // a, b, c: the fields Decode reads for the kind, in order
  };

  std::array<Event, kSchedTracepoints> events_;
};

}  // namespace hvprof::linux_host
