// Other processes, as /proc shows them.
#pragma once

#include <string_view>

namespace hvprof {

// Whether `pid` is running (a zombie has ended: it only waits for its parent) and, with
// `comm_prefix`, whether its name (/proc/PID/comm) starts with it.
bool ProcessRunning(long pid, std::string_view comm_prefix = {});

}  // namespace hvprof
