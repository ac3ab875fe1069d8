#include "hvprof/linux/perf_events.h"

#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "hvprof/base/files.h"

namespace hvprof::linux_host {

using hvprof::ErrorKind;
using hvprof::MakeError;

namespace {

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::optional<std::string> ReadSmall(const std::string& path) {
  auto text = hvprof::ReadFileToString(path);
  if (!text) return std::nullopt;
  return Trimmed(std::move(text).value());
}

// The "Seccomp:" mode of this process: 0 none, 1 strict, 2 filter.
int SeccompMode(const HostPaths& paths) {
  auto status = hvprof::ReadFileToString(paths.proc + "/self/status");
  if (!status) return 0;
  const std::string& text = status.value();
  const size_t at = text.find("\nSeccomp:");
  if (at == std::string::npos) return 0;
  return std::atoi(text.c_str() + at + 9);
}

std::string ParanoidText(const HostPaths& paths) {
  auto level = ReadSysctl(paths, "kernel/perf_event_paranoid");
  return level ? std::to_string(*level) : std::string("unknown");
}

}  // namespace

std::optional<int64_t> ReadSysctl(const HostPaths& paths, std::string_view name) {
  auto text = ReadSmall(paths.proc + "/sys/" + std::string(name));
  if (!text || text->empty()) return std::nullopt;
  int64_t value = 0;
  auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc()) return std::nullopt;
  return value;
}

hvprof::Error PerfOpenError(int errnum, std::string_view what, int cpu, const HostPaths& paths) {
  const std::string where = fmt::format("perf_event_open of {} on CPU {}", what, cpu);
  switch (errnum) {
    case EACCES:
    case EPERM: {
      if (SeccompMode(paths) == 2) {
        return MakeError(ErrorKind::kPermissionDenied,
                         "{}: {}; this process runs under a seccomp filter, which container "
                         "runtimes use to block perf_event_open: run the container with "
                         "--security-opt seccomp=unconfined (or a profile that allows "
                         "perf_event_open) and --cap-add PERFMON",
                         where, std::strerror(errnum));
      }
      if (::geteuid() != 0) {
        return MakeError(ErrorKind::kPermissionDenied,
                         "{}: {} (kernel.perf_event_paranoid={}); system-wide sampling needs root "
                         "or CAP_PERFMON: run hvprof-hv as root, or allow it for everybody with "
                         "`sysctl kernel.perf_event_paranoid=-1`",
                         where, std::strerror(errnum), ParanoidText(paths));
      }
      return MakeError(ErrorKind::kPermissionDenied,
                       "{}: {} even as root (kernel.perf_event_paranoid={}): in a container, root "
                       "also needs CAP_PERFMON (--cap-add PERFMON); otherwise a security module "
                       "(SELinux, AppArmor, kernel lockdown) forbids perf events, or try "
                       "`sysctl kernel.perf_event_paranoid=-1`",
                       where, std::strerror(errnum), ParanoidText(paths));
    }
    case ENOSYS:
      return MakeError(ErrorKind::kUnsupported,
                       "{}: perf_event_open is not available: the kernel was built without "
                       "CONFIG_PERF_EVENTS, or a seccomp filter (a container's) makes it fail "
                       "with ENOSYS; run on the host or with --security-opt seccomp=unconfined",
                       where);
    case ENOENT:
    case EOPNOTSUPP:
      return MakeError(ErrorKind::kUnsupported,
                       "{}: {}: the CPU's PMU does not support this event (virtual machines "
                       "usually expose no hardware PMU); use the cpu-clock fallback "
                       "(cpu_type linux/software)",
                       where, std::strerror(errnum));
    case EMFILE:
    case ENFILE: {
      struct rlimit limit {};
      ::getrlimit(RLIMIT_NOFILE, &limit);
      return MakeError(ErrorKind::kNoSpace,
                       "{}: too many open files: hvprof needs one descriptor per CPU and counter "
                       "and the limit is {}; raise it (`ulimit -n 65536`, or LimitNOFILE= for a "
                       "service)",
                       where, limit.rlim_cur);
    }
    case ENODEV:
      return MakeError(ErrorKind::kUnsupported, "{}: CPU {} is offline or has no such PMU", where,
                       cpu);
    case EBUSY:
      return MakeError(ErrorKind::kBusy,
                       "{}: the PMU is in exclusive use (another profiler, or a guest's vPMU); "
                       "stop it and retry",
                       where);
    case E2BIG:
      return MakeError(ErrorKind::kUnsupported,
                       "{}: the kernel does not know perf_event_attr of {} bytes: it is older "
                       "than the headers hvprof was built with",
                       where, sizeof(perf_event_attr));
    case EOVERFLOW:
      return MakeError(ErrorKind::kInvalidArgument,
                       "{}: the callchain depth is above kernel.perf_event_max_stack; ask for a "
                       "shorter backtrace",
                       where);
    case EINVAL:
      return MakeError(ErrorKind::kInvalidArgument,
                       "{}: the kernel rejected the event's attributes (invalid argument); a raw "
                       "event code or unit mask this PMU does not take, or a kernel older than "
                       "4.1 (use_clockid)",
                       where);
    default:
      return hvprof::ErrnoError(errnum, where);
  }
}

