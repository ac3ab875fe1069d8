// The host's processes as perf's side-band records (FORK, EXIT, COMM, MMAP2) and /proc tell
// them: pid, parent, comm, executable mappings with bias and build-id, threads, and domain.
// What it learns goes out as context events (hvprof/context/context_event.h), with their times,
// which the agent keeps in the session (context.hvc): a process born (a fork, an exec, or found
// in /proc), renamed, mapping a file, exiting. So the table keeps only what the sample path needs
// now, the live processes and those that exited a moment ago (for late samples), and a host that
// forks all day costs it no more memory at the end of the day than at its start.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hvpmu/abi/ops.h"
#include "hvprof/context/context_event.h"
#include "hvprof/linux/domain_map.h"
#include "hvprof/linux/elf_info.h"
#include "hvprof/linux/perf_records.h"

namespace hvprof::linux_host {

using hvpmu::DomainId;

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t pgoff = 0;
  uint64_t bias = 0;  // symbolizer bias: runtime = image address + bias
  std::string path;
  std::string build_id;
  uint64_t time_ns = 0;   // perf time it was mapped (or its process forked): its event's
  std::string awaiting;   // the ELF cache key of its file while that file's answer has not come
};

struct Thread {
  std::string comm;
  int32_t vcpu = -1;  // for VMM threads that ran a guest: the vCPU index
};

struct Process {
  enum class Origin : uint8_t {
    kDefault,   // dom0
    kPidRule,   // a pid: rule on its ancestry
    kCgroup,    // a cgroup: rule
  };
  uint32_t pid = 0;
  uint32_t ppid = 0;
  std::string comm;
  DomainId domain = 0;
  Origin origin = Origin::kDefault;
  bool exited = false;
  uint64_t exit_time = 0;      // perf time of its EXIT
  uint64_t birth_ns = 0;       // perf time of its FORK or exec; 0 for a process found in /proc at setup
  uint64_t start_ticks = 0;    // /proc/PID/stat starttime, 0 when unknown
  std::vector<Mapping> mappings;  // sorted by start, non-overlapping
  std::map<uint32_t, Thread> threads;
  int32_t next_vcpu = 0;       // for vCPU threads whose name has no number
};

class ImageReader;

struct ProcessTableStats {
  uint64_t processes = 0;       // entries (live, and exited a moment ago)
  uint64_t proc_discoveries = 0;  // processes first seen in a sample, read from /proc
  uint64_t elf_failures = 0;      // mappings whose file could not be read (bias guessed)
  uint64_t mappings = 0;
  uint64_t threads = 0;         // threads whose process is known (FORK records, /proc)
  uint64_t context_events = 0;  // made since the start
  uint64_t context_pending = 0; // not yet taken by the agent
  uint64_t context_dropped = 0; // dropped untaken (kMaxPendingEvents)
};

class ProcessTable {
 public:
  struct Options {
    std::string proc_root = "/proc";
    bool read_elf = true;  // read build-ids and segments of mapped files
  };

  ProcessTable(DomainRegistry& registry, Options options);
  ~ProcessTable();

  // Reads every /proc/PID (comm, parent, start time, cgroup, executable mappings). New
  // processes get their domain from their ancestry; known live ones get fresh mappings.
  void ScanProc();
  // Pids of processes that hold a KVM VM file descriptor (anon_inode:kvm-vm), sorted.
  std::vector<uint32_t> FindVmmProcesses() const;

  void OnTask(const PerfTask& record);
  void OnComm(const PerfComm& record);
  void OnMmap2(const PerfMmap2& record);

  // The live entry of `pid`, read from /proc if it was never seen (a stub if it is gone). Inline
  // for the sample path's common case, a process seen a moment ago.
  Process& Get(uint32_t pid) {
    Process* recent = recent_[pid % recent_.size()];
    return recent != nullptr && recent->pid == pid ? *recent : Lookup(pid);
  }
  const Process* Find(uint32_t pid) const;

  // The vCPU index of VMM thread `tid`: from its name ("CPU 3/KVM", "vcpu3", "fc_vcpu 3"), else
  // numbered in order of first use.
  uint16_t VcpuOf(uint32_t pid, uint32_t tid);
  // Whether `tid` of VMM `pid` runs a vCPU (its name says so, or it ran guest code).
  bool IsVcpuThread(uint32_t pid, uint32_t tid);
  // The process (thread group) thread `tid` belongs to: from FORK records, else from
  // /proc/TID/status; `tid` itself where neither says (a thread gone before it was asked about).
  uint32_t TgidOf(uint32_t tid);
  // --sched: task `tid` of process `pid` is named in scheduling records. It is told once, by
  // its thread's name, as a context event (kTask), and kept after it exits too, so that a
  // report names it.
  void NoteTask(uint32_t pid, uint32_t tid);

