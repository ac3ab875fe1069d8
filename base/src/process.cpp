#include "hvprof/base/process.h"

#include <sys/resource.h>

#include <charconv>

#include <fmt/format.h>

#include "hvprof/base/files.h"

namespace hvprof {

std::vector<std::string_view> ProcStatFields(std::string_view stat) {
  std::vector<std::string_view> fields;
  const size_t open = stat.find('(');
  const size_t close = stat.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return fields;
  size_t pos = close + 1;
  while (pos < stat.size()) {
    while (pos < stat.size() && (stat[pos] == ' ' || stat[pos] == '\n')) ++pos;
    size_t end = pos;
    while (end < stat.size() && stat[end] != ' ' && stat[end] != '\n') ++end;
    if (end > pos) fields.push_back(stat.substr(pos, end - pos));
    pos = end;
  }
  return fields;
}

bool ProcessRunning(long pid, std::string_view comm_prefix) {
  if (pid <= 0) return false;
  if (!comm_prefix.empty()) {
    auto comm = ReadFileToString(fmt::format("/proc/{}/comm", pid), 64, Links::kFollow);
    if (!comm || !std::string_view(comm.value()).starts_with(comm_prefix)) return false;
  }
  auto stat = ReadFileToString(fmt::format("/proc/{}/stat", pid), 4096, Links::kFollow);
  if (!stat) return false;
  const auto fields = ProcStatFields(stat.value());
  return fields.empty() || fields[0] != "Z";
}

long long ProcessCpuTicks(long pid) {
  if (pid <= 0) return -1;
  auto stat = ReadFileToString(fmt::format("/proc/{}/stat", pid), 4096, Links::kFollow);
  if (!stat) return -1;
  const auto fields = ProcStatFields(stat.value());  // fields 14 and 15 are the CPU times
  if (fields.size() <= 12) return -1;
  long long user = 0, system = 0;
  const auto parse = [](std::string_view text, long long* out) {
    return std::from_chars(text.data(), text.data() + text.size(), *out).ec == std::errc();
  };
  if (!parse(fields[11], &user) || !parse(fields[12], &system)) return -1;
  return user + system;
}

bool CpuProgress::Advanced() {
  if (!ProcessRunning(pid_)) return false;
  const long long now = ProcessCpuTicks(pid_);
  const bool advanced = now >= 0 && now > last_;
  last_ = now;
  return advanced;
}

size_t RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? size_t(1) << 20 : static_cast<size_t>(limit.rlim_cur);
}

}  // namespace hvprof
