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

std::optional<store::Aggregate> ProfileBuilder::UsableAggregate(ProfileParts& profile, const LoadOptions& options,
                                                                const std::string& path, uint64_t samples_bytes) {
  // A samples file shorter than the metadata says was cut: its aggregate cannot be trusted.
  // An aggregate without stacks (an older one, or one whose stacks were too many to keep) serves
  // no stack view: then the one raw pass counts both.
  if (!options.use_aggregate || samples_bytes < profile.metadata.samples_file_bytes) return std::nullopt;
  auto read = store::ReadAggregate(path);
  if (!read) {
    if (read.error().kind() == ErrorKind::kCorrupt) {
      profile.problems.push_back(read.error().message() + "; the raw samples were read instead");
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
  const uint64_t stored = profile.metadata.samples_stored;
  // Its stacks count what its entries count (the reader checked that they add up to its total).
  if (overflow || (stored != 0 && sum != stored) || (a.has_stacks && a.samples != sum)) {
    profile.problems.push_back(fmt::format(
        "{} is damaged: it counts {} samples where {} says the session stored {}; it was ignored and the raw "
        "samples read instead",
        path, overflow ? std::string("more than 2^64") : std::to_string(sum), store::kMetadataFile, stored));
    return std::nullopt;
  }
  return std::move(read).value();
}

Result<std::optional<store::Aggregate>> ProfileBuilder::StoredAggregate(ProfileParts& profile, const LoadOptions& options,
                                                                        std::optional<uint64_t> samples_bytes) {
  const std::string path = profile.directory + "/" + store::kAggregateFile;
  if (samples_bytes) return UsableAggregate(profile, options, path, *samples_bytes);
  const store::SessionMetadata& m = profile.metadata;
  if (!m.window || !m.window->raw_dropped) return std::optional<store::Aggregate>();
  // The aggregate alone stands for what samples.hvs held.
  std::optional<store::Aggregate> usable = UsableAggregate(profile, options, path, m.samples_file_bytes);
  if (!usable) {
    return MakeError(ErrorKind::kUnsupported,
                     "{} is a window whose raw samples were dropped to keep the windows within their disk budget "
                     "(hvprofd --keep-size): its aggregate serves the flat, call-graph and stack views, not this one "
                     "(by process, or pprof's thread labels), or it is damaged; report a newer window, or keep more "
                     "(docs/continuous.md)",
                     profile.directory);
  }
  return usable;
}

Result<std::optional<store::Aggregate>> ProfileBuilder::ReadSamplesOnce(const std::string& samples,
                                                                        const SamplesNeeds& needs,
                                                                        const store::SampleWatch& watch) {
  const store::SessionMetadata& m = p_.metadata;
  store::ReadSummary summary;
  const auto id = store::ParseSessionId(m.session_id);
  const store::Translation translation{p_.has_context_file ? p_.context.get() : nullptr, options_.processes};
  // Without a time span in the metadata (no dump since the first samples), the chunks' headers
  // give it (store::AggregateSamplesFile).
  const store::TimeSlicing slicing{needs.slices, m.first_sample_ns, m.last_sample_ns};
  const store::StackDetail stacks = !needs.count || !options_.stacks ? store::StackDetail::kNone
                                    : options_.stack_threads         ? store::StackDetail::kStacksByThread
                                                                     : store::StackDetail::kStacks;
  auto raw = store::AggregateSamplesFile(samples, &summary,
                                         id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt, stacks,
                                         slicing, 0, translation, watch);
  if (!raw && !needs.count && (needs.slices == 0 || needs.slices_from_spans)) {
    // The aggregate stands for the samples: without their times the replaced JIT code is named
    // by the latest code there, and the slices come from the aggregate's spans.
    if (needs.jit != nullptr) {
      for (const auto& [process, table] : *needs.jit) {
        NoteOnce(fmt::format("pid {} loaded new JIT code over old code's addresses, and without the raw samples' "
                             "times ({}) its samples there are named by the latest code",
                             process.second, raw.error().message()));
      }
    }
    return std::optional<store::Aggregate>();
  }
  HVPROF_TRY(counted, std::move(raw));
  if (needs.slices != 0 && counted.time_slices != needs.slices) {
    return MakeError(ErrorKind::kInvalidArgument, "{}: a sample's count in one time slice is beyond 32 bits", samples);
  }
  if (!needs.count) return std::optional(std::move(counted));  // the aggregate said the file's damage
  for (const store::FileProblem& problem : summary.problems) {
    p_.problems.push_back(fmt::format("{} at byte {}: {}", samples, problem.offset, problem.description));
  }
  if (summary.next_sequence < m.samples_file_chunks) {
    p_.problems.push_back(fmt::format(
        "{} ends after chunk {} where the session had written {} chunks: the file was cut short and the samples "
        "of the last {} chunks are lost",
        samples, summary.next_sequence == 0 ? std::string("none") : std::to_string(summary.next_sequence - 1),
        m.samples_file_chunks, m.samples_file_chunks - summary.next_sequence));
  }
  return std::optional(std::move(counted));
}

void ProfileBuilder::NoteSessionState(ProfileParts& profile, std::optional<uint64_t> samples_bytes) {
  const store::SessionMetadata& m = profile.metadata;
  const std::string samples = profile.directory + "/" + store::kSamplesFile;
  if (m.window && m.window->raw_dropped) {
    profile.metadata.notes.push_back(
        "this window's raw samples were dropped to keep the windows within their disk budget: it is reported from "
        "its aggregate");
    return;
  }
  if (samples_bytes && *samples_bytes < m.samples_file_bytes) {
    profile.problems.push_back(fmt::format("{} holds {} bytes where the session had written {}: it was truncated",
                                            samples, *samples_bytes, m.samples_file_bytes));
  }
  if (!samples_bytes) profile.problems.push_back(fmt::format("{} has no samples file", profile.directory));
  for (const std::string& reason : m.incomplete) profile.problems.push_back("the session is incomplete: " + reason);
  if (!m.profiling.empty() && m.profiling.back().stop_ns == 0) {
    if (store::SessionWriterAlive(profile.directory)) {
      profile.metadata.notes.push_back(
          "profiling is still on: this is the session as hvprofd last wrote it (`hvprof --dump` writes it now)");
    } else {
      profile.problems.push_back(
          "the session is incomplete: profiling was never stopped, and no hvprofd is writing it (it died or was "
          "killed); the samples it had not yet written were lost uncounted. `hvprof --start-daemon` with the same "
          "--session-dir recovers and continues the session");
    }
  }
}

// The stored aggregate's time spans give `slices` slices (as many spans at least).
static bool SpansServe(const store::Aggregate& aggregate, uint32_t slices) {
  return aggregate.time_slices >= slices &&
         aggregate.slice_counts.size() == aggregate.entries.size() * aggregate.time_slices;
}

// The whole of context.hvc where the profile held only the aggregate's images and regions
// (ProfileParts::partial_context): a pass over samples.hvs translates its samples with it, as
// hvprofd did when it counted them (the aggregate's regions name no mapped file).
static void TakeWholeContext(ProfileParts& profile) {
  if (!profile.partial_context) return;
  profile.context = profile.ReadWholeContext(profile.problems, "user samples are shown by process and address");
  profile.partial_context = false;
}

// The session's metadata, its notes each once: sessions written before hvprofd kept them apart said
// some twice (a continued session carried its first hvprofd's notes, and the new one said them again).
static ProfileParts PartsOf(store::SessionOnDisk session) {
  ProfileParts profile;
  profile.metadata = std::move(session.metadata);
  profile.directory = session.directory;
  profile.loaded_directory = session.directory;
  std::vector<std::string> notes;
  for (std::string& note : profile.metadata.notes) {
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(std::move(note));
  }
  profile.metadata.notes = std::move(notes);
  return profile;
}

Result<std::optional<store::Aggregate>> ProfileBuilder::ReadAggregateAndContext(ProfileParts& profile,
                                                                                const LoadOptions& options,
                                                                                std::optional<uint64_t> samples_bytes) {
  // The processes the samples ran in: context.hvc, as hvprofd wrote it while profiling; in a
  // session from before it, the processes session.json lists (each alive the whole session).
  // A report counted from an aggregate that lists the regions its per-process addresses fell in
  // needs none of it: user code is counted by image, the aggregate names the images and regions,
  // and session.json counts the processes. After a day of a host that starts processes all day
  // context.hvc is hundreds of megabytes, and `hvprof run` prints this report as its run ends.
  // Otherwise it is read on a thread of its own while the aggregate is read.
  auto context = std::make_shared<store::ContextIndex>();
  const std::string context_path = profile.directory + "/" + store::kContextFile;
  struct stat context_st {};
  // A window of continuous profiling whose raw samples were dropped to keep within its budget
  // (store::DropRawSamples) has its aggregate alone, and no context.hvc.
  const bool raw_dropped = profile.metadata.window && profile.metadata.window->raw_dropped;
  const bool may_skip_context = options.use_aggregate && (samples_bytes || raw_dropped) && !options.processes &&
                                profile.metadata.context.has_value() &&
                                (raw_dropped || ::stat(context_path.c_str(), &context_st) == 0);
  std::optional<Result<store::ContextReadSummary>> context_read;
  std::jthread context_reader;
  if (!may_skip_context) {
    context_reader = std::jthread([&context_read, &context, &context_path, &profile] {
      context_read.emplace(store::ReadContextFile(context_path, profile.metadata.session_id, *context));
    });
  }
  auto stored = StoredAggregate(profile, options, samples_bytes);
  if (context_reader.joinable()) context_reader.join();
  HVPROF_TRY(usable, std::move(stored));
  if (usable && may_skip_context && usable->has_regions) {
    // The aggregate's images and regions: all the builder asks of the context (a view that needs
    // the processes themselves makes Profile::context() read the file).
    ContextOfAggregate(*usable, *context);
    profile.has_context_file = true;
    profile.context = context;
    profile.context_summary = *profile.metadata.context;
    profile.partial_context = true;
    return usable;
  }
  if (!context_read) context_read.emplace(store::ReadContextFile(context_path, profile.metadata.session_id, *context));
  if (!context_read->has_value()) {
    profile.problems.push_back(context_read->error().message() + "; user samples are shown by process and address");
  } else if (context_read->value().present) {
    profile.has_context_file = true;
    for (const store::FileProblem& problem : context_read->value().problems) {
      profile.problems.push_back(fmt::format("{} at byte {}: {}", context_path, problem.offset, problem.description));
    }
  } else {
    store::ContextFromMetadata(profile.metadata, *context);
  }
  profile.context = context;
  profile.context_summary = {context->processes(), context->images().size(), context->Domains()};
  return usable;
}

Result<Profile> ProfileBuilder::Load(const std::string& directory, const LoadOptions& options) {
  const uint32_t slices = options.time_slices;
  if (slices > store::kMaxTimeSlices) {
    return MakeError(ErrorKind::kInvalidArgument, "at most {} time slices can be counted, not {}",
                     store::kMaxTimeSlices, slices);
  }
  HVPROF_TRY(session, store::OpenSession(directory));
  ProfileParts profile = PartsOf(std::move(session));
  const std::string samples = profile.directory + "/" + store::kSamplesFile;
  struct stat st {};
  const bool have_samples = ::stat(samples.c_str(), &st) == 0;
  const std::optional<uint64_t> samples_bytes = have_samples ? std::optional<uint64_t>(st.st_size) : std::nullopt;
  const Stopwatch reading;
  profile.keeps_pids = options.processes;
  HVPROF_TRY(usable, ReadAggregateAndContext(profile, options, samples_bytes));
  const bool from_aggregate = usable.has_value();
  store::Aggregate aggregate = from_aggregate ? std::move(*usable) : store::Aggregate();
  ProfileBuilder builder(profile, options, buildid_cache::SearchDirectories(profile.metadata.build_id_cache));
  // What the report needs of samples.hvs, in one pass or none: the counts, where no stored
  // aggregate stands for them; the time slices, where its spans cannot give them (or the pass is
  // made anyway); the times of the samples in JIT code that was replaced, to name each by the code
  // its time found (the JIT copies of the processes sampled are read first, to know).
  const ReusedJit reused = have_samples ? builder.ReusedJitTables(from_aggregate ? &aggregate : nullptr) : ReusedJit();
  SamplesNeeds needs;
  needs.count = !from_aggregate && have_samples;
  needs.jit = reused.empty() ? nullptr : &reused;
  needs.slices_from_spans = from_aggregate && SpansServe(aggregate, slices);
  if (slices != 0 && have_samples && (!needs.slices_from_spans || needs.count || needs.jit)) needs.slices = slices;
  JitWatch jit(reused, needs.slices);
  std::optional<store::Aggregate> sliced;  // the pass's count, for the time slices alone
  if (needs.count || needs.jit != nullptr || needs.slices != 0) {
    if (needs.slices != 0) TakeWholeContext(profile);  // the slices are matched to the entries by key
    HVPROF_TRY(counted, builder.ReadSamplesOnce(samples, needs, jit.Watch()));
    ++profile.timings.samples_passes;
    if (!counted) {  // it could not be read, and the aggregate serves (ReadSamplesOnce said so)
      needs.jit = nullptr;
      needs.slices = 0;
    } else if (needs.count) {
      aggregate = std::move(*counted);
    } else if (needs.slices != 0) {
      sliced = std::move(counted);
    }
  }
  NoteSessionState(profile, samples_bytes);
  std::vector<PublishedProfile> published;
  if (options.all_domains) published = ProfileBuilder::ReadPublished(profile, &aggregate, TotalCount(aggregate));
  if (slices != 0 && !published.empty()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "the profiles guests published (--all-domains) hold no samples to cut into time slices");
  }
  profile.timings.read_seconds = reading.Seconds();
  profile.timings.from_aggregate = from_aggregate;
  for (const PublishedProfile& guest : published) builder.published_domains.push_back(guest.domain);
  if (options.debuginfod) {
    auto client = sym::Debuginfod::FromEnvironment();
    if (client) builder.debuginfod = std::move(client).value();
    else profile.problems.push_back(client.error().message() + "; no images were asked for there");
  }
  HVPROF_TRYV(builder.Build(aggregate, profile.entries));
  if (needs.slices != 0) {
    builder.SlicesFromPass(sliced ? *sliced : aggregate, slices, sliced.has_value());
  } else if (slices != 0) {
    HVPROF_TRYV(builder.SlicesWithoutPass(aggregate, slices, needs.slices_from_spans));
  }
  builder.AddPublishedSymbols(published);
  builder.MarkIdle(aggregate);
  if (needs.jit != nullptr && published.empty()) builder.SplitJitByTime(reused, jit.Merged());
  if (options.stacks) {
    HVPROF_TRYV(builder.BuildStacks(CollectStacks(aggregate, options.stack_threads)));
    builder.MarkIdleStacks();
  }
  builder.NoteJitProblems();
  if (!options.shown_directory.empty()) profile.directory = options.shown_directory;
  return Profile(std::move(profile));
}

Result<Profile> LoadProfile(const std::string& directory, const LoadOptions& options) {
  return ProfileBuilder::Load(directory, options);
}

}  // namespace hvprof::report
