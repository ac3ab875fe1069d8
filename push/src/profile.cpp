#include "hvprof/push/profile.h"

#include <chrono>
#include <cstdlib>
#include <set>

#include "hvprof/facts/sample.h"

#include "hvprof/report/writers/pprof.h"

namespace hvprof::push {

namespace {

std::string Environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// The domain's own name, without the number DomainName puts before a guest's.
std::string DomainLabel(const report::Profile& profile, uint16_t domain) {
  if (domain == hvprof::kIdleDomain) return "idle";
  for (const store::DomainRecord& record : profile.metadata().domains) {
    if (record.id == domain && !record.name.empty()) return record.name;
  }
  return domain == 0 ? "dom0" : "domain" + std::to_string(domain);
}

}  // namespace

ProfilePush PushFromCommandLine(std::string url, std::string tenant, std::string app) {
  ProfilePush push;
  push.options.url = std::move(url);
  push.options.tenant = std::move(tenant);
  push.options.username = Environment(kUserVariable);
  push.options.password = Environment(kPasswordVariable);
  if (!app.empty()) push.app = std::move(app);
  return push;
}

Result<std::vector<PyroscopeSeries>> ProfileSeries(const report::Profile& profile, const report::StackFilter& filter,
                                                   const ProfilePush& push, const SeriesChoice& choice) {
  const store::SessionMetadata& m = profile.metadata();
  std::set<std::pair<uint16_t, uint8_t>> parts;  // (domain, mode); mode 0 for all without by_mode
  for (const report::Stack& stack : profile.stacks()) {
    if (filter.Selects(stack)) parts.emplace(stack.domain, choice.by_mode ? stack.mode : 0);
  }
  if (parts.empty()) {
    return MakeError(ErrorKind::kNotFound,
                     "--push: the session has no samples of the chosen event{} to push",
                     filter.domains.empty() && filter.modes.empty() && filter.pids.empty() &&
                             filter.processes.empty() && filter.tids.empty()
                         ? ""
                         : " in the chosen domains, modes, processes and threads");
  }
  const std::string event = report::StackEventName(profile, filter);
  uint64_t from_ns = choice.from_ns, until_ns = choice.until_ns;
  if (from_ns == 0 && until_ns == 0) {
    // The profiling interval; a session still running ends now.
    const auto now_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                  std::chrono::system_clock::now().time_since_epoch())
                                                  .count());
    from_ns = m.created_ns;
    if (!m.profiling.empty()) {
      from_ns = m.profiling.front().start_ns;
      for (const store::ProfilingInterval& interval : m.profiling) {
        until_ns = std::max(until_ns, interval.stop_ns == 0 ? now_ns : interval.stop_ns);
      }
    }
    if (from_ns == 0) from_ns = now_ns;
  }
  until_ns = std::max(until_ns, from_ns);

  std::vector<PyroscopeSeries> series;
  for (const auto& [domain, mode] : parts) {
    report::StackFilter one = filter;
    one.domains = {domain};
    if (choice.by_mode) one.modes = {mode};
    HVPROF_TRY(profile_bytes, report::FormatPprof(profile, one));
    PyroscopeSeries s;
    s.app = push.app;
    s.labels = {{"domain", std::to_string(domain)}, {"domain_name", DomainLabel(profile, domain)}};
    if (choice.by_mode) s.labels.emplace_back("mode", std::string(sample_mode::Name(mode)));
    s.labels.emplace_back("event", event);
    if (!m.platform.empty()) s.labels.emplace_back("platform", m.platform);
    if (!m.machine.empty()) s.labels.emplace_back("host", m.machine);
    s.labels.insert(s.labels.end(), choice.labels.begin(), choice.labels.end());
    s.from_seconds = from_ns / 1'000'000'000;
    s.until_seconds = (until_ns + 999'999'999) / 1'000'000'000;
    s.profile = std::move(profile_bytes);
    series.push_back(std::move(s));
  }
  return series;
}

Result<PushSummary> PushProfile(const report::Profile& profile, const report::StackFilter& filter,
                                const ProfilePush& push) {
  HVPROF_TRY(series, ProfileSeries(profile, filter, push, SeriesChoice{}));
  return PushToPyroscope(push.options, series);
}

}  // namespace hvprof::push
