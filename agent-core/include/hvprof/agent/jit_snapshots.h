// Copies of what JIT runtimes say of their code, kept in the session while it runs.
//
// A process whose user-space samples the agent stores may run generated code that no file
// holds (Node, the JVM, CPython's perf trampolines). Such runtimes describe it in a perf map
// (/tmp/perf-PID.map) or a jitdump (jit-PID.dump, which the process maps so profilers find it).
// Both are rewritten while the process runs and may be removed once it ends, so the agent copies
// them into the session's jit/ directory as they grow, and one last time when the process ends
// (it holds a pidfd and the process's root directory for that): the report names the code later,
// and from an archive.
//
// The files belong to the profiled process, so they are read as hostile input: resolved inside
// the process's own root (openat2 RESOLVE_IN_ROOT, never following a last symlink), only when
// owned by the process's user, regular with one name, and bounded in size; the report parses
// them with a fuzzed parser. The copies keep the runtime file's read permissions (a file only
// its user could read is only root's to read in the session). Nothing here runs on a sample's
// path but Watch, a hash lookup; the copying happens between drains, a bounded amount at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hvprof/base/scoped_fd.h"
#include "hvprof/store/session.h"

namespace hvprof::agent {

class JitSnapshots {
 public:
  struct Options {
    std::string proc_root = "/proc";
    uint64_t max_perf_map_bytes = 64ull << 20;
    uint64_t max_jitdump_bytes = 512ull << 20;
    uint64_t max_session_bytes = 2ull << 30;  // all copies of the session together
    uint64_t max_bytes_per_poll = 32ull << 20;  // copied per Poll, so that draining goes on
    size_t max_jitdumps_per_process = 2;
    // Processes followed at once (each holds two descriptors); 0: from RLIMIT_NOFILE.
    size_t max_processes = 0;
    // Programs whose processes are never followed: hvprof's own, which write no perf map or
    // jitdump, and whose /proc/PID/maps (hundreds of mappings) cost a millisecond to read.
    // Missing files are left out.
    std::vector<std::string> skip_programs;
  };

  // `existing`: the copies an earlier hvprofd listed in the session it continues.
  JitSnapshots(std::string session_directory, Options options, std::vector<store::JitRecord> existing = {});
  ~JitSnapshots();
  JitSnapshots(const JitSnapshots&) = delete;
  JitSnapshots& operator=(const JitSnapshots&) = delete;

  // A user-space sample of `pid` in `domain` was stored. A process not seen before is queued
  // for Poll to look up (its identity pinned by a pidfd) and copy. A hash lookup at most: it
  // runs on the drain path.
  void Watch(uint16_t domain, uint32_t pid) {
    // Inline: it runs on every user-mode sample, nearly always for the process just seen.
    const uint64_t key = (uint64_t{domain} << 32) | pid;
    if (key != last_key_) WatchNew(key, domain, pid);
  }
  // Looks up the queued processes and copies their files; then, at most once a second unless
  // `now`, copies what grew and the files of processes that ended since. At most
  // max_bytes_per_poll bytes are copied per call, unless `now`.
  void Poll(bool now = false);
  // A last copy of every watched process's files (profiling stopped, or the session is dumped).
  void CopyAll();
  // The copies, for the session metadata.
  const std::vector<store::JitRecord>& records() const { return records_; }
  // Processes not followed because max_processes were followed at the time.
  uint64_t unwatched() const { return unwatched_; }
  size_t max_processes() const { return options_.max_processes; }

 private:
  struct File {
    std::string kind;     // "perf-map", "jitdump"
    std::string path;     // inside the process's root, without the leading '/'
    uint64_t max_bytes = 0;
    dev_t device = 0;
    ino_t inode = 0;
    uint64_t copied = 0;
    int64_t mtime_ns = 0;
    size_t record = 0;    // index in records_
    bool failed = false;  // refused for good, or a write into the session failed
  };
  struct Process {
    uint16_t domain = 0;
    uint32_t pid = 0;
    uint64_t start_ticks = 0;
    uint32_t ns_pid = 0;  // the pid inside its own namespace (the files' names use it)
    uid_t uid = 0;        // its real and effective users may own its files
    uid_t euid = 0;
    ScopedFd pidfd;
    ScopedFd root;        // O_PATH of /proc/PID/root
    bool started = false;
    bool ended = false;
    std::chrono::steady_clock::time_point started_at;
    std::chrono::steady_clock::time_point maps_read;
    std::vector<File> files;
  };

  void Start(Process& process);
  bool Skipped(const Process& process) const;
  void End(Process& process);
  void FindJitDumps(Process& process);
  void AddFile(Process& process, std::string kind, std::string path, uint64_t max_bytes);
  void Copy(Process& process, File& file, uint64_t* budget);
  void SetProblem(File& file, std::string problem);

  std::string directory_;
  Options options_;
  // By (domain << 32 | pid).
  std::unordered_map<uint64_t, Process> processes_;
  std::vector<uint64_t> queued_;
  std::vector<uint64_t> young_;  // started less than a few seconds ago, no jitdump found yet
  size_t live_ = 0;  // processes holding descriptors
  void WatchNew(uint64_t key, uint16_t domain, uint32_t pid);  // Watch of another process than the last
  uint64_t last_key_ = UINT64_MAX;
  std::vector<store::JitRecord> records_;
  std::vector<std::pair<dev_t, ino_t>> skipped_programs_;  // options_.skip_programs' files
  uint64_t session_bytes_ = 0;
  uint64_t unwatched_ = 0;
  std::chrono::steady_clock::time_point last_poll_{};
};

}  // namespace hvprof::agent