hvprof::Error PerfMmapError(int errnum, uint64_t bytes, int cpu, const HostPaths& paths) {
  const auto budget = ReadSysctl(paths, "kernel/perf_event_mlock_kb");
  return MakeError(errnum == ENOMEM || errnum == EPERM ? ErrorKind::kNoSpace : ErrorKind::kIo,
                   "mmap of the {} KiB perf ring of CPU {}: {}; perf rings count against "
                   "kernel.perf_event_mlock_kb={} KiB per CPU and `ulimit -l`: run as root, use "
                   "a smaller ring, or raise kernel.perf_event_mlock_kb",
                   bytes / 1024, cpu, std::strerror(errnum),
                   budget ? std::to_string(*budget) : std::string("unknown"));
}

hvprof::Result<hvprof::ScopedFd> OpenPerfEvent(perf_event_attr& attr, int cpu,
                                               std::string_view what, const HostPaths& paths) {
  attr.size = sizeof attr;
  for (;;) {
    const long fd = ::syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd >= 0) return hvprof::ScopedFd(static_cast<int>(fd));
    if (errno == EINTR) continue;
    const int saved = errno;
    // Kernels before 5.12 have no build-ids in MMAP2 and refuse the bit: retry without it.
    if (saved == EINVAL && attr.build_id != 0) {
      attr.build_id = 0;
      continue;
    }
    return PerfOpenError(saved, what, cpu, paths);
  }
}

hvprof::Result<PerfProbe> ProbePerf(int cpu, bool force_software, const HostPaths& paths) {
  perf_event_attr attr{};
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.sample_period = 1000000;
  attr.disabled = 1;
  HVPROF_TRY(software, OpenPerfEvent(attr, cpu, "cpu-clock", paths));
  (void)software;

  PerfProbe probe;
  if (force_software) {
    probe.reason = "sampling with the cpu-clock software timer, as asked";
    return probe;
  }
  for (const char* name : {"cpu", "cpu_core"}) {
    struct stat st {};
    if (::stat((paths.sys + "/bus/event_source/devices/" + name).c_str(), &st) == 0) {
      probe.pmu = name;
      break;
    }
  }
  if (probe.pmu.empty()) {
    probe.reason = "no hardware PMU (/sys/bus/event_source/devices/cpu is absent, as in most "
                   "virtual machines): sampling with the cpu-clock software timer";
    return probe;
  }
  perf_event_attr cycles{};
  cycles.type = PERF_TYPE_HARDWARE;
  cycles.config = PERF_COUNT_HW_CPU_CYCLES;
  cycles.sample_period = 1000000;
  cycles.disabled = 1;
  auto hardware = OpenPerfEvent(cycles, cpu, "cycles", paths);
  if (!hardware) {
    probe.pmu.clear();
    probe.reason = "the hardware PMU cannot count cycles (" + hardware.error().message() +
                   "): sampling with the cpu-clock software timer";
    return probe;
  }
  probe.source = EventSource::kHardware;
  probe.reason = "sampling with raw events of the hardware PMU '" + probe.pmu + "'";
  return probe;
}

