#include "hvprof/report/compare.h"

#include <algorithm>

namespace hvprof::report {

Result<void> ResolveNamedFilters(const Profile& profile, const std::vector<std::string>& domains,
                                 const std::vector<std::string>& events, ReportOptions* options) {
  options->domains.clear();
  options->events.clear();
  for (const std::string& item : domains) {
    bool found = item == "idle";
    if (found) options->domains.push_back(kIdleDomain);
    for (const auto& record : profile.metadata().domains) {
      if (record.name == item || std::to_string(record.id) == item) {
        options->domains.push_back(record.id);
        found = true;
      }
    }
    if (!found) {
      return MakeError(ErrorKind::kInvalidArgument, "--domain: the session {} has no domain '{}'", profile.directory(), item);
    }
  }
  for (const std::string& item : events) {
    bool found = false;
    for (const auto& event : profile.metadata().events) {
      if (event.name == item) {
        options->events.push_back(event.counter);
        found = true;
      }
    }
    if (!found) {
      return MakeError(ErrorKind::kInvalidArgument, "--event: the session {} did not count '{}'", profile.directory(), item);
    }
  }
  return Ok();
}

Result<LoadedDiff> DiffSessions(const DiffRequest& request) {
  if (request.base.empty() || request.next.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "--diff needs a session on each side: --diff BASE NEW");
  }
  LoadedDiff out;
  const size_t count = request.base.size() + request.next.size();
  out.profiles.reserve(count);
  std::vector<DiffRun> base, next;
  for (size_t i = 0; i < count; ++i) {
    const bool is_base = i < request.base.size();
    const std::string& argument = is_base ? request.base[i] : request.next[i - request.base.size()];
    HVPROF_TRY(source, OpenSessionSource(argument, request.session_root));
    LoadOptions load = request.load;
    load.build_id_roots = source.build_id_roots;
    auto profile = LoadProfile(source.directory, load);
    if (!profile) {
      return MakeError(profile.error().kind(), "{} ({} side): {}", argument, is_base ? "base" : "new",
                       profile.error().message());
    }
    out.sources.push_back(std::move(source));
    out.profiles.push_back(std::move(profile).value());
    const Profile& loaded = out.profiles.back();
    DiffRun run;
    run.profile = &loaded;
    run.label = argument.empty() ? std::string("current") : argument;
    run.table = request.table;
    HVPROF_TRYV(ResolveNamedFilters(loaded, request.domains, request.events, &run.table));
    if (request.diff.stacks) {
      HVPROF_TRY(events, SelectStackEvents(loaded, run.table.events, run.table.merge_unit_masks, run.table.merge_all));
      run.stacks.events = std::move(events);
      run.stacks.domains = run.table.domains;
      run.stacks.modes = run.table.modes;
    }
    (is_base ? base : next).push_back(std::move(run));
  }
  HVPROF_TRY(diff, BuildDiff(base, next, request.diff));
  out.diff = std::move(diff);
  return out;
}

}  // namespace hvprof::report
