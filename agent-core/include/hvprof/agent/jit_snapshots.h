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
// owned by the process's user or root, regular, and bounded in size; the report parses them with
// a fuzzed parser. Nothing here runs on a sample's path but Watch, which is a hash lookup for a
// process seen before.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
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
    size_t max_processes = 4096;  // watched at once; more are counted, not copied
  };

  JitSnapshots(std::string session_directory, Options options);
  ~JitSnapshots();
  JitSnapshots(const JitSnapshots&) = delete;
  JitSnapshots& operator=(const JitSnapshots&) = delete;

  // A user-space sample of `pid` in `domain` was stored. The first time, the process is looked
  // up (its identity pinned by a pidfd) and its JIT files copied.
  void Watch(uint16_t domain, uint32_t pid);
  // Copies what grew, and the files of processes that ended since; at most once a second
  // unless `now`.
  void Poll(bool now = false);
  // A last copy of every watched process's files (profiling stopped, or the session is dumped).
  void CopyAll();
  // The copies, for the session metadata.
  const std::vector<store::JitRecord>& records() const { return records_; }
  // Processes not watched because max_processes were.
  uint64_t unwatched() const { return unwatched_; }

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
    bool failed = false;  // a write into the session failed: no more copies
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
    bool ended = false;
    std::chrono::steady_clock::time_point maps_read;
    std::vector<File> files;
  };

  void Start(Process& process);
  void FindJitDumps(Process& process);
  void AddFile(Process& process, std::string kind, std::string path, uint64_t max_bytes);
  void Copy(Process& process, File& file);
  void SetProblem(File& file, std::string problem);

  std::string directory_;
  Options options_;
  // By (domain << 32 | pid).
  std::unordered_map<uint64_t, Process> processes_;
  uint64_t last_key_ = UINT64_MAX;
  std::vector<store::JitRecord> records_;
  uint64_t unwatched_ = 0;
  std::chrono::steady_clock::time_point last_poll_{};
};

}  // namespace hvprof::agent
