// The raw-sample file of a session (samples.hvs): append-only chunks, each checksummed and
// decodable on its own, so a crash loses at most the chunk being written and a reader can skip
// a damaged chunk and read the rest. The byte format is in docs/session-format.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hvprof/base/error.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof::store {

inline constexpr char kSamplesFileMagic[8] = {'H', 'V', 'P', 'R', 'O', 'F', 'S', '1'};
inline constexpr uint32_t kSamplesFileVersion = 1;
inline constexpr uint32_t kChunkMagic = 0x4B435648;  // "HVCK"
inline constexpr uint32_t kMaxChunkRecords = 65536;
inline constexpr uint32_t kMaxChunkPayload = 8u << 20;
inline constexpr uint32_t kMaxFrames = 64;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint8_t session_id[16];
  uint64_t created_ns;  // CLOCK_REALTIME
  uint8_t reserved[24];
};
static_assert(sizeof(FileHeader) == 64);

struct ChunkHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_bytes;
  uint32_t sequence;       // chunk number in the file, from 0
  uint32_t records;
  uint32_t payload_bytes;
  uint32_t payload_crc;    // zlib crc32 of the payload
  uint64_t first_time_ns;
  uint64_t last_time_ns;
  uint32_t header_crc;     // crc32 of the bytes before this field
  uint32_t reserved;
};
static_assert(sizeof(ChunkHeader) == 48);

// One sample as the store keeps it.
struct StoredSample {
  uint64_t ip = 0;
  uint64_t time_ns = 0;
  uint64_t period = 0;
  uint32_t pid = 0xFFFFFFFF;  // ring::kNoPid when unknown
  uint32_t tid = 0xFFFFFFFF;
  uint16_t domain = 0;
  uint16_t vcpu = 0;
  uint16_t pcpu = 0;
  uint8_t mode = 0;
  uint8_t event = 0;
  uint16_t flags = 0;
  std::span<const uint64_t> frames;  // innermost first
};

struct WriterStats {
  uint64_t samples = 0;   // appended
  uint64_t chunks = 0;    // written to the file
  uint64_t bytes = 0;     // file size
  uint64_t failed = 0;    // samples lost because the file could not be written
};

class SamplesWriter {
 public:
  // Opens `path` for appending, creating it with a file header if it is new. An existing file
  // must have a valid header; new chunks are numbered after the chunks it holds.
  static Result<SamplesWriter> Open(const std::string& path, std::span<const uint8_t, 16> session_id);

  void Append(const StoredSample& sample);
  // Writes the chunk in progress (if any); with `sync`, fdatasync()s the file too.
  Result<void> Flush(bool sync);
  const WriterStats& stats() const { return stats_; }
  // The last write error (a full disk...), if any; samples appended since are counted as failed.
  const std::optional<Error>& failure() const { return failure_; }

 private:
  explicit SamplesWriter(ScopedFd fd, uint32_t next_sequence, uint64_t bytes);
  void Encode(const StoredSample& sample);
  void StartChunk();

  ScopedFd fd_;
  uint32_t sequence_;
  std::vector<uint8_t> payload_;
  uint32_t records_ = 0;
  uint64_t first_time_ = 0;
  uint64_t last_time_ = 0;
  // Delta-encoding state, reset at each chunk so chunks decode on their own.
  StoredSample previous_;
  bool fresh_ = true;
  WriterStats stats_;
  std::optional<Error> failure_;
};

// What a reader found wrong, chunk by chunk. Reading goes on past every problem.
struct FileProblem {
  uint64_t offset = 0;
  int64_t chunk = -1;  // chunk number if known
  std::string description;
};

struct ReadSummary {
  uint64_t samples = 0;
  uint64_t chunks = 0;
  uint64_t damaged_chunks = 0;
  uint64_t skipped_bytes = 0;
  std::vector<FileProblem> problems;
  bool header_ok = false;
  uint8_t session_id[16] = {};
};

// Reads every intact chunk of a samples file, calling `on_sample` for each sample. Damaged,
// torn and truncated chunks are reported in the summary and skipped; Result fails only when
// the file cannot be read at all.
Result<ReadSummary> ReadSamplesFile(const std::string& path,
                                    const std::function<void(const StoredSample&)>& on_sample);
// The same over bytes in memory (for the fuzzer and tests).
ReadSummary ReadSamples(std::span<const uint8_t> bytes,
                        const std::function<void(const StoredSample&)>& on_sample);

}  // namespace hvprof::store
