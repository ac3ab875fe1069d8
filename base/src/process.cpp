#include "hvprof/base/process.h"

#include <fmt/format.h>

#include "hvprof/base/files.h"

namespace hvprof {

bool ProcessRunning(long pid, std::string_view comm_prefix) {
  if (pid <= 0) return false;
  if (!comm_prefix.empty()) {
    auto comm = ReadFileToString(fmt::format("/proc/{}/comm", pid), 64, Links::kFollow);
    if (!comm || !std::string_view(comm.value()).starts_with(comm_prefix)) return false;
  }
  auto stat = ReadFileToString(fmt::format("/proc/{}/stat", pid), 4096, Links::kFollow);
  if (!stat) return false;
  const size_t paren = stat.value().rfind(')');  // the state follows the comm, which may hold ')'
  return paren == std::string::npos || paren + 2 >= stat.value().size() || stat.value()[paren + 2] != 'Z';
}

}  // namespace hvprof
