// The agent's side of the session store: samples from the rings go into samples.hvs,
// scheduling records into sched.hvs, counts into the metadata, and a dump writes everything
// durable (chunks synced, the aggregate, and session.json).
#pragma once

#include <array>
#include <memory>
#include <cstdint>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"
#include "hvprof/base/result.h"
#include "hvprof/store/aggregate_builder.h"
#include "hvprof/store/context_file.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/sched_file.h"
#include "hvprof/store/sampled_images.h"
#include "hvprof/store/session.h"

namespace hvprof::agent {

// Disk space set aside in a session directory, so that when the disk fills up the metadata
// that records the loss can still be written. Removed with its owner.
class SpaceReserve {
 public:
  SpaceReserve() = default;
  // Best effort: a filesystem without room or fallocate gives an empty reserve.
  static SpaceReserve Create(const std::string& path, uint64_t bytes);
  SpaceReserve(SpaceReserve&& other) noexcept
      : path_(std::exchange(other.path_, {})), bytes_(std::exchange(other.bytes_, 0)) {}
  SpaceReserve& operator=(SpaceReserve&& other) noexcept;
  ~SpaceReserve() { Release(); }
  bool held() const { return !path_.empty(); }
  // Gives the space back; true if there was any.
  bool Release();
  // Sets at least `bytes` aside (best effort).
  void Grow(uint64_t bytes);
  uint64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  uint64_t bytes_ = 0;
};

class SessionWriter {
 public:
  // Creates (or continues) the session in `directory`. A directory that already holds samples
  // is continued only if its events match `metadata`'s; else kBadState, naming the difference.
  // Continuing a session whose profiling an earlier agent never stopped (it died), records
  // that as a reason the session is incomplete.
  static Result<SessionWriter> Open(const std::string& directory, store::SessionMetadata metadata);

  // A sample, into samples.hvs; it is counted into the aggregate by the next CountPending, once
  // the processes it ran in are known (AddContext).
  void Add(const hvpmu::ring::SampleRecord& record, std::span<const uint64_t> frames);
  // What the platform says of the processes (FetchContextEvents), into context.hvc and the index
  // the aggregate resolves user addresses with. Events that cannot be written are counted
  // (context_failed) and still applied.
  void AddContext(const context::ContextEvent& event);
  // Counts the samples added since the last call into the aggregate: call after the context
  // events of the platform's side as of then (their samples came after their events).
  void CountPending();
  uint64_t context_events() const { return context_writer_ ? context_writer_->events() : 0; }
  const store::ContextIndex& context() const { return *context_; }
  // A scheduling record, into sched.hvs: the file is made at the first (a session without
  // scheduling has none) and continued with the session. Records that cannot be written (the
  // file cannot be made, a full disk) are counted as the metadata's sched.lost.store_failed.
  // The agent says where they come from and what the rings lost in metadata().sched.
  void AddSched(const hvpmu::ring::SchedRecord& record);
  // Makes everything so far durable: the chunks in progress, the metadata and the aggregate.
  // Fails only if the metadata cannot be written; samples and scheduling records that could
  // not be written are counted (stats().failed, sched_stats()) and recorded in the metadata as
  // a reason it is incomplete.
  Result<void> Dump();
  // Writes the chunks in progress (without syncing), so that a crash of the agent loses at most
  // what came since.
  Result<void> Flush();
  // Writes session.json; on a full disk, releases the space reserve and tries again once.
  Result<void> WriteMetadata();
  // Records why the session is incomplete (kept in the metadata's "incomplete").
  void AddIncomplete(std::string reason);
  // The write error while samples cannot be written, for status.
  const std::optional<Error>& store_failure() const { return writer_.failure(); }
  const std::optional<Error>& last_store_failure() const { return writer_.last_failure(); }
  // Samples in samples.hvs (stats().samples less the chunk in progress).
  uint64_t samples_in_file() const { return writer_.stats().samples - writer_.pending(); }

