// Other processes, as /proc shows them.
#pragma once

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

}  // namespace hvprof
