#include "hvprof/report/writers/sessions.h"

#include <nlohmann/json.hpp>

#include "hvprof/base/units.h"

#include "writers/common.h"

namespace hvprof::report {

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
    out += fmt::format("{} {:<{}}  {:<19}  {:<8}  {:>9}  {:>10}  {:>8}  {}\n", s.chosen ? "*" : " ", Safe(s.name),
                       name_width, FormatLocalTime(s.created_ns), Safe(s.platform.empty() ? "?" : s.platform), sampled,
                       s.samples, s.lost, state);
  }
  return out;
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
  }
  const nlohmann::json out = {{"schema", "hvprof-sessions"}, {"version", 1}, {"root", session_root}, {"sessions", list}};
  return out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace hvprof::report
