// perf_event_open on this host: what it can do (a hardware PMU, or only software timers), the
// CPUs, the nominal clock, and errors that say why a call failed and what to change.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"

struct perf_event_attr;

namespace hvprof::linux_host {

// Where the host's files are (tests point them at fakes).
struct HostPaths {
  std::string proc = "/proc";
  std::string sys = "/sys";
};

enum class EventSource : uint8_t {
  kSoftware,  // the cpu-clock software timer
  kHardware,  // raw events of the CPU's PMU
};

struct PerfProbe {
  EventSource source = EventSource::kSoftware;
  std::string pmu;     // the PMU's sysfs name ("cpu"), empty without one
  std::string reason;  // why this source, for the notes
};

// Checks that system-wide perf events can be opened at all (a software cpu-clock event on
// `cpu`), then whether a hardware PMU counts cycles. Fails with advice when perf is unusable.
hvprof::Result<PerfProbe> ProbePerf(int cpu, bool force_software, const HostPaths& paths);

// perf_event_open(attr, pid -1, cpu, group -1, FD_CLOEXEC). `what` names the event in errors.
hvprof::Result<hvprof::ScopedFd> OpenPerfEvent(perf_event_attr& attr, int cpu,
                                               std::string_view what, const HostPaths& paths);

// An error for a failed perf_event_open: why, and what to change.
hvprof::Error PerfOpenError(int errnum, std::string_view what, int cpu, const HostPaths& paths);
// An error for a failed mmap of a perf ring of `bytes`.
hvprof::Error PerfMmapError(int errnum, uint64_t bytes, int cpu, const HostPaths& paths);

struct CpuFrequency {
  double mhz = 1000;
  std::string source;  // where the number came from
};
// The CPU's nominal frequency: cpufreq's base_frequency, the "@ x.yGHz" of the model name,
// /proc/cpuinfo's "cpu MHz" (the TSC rate in most VMs), cpufreq's maximum, else 1 GHz.
CpuFrequency NominalFrequency(const HostPaths& paths);

// CPUs listed in a sysfs cpu list ("0-3,8,10-11").
std::vector<uint32_t> ParseCpuList(std::string_view text);
std::vector<uint32_t> OnlineCpus(const HostPaths& paths);
// The highest possible CPU + 1 (the size of the CPU index space).
uint32_t PossibleCpus(const HostPaths& paths);

// An integer sysctl under /proc/sys ("kernel/perf_event_max_sample_rate").
std::optional<int64_t> ReadSysctl(const HostPaths& paths, std::string_view name);

// The kernel's floor on a cpu-clock period (perf_swevent_start_hrtimer): shorter is raised.
inline constexpr uint64_t kMinCpuClockPeriodNs = 10000;

}  // namespace hvprof::linux_host