CpuFrequency NominalFrequency(const HostPaths& paths) {
  CpuFrequency frequency;
  const std::string cpufreq = paths.sys + "/devices/system/cpu/cpu0/cpufreq/";
  if (auto base = ReadSmall(cpufreq + "base_frequency")) {
    const double khz = std::strtod(base->c_str(), nullptr);
    if (khz > 0) return {khz / 1000, "cpufreq base_frequency"};
  }
  auto cpuinfo = hvprof::ReadFileToString(paths.proc + "/cpuinfo");
  if (cpuinfo) {
    const std::string& text = cpuinfo.value();
    const size_t model = text.find("model name");
    if (model != std::string::npos) {
      const size_t end = text.find('\n', model);
      const std::string line = text.substr(model, end == std::string::npos ? end : end - model);
      const size_t at = line.rfind('@');
      if (at != std::string::npos) {
        const double ghz = std::strtod(line.c_str() + at + 1, nullptr);
        if (ghz > 0 && line.find("GHz", at) != std::string::npos) {
          return {ghz * 1000, "the model name in /proc/cpuinfo"};
        }
      }
    }
    const size_t mhz = text.find("cpu MHz");
    if (mhz != std::string::npos) {
      const size_t colon = text.find(':', mhz);
      if (colon != std::string::npos) {
        const double value = std::strtod(text.c_str() + colon + 1, nullptr);
        if (value > 0) return {value, "\"cpu MHz\" of /proc/cpuinfo"};
      }
    }
  }
  if (auto max = ReadSmall(cpufreq + "cpuinfo_max_freq")) {
    const double khz = std::strtod(max->c_str(), nullptr);
    if (khz > 0) return {khz / 1000, "cpufreq cpuinfo_max_freq"};
  }
  frequency.source = "unknown, assumed 1 GHz";
  return frequency;
}

std::vector<uint32_t> ParseCpuList(std::string_view text) {
  std::vector<uint32_t> cpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && (item.back() == '\n' || item.back() == ' ')) item.remove_suffix(1);
    const size_t dash = item.find('-');
    uint32_t first = 0, last = 0;
    const std::string_view low = item.substr(0, dash);
    if (std::from_chars(low.data(), low.data() + low.size(), first).ec == std::errc()) {
      last = first;
      if (dash != std::string_view::npos) {
        const std::string_view high = item.substr(dash + 1);
        if (std::from_chars(high.data(), high.data() + high.size(), last).ec != std::errc()) {
          last = first;
        }
      }
      for (uint32_t cpu = first; cpu <= last && cpu < 4096; ++cpu) cpus.push_back(cpu);
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return cpus;
}

std::vector<uint32_t> OnlineCpus(const HostPaths& paths) {
  if (auto online = ReadSmall(paths.sys + "/devices/system/cpu/online")) {
    auto cpus = ParseCpuList(*online);
    if (!cpus.empty()) return cpus;
  }
  const long count = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<uint32_t> cpus;
  for (long cpu = 0; cpu < std::max(count, 1L); ++cpu) cpus.push_back(static_cast<uint32_t>(cpu));
  return cpus;
}

uint32_t PossibleCpus(const HostPaths& paths) {
  uint32_t count = 0;
  if (auto possible = ReadSmall(paths.sys + "/devices/system/cpu/possible")) {
    for (uint32_t cpu : ParseCpuList(*possible)) count = std::max(count, cpu + 1);
  }
  for (uint32_t cpu : OnlineCpus(paths)) count = std::max(count, cpu + 1);
  return count;
}

}  // namespace hvprof::linux_host
