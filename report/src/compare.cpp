#include "hvprof/report/compare.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <optional>
#include <thread>

namespace hvprof::report {

Result<void> ResolveNamedFilters(const Profile& profile, const std::vector<std::string>& domains,
                                 const std::vector<std::string>& events, ReportOptions* options) {
  options->domains.clear();
  options->events.clear();
  for (const std::string& item : domains) {
    bool found = item == "idle";
    if (found) options->domains.push_back(kIdleDomain);
    for (const auto& record : profile.metadata().domains) {
      // The domain's own name, its number, or the name reports print (dom0, dom3, "dom3 (web-1)").
      if (record.name == item || std::to_string(record.id) == item || fmt::format("dom{}", record.id) == item ||
          store::DomainName(record.id, record.name) == item) {
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

Result<void> ResolveProcessNames(const Profile& profile, const std::vector<std::string>& comms,
                                 ReportOptions* options) {
  if (comms.empty()) return Ok();
  std::vector<bool> found(comms.size(), false);
  for (const auto& domain : profile.metadata().domains) {
    for (const auto& [pid, name] : profile.context().Processes(domain.id)) {
      for (size_t i = 0; i < comms.size(); ++i) {
        if (name != comms[i]) continue;
        found[i] = true;
        options->processes.emplace_back(domain.id, pid);  // pids are per domain
      }
    }
  }
  std::sort(options->processes.begin(), options->processes.end());
  options->processes.erase(std::unique(options->processes.begin(), options->processes.end()),
                           options->processes.end());
  for (size_t i = 0; i < comms.size(); ++i) {
    if (!found[i]) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--comm: no process of the session {} is named '{}' (`hvprof-report --by-process` lists them)",
                       profile.directory(), comms[i]);
    }
  }
  return Ok();
}

namespace {

// A side's runs: its session arguments, or the windows of its time range; with their labels.
struct Side {
  std::vector<std::string> arguments;
  std::vector<std::string> labels;
};

Result<Side> SideOf(const std::vector<std::string>& sessions, const std::optional<TimeRange>& range,
                    const std::string& session_root, std::string_view which) {
  Side side;
  if (!range) {
    side.arguments = sessions;
    for (const std::string& argument : sessions) side.labels.push_back(argument.empty() ? "current" : argument);
    return side;
  }
  auto windows = WindowsInRange(session_root, *range);
  if (!windows) return windows.error().WithContext(fmt::format("the {} side", which));
  for (WindowSource& window : windows.value()) {
    side.arguments.push_back(std::move(window.directory));
    side.labels.push_back(std::move(window.name));
  }
  return side;
}

}  // namespace

Result<LoadedDiff> DiffSessions(const DiffRequest& request) {
  HVPROF_TRY(base_side, SideOf(request.base, request.base_range, request.session_root, "base"));
  HVPROF_TRY(next_side, SideOf(request.next, request.next_range, request.session_root, "new"));
  if (base_side.arguments.empty() || next_side.arguments.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "--diff needs a session on each side: --diff BASE NEW");
  }
  LoadedDiff out;
  const size_t count = base_side.arguments.size() + next_side.arguments.size();
  const size_t base_count = base_side.arguments.size();
  auto argument_of = [&](size_t i) -> const std::string& {
    return i < base_count ? base_side.arguments[i] : next_side.arguments[i - base_count];
  };
  auto label_of = [&](size_t i) -> const std::string& {
    return i < base_count ? base_side.labels[i] : next_side.labels[i - base_count];
  };
  for (size_t i = 0; i < count; ++i) {
    HVPROF_TRY(source, OpenSessionSource(argument_of(i), request.session_root));
    out.sources.push_back(std::move(source));
  }
  // The sessions load side by side, as many at once as there are CPUs: each load is its own
  // (its symbolizer, its files), and a diff costs about one report instead of two.
  std::vector<std::optional<Result<Profile>>> loaded(count);
  // The time slices the diff counts, in the same pass as the rest of each session.
  const uint32_t slices = DiffTimeSlices(request.diff, base_count, count - base_count);
  const size_t workers = std::max<size_t>(1, std::min<size_t>(count, std::thread::hardware_concurrency()));
  std::atomic<size_t> next_index{0};
  auto work = [&] {
    for (size_t i = next_index++; i < count; i = next_index++) {
      LoadOptions load = request.load;
      load.build_id_roots = out.sources[i].build_id_roots;
      load.shown_directory = out.sources[i].shown_directory;
      load.time_slices = slices >= 2 ? slices : 0;
      loaded[i] = LoadProfile(out.sources[i].directory, load);
    }
  };
  {
    std::vector<std::future<void>> running;
    for (size_t w = 1; w < workers; ++w) running.push_back(std::async(std::launch::async, work));
    work();
    for (std::future<void>& done : running) done.get();
  }
  out.profiles.reserve(count);
  std::vector<DiffRun> base, next;
  for (size_t i = 0; i < count; ++i) {
    const bool is_base = i < base_count;
    Result<Profile>& profile = *loaded[i];
    if (!profile) {
      return MakeError(profile.error().kind(), "{} ({} side): {}", label_of(i), is_base ? "base" : "new",
                       profile.error().message());
    }
    out.profiles.push_back(std::move(profile).value());
    const Profile& session = out.profiles.back();
    DiffRun run;
    run.profile = &session;
    run.label = label_of(i);
    run.table = request.table;
    HVPROF_TRYV(ResolveNamedFilters(session, request.domains, request.events, &run.table));
    if (request.diff.stacks) {
      HVPROF_TRY(events, SelectStackEvents(session, run.table.events, run.table.merge_unit_masks, run.table.merge_all));
      run.stacks.events = std::move(events);
      run.stacks.domains = run.table.domains;
      run.stacks.modes = run.table.modes;
      run.stacks.include_idle = run.table.include_idle;
    }
    (is_base ? base : next).push_back(std::move(run));
  }
  HVPROF_TRY(diff, BuildDiff(base, next, request.diff));
  out.diff = std::move(diff);
  return out;
}

}  // namespace hvprof::report
