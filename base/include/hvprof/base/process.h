// Other processes, as /proc shows them.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace hvprof {

// The fields of a /proc/PID/stat text ("pid (comm) S ppid ...") after the comm, which may hold
// spaces and parentheses: [0] is field 3 (the state), so field N is [N - 3]. Empty when the
// text has no comm in parentheses. The views point into `stat`.
std::vector<std::string_view> ProcStatFields(std::string_view stat);

// Whether `pid` is running (a zombie has ended: it only waits for its parent) and, with
// `comm_prefix`, whether its name (/proc/PID/comm) starts with it.
bool ProcessRunning(long pid, std::string_view comm_prefix = {});

// The CPU time `pid` has used (utime + stime, in clock ticks), or -1 when it cannot be read.
long long ProcessCpuTicks(long pid);

// Whether a process we wait for is still at work, for waits that must not give up on a busy
// machine but must on a hung process: Advanced() is true while `pid` runs and has used CPU
// since the last call (or since construction).
// Raises the soft limit on open descriptors to the hard one (daemons that hold a descriptor per
// ring or per watched process: thousands on a big host) and returns the limit now in force.
size_t RaiseDescriptorLimit();

class CpuProgress {
 public:
  explicit CpuProgress(long pid) : pid_(pid), last_(ProcessCpuTicks(pid)) {}
  bool Advanced();

 private:
  long pid_;
  long long last_;
};

}  // namespace hvprof
