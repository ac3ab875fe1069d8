#include "hvprof/report/writers/sessions.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "hvprof/base/units.h"

#include "writers/common.h"

namespace hvprof::report {

namespace {

// "window 42, 14:25:00 to 14:26:00 (its aggregate only)": what a window covers.
std::string WindowSpan(const store::WindowRecord& w) {
  return fmt::format("window {}, {} to {}{}", w.index, FormatLocalTime(w.start_ns),
                     w.end_ns == 0 ? std::string("now (in progress)") : FormatLocalTime(w.end_ns),
                     w.raw_dropped ? " (its aggregate only: raw samples dropped by the budget)" : "");
}

// Continuous mode's windows together: the span they cover, where profiling stopped between two
// of them (hvprofd was not running), the samples lost, and how many were thinned by the budget.
std::string ContinuousSummary(const std::vector<SessionSummary>& sessions) {
  std::vector<const SessionSummary*> windows;
  for (const SessionSummary& s : sessions) {
    if (s.window) windows.push_back(&s);
  }
  if (windows.empty()) return "";
  std::sort(windows.begin(), windows.end(),
            [](const SessionSummary* a, const SessionSummary* b) { return a->window->index < b->window->index; });
  uint64_t lost = 0, lossy = 0, thinned = 0, samples = 0;
  std::vector<std::string> gaps;
  for (size_t i = 0; i < windows.size(); ++i) {
    const SessionSummary& s = *windows[i];
    samples += s.samples;
    lost += s.lost;
    lossy += s.lost != 0 ? 1 : 0;
    thinned += s.window->raw_dropped ? 1 : 0;
    if (s.stopped_ns != 0) {
      gaps.push_back(fmt::format("{:.0f} s within window {} (hvprofd restarted, and continued it)",
                                 static_cast<double>(s.stopped_ns) / 1e9, s.window->index));
    }
    if (i == 0) continue;
    const store::WindowRecord& before = *windows[i - 1]->window;
    if (s.window->index != before.index + 1) {
      gaps.push_back(fmt::format("windows {} to {}: not listed (damaged, or removed by hand)", before.index + 1,
                                 s.window->index - 1));
    } else if (before.end_ns != 0 && s.window->start_ns > before.end_ns) {
      gaps.push_back(fmt::format("{} to {}, between windows {} and {} (hvprofd was not running)",
                                 FormatLocalTime(before.end_ns), FormatLocalTime(s.window->start_ns), before.index,
                                 s.window->index));
    }
  }
  const store::WindowRecord& first = *windows.front()->window;
  const store::WindowRecord& last = *windows.back()->window;
  std::string out = fmt::format(
      "Continuous profiling: {} window{} ({} to {}), {} to {}; {} samples, {} lost{}{}\n", windows.size(),
      windows.size() == 1 ? "" : "s", first.index, last.index, FormatLocalTime(first.start_ns),
      last.end_ns == 0 ? std::string("now") : FormatLocalTime(last.end_ns), samples, lost,
      lossy == 0 ? std::string() : fmt::format(" (in {} windows)", lossy),
      thinned == 0 ? std::string() : fmt::format("; {} reduced to their aggregate by the budget", thinned));
  if (gaps.empty()) {
    out += "  no gap: each window starts where the one before ended\n";
  } else {
    out += fmt::format("  not profiled ({} gap{}):\n", gaps.size(), gaps.size() == 1 ? "" : "s");
    for (const std::string& gap : gaps) out += "    " + gap + "\n";
  }
  if (first.index != 0) {
    out += fmt::format("  windows 0 to {} are gone (past the budget's size or age)\n", first.index - 1);
  }
  return out;
}

}  // namespace

std::string FormatSessionList(const std::string& session_root, const std::vector<SessionSummary>& sessions,
                              bool color) {
  if (sessions.empty()) {
    return fmt::format("No sessions in {} (profile with `hvprof --start-daemon` and `hvprof --start`, or give "
                       "--session-dir)\n",
                       Safe(session_root));
  }
  std::string out = fmt::format("Sessions in {}, oldest first ('*': what hvprof-report reports when no session is "
                                "named):\n",
                                Safe(session_root));
  size_t name_width = 4;
  for (const SessionSummary& s : sessions) name_width = std::max(name_width, Safe(s.name).size());
  const std::string heading = fmt::format("  {:<{}}  {:<19}  {:<8}  {:>9}  {:>10}  {:>8}  {}", "name", name_width,
                                          "created", "platform", "sampled", "samples", "lost", "state");
  out += (color ? "\x1b[1m" + heading + "\x1b[0m" : heading) + "\n";
  for (const SessionSummary& s : sessions) {
    const std::string sampled = s.state == "damaged" ? "-" : fmt::format("{:.3f} s", static_cast<double>(s.sampled_ns) / 1e9);
    std::string state = s.state;
    if (!s.problem.empty()) state += ": " + Safe(s.problem);
    if (s.window) state += "; " + WindowSpan(*s.window);
    out += fmt::format("{} {:<{}}  {:<19}  {:<8}  {:>9}  {:>10}  {:>8}  {}\n", s.chosen ? "*" : " ", Safe(s.name),
                       name_width, FormatLocalTime(s.created_ns), Safe(s.platform.empty() ? "?" : s.platform), sampled,
                       s.samples, s.lost, state);
  }
  return out + ContinuousSummary(sessions);
}

std::string FormatSessionListJson(const std::string& session_root, const std::vector<SessionSummary>& sessions) {
  nlohmann::json list = nlohmann::json::array();
  for (const SessionSummary& s : sessions) {
    list.push_back({{"name", s.name},
                    {"directory", s.directory},
                    {"current", s.current},
                    {"created_ns", s.created_ns},
                    {"platform", s.platform},
                    {"machine", s.machine},
                    {"sampled_ns", s.sampled_ns},
                    {"samples", s.samples},
                    {"lost", s.lost},
                    {"state", s.state},
                    {"problem", s.problem},
                    {"chosen", s.chosen}});
    if (s.window) {
      list.back()["window"] = {{"series", s.window->series},       {"index", s.window->index},
                               {"start_ns", s.window->start_ns},   {"end_ns", s.window->end_ns},
                               {"clock", s.window->clock},         {"raw_dropped", s.window->raw_dropped}};
    }
  }
  const nlohmann::json out = {{"schema", "hvprof-sessions"}, {"version", 1}, {"root", session_root}, {"sessions", list}};
  return out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace hvprof::report
