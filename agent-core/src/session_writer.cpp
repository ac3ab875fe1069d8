#include "hvprof/agent/session_writer.h"

#include "hvprof/base/units.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/store/session_files.h"

namespace hvprof::agent {

std::array<uint8_t, 16> NewSessionId() {
  std::array<uint8_t, 16> id{};
  if (::getrandom(id.data(), id.size(), 0) != static_cast<ssize_t>(id.size())) {
    // Not a secret: a clock is good enough to tell sessions apart.
    const auto now = std::chrono::system_clock::now().time_since_epoch().count();
    std::memcpy(id.data(), &now, sizeof now);
  }
  return id;
}

namespace {

// The store keeps the ring ABI's scheduling values as numbers of its own.
static_assert(store::kSchedRunstate == static_cast<uint8_t>(hvpmu::ring::SchedType::kRunstate) &&
              store::kSchedWakeup == static_cast<uint8_t>(hvpmu::ring::SchedType::kWakeup) &&
              store::kSchedMigrate == static_cast<uint8_t>(hvpmu::ring::SchedType::kMigrate) &&
              store::kSchedLost == static_cast<uint8_t>(hvpmu::ring::SchedType::kLost) &&
              store::kMaxStoredSchedType == hvpmu::ring::kMaxSchedType);
static_assert(store::kSchedFlagTask == hvpmu::ring::kSchedPidValid &&
              store::kSchedFlagOther == hvpmu::ring::kSchedOtherValid);
static_assert(hvprof::kNoPid == hvpmu::ring::kNoPid && hvprof::kUnknownPcpu == hvpmu::ring::kUnknownPcpu);

bool SameEvents(const store::SessionMetadata& a, const store::SessionMetadata& b) {
  if (a.events.size() != b.events.size()) return false;
  for (size_t i = 0; i < a.events.size(); ++i) {
    const auto& x = a.events[i];
    const auto& y = b.events[i];
    if (x.counter != y.counter || x.code != y.code || x.unit_mask != y.unit_mask ||
        x.count != y.count || x.kernel != y.kernel || x.user != y.user) {
      return false;
    }
  }
  return true;
}

}  // namespace

SpaceReserve SpaceReserve::Create(const std::string& path, uint64_t bytes) {
  SpaceReserve reserve;
  auto fd = OpenRegularFile(path, O_WRONLY | O_CREAT, 0600);
  if (!fd) return reserve;
  if (::posix_fallocate(fd.value().get(), 0, static_cast<off_t>(bytes)) != 0) {
    ::unlink(path.c_str());
    return reserve;
  }
  reserve.path_ = path;
  reserve.bytes_ = bytes;
  return reserve;
}

void SpaceReserve::Grow(uint64_t bytes) {
  if (path_.empty() || bytes <= bytes_) return;
  auto fd = OpenRegularFile(path_, O_WRONLY);
  if (fd && ::posix_fallocate(fd.value().get(), 0, static_cast<off_t>(bytes)) == 0) bytes_ = bytes;
}

SpaceReserve& SpaceReserve::operator=(SpaceReserve&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::exchange(other.path_, {});
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

bool SpaceReserve::Release() {
  if (path_.empty()) return false;
  ::unlink(path_.c_str());
  path_.clear();
  bytes_ = 0;
  return true;
}

SessionWriter::SessionWriter(std::string directory, store::SessionMetadata metadata,
                             store::SamplesWriter writer)
    : directory_(std::move(directory)),
      metadata_(std::move(metadata)),
      writer_(std::move(writer)),
      by_domain_mode_(size_t{hvpmu::kDomainIdle} + 1) {}

namespace {

uint64_t ModifiedNs(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

// What continuing a session's record file (`file`, of `records`) found lost: chunks that the
// last metadata counted (`recorded_chunks`, `recorded_bytes`) and the file no longer holds (a
// crash before they were synced; the next chunks are numbered after them, so the gap shows),
// and a torn tail that was cut off.
void NoteContinued(store::RecordFileWriter& writer, const char* file, const char* records, uint64_t recorded_chunks,
                   uint64_t recorded_bytes, std::vector<std::string>* incomplete) {
  const store::ChunkWriterStats& stats = writer.chunk_stats();
  if (writer.next_sequence() < recorded_chunks || stats.bytes < recorded_bytes) {
    incomplete->push_back(fmt::format("{} held {} chunks ({} bytes) when an earlier hvprofd last recorded it, and "
                                      "{} ({} bytes) when this one continued it: the rest was lost",
                                      file, recorded_chunks, recorded_bytes, writer.next_sequence(), stats.bytes));
    writer.SkipTo(static_cast<uint32_t>(std::min<uint64_t>(recorded_chunks, UINT32_MAX - 1)));
  }
  if (stats.torn_bytes != 0) {
    incomplete->push_back(fmt::format("an earlier hvprofd died while writing a chunk of {}: its {} bytes were cut off "
                                      "the end of {}",
                                      records, stats.torn_bytes, file));
  }
}

// What a session continued by a new hvprofd keeps of what the earlier one recorded.
struct Carried {
  std::array<uint8_t, 16> id{};
  std::vector<std::string> incomplete;
  store::LossRecord losses;
  std::optional<store::SchedSummary> sched;
  uint64_t idle = 0;
  uint64_t chunks = 0, bytes = 0;  // of samples.hvs, as recorded
};

// Continues the session in `directory` (whose metadata exists) under `metadata`: its id, times,
// losses and notes carried over, a death while profiling noted. A session that recorded nothing
// (of other events, or never profiled) is removed, and false returned: it starts again. One of
// other events that recorded something is refused.
Result<bool> ContinueSession(const std::string& directory, store::SessionMetadata& metadata, Carried& carried) {
  const std::string samples_path = directory + "/" + store::kSamplesFile;
  const std::string metadata_path = directory + "/" + store::kMetadataFile;
  std::error_code ec;
  HVPROF_TRY(text, ReadFileToString(metadata_path, size_t{64} << 20, Links::kRefuse));
  auto previous = store::ParseMetadata(text, metadata_path);
  const auto previous_id = previous ? store::ParseSessionId(previous.value().session_id) : std::nullopt;
  if (!previous || !previous_id) {
    return MakeError(ErrorKind::kBadState,
                     "{} holds a damaged session ({}); run `hvprof --reset` or move it away", directory,
                     previous ? "its session_id is not 32 hex digits" : previous.error().message());
  }
  const store::SessionMetadata& before = previous.value();
  const store::LossRecord& l = before.losses;
  bool empty = before.samples_stored == 0 && before.samples_file_chunks == 0;
  for (const store::LossField& field : store::kLossFields) empty &= l.*field.member == 0;
  if (before.sched) {
    empty &= before.sched->records == 0 && before.sched->file_chunks == 0;
    for (const store::SchedLossField& field : store::kSchedLossFields) empty &= before.sched->lost.*field.member == 0;
  }
  if (!SameEvents(before, metadata) && !empty) {
    return MakeError(ErrorKind::kBadState,
                     "{} holds a session with other events; keep it with `hvprof --save=NAME` or "
                     "discard it with `hvprof --reset` first",
                     directory);
  }
  if (!SameEvents(before, metadata) || (empty && before.profiling.empty())) {
    // Nothing was recorded under the old events, or nothing at all (a fresh session left by a
    // --save, or by a daemon that never profiled): the session starts again, with no note.
    store::RemoveSessionFiles(directory);
    return false;
  }
  // Continue it: same id, keep what it recorded so far.
  const store::SessionMetadata& old = previous.value();
  carried.id = *previous_id;
  metadata.session_id = old.session_id;
  metadata.created_ns = old.created_ns;
  metadata.profiling = old.profiling;
  metadata.jit = old.jit;  // the copies already in jit/
  metadata.window = old.window;  // continuous mode's window in progress, which the new one continues
  carried.incomplete = old.incomplete;
  carried.losses = old.losses;
  carried.sched = old.sched;
  carried.idle = old.idle_samples;
  carried.chunks = old.samples_file_chunks;
  carried.bytes = old.samples_file_bytes;
  if (!metadata.profiling.empty() && metadata.profiling.back().stop_ns == 0) {
    // The agent that wrote it died while profiling: its last flush is where the session
    // stops being whole.
    const uint64_t last = std::max(ModifiedNs(samples_path), metadata.profiling.back().start_ns);
    metadata.profiling.back().stop_ns = last;
    carried.incomplete.push_back(fmt::format(
        "an earlier hvprofd stopped while profiling without closing the session (it died or was killed) "
        "about {}: what it had read but not yet written, and what its rings still held, was lost uncounted",
        FormatLocalTime(last)));
  }
  std::vector<std::string> notes = old.notes;
  notes.push_back("more than one hvprofd added to this session: it was set up again (--start-daemon) and went on "
                  "with the samples already taken (`hvprof --save` or `--reset` first starts a new one)");
  // The new hvprofd mostly says again what the first one said: each note once.
  for (const std::string& note : metadata.notes) {
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
  }
  metadata.notes = std::move(notes);
  return true;
}

}  // namespace

Result<SessionWriter> SessionWriter::Open(const std::string& directory, store::SessionMetadata metadata) {
  HVPROF_TRYV(MakeDirectories(directory));
  const std::string samples_path = directory + "/" + store::kSamplesFile;
  const std::string metadata_path = directory + "/" + store::kMetadataFile;
  std::error_code ec;
  const bool continuing = std::filesystem::exists(metadata_path, ec);
  Carried carried;
  carried.id = NewSessionId();
  if (continuing) {
    HVPROF_TRY(continued, ContinueSession(directory, metadata, carried));
    if (!continued) return Open(directory, std::move(metadata));
  } else {
    metadata.session_id = store::SessionIdHex(carried.id);
    metadata.created_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count());
  }
  // The processes already told (continued: their images keep their numbers), then the counts of
  // the samples already in the file, as this writer would have made them, the aggregate's included.
  auto context = std::make_unique<store::ContextIndex>();
  std::optional<store::ContextWriter> context_writer;
  std::optional<Error> context_failure;
  if (auto opened = store::ContextWriter::Open(directory, carried.id, *context)) {
    context_writer = std::move(opened).value();
  } else {
    context_failure = opened.error();
    Log(LogLevel::kWarning, "cannot write {}: {}; user samples are counted by process",
        store::kContextFile, opened.error().message());
  }
  store::AggregateBuilder aggregate(store::StackDetail::kStacksByCpu, context.get());
  std::vector<std::array<uint64_t, sample_mode::kCount>> existing(size_t{kIdleDomain} + 1);
  uint64_t first_ns = 0, last_ns = 0;
  auto count_existing = [&](const store::StoredSample& sample) {
    if (sample.domain < existing.size() && sample_mode::IsValid(sample.mode)) ++existing[sample.domain][sample.mode];
    if (first_ns == 0 || sample.time_ns < first_ns) first_ns = sample.time_ns;
    last_ns = std::max(last_ns, sample.time_ns);
    aggregate.Add(sample);
  };
  HVPROF_TRY(writer, store::SamplesWriter::Open(samples_path, carried.id, count_existing));
  NoteContinued(writer, store::kSamplesFile, "samples", carried.chunks, carried.bytes, &carried.incomplete);
  // Scheduling records already there are continued now (a file of another session is refused,
  // as for samples; one the session wrote and lost is noted); else sched.hvs is made at the
  // first record.
  std::optional<store::SchedWriter> sched;
  if (store::HasSched(directory) || (carried.sched && carried.sched->file_chunks != 0)) {
    HVPROF_TRY(opened, store::SchedWriter::Open(directory, carried.id));
    NoteContinued(opened, store::kSchedFile, "scheduling records", carried.sched ? carried.sched->file_chunks : 0,
                  carried.sched ? carried.sched->file_bytes : 0, &carried.incomplete);
    sched = std::move(opened);
  }
  SessionWriter session(directory, std::move(metadata), std::move(writer));
  session.id_ = carried.id;
  session.context_ = std::move(context);
  session.context_writer_ = std::move(context_writer);
  session.context_failure_ = std::move(context_failure);
  session.aggregate_ = std::move(aggregate);
  session.sched_ = std::move(sched);
  session.carried_sched_ = std::move(carried.sched);
  session.by_domain_mode_ = std::move(existing);
  session.metadata_.first_sample_ns = first_ns;
  session.metadata_.last_sample_ns = last_ns;
  session.incomplete_ = std::move(carried.incomplete);
  session.carried_losses_ = carried.losses;
  session.carried_idle_ = carried.idle;
  session.reserve_ = SpaceReserve::Create(directory + "/" + kSpaceReserveFile, kSpaceReserveBytes);
  // Samples never take the last of the disk: what is left is for the metadata.
  session.keep_free_ = kSpaceReserveBytes;
  session.writer_.set_keep_free(session.keep_free_);
  if (session.sched_) session.sched_->set_keep_free(session.keep_free_);
  HVPROF_TRYV(session.WriteMetadata());
  return session;
}

void SessionWriter::Add(const hvpmu::ring::SampleRecord& record, std::span<const uint64_t> frames) {
  store::StoredSample sample;
  sample.ip = record.ip;
  sample.time_ns = record.time_ns;
  sample.period = record.period;
  sample.pid = record.pid;
  sample.tid = record.tid;
  const uint8_t mode = sample_mode::Byte(sample_mode::Of(record.mode));
  sample.SetPlace(record.domain, record.vcpu, record.pcpu, mode, record.event);
  sample.flags = record.flags;
  sample.frames = frames;
  writer_.Append(sample);
  Pending pending{sample, pending_frames_.size(), frames.size()};
  pending.sample.frames = {};
  pending_frames_.insert(pending_frames_.end(), frames.begin(), frames.end());
  pending_.push_back(pending);
  if (metadata_.first_sample_ns == 0 || record.time_ns < metadata_.first_sample_ns) {
    metadata_.first_sample_ns = record.time_ns;
  }
  if (record.time_ns > metadata_.last_sample_ns) metadata_.last_sample_ns = record.time_ns;
  if (record.domain < by_domain_mode_.size()) ++by_domain_mode_[record.domain][mode];
}

void SessionWriter::AddContext(const context::ContextEvent& event) {
  if (context_writer_) {
    context_writer_->Add(event, *context_);
  } else {
    context_->Apply(event);
  }
}

void SessionWriter::CountPending() {
  uint64_t latest = 0;
  for (Pending& pending : pending_) {
    store::StoredSample& sample = pending.sample;
    sample.frames = std::span<const uint64_t>(pending_frames_.data() + pending.first_frame, pending.frames);
    aggregate_.Add(sample);
    latest = std::max(latest, sample.time_ns);
  }
  pending_.clear();
  pending_frames_.clear();
  // Processes that exited well before the newest sample counted have had their samples: the
  // index forgets them (context.hvc has them), so a host that forks all day costs no more memory
  // at its end than at its start. Late samples come within a drain or two of their exit (the
  // rings are drained every 250 ms at the latest): two seconds is ample.
  constexpr uint64_t kKeepExitedNs = 2'000'000'000;
  if (latest > kKeepExitedNs && latest - kKeepExitedNs > pruned_before_ + 1'000'000'000) {
    pruned_before_ = latest - kKeepExitedNs;
    context_->Prune(pruned_before_);
  }
}

void SessionWriter::AddSched(const hvpmu::ring::SchedRecord& record) {
  if (!sched_ && !OpenSched()) {
    ++sched_dropped_;
    return;
  }
  store::StoredSched stored;
  stored.type = record.type;
  stored.flags = record.flags;
  stored.pcpu = record.pcpu;
  stored.old_state = record.old_state;
  stored.new_state = record.new_state;
  stored.time_ns = record.time_ns;
  stored.domain = record.domain;
  stored.vcpu = record.vcpu;
  stored.pid = record.pid;
  stored.tid = record.tid;
  stored.other_domain = record.other_domain;
  stored.other_vcpu = record.other_vcpu;
  stored.other_pid = record.other_pid;
  stored.other_tid = record.other_tid;
  stored.from_pcpu = record.from_pcpu;
  stored.to_pcpu = record.to_pcpu;
  stored.count = record.count;
  stored.aux = record.aux;
  sched_->Add(stored);
}

bool SessionWriter::OpenSched() {
  if (sched_open_waits_) return false;
  auto opened = store::SchedWriter::Open(directory_, id_);
  if (!opened) {
    sched_open_failure_ = opened.error().WithContext(fmt::format("cannot write {}", store::kSchedFile));
    sched_open_waits_ = true;
    if (!sched_open_logged_) {  // tried again after each flush: said once
      Log(LogLevel::kError, "{}; its scheduling records are counted as lost (store_failed)",
          sched_open_failure_->message());
      sched_open_logged_ = true;
    }
    return false;
  }
  sched_ = std::move(opened).value();
  sched_->set_keep_free(keep_free_);
  return true;
}

store::SchedWriterStats SessionWriter::sched_stats() const {
  return sched_ ? sched_->stats() : store::SchedWriterStats{};
}

std::optional<store::SchedSummary> SessionWriter::SchedMetadata(std::vector<std::string>* incomplete) const {
  if (!metadata_.sched && !carried_sched_ && !sched_ && sched_dropped_ == 0) return std::nullopt;
  store::SchedSummary out = WithSchedFile(metadata_.sched.value_or(store::SchedSummary{}));
  const store::SchedWriterStats stats = sched_stats();
  if (stats.failed + sched_dropped_ != 0) {
    const std::optional<Error>& why = sched_ && sched_->last_failure() ? sched_->last_failure() : sched_open_failure_;
    incomplete->push_back(fmt::format(
        "{} scheduling records could not be written to {}{}: they are counted as lost (store_failed); free space in "
        "{} before profiling again",
        stats.failed + sched_dropped_, store::kSchedFile, why ? " (" + why->message() + ")" : std::string(),
        directory_));
  }
  return out;
}

store::SchedSummary SessionWriter::WithSchedFile(store::SchedSummary out) const {
  if (out.source.empty() && carried_sched_) out.source = carried_sched_->source;
  const store::SchedWriterStats stats = sched_stats();
  out.records = stats.records - (sched_ ? sched_->pending() : 0);  // what the file holds
  out.file_chunks = sched_ ? sched_->next_sequence() : 0;
  out.file_bytes = stats.bytes;
  auto add = [](uint64_t& total, uint64_t more) {
    if (__builtin_add_overflow(total, more, &total)) total = UINT64_MAX;
  };
  // An earlier agent's losses, then this one's (the engine's counts restart with each agent).
  for (const store::SchedLossField& field : store::kSchedLossFields) {
    if (carried_sched_) add(out.lost.*field.member, carried_sched_->lost.*field.member);
  }
  out.lost.store_failed = carried_sched_ ? carried_sched_->lost.store_failed : 0;
  add(out.lost.store_failed, stats.failed);
  add(out.lost.store_failed, sched_dropped_);
  add(out.lost.unknown_type, stats.unknown_type);
  return out;
}

uint64_t SessionWriter::samples(uint16_t domain, uint8_t mode) const {
  return domain < by_domain_mode_.size() && sample_mode::IsValid(mode) ? by_domain_mode_[domain][mode] : 0;
}

void SessionWriter::AddIncomplete(std::string reason) {
  if (std::find(incomplete_.begin(), incomplete_.end(), reason) == incomplete_.end()) {
    incomplete_.push_back(std::move(reason));
  }
}

Result<void> SessionWriter::WriteMetadata() {
  store::SessionMetadata out = metadata_;
  out.samples_by_domain_mode.clear();
  for (size_t domain = 0; domain < by_domain_mode_.size(); ++domain) {
    for (uint8_t mode = 0; mode < sample_mode::kCount; ++mode) {
      if (by_domain_mode_[domain][mode] == 0) continue;
      out.samples_by_domain_mode[fmt::format("{}/{}", domain, sample_mode::Name(mode))] = by_domain_mode_[domain][mode];
    }
  }
  const store::WriterStats& stats = writer_.stats();
  out.samples_stored = stats.samples - writer_.pending();  // what the file holds
  out.samples_file_chunks = writer_.next_sequence();
  out.samples_file_bytes = stats.bytes;
  // An earlier agent's losses, then this one's (the engine's counts restart with each agent).
  for (const store::LossField& field : store::kLossFields) {
    const uint64_t carried = carried_losses_.*field.member;
    uint64_t& total = out.losses.*field.member;
    if (__builtin_add_overflow(total, carried, &total)) total = UINT64_MAX;
  }
  out.losses.store_failed = carried_losses_.store_failed;
  if (__builtin_add_overflow(out.losses.store_failed, stats.failed, &out.losses.store_failed)) {
    out.losses.store_failed = UINT64_MAX;
  }
  if (__builtin_add_overflow(out.idle_samples, carried_idle_, &out.idle_samples)) out.idle_samples = UINT64_MAX;
  out.incomplete = incomplete_;
  if (stats.failed != 0) {
    out.incomplete.push_back(fmt::format(
        "{} samples ({} chunks) could not be written to {}{}: they are counted as lost (store_failed); free space "
        "in {} before profiling again",
        stats.failed, stats.failed_chunks, store::kSamplesFile,
        writer_.last_failure() ? " (" + writer_.last_failure()->message() + ")" : std::string(), directory_));
  }
  out.sched = SchedMetadata(&out.incomplete);
  // What context.hvc told (its index forgets processes, not their count): a report of the
  // aggregate says it without reading the file. Not when the file could not be written: a report
  // then reads what it holds.
  if (context_writer_ && !context_failure_) {
    out.context = store::ContextSummary{context_->processes(), context_->images().size(), context_->Domains()};
  }
  const std::string path = directory_ + "/" + store::kMetadataFile;
  const std::string text = store::SerializeMetadata(out);
  auto written = WriteFileAtomically(path, text);
  if (!written && written.error().kind() == ErrorKind::kNoSpace && reserve_.Release()) {
    Log(LogLevel::kWarning, "the disk is full: released the space kept in {} to write {}", directory_,
        store::kMetadataFile);
    written = WriteFileAtomically(path, text);
  }
  if (written) {
    // Room for the next one beside this one, however large the metadata grows (thousands of
    // processes on a linux host).
    const uint64_t needed = std::max<uint64_t>(kSpaceReserveBytes, 2 * uint64_t{text.size()});
    reserve_.Grow(needed);
    keep_free_ = needed;
    writer_.set_keep_free(needed);
    if (sched_) sched_->set_keep_free(needed);
  }
  return written;
}

Result<void> SessionWriter::Flush() {
  auto flushed = writer_.Flush(false);
  if (context_writer_) {
    if (auto written = context_writer_->Flush(false); !written) context_failure_ = written.error();
  }
  sched_open_waits_ = false;  // the next scheduling record tries to make sched.hvs again
  if (!sched_) return flushed;
  auto sched_flushed = sched_->Flush();
  return flushed ? sched_flushed : flushed;
}

Result<void> SessionWriter::Dump() {
  auto flushed = writer_.Flush(true);
  if (context_writer_) {
    if (auto written = context_writer_->Flush(true); !written) context_failure_ = written.error();
  }
  auto sched_flushed = sched_ ? sched_->Dump() : Ok();
  // The metadata is written even when the samples could not be: it records their loss.
  HVPROF_TRYV(WriteMetadata());
  sched_open_waits_ = false;
  if (!flushed) {
    Log(LogLevel::kError, "{} samples could not be written: {}", writer_.stats().failed, flushed.error().message());
  }
  if (!sched_flushed) {
    Log(LogLevel::kError, "{} scheduling records could not be written: {}", sched_->stats().failed,
        sched_flushed.error().message());
  }
  // The aggregate is a cache of samples.hvs, counted as the samples came (a sort, not a read of
  // the file): without it (no space), a report reads the samples. It covers the samples written:
  // those that could not be were not counted in the file either.
  CountPending();
  // What outgrew its memory budget is said once: which part the aggregate no longer keeps, and
  // which views read the samples instead.
  const auto tell_budget = [](bool over, bool* told, const std::string& message) {
    if (!over || *told) return;
    *told = true;
    Log(LogLevel::kInfo, "{}", message);
  };
  const auto outgrew = [](std::string_view what, size_t budget, std::string_view instead) {
    return fmt::format("the session's {} outgrew the {} MiB kept for them in memory: its aggregate keeps none, and {} {}",
                       what, budget >> 20, instead, store::kSamplesFile);
  };
  tell_budget(aggregate_.stacks_over_budget(), &stacks_budget_told_,
              outgrew("distinct call stacks", store::AggregateBuilder::kDefaultStackBudgetBytes,
                      "stack views read them from"));
  tell_budget(aggregate_.slices_over_budget(), &slices_budget_told_,
              outgrew("counts per span of time", store::AggregateBuilder::kDefaultSliceBudgetBytes,
                      "a diff of its time slices (--slices) reads"));
  tell_budget(aggregate_.regions_over_budget(), &regions_budget_told_,
              fmt::format("the session's addresses counted by process fell in more than {} mappings of no file: its "
                          "aggregate lists none of them, and a report reads {} to name them",
                          store::AggregateBuilder::kMaxRegions, store::kContextFile));
  const std::string aggregate_path = directory_ + "/" + store::kAggregateFile;
  struct stat st {};
  const uint64_t file_bytes =
      ::stat((directory_ + "/" + store::kSamplesFile).c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  struct stat aggregate_st {};
  if (file_bytes == aggregate_file_bytes_ && aggregate_.samples() == aggregate_samples_ &&
      ::stat(aggregate_path.c_str(), &aggregate_st) == 0) {
    return Ok();  // written at the dump before, and nothing came since
  }
  store::Aggregate snapshot = aggregate_.Snapshot(file_bytes);
  sampled_images_ = store::SampledImagesOf(metadata_, snapshot);
  Result<void> cached = writer_.stats().failed == 0
                            ? store::WriteAggregate(aggregate_path, snapshot)
                            : Result<void>(MakeError(ErrorKind::kNoSpace, "samples were lost before the file"));
  if (cached) {
    aggregate_file_bytes_ = file_bytes;
    aggregate_samples_ = aggregate_.samples();
  } else {
    // An older aggregate stays: a report uses it only if it still covers the whole file.
    Log(LogLevel::kWarning, "the aggregate of {} could not be updated ({}); reports read the samples instead",
        directory_, cached.error().message());
  }
  return Ok();
}

}  // namespace hvprof::agent
