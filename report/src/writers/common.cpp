// Pieces every flat-table writer shares: percentages, image and source names, the loss lines
// with their advice, and the platform's own sampling figures.
#include "writers/common.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace hvprof::report {

using Json = nlohmann::json;

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

std::string CsvField(const std::string& raw) {
  const std::string text = Safe(raw);
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

const std::string& ImageName(const Profile& profile, uint32_t image, const ReportOptions& options) {
  const Image& i = profile.images()[image];
  return options.long_filenames ? i.long_name : i.name;
}

std::string SourceOf(const Profile& profile, const Row& row) {
  if (row.line == kNoIndex) return "(no location information)";
  const SourceLine& line = profile.lines()[row.line];
  return fmt::format("{}:{}", line.file, line.line);
}

std::vector<LossLine> Losses(const store::SessionMetadata& m) {
  std::vector<LossLine> lines = {
      {"hypervisor", "ring full", m.losses.ring_full,
       "the agent did not drain in time: give --buffer-size a larger value, a shorter "
       "--poll-interval, or use a larger event count"},
      {"hypervisor", "corrupt ring index", m.losses.corrupt_index,
       "a consumer wrote an impossible index into its ring: a bug in (or tampering with) that "
       "domain's agent; restart it"},
      {"hypervisor", "vCPU without a ring", m.losses.no_ring,
       "vCPUs were added after profiling was set up: --shutdown and --start-daemon again"},
      {"agent", "malformed records", m.losses.malformed_records,
       "records in a ring did not follow the format: the hypervisor and hvprof disagree on the "
       "ABI, or the ring memory was overwritten"},
      {"store", "not written", m.losses.store_failed,
       "the session could not be written (a full disk?): free space; samples written before "
       "are kept"},
      {"platform", "perf ring overflow", m.losses.platform_lost,
       "perf's own buffers filled before hvprof-hv read them: use a larger event count, or "
       "fewer events"},
      {"platform", "throttled", m.losses.throttled,
       "the kernel throttled sampling (kernel.perf_event_max_sample_rate, or perf's interrupts "
       "took more than kernel.perf_cpu_time_max_percent of the CPU); counted at the rate asked for "
       "the time it lasted: ask for a lower rate (-F) or a larger count"},
  };
  std::erase_if(lines, [](const LossLine& line) { return line.count == 0; });
  return lines;
}

// What the platform said of its own sampling (linux): the timer or PMU, and the rate asked for
// against the rate each CPU achieved, with the kernel's throttling.
std::string PlatformRates(const store::SessionMetadata& m) {
  if (!m.platform_stats) return {};
  const context::PlatformStats& stats = *m.platform_stats;
  const bool timer = stats.source == "cpu-clock";
  std::string out = fmt::format("Sampling: {}", timer ? "perf's cpu-clock timer (no hardware PMU)"
                                                      : "perf hardware events");
  if (stats.nominal_mhz > 0) out += fmt::format(", nominal {:.0f} MHz", stats.nominal_mhz);
  std::string achieved;
  double requested = 0;
  uint64_t throttles = 0;
  for (const context::CpuRate& cpu : stats.cpus) {
    requested = std::max(requested, cpu.requested_hz);
    throttles += cpu.throttles;
    achieved += fmt::format("{}cpu{} {:.0f}", achieved.empty() ? "" : ", ", cpu.cpu, cpu.achieved_hz);
  }
  if (requested > 0) out += fmt::format("; asked {:.0f} samples/s per CPU, achieved {}", requested, achieved);
  if (throttles > 0) {
    out += fmt::format("; the kernel throttled sampling {} times (kernel.perf_event_max_sample_rate={})",
                       throttles, stats.max_sample_rate);
  }
  return out + "\n";
}

uint64_t TotalLost(const std::vector<LossLine>& losses) {
  uint64_t lost = 0;
  for (const LossLine& line : losses) lost += line.count;
  return lost;
}

uint64_t SampledNs(const store::SessionMetadata& m) {
  return m.last_sample_ns > m.first_sample_ns ? m.last_sample_ns - m.first_sample_ns : 0;
}

std::string FillPage(std::string_view page, const nlohmann::json& data) {
  constexpr std::string_view kMarker = "/*HVPROF-DATA*/";
  const std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string escaped;
  escaped.reserve(json.size());
  for (char c : json) {
    if (c == '<') {
      escaped += "\\u003c";  // JSON reads it back as '<'
    } else {
      escaped += c;
    }
  }
  const size_t marker = page.find(kMarker);
  std::string filled;
  filled.reserve(page.size() + escaped.size());
  filled += page.substr(0, marker);
  filled += escaped;
  filled += page.substr(marker + kMarker.size());
  return filled;
}

}  // namespace hvprof::report
