// This kernel's own tasks, as perf's side band tells them, without sampling anything: for the
// agent of a Linux domain that a hypervisor samples from outside (Xen with hvprof's engine, or
// xenoprof). Those samples carry the domain's vCPU, a time and an address, but no process: the
// hypervisor knows vCPUs, not the guest kernel's tasks. The tracker keeps
//   - the domain's processes and what they map (ProcessTable, told as context events, each
//     with this domain's id), and
//   - which task ran on each CPU when (context switches, per CPU, for a bounded window),
// so that the agent can give each sample of its own domain the task its vCPU was running then.
//
// One software dummy event per online CPU (it counts nothing and takes no samples): FORK, EXIT,
// COMM, MMAP2 with build-ids, and CPU-wide context switches, timed by `clock`.
#pragma once

#include <time.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/linux/domain_map.h"
#include "hvprof/linux/perf_events.h"
#include "hvprof/linux/perf_ring.h"
#include "hvprof/linux/process_table.h"

namespace hvprof::linux_host {

class TaskTracker {
 public:
  struct Options {
    DomainId domain = 0;  // the domain these tasks are in: every context event is told as its
    clockid_t clock = CLOCK_MONOTONIC_RAW;  // what the records' times are
    uint64_t ring_bytes = uint64_t{256} << 10;  // per CPU, a power of two of pages
    uint64_t keep_switches_ns = 10'000'000'000;  // how far back TaskAt can answer
    HostPaths paths;
    bool scan_proc = true;  // tell the processes alive at the start too (from /proc)
    bool read_elf = true;   // read the mapped files' build-ids and segments
  };
  static Result<std::unique_ptr<TaskTracker>> Open(const Options& options);
  ~TaskTracker();

  // Reads what the rings hold, in time order: into the process table and the switch history.
  void Drain();

  struct Task {
    uint32_t pid = 0;
    uint32_t tid = 0;
  };
  // The task that ran on `cpu` at `time` (ns of options.clock): the one the latest switch at or
  // before `time` put there. None when `time` is before the history kept (or before the first
  // switch seen on that CPU), when records of that CPU were lost around it, or when it is
  // later than the last record drained from that CPU and Drain has not been called since.
  // pid 0 is the idle task.
  std::optional<Task> TaskAt(uint32_t cpu, uint64_t time) const;

  // The context events from `from` on, at most `max` (ProcessTable::TakeEvents), told as
  // options.domain's.
  ProcessTable::Events TakeEvents(uint64_t from, size_t max) const;
  void Acknowledge(uint64_t sequence) { processes_->Acknowledge(sequence); }
  ProcessTable& processes() { return *processes_; }

  struct Stats {
    uint64_t switches = 0;      // context switches read
    uint64_t lost_records = 0;  // records the kernel could not write (full rings)
    uint64_t malformed = 0;     // records that broke the format
  };
  Stats stats() const { return stats_; }
  // The current time of options.clock, in ns.
  uint64_t Now() const;

 private:
  struct Ring {
    uint32_t cpu = 0;
    ScopedFd fd;
    ScopedMmap mapping;
    PerfRing ring;
  };
  struct Switch {
    uint64_t time = 0;
    uint32_t pid = 0;
    uint32_t tid = 0;
  };
  struct CpuHistory {
    std::deque<Switch> switches;  // in time order
    uint64_t lost_until = 0;      // records were lost before this time (TaskAt answers nothing)
    uint64_t drained_to = 0;      // the latest record time read from this CPU
  };
  class Visitor;

  explicit TaskTracker(const Options& options);
  void NoteSwitch(uint32_t cpu, uint64_t time, uint32_t pid, uint32_t tid);

  Options options_;
  DomainRegistry registry_;
  std::unique_ptr<ProcessTable> processes_;
  std::vector<Ring> rings_;
  std::vector<CpuHistory> history_;  // by CPU number
  Stats stats_;
  std::vector<uint8_t> copy_;  // a wrapped ring's bytes, made contiguous
};

}  // namespace hvprof::linux_host