  // The context events from sequence number `from` on, at most `max` of them (all domains'), and
  // the number of the first of them; events before the first kept are lost (kMaxPendingEvents).
  // With `from` 0, what is alive is told first, as events (a new agent, or one that lost some);
  // events are numbered from 1.
  using Events = context::ContextEventBatch;
  Events TakeEvents(uint64_t from, size_t max) const;
  // The agent has what came before `sequence`: it need not be kept.
  void Acknowledge(uint64_t sequence);
  static constexpr size_t kMaxPendingEvents = size_t{1} << 20;

  // Forgets what no later record can need, so that a long session on a busy host (a build
  // forking thousands of processes a minute) holds only what its samples need now: processes that
  // exited before `before` (perf time), the threads of processes that exited before it, and which
  // process each thread that exited before it belonged to (its last scheduler records come just
  // after its EXIT). Their context went out as events.
  void Prune(uint64_t before);

  ProcessTableStats stats() const;

  // The ELF headers of mapped files are read off this thread (image_reader.h), so that a file
  // slow to read never holds up the rings: a new mapping gets the usual bias (start - pgoff)
  // and its record's build-id at once (and is told so as an event), and the file's once its
  // answer is taken (told again, as of the mapping's time). TakeImages takes the answers there
  // are without waiting (the machine does after each drain);
  // WaitForImages waits up to `timeout` for the reads asked for so far, from any thread;
  // SettleImages (a session closing) waits, then takes the answers, where drains are made.
  // Whether every read asked for was answered.
  void TakeImages();
  bool WaitForImages(std::chrono::milliseconds timeout) const;
  bool SettleImages(std::chrono::milliseconds timeout);

  // "CPU 3/KVM" -> 3; -1 if the name does not look like a vCPU thread.
  static int32_t ParseVcpuName(std::string_view comm);

 private:
  struct ProcEntry;
  struct ElfCacheEntry {
    bool ok = false;
    bool pending = false;  // asked of the image reader, not answered yet
    ElfInfo info;
  };

  // Get's cases but the recent process: the live table, else /proc.
  Process& Lookup(uint32_t pid);
  void AssignDomain(Process& process, const Process* parent,
                    const std::vector<std::string>* cgroups);
  bool ReadProc(uint32_t pid, ProcEntry* entry) const;
  // A new process under `pid` (replacing its entry), born at `birth_ns`, named `comm`: told as an
  // event.
  Process& Create(uint32_t pid, uint32_t ppid, const std::vector<std::string>* cgroups, uint64_t birth_ns,
                  std::string comm);
  void AddMapping(Process& process, Mapping mapping, uint64_t time_ns);
  void Emit(context::ContextEvent event);
  void EmitMapping(const Process& process, const Mapping& mapping, uint64_t time_ns);
  const ElfCacheEntry* ElfFor(uint32_t pid, const std::string& path, uint64_t start,
                              uint64_t end, const std::string& key);
  void FillMapping(uint32_t pid, Mapping* mapping, const std::string& key);
  std::string ReadThreadComm(uint32_t pid, uint32_t tid) const;

  DomainRegistry& registry_;
  Options options_;
  std::unordered_map<uint32_t, Process> live_;
  // The processes Get found last, by pid modulo the size (nodes of live_ do not move): samples
  // come in runs of a few processes, interleaved across CPUs. Cleared when a node goes.
  std::array<Process*, 16> recent_{};
  std::deque<context::ContextEvent> events_;  // not yet acknowledged
  // Sequence number of events_.front(). From 1: `from` 0 asks to start over (what is alive, then
  // the kept events), and a reply to it moves `next` on from 0 even when what is alive filled it.
  uint64_t events_first_ = 1;
  uint64_t events_made_ = 0;
  uint64_t events_dropped_ = 0;
  uint64_t last_time_ = 0;                    // of the latest record: a process found in /proc is born then
  std::map<std::string, ElfCacheEntry> elf_cache_;
  std::unique_ptr<ImageReader> images_;  // null without read_elf
  std::unordered_map<uint32_t, uint32_t> tgid_of_;  // thread -> process, as TgidOf found it
  // Threads that exited, in the order of their EXIT records: {time, tid, tgid}; Prune forgets
  // their tgid_of_ entries.
  struct ExitedThread {
    uint64_t time = 0;
    uint32_t tid = 0;
    uint32_t tgid = 0;
  };
  std::deque<ExitedThread> exited_threads_;
  struct NamedTask {
    uint32_t pid = 0;
    DomainId domain = 0;
    std::string comm;
  };
  // (pid << 32 | tid) -> NoteTask's: a tid reused by another process is another task.
  std::unordered_map<uint64_t, NamedTask> named_tasks_;
  static uint64_t TaskKey(uint32_t pid, uint32_t tid) { return uint64_t{pid} << 32 | tid; }
  uint64_t proc_discoveries_ = 0;
  uint64_t elf_failures_ = 0;
};

}  // namespace hvprof::linux_host
