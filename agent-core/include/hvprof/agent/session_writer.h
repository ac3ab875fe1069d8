// The agent's side of the session store: samples from the rings go into samples.hvs, counts
// into the metadata, and a dump writes everything durable (chunks synced, the aggregate, and
// session.json).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "hvprof/base/error.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"

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

  void Add(const hvpmu::ring::SampleRecord& record, std::span<const uint64_t> frames);
  // Makes everything so far durable: the chunk in progress, the metadata and the aggregate.
  // Fails only if the metadata cannot be written; samples that could not be written are
  // counted (stats().failed) and recorded in the metadata as a reason it is incomplete.
  Result<void> Dump();
  // Writes the chunk in progress (without syncing), so that a crash of the agent loses at most
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

  store::SessionMetadata& metadata() { return metadata_; }
  store::WriterStats stats() const { return writer_.stats(); }
  const std::string& directory() const { return directory_; }
  uint64_t samples(uint16_t domain, uint8_t mode) const;

 private:
  SessionWriter(std::string directory, store::SessionMetadata metadata, store::SamplesWriter writer);
  void CountExisting(const store::StoredSample& sample);

  std::string directory_;
  SpaceReserve reserve_;
  std::vector<std::string> incomplete_;  // without the store's own reason, made at each write
  store::LossRecord carried_losses_;      // an earlier agent's, when continuing its session
  uint64_t carried_idle_ = 0;
  store::SessionMetadata metadata_;
  store::SamplesWriter writer_;
  std::vector<std::array<uint64_t, 3>> by_domain_mode_;  // indexed by domain id
};

// 16 random bytes for a session id (store::SessionIdHex gives its hex form).
std::array<uint8_t, 16> NewSessionId();

// A CLOCK_REALTIME time in ns as local "YYYY-MM-DD HH:MM:SS", for messages.
std::string FormatWallClock(uint64_t ns);

// What a session directory keeps free for its metadata on a full disk.
inline constexpr uint64_t kSpaceReserveBytes = 1u << 20;
inline constexpr const char* kSpaceReserveFile = ".space-reserve";

}  // namespace hvprof::agent
