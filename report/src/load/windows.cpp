// LoadWindows: continuous mode's windows in a time range as one profile (load.h).
#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include "hvprof/base/units.h"
#include "hvprof/buildid_cache/cache.h"
#include "hvprof/store/aggregate_builder.h"
#include "hvprof/store/windows.h"
#include "load/profile_builder.h"

namespace hvprof::report {

namespace {

struct Part {
  std::string name;  // the window's, for messages
  store::SessionMetadata metadata;
  store::Aggregate aggregate;
};

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// The windows that overlap `range`, oldest first, with the window in progress last.
struct Chosen {
  std::vector<std::pair<std::string, std::string>> windows;  // name, directory
  std::vector<std::string> problems;
};

// When the window in progress ends: now while an hvprofd writes it, else when it stopped
// profiling (or, after a crash, last wrote its samples).
uint64_t CurrentEndNs(const std::string& directory, const store::SessionMetadata& m) {
  if (store::SessionWriterAlive(directory)) return NowNs();
  if (!m.profiling.empty() && m.profiling.back().stop_ns != 0) return m.profiling.back().stop_ns;
  struct stat st {};
  if (::stat((directory + "/" + store::kSamplesFile).c_str(), &st) != 0) return m.window->start_ns;
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

Result<Chosen> ChooseWindows(const store::SessionPaths& paths, const TimeRange& range) {
  const store::WindowList list = store::ListWindows(paths);
  Chosen chosen;
  chosen.problems = list.problems;
  for (const store::WindowEntry& w : list.windows) {
    if (w.window.start_ns < range.until_ns && w.window.end_ns > range.since_ns) {
      chosen.windows.emplace_back(w.name, w.directory);
    }
  }
  auto current = store::OpenSession(paths.current());
  const bool current_is_window = current && current.value().metadata.window;
  uint64_t current_end = 0;
  if (current_is_window) {
    current_end = CurrentEndNs(paths.current(), current.value().metadata);
    if (current.value().metadata.window->start_ns < range.until_ns && current_end > range.since_ns) {
      chosen.windows.emplace_back("current", paths.current());
    }
  }
  if (!chosen.windows.empty()) return chosen;
  std::string covered = "there are none";
  if (!list.windows.empty() || current_is_window) {
    const uint64_t first = !list.windows.empty() ? list.windows.front().window.start_ns
                                                 : current.value().metadata.window->start_ns;
    const uint64_t last = current_is_window ? current_end : list.windows.back().window.end_ns;
    covered = fmt::format("they span {} to {}", FormatLocalTime(first), FormatLocalTime(last));
  }
  return MakeError(ErrorKind::kNotFound,
                   "no window of continuous profiling under {} overlaps {} to {} ({}); `hvprof-report --list` "
                   "lists them",
                   paths.root, FormatLocalTime(range.since_ns),
                   range.until_ns == UINT64_MAX ? std::string("now") : FormatLocalTime(range.until_ns), covered);
}

}  // namespace

Result<std::vector<WindowSource>> WindowsInRange(const std::string& session_root, const TimeRange& range) {
  HVPROF_TRY(chosen, ChooseWindows(store::SessionPaths{session_root}, range));
  std::vector<WindowSource> out;
  for (auto& [name, directory] : chosen.windows) out.push_back({std::move(name), std::move(directory)});
  return out;
}

namespace {

// The window's samples as its aggregate counts them: the aggregate, where it stands for the
// samples this report needs; else samples.hvs counted through the window's context.hvc, as hvprofd
// counts its aggregate (the window in progress, whose aggregate is written when it closes).
Result<Part> ReadPart(const std::string& name, const std::string& directory, const LoadOptions& options,
                      std::vector<std::string>& problems) {
  HVPROF_TRY(session, store::OpenSession(directory));
  ProfileParts scratch;  // for StoredAggregate's checks and the problems it finds
  scratch.metadata = std::move(session.metadata);
  scratch.directory = session.directory;
  const store::SessionMetadata& m = scratch.metadata;
  const std::string samples = directory + "/" + store::kSamplesFile;
  struct stat st {};
  const bool have_samples = ::stat(samples.c_str(), &st) == 0;
  HVPROF_TRY(usable, ProfileBuilder::StoredAggregate(
                         scratch, options, have_samples ? std::optional<uint64_t>(st.st_size) : std::nullopt));
  Part part{name, m, {}};
  if (usable) {
    part.aggregate = std::move(*usable);
  } else if (have_samples) {
    store::ContextIndex context;
    const std::string context_path = directory + "/" + store::kContextFile;
    auto read = store::ReadContextFile(context_path, m.session_id, context);
    if (!read) problems.push_back(fmt::format("{}: {}; its user samples are shown by process and address", name, read.error().message()));
    else if (!read.value().present) store::ContextFromMetadata(m, context);
    store::AggregateBuilder builder(options.stacks ? store::StackDetail::kStacks : store::StackDetail::kNone, &context);
    const auto id = store::ParseSessionId(m.session_id);
    HVPROF_TRY(summary, store::ReadSamplesFile(samples, [&](const store::StoredSample& s) { builder.Add(s); },
                                               id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt));
    // The window in progress may end inside a chunk being written: that is its unflushed tail.
    const uint64_t damaged = summary.damaged_chunks + (summary.torn_tail && name != "current" ? 1 : 0);
    if (damaged != 0) {
      problems.push_back(fmt::format("{}: {} damaged chunks in {}; their samples are left out", name, damaged, samples));
    }
    part.aggregate = builder.Snapshot(static_cast<uint64_t>(st.st_size));
    // Its session.json is as of its last dump (the window in progress: as it opened): its counts
    // are what was counted now. Its losses are recorded when it closes.
    part.metadata.samples_stored = part.aggregate.samples;
    part.metadata.samples_by_domain_mode.clear();
    for (const store::AggregateEntry& entry : part.aggregate.entries) {
      part.metadata.samples_by_domain_mode[fmt::format("{}/{}", entry.key.domain, sample_mode::Name(entry.key.mode))] +=
          entry.count;
    }
    if (name == "current") {
      part.metadata.notes.push_back("the window in progress is counted as far as hvprofd has written it; its "
                                    "losses are recorded when it closes");
    }
  } else {
    return MakeError(ErrorKind::kCorrupt, "{} has neither samples.hvs nor an aggregate that stands for it", directory);
  }
  for (const std::string& problem : scratch.problems) problems.push_back(name + ": " + problem);
  // Its JIT files, named from the samples directory the merged profile reads them from.
  for (store::JitRecord& record : part.metadata.jit) {
    if (!record.file.empty()) record.file = name + "/" + record.file;
  }
  return part;
}

// Whether two windows' samples mean the same: the same platform and machine, events on the same
// counters, and the same images (a reboot or an upgrade in between changes them).
std::optional<std::string> SetupChange(const store::SessionMetadata& a, const store::SessionMetadata& b) {
  if (a.platform != b.platform || a.machine != b.machine) return "the platform or machine";
  if (a.events.size() != b.events.size()) return "the events";
  for (size_t i = 0; i < a.events.size(); ++i) {
    const store::EventRecord &x = a.events[i], &y = b.events[i];
    if (x.counter != y.counter || x.name != y.name || x.count != y.count || x.unit_mask != y.unit_mask) {
      return "the events";
    }
  }
  for (const store::ImageRecord& image : a.images) {
    for (const store::ImageRecord& other : b.images) {
      if (image.path == other.path && image.domain == other.domain &&
          (image.build_id != other.build_id || image.bias != other.bias)) {
        return "the image " + image.path;
      }
    }
  }
  return std::nullopt;
}

// The parts' metadata as one session's: the newest window's setup, every count summed.
store::SessionMetadata MergeMetadata(const std::vector<Part>& parts) {
  store::SessionMetadata merged = parts.back().metadata;
  merged.samples_stored = merged.idle_samples = 0;
  merged.losses = {};
  merged.samples_by_domain_mode.clear();
  merged.profiling.clear();
  merged.incomplete.clear();
  merged.notes.clear();
  merged.first_sample_ns = UINT64_MAX;
  merged.last_sample_ns = 0;
  merged.samples_file_bytes = merged.samples_file_chunks = 0;
  merged.platform_stats.reset();  // per window: its rates and throttling do not add up
  merged.sched.reset();
  for (const Part& part : parts) {
    const store::SessionMetadata& m = part.metadata;
    merged.samples_stored += m.samples_stored;
    merged.idle_samples += m.idle_samples;
    for (const store::LossField& field : store::kLossFields) merged.losses.*field.member += m.losses.*field.member;
    for (const auto& [key, count] : m.samples_by_domain_mode) merged.samples_by_domain_mode[key] += count;
    merged.profiling.insert(merged.profiling.end(), m.profiling.begin(), m.profiling.end());
    for (const std::string& reason : m.incomplete) merged.incomplete.push_back(part.name + ": " + reason);
    for (const std::string& note : m.notes) {
      if (std::find(merged.notes.begin(), merged.notes.end(), note) == merged.notes.end()) merged.notes.push_back(note);
    }
    if (m.samples_stored != 0) {
      merged.first_sample_ns = std::min(merged.first_sample_ns, m.first_sample_ns);
      merged.last_sample_ns = std::max(merged.last_sample_ns, m.last_sample_ns);
    }
    for (const store::DomainRecord& domain : m.domains) {
      auto same = [&](const store::DomainRecord& d) { return d.id == domain.id; };
      if (std::none_of(merged.domains.begin(), merged.domains.end(), same)) merged.domains.push_back(domain);
    }
    if (&part != &parts.back()) merged.jit.insert(merged.jit.begin(), m.jit.begin(), m.jit.end());
    for (const store::ImageRecord& image : m.images) {
      auto same = [&](const store::ImageRecord& i) { return i.path == image.path && i.domain == image.domain; };
      if (std::none_of(merged.images.begin(), merged.images.end(), same)) merged.images.push_back(image);
    }
  }
  if (merged.first_sample_ns == UINT64_MAX) merged.first_sample_ns = 0;
  const std::optional<store::WindowRecord>& first = parts.front().metadata.window;
  const std::optional<store::WindowRecord>& last = parts.back().metadata.window;
  if (first && last) {
    merged.window = store::WindowRecord{.series = first->series, .index = first->index, .start_ns = first->start_ns,
                                        .end_ns = last->end_ns, .clock = last->clock};
  }
  merged.notes.insert(merged.notes.begin(),
                      fmt::format("{} windows of continuous profiling merged: {} to {}, from {} to {}", parts.size(),
                                  parts.front().name, parts.back().name,
                                  first ? FormatLocalTime(first->start_ns) : std::string("?"),
                                  last && last->end_ns != 0 ? FormatLocalTime(last->end_ns) : std::string("now")));
  return merged;
}

}  // namespace

Result<Profile> ProfileBuilder::LoadWindows(const std::string& session_root, const TimeRange& range,
                                            const LoadOptions& options) {
  if (options.processes || options.stack_threads || options.all_domains) {
    return MakeError(ErrorKind::kUnsupported,
                     "a report over a time range adds up each window's aggregate, which counts code, not processes or "
                     "threads: {} need every sample; report one window instead (--session=NAME; --list names them)",
                     options.all_domains ? "--all-domains and the views by process" : "views by process and pprof's thread labels");
  }
  if (options.time_slices != 0) {
    return MakeError(ErrorKind::kUnsupported,
                     "a report over a time range adds up its windows: each window is a time slice of it already "
                     "(a diff of two ranges compares them window by window)");
  }
  const Stopwatch reading;
  const store::SessionPaths paths{session_root};
  HVPROF_TRY(chosen, ChooseWindows(paths, range));
  std::vector<std::string> problems = std::move(chosen.problems);
  std::vector<Part> parts;
  std::vector<store::Aggregate> aggregates;
  for (const auto& [name, directory] : chosen.windows) {
    auto part = ReadPart(name, directory, options, problems);
    if (!part && part.error().kind() == ErrorKind::kNotFound) {
      // Removed by the budget since it was listed.
      problems.push_back(fmt::format("{} was removed while the report read the windows: left out", name));
      continue;
    }
    HVPROF_TRYV(part);
    if (!parts.empty()) {
      if (auto change = SetupChange(parts.back().metadata, part.value().metadata)) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "{} changed between {} and {} (hvprofd was set up again, or the host rebooted): a range "
                         "merges windows of one setup; end it before {} or start it there",
                         *change, parts.back().name, name, name);
      }
    }
    aggregates.push_back(std::move(part.value().aggregate));
    parts.push_back(std::move(part).value());
  }
  if (parts.empty()) return MakeError(ErrorKind::kNotFound, "every window of the range was removed while it was read");
  ProfileParts profile;
  profile.metadata = MergeMetadata(parts);
  profile.directory = paths.samples_dir();
  profile.loaded_directory = paths.samples_dir();
  profile.problems = std::move(problems);
  HVPROF_TRY(aggregate, store::MergeAggregates(std::move(aggregates)));
  if (options.stacks && !aggregate.has_stacks) {
    return MakeError(ErrorKind::kUnsupported,
                     "a window in the range kept no stacks in its aggregate (it had too many distinct stacks, or its "
                     "raw samples were dropped); report the windows one by one");
  }
  auto context = std::make_shared<store::ContextIndex>();
  ContextOfAggregate(aggregate, *context);
  if (!aggregate.has_regions) {
    profile.problems.push_back(
        "a window's aggregate lists no regions of anonymous memory: user samples there are shown by process and address");
  }
  profile.context = context;
  profile.has_context_file = true;
  profile.context_summary = {context->processes(), context->images().size(), context->Domains()};
  profile.timings.read_seconds = reading.Seconds();
  profile.timings.from_aggregate = true;
  ProfileBuilder builder(profile, options, buildid_cache::SearchDirectories(profile.metadata.build_id_cache));
  if (options.debuginfod) {
    auto client = sym::Debuginfod::FromEnvironment();
    if (client) builder.debuginfod = std::move(client).value();
    else profile.problems.push_back(client.error().message() + "; no images were asked for there");
  }
  HVPROF_TRYV(builder.Build(aggregate, profile.entries));
  builder.MarkIdle(aggregate);
  if (options.stacks) {
    HVPROF_TRYV(builder.BuildStacks(CollectStacks(aggregate, false)));
    builder.MarkIdleStacks();
  }
  builder.NoteJitProblems();
  return Profile(std::move(profile));
}

Result<Profile> LoadWindows(const std::string& session_root, const TimeRange& range, const LoadOptions& options) {
  return ProfileBuilder::LoadWindows(session_root, range, options);
}

}  // namespace hvprof::report
