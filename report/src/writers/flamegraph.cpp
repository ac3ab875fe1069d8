#include "hvprof/report/writers/flamegraph.h"

#include <set>

#include <nlohmann/json.hpp>

#include "writers/common.h"

namespace hvprof::report {

extern const std::string_view kFlameGraphPage;

namespace {

// The header's facts as [term, value, is_warning]: the same things the text report's header
// says, so a page that travels without its session still says what it measured.
nlohmann::json Facts(const Profile& profile, const NamedStacks& stacks, const StackFilter& filter) {
  const store::SessionMetadata& m = profile.metadata();
  nlohmann::json facts = nlohmann::json::array();
  auto add = [&facts](std::string term, std::string value, bool warning = false) {
    facts.push_back({std::move(term), std::move(value), warning});
  };
  add("Session", profile.directory());
  add("Platform", fmt::format("{}{}; {}, {} CPUs", m.platform, m.machine.empty() ? "" : " (" + m.machine + ")",
                              m.cpu_type, m.num_cpus));
  uint64_t event_samples = 0;
  for (const Entry& entry : profile.entries()) {
    if (filter.SelectsEvent(entry.event)) event_samples += entry.count;
  }
  for (const store::EventRecord& event : m.events) {
    if (!filter.SelectsEvent(event.counter)) continue;
    add("Event", fmt::format("{} (unit mask {:#04x}{}), a sample every {} events", event.name, event.unit_mask,
                             event.kernel && event.user ? "" : event.kernel ? ", kernel only" : ", user only",
                             event.count));
  }
  const double seconds = static_cast<double>(SampledNs(m)) / 1e9;
  if (seconds > 0) {
    add("Sampled", fmt::format("{:.3f} s of the platform's clock; {:.0f} samples/s per CPU", seconds,
                               m.num_cpus > 0 ? static_cast<double>(event_samples) / seconds / m.num_cpus : 0.0));
  }
  std::string shown = fmt::format("{} of the event's {} samples", stacks.samples, event_samples);
  if (!filter.domains.empty()) {
    std::vector<std::string> names;
    for (uint16_t domain : filter.domains) names.push_back(profile.DomainName(domain));
    shown += fmt::format("; domains {}", fmt::join(names, ", "));
  }
  if (!filter.modes.empty()) {
    std::vector<std::string> names;
    for (uint8_t mode : filter.modes) names.emplace_back(sample_mode::Name(mode));
    shown += fmt::format("; modes {}", fmt::join(names, ", "));
  }
  if (!filter.pids.empty() || !filter.processes.empty()) {
    std::vector<std::string> names;
    for (uint32_t pid : filter.pids) names.push_back(fmt::format("pid {}", pid));
    for (const auto& [domain, pid] : filter.processes) {
      names.push_back(fmt::format("{} pid {}", profile.DomainName(domain), pid));
    }
    shown += fmt::format("; processes {}", fmt::join(names, ", "));
  }
  if (!filter.tids.empty()) shown += fmt::format("; threads {}", fmt::join(filter.tids, ", "));
  add("Shown", shown);
  add("Call chains", m.backtrace_depth == 0
                         ? std::string("none recorded: every stack is one frame (profile with --callgraph=16)")
                         : fmt::format("up to {} frames", m.backtrace_depth),
      m.backtrace_depth == 0);
  const auto losses = Losses(m);
  if (losses.empty()) {
    add("Lost samples", "none");
  } else {
    const uint64_t lost = TotalLost(losses);
    std::vector<std::string> causes;
    for (const LossLine& line : losses) causes.push_back(fmt::format("{} {}", line.count, line.cause));
    add("Lost samples",
        fmt::format("{} ({:.2f}% of what was sampled): {}", lost, Percent(lost, lost + m.samples_stored),
                    fmt::join(causes, "; ")),
        true);
  }
  for (const std::string& reason : m.incomplete) add("Incomplete", reason, true);
  for (const std::string& warning : profile.Warnings()) add("Warning", warning, true);
  for (const std::string& note : m.notes) add("Note", note);
  return facts;
}

}  // namespace

std::string FormatFlameGraph(const Profile& profile, const NamedStacks& stacks, const StackFilter& filter) {
  const store::SessionMetadata& m = profile.metadata();
  nlohmann::json data;
  const std::string event_name = StackEventName(profile, filter);
  data["title"] = fmt::format("hvprof: {} on {}{}", event_name, m.platform, m.machine.empty() ? "" : " " + m.machine);
  data["facts"] = Facts(profile, stacks, filter);
  std::set<int32_t> domains;
  for (const NamedStack& stack : stacks.stacks) {
    if (stack.domain >= 0) domains.insert(stack.domain);
  }
  data["domains"] = nlohmann::json::array();
  for (int32_t domain : domains) {
    data["domains"].push_back({domain, profile.DomainName(static_cast<uint16_t>(domain))});
  }
  data["names"] = stacks.names;
  data["modes"] = stacks.modes;
  nlohmann::json rows = nlohmann::json::array();
  for (const NamedStack& stack : stacks.stacks) {
    nlohmann::json row = nlohmann::json::array({stack.count, stack.domain});
    for (uint32_t frame : stack.frames) row.push_back(frame);
    rows.push_back(std::move(row));
  }
  data["stacks"] = std::move(rows);
  return FillPage(kFlameGraphPage, data);
}

std::string FormatDiffFlameGraphPage(const NamedStacks& stacks, const FlameGraphDiff& diff) {
  nlohmann::json data;
  data["title"] = diff.title;
  data["facts"] = nlohmann::json::array();
  for (const auto& [term, value] : diff.facts) data["facts"].push_back({term, value, false});
  for (const std::string& warning : diff.warnings) data["facts"].push_back({"Warning", warning, true});
  data["domains"] = nlohmann::json::array();
  data["names"] = stacks.names;
  data["modes"] = stacks.modes;
  nlohmann::json rows = nlohmann::json::array();
  for (const NamedStack& stack : stacks.stacks) {
    nlohmann::json row = nlohmann::json::array({stack.count, -1});
    for (uint32_t frame : stack.frames) row.push_back(frame);
    rows.push_back(std::move(row));
  }
  data["stacks"] = std::move(rows);
  data["diff"] = {{"base_total", diff.base_total}, {"new_total", diff.new_total}, {"base_counts", diff.base_counts}};
  return FillPage(kFlameGraphPage, data);
}

}  // namespace hvprof::report
