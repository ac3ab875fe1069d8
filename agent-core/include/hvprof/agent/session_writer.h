// The agent's side of the session store: samples from the rings go into samples.hvs, counts
// into the metadata, and a dump writes everything durable (chunks synced, the aggregate, and
// session.json).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hvprof/base/error.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"

namespace hvprof::agent {

class SessionWriter {
 public:
  // Creates (or continues) the session in `directory`. A directory that already holds samples
  // is continued only if its events match `metadata`'s; else kBadState, naming the difference.
  static Result<SessionWriter> Open(const std::string& directory, store::SessionMetadata metadata);

  void Add(const hvpmu::ring::SampleRecord& record, std::span<const uint64_t> frames);
  // Makes everything so far durable: the chunk in progress, the aggregate and the metadata.
  Result<void> Dump();
  // Writes the chunk in progress (without syncing), so that a crash of the agent loses at most
  // what came since.
  Result<void> Flush();
  Result<void> WriteMetadata();

  store::SessionMetadata& metadata() { return metadata_; }
  const store::WriterStats& stats() const { return writer_.stats(); }
  const std::string& directory() const { return directory_; }
  uint64_t samples(uint16_t domain, uint8_t mode) const;

 private:
  SessionWriter(std::string directory, store::SessionMetadata metadata, store::SamplesWriter writer);

  std::string directory_;
  store::SessionMetadata metadata_;
  store::SamplesWriter writer_;
  std::vector<std::array<uint64_t, 3>> by_domain_mode_;  // indexed by domain id
};

// 16 random bytes for a session id, and their hex form.
std::array<uint8_t, 16> NewSessionId();
std::string HexId(std::span<const uint8_t> bytes);

}  // namespace hvprof::agent
