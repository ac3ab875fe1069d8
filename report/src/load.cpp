// LoadProfile: which source stands for the session's samples (its aggregate or samples.hvs),
// and the order of the steps; the steps are in load/ (load/profile_builder.h).
#include "load/profile_builder.h"
#include "hvprof/buildid_cache/cache.h"

namespace hvprof::report {

void ProfileBuilder::ContextOfAggregate(const store::Aggregate& counted, store::ContextIndex& context) {
  for (const store::AggregateImage& image : counted.images) {
    store::ContextEvent named;
    named.kind = store::ContextKind::kImage;
    named.image = image.id;
    named.path = image.path;
    named.build_id = image.build_id;
    context.Apply(named);
  }
  std::vector<const store::AggregateRegion*> regions;
  for (const store::AggregateRegion& region : counted.regions) regions.push_back(&region);
  std::stable_sort(regions.begin(), regions.end(), [](auto* a, auto* b) { return a->time_ns < b->time_ns; });
  for (const store::AggregateRegion* region : regions) {
    store::ContextEvent mapped;
    mapped.kind = store::ContextKind::kMapping;
    mapped.domain = region->domain;
    mapped.pid = region->pid;
    mapped.time_ns = region->time_ns;
    mapped.start = region->start;
    mapped.end = region->end;
    mapped.path = region->path;
    context.Apply(mapped);
  }
}

// The sum of an aggregate's counts, which UsableAggregate checked (or, from the raw samples, one
// per sample read) cannot wrap.
static uint64_t TotalCount(const store::Aggregate& counted) {
  uint64_t sum = 0;
  for (const store::AggregateEntry& entry : counted.entries) sum += entry.count;
  return sum;
}

std::optional<store::Aggregate> ProfileBuilder::UsableAggregate(Profile& profile, const LoadOptions& options,
                                                                const std::string& path, uint64_t samples_bytes) {
  // A samples file shorter than the metadata says was cut: its aggregate cannot be trusted.
  // An aggregate without stacks (an older one, or one whose stacks were too many to keep) serves
  // no stack view: then the one raw pass counts both.
  if (!options.use_aggregate || samples_bytes < profile.metadata_.samples_file_bytes) return std::nullopt;
  auto read = store::ReadAggregate(path);
  if (!read) {
    if (read.error().kind() == ErrorKind::kCorrupt) {
      profile.problems_.push_back(read.error().message() + "; the raw samples were read instead");
    }
    return std::nullopt;
  }
  const store::Aggregate& a = read.value();
  // Counted across processes (by image, and the kernel's and hypervisor's code), it cannot tell
  // processes apart; stacks merged across threads cannot give pprof its thread labels: those
  // views count the raw samples.
  const bool by_image = std::any_of(a.entries.begin(), a.entries.end(),
                                    [](const store::AggregateEntry& entry) { return entry.key.pid == store::kAnyProcess; });
  const bool by_thread = std::any_of(a.stacks.begin(), a.stacks.end(),
                                     [](const store::CountedStack& stack) { return stack.key.tid != hvprof::kNoTid; });
  if (a.source_bytes != samples_bytes || (options.stacks && !a.has_stacks) || (options.processes && by_image) ||
      (options.stack_threads && !a.stacks.empty() && !by_thread)) {
    return std::nullopt;
  }
  // The aggregate is a cache of samples.hvs; one that counts other than what the session stored
  // (or more than a number holds) is forged or damaged, and is not used. Counts are checked once,
  // here: every sum a view makes is of a subset of these entries, so none can wrap.
  uint64_t sum = 0;
  bool overflow = false;
  for (const store::AggregateEntry& entry : a.entries) overflow |= __builtin_add_overflow(sum, entry.count, &sum);
  const uint64_t stored = profile.metadata_.samples_stored;
  // Its stacks count what its entries count (the reader checked that they add up to its total).
  if (overflow || (stored != 0 && sum != stored) || (a.has_stacks && a.samples != sum)) {
    profile.problems_.push_back(fmt::format(
        "{} is damaged: it counts {} samples where {} says the session stored {}; it was ignored and the raw "
        "samples read instead",
        path, overflow ? std::string("more than 2^64") : std::to_string(sum), store::kMetadataFile, stored));
    return std::nullopt;
  }
  return std::move(read).value();
}

Result<std::optional<store::Aggregate>> ProfileBuilder::StoredAggregate(Profile& profile, const LoadOptions& options,
                                                                        std::optional<uint64_t> samples_bytes) {
  const std::string path = profile.directory_ + "/" + store::kAggregateFile;
  if (samples_bytes) return UsableAggregate(profile, options, path, *samples_bytes);
  const store::SessionMetadata& m = profile.metadata_;
  if (!m.window || !m.window->raw_dropped) return std::optional<store::Aggregate>();
  // The aggregate alone stands for what samples.hvs held.
  std::optional<store::Aggregate> usable = UsableAggregate(profile, options, path, m.samples_file_bytes);
  if (!usable) {
    return MakeError(ErrorKind::kUnsupported,
                     "{} is a window whose raw samples were dropped to keep the windows within their disk budget "
                     "(hvprofd --keep-size): its aggregate serves the flat, call-graph and stack views, not this one "
                     "(by process, or pprof's thread labels), or it is damaged; report a newer window, or keep more "
                     "(docs/continuous.md)",
                     profile.directory_);
  }
  return usable;
}

Result<store::Aggregate> ProfileBuilder::ReadRawSamples(Profile& profile, const LoadOptions& options,
                                                        const std::string& samples,
                                                        const store::Translation& translation) {
  const store::SessionMetadata& m = profile.metadata_;
  store::ReadSummary summary;
  const auto id = store::ParseSessionId(m.session_id);
  HVPROF_TRY(raw, store::AggregateSamplesFile(samples, &summary,
                                              id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt,
                                              !options.stacks         ? store::StackDetail::kNone
                                              : options.stack_threads ? store::StackDetail::kStacksByThread
                                                                      : store::StackDetail::kStacks,
                                              {}, 0, translation));
  for (const store::FileProblem& problem : summary.problems) {
    profile.problems_.push_back(fmt::format("{} at byte {}: {}", samples, problem.offset, problem.description));
  }
  if (summary.next_sequence < m.samples_file_chunks) {
    profile.problems_.push_back(fmt::format(
        "{} ends after chunk {} where the session had written {} chunks: the file was cut short and the samples "
        "of the last {} chunks are lost",
        samples, summary.next_sequence == 0 ? std::string("none") : std::to_string(summary.next_sequence - 1),
        m.samples_file_chunks, m.samples_file_chunks - summary.next_sequence));
  }
  return raw;
}

void ProfileBuilder::NoteSessionState(Profile& profile, std::optional<uint64_t> samples_bytes) {
  const store::SessionMetadata& m = profile.metadata_;
  const std::string samples = profile.directory_ + "/" + store::kSamplesFile;
  if (m.window && m.window->raw_dropped) {
    profile.metadata_.notes.push_back(
        "this window's raw samples were dropped to keep the windows within their disk budget: it is reported from "
        "its aggregate");
    return;
  }
  if (samples_bytes && *samples_bytes < m.samples_file_bytes) {
    profile.problems_.push_back(fmt::format("{} holds {} bytes where the session had written {}: it was truncated",
                                            samples, *samples_bytes, m.samples_file_bytes));
  }
  if (!samples_bytes) profile.problems_.push_back(fmt::format("{} has no samples file", profile.directory_));
  for (const std::string& reason : m.incomplete) profile.problems_.push_back("the session is incomplete: " + reason);
  if (!m.profiling.empty() && m.profiling.back().stop_ns == 0) {
    if (store::SessionWriterAlive(profile.directory_)) {
      profile.metadata_.notes.push_back(
          "profiling is still on: this is the session as hvprofd last wrote it (`hvprof --dump` writes it now)");
    } else {
      profile.problems_.push_back(
          "the session is incomplete: profiling was never stopped, and no hvprofd is writing it (it died or was "
          "killed); the samples it had not yet written were lost uncounted. `hvprof --start-daemon` with the same "
          "--session-dir recovers and continues the session");
    }
  }
}

Result<Profile> ProfileBuilder::Load(const std::string& directory, const LoadOptions& options) {
  HVPROF_TRY(session, store::OpenSession(directory));
  Profile profile;
  profile.metadata_ = std::move(session.metadata);
  profile.directory_ = session.directory;
  // Each note once: sessions written before hvprofd kept them apart said some twice (a
  // continued session carried its first hvprofd's notes, and the new one said them again).
  std::vector<std::string> notes;
  for (std::string& note : profile.metadata_.notes) {
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(std::move(note));
  }
  profile.metadata_.notes = std::move(notes);
  const std::string samples = profile.directory_ + "/" + store::kSamplesFile;
  struct stat st {};
  const bool have_samples = ::stat(samples.c_str(), &st) == 0;
  const Stopwatch reading;
  // The processes the samples ran in: context.hvc, as hvprofd wrote it while profiling; in a
  // session from before it, the processes session.json lists (each alive the whole session).
  // A report counted from an aggregate that lists the regions its per-process addresses fell in
  // needs none of it: user code is counted by image, the aggregate names the images and regions,
  // and session.json counts the processes. After a day of a host that starts processes all day
  // context.hvc is hundreds of megabytes, and `hvprof run` prints this report as its run ends.
  // Otherwise it is read on a thread of its own while the aggregate is read.
  auto context = std::make_shared<store::ContextIndex>();
  const std::string context_path = profile.directory_ + "/" + store::kContextFile;
  struct stat context_st {};
  // A window of continuous profiling whose raw samples were dropped to keep within its budget
  // (store::DropRawSamples) has its aggregate alone, and no context.hvc.
  const bool raw_dropped = profile.metadata_.window && profile.metadata_.window->raw_dropped;
  const bool may_skip_context = options.use_aggregate && (have_samples || raw_dropped) && !options.processes &&
                                profile.metadata_.context.has_value() &&
                                (raw_dropped || ::stat(context_path.c_str(), &context_st) == 0);
  std::optional<Result<store::ContextReadSummary>> context_read;
  std::jthread context_reader;
  if (!may_skip_context) {
    context_reader = std::jthread([&context_read, &context, &context_path, &profile] {
      context_read.emplace(store::ReadContextFile(context_path, profile.metadata_.session_id, *context));
    });
  }
  bool context_taken = false;
  const auto take_context = [&] {
    if (context_taken) return;
    context_taken = true;
    if (context_reader.joinable()) {
      context_reader.join();
    } else {
      context_read.emplace(store::ReadContextFile(context_path, profile.metadata_.session_id, *context));
    }
    if (!context_read->has_value()) {
      profile.problems_.push_back(context_read->error().message() + "; user samples are shown by process and address");
    } else if (context_read->value().present) {
      profile.has_context_file_ = true;
      for (const store::FileProblem& problem : context_read->value().problems) {
        profile.problems_.push_back(fmt::format("{} at byte {}: {}", context_path, problem.offset, problem.description));
      }
    } else {
      store::ContextFromMetadata(profile.metadata_, *context);
    }
    profile.context_ = context;
    profile.context_summary_ = {context->processes(), context->images().size(), context->Domains()};
  };
  // The aggregate's images and regions: all the builder asks of the context (a view that needs
  // the processes themselves makes Profile::context() read the file).
  const auto take_regions = [&](const store::Aggregate& counted) {
    context_taken = true;
    ContextOfAggregate(counted, *context);
    profile.has_context_file_ = true;
    profile.context_ = context;
    profile.context_summary_ = *profile.metadata_.context;
    profile.whole_context_ = std::make_shared<Profile::WholeContext>();
  };
  profile.keeps_pids_ = options.processes;
  HVPROF_TRY(usable, StoredAggregate(profile, options,
                                     have_samples ? std::optional<uint64_t>(st.st_size) : std::nullopt));
  const bool from_aggregate = usable.has_value();
  store::Aggregate aggregate = from_aggregate ? std::move(*usable) : store::Aggregate();
  if (from_aggregate && may_skip_context && aggregate.has_regions) take_regions(aggregate);
  take_context();
  const store::Translation translation{profile.has_context_file_ ? profile.context_.get() : nullptr,
                                       options.processes};
  if (!from_aggregate && have_samples) {
    HVPROF_TRY(raw, ReadRawSamples(profile, options, samples, translation));
    aggregate = std::move(raw);
  }
  NoteSessionState(profile, have_samples ? std::optional<uint64_t>(st.st_size) : std::nullopt);
  std::vector<PublishedProfile> published;
  if (options.all_domains) published = ProfileBuilder::ReadPublished(profile, &aggregate, TotalCount(aggregate));
  profile.timings_.read_seconds = reading.Seconds();
  profile.timings_.from_aggregate = from_aggregate;
  ProfileBuilder builder(profile, options, buildid_cache::SearchDirectories(profile.metadata_.build_id_cache));
  for (const PublishedProfile& guest : published) builder.published_domains.push_back(guest.domain);
  if (options.debuginfod) {
    auto client = sym::Debuginfod::FromEnvironment();
    if (client) builder.debuginfod = std::move(client).value();
    else profile.problems_.push_back(client.error().message() + "; no images were asked for there");
  }
  HVPROF_TRYV(builder.Build(aggregate, profile.entries_));
  if (from_aggregate && aggregate.time_slices != 0 && published.empty()) {
    profile.time_slices_ = aggregate.time_slices;
    profile.slice_counts_ = std::move(aggregate.slice_counts);
  }
  builder.AddPublishedSymbols(published);
  builder.MarkIdle(aggregate);
  if (have_samples && published.empty()) {
    HVPROF_TRY(split, builder.SplitJitByTime(samples));
    // The aggregate's per-entry time slices no longer line up: Slice counts them again.
    if (split) {
      profile.time_slices_ = 0;
      profile.slice_counts_.clear();
    }
  }
  if (options.stacks) {
    HVPROF_TRYV(builder.BuildStacks(CollectStacks(aggregate, options.stack_threads)));
    builder.MarkIdleStacks();
  }
  profile.loaded_directory_ = profile.directory_;
  if (!options.shown_directory.empty()) profile.directory_ = options.shown_directory;
  return profile;
}


Result<Profile> LoadProfile(const std::string& directory, const LoadOptions& options) {
  return ProfileBuilder::Load(directory, options);
}

}  // namespace hvprof::report