  // sched.hvs: its writer's counts (zero while there is none), and the error while scheduling
  // records cannot be written (or the last one that kept it from being made, while it is not).
  store::SchedWriterStats sched_stats() const;
  const std::optional<Error>& sched_failure() const { return sched_ ? sched_->failure() : sched_open_failure_; }
  // `recorded` (the rings' and the platform's side: source, losses) completed as session.json's
  // "sched" says it: the records sched.hvs holds, its size, an earlier agent's losses and the
  // records that could not be written.
  store::SchedSummary WithSchedFile(store::SchedSummary recorded) const;

  store::SessionMetadata& metadata() { return metadata_; }
  // The images the samples fell in, as of the last Dump that wrote the aggregate
  // (store::SampledImagesOf): what the agent keeps in its build-id cache.
  const std::vector<store::SampledImage>& sampled_images() const { return sampled_images_; }
  store::WriterStats stats() const { return writer_.stats(); }
  const std::string& directory() const { return directory_; }
  uint64_t samples(uint16_t domain, uint8_t mode) const;

 private:
  SessionWriter(std::string directory, store::SessionMetadata metadata, store::SamplesWriter writer);
  void CountExisting(const store::StoredSample& sample);
  // Continues or makes sched.hvs; false if it cannot (then not tried again until a flush).
  bool OpenSched();
  // The metadata's "sched": the agent's, with the file's counts and an earlier agent's losses.
  std::optional<store::SchedSummary> SchedMetadata(std::vector<std::string>* incomplete) const;

  std::string directory_;
  SpaceReserve reserve_;
  std::vector<std::string> incomplete_;  // without the store's own reason, made at each write
  store::LossRecord carried_losses_;      // an earlier agent's, when continuing its session
  uint64_t carried_idle_ = 0;
  store::SessionMetadata metadata_;
  store::SamplesWriter writer_;
  std::vector<std::array<uint64_t, sample_mode::kCount>> by_domain_mode_;  // indexed by domain id
  std::array<uint8_t, 16> id_{};
  uint64_t keep_free_ = 0;                       // what the writers leave free on the disk
  std::optional<store::SchedWriter> sched_;      // once there is a sched.hvs
  std::optional<store::SchedSummary> carried_sched_;  // an earlier agent's, when continuing
  std::optional<Error> sched_open_failure_;      // why sched.hvs could not be made, the latest
  // The processes the samples ran in (context.hvc), and the aggregate counted as samples come,
  // with user addresses resolved by image through them. The index is on the heap: the builder
  // keeps its address while the writer moves.
  std::unique_ptr<store::ContextIndex> context_;
  std::vector<store::SampledImage> sampled_images_;
  std::optional<store::ContextWriter> context_writer_;
  std::optional<Error> context_failure_;
  store::AggregateBuilder aggregate_{store::StackDetail::kStacks, nullptr};
  struct Pending {
    store::StoredSample sample;  // frames: in pending_frames_
    size_t first_frame = 0;
    size_t frames = 0;
  };
  std::vector<Pending> pending_;
  std::vector<uint64_t> pending_frames_;
  uint64_t pruned_before_ = 0;
  // Which of the aggregate's memory budgets the log has told were outgrown.
  bool stacks_budget_told_ = false;
  bool slices_budget_told_ = false;
  bool regions_budget_told_ = false;
  // What the aggregate on disk covers (samples.hvs's size, the samples counted): a dump with
  // nothing new (the stop and then the shutdown of a run) does not write it again.
  uint64_t aggregate_file_bytes_ = UINT64_MAX;
  uint64_t aggregate_samples_ = 0;
  bool sched_open_waits_ = false;                // for the next flush before trying again
  bool sched_open_logged_ = false;
  uint64_t sched_dropped_ = 0;                   // records lost that way
};

// 16 random bytes for a session id (store::SessionIdHex gives its hex form).
std::array<uint8_t, 16> NewSessionId();

// What a session directory keeps free for its metadata on a full disk.
inline constexpr uint64_t kSpaceReserveBytes = 1u << 20;
inline constexpr const char* kSpaceReserveFile = ".space-reserve";

}  // namespace hvprof::agent
