// The raw-sample file of a session (samples.hvs): append-only chunks, each checksummed and
// decodable on its own, so a crash loses at most the chunk being written and a reader can skip
// a damaged chunk and read the rest. The byte format is in docs/session-format.md.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/error.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof::store {

inline constexpr char kSamplesFileMagic[8] = {'H', 'V', 'P', 'R', 'O', 'F', 'S', '1'};
// Version 2 chunks carry the session id; version 1 files (hvprof 0.1) are still read.
inline constexpr uint32_t kSamplesFileVersion = 2;
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

// A chunk's header (version 2). Its session id and sequence number tie it to its file: a
// reader skips chunks of another session and repeated ones, and names gaps.
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
  uint8_t session_id[16];  // the file header's
  uint32_t header_crc;     // crc32 of the bytes before this field
  uint32_t reserved;
};
static_assert(sizeof(ChunkHeader) == 64);

// Version 1's chunk header: the same fields without the session id.
struct ChunkHeaderV1 {
  uint32_t magic;
  uint16_t version;
  uint16_t header_bytes;
  uint32_t sequence;
  uint32_t records;
  uint32_t payload_bytes;
  uint32_t payload_crc;
  uint64_t first_time_ns;
  uint64_t last_time_ns;
  uint32_t header_crc;
  uint32_t reserved;
};
static_assert(sizeof(ChunkHeaderV1) == 48);

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
  uint64_t samples = 0;   // in the file and the chunk in progress (an existing file's included)
  uint64_t chunks = 0;    // written to the file (an existing file's included)
  uint64_t bytes = 0;     // file size
  uint64_t failed = 0;    // samples lost because the file could not be written
  uint64_t failed_chunks = 0;
  uint64_t torn_bytes = 0;  // a torn tail an earlier writer left, cut off by Open
};

class SamplesWriter {
 public:
  // Opens `path` for appending, creating it with a file header if it is new. An existing file
  // must be a version 2 file of the same session; its samples are passed to `on_existing`
  // (if given), new chunks are numbered after its own, and a torn tail (an earlier writer died
  // mid-chunk) is cut off and counted in stats().torn_bytes.
  static Result<SamplesWriter> Open(const std::string& path, std::span<const uint8_t, 16> session_id,
                                    const std::function<void(const StoredSample&)>& on_existing = {});

  void Append(const StoredSample& sample);
  // Writes the chunk in progress (if any); with `sync`, fdatasync()s the file too. A chunk that
  // cannot be written (a full disk...) is cut off the file again and its samples counted as
  // failed; the next chunk is tried afresh, so writing resumes once there is space.
  Result<void> Flush(bool sync);
  const WriterStats& stats() const { return stats_; }
  // Samples appended but not yet in the file (the chunk in progress).
  uint64_t pending() const { return records_; }
  // The sequence number the next chunk will carry.
  uint32_t next_sequence() const { return sequence_; }
  // Numbers the next chunk at least `sequence` (after chunks an earlier writer recorded but
  // the file lost), so that the loss stays a visible gap.
  void SkipTo(uint32_t sequence) { sequence_ = std::max(sequence_, sequence); }
  // The latest write error, while writes fail; cleared by the next chunk written.
  const std::optional<Error>& failure() const { return failure_; }
  // The latest write error ever, kept after writing works again.
  const std::optional<Error>& last_failure() const { return last_failure_; }
  // A chunk is not written when it would leave less than `bytes` free on the filesystem
  // (kNoSpace, counted as failed like any write error): room kept for the session's metadata.
  void set_keep_free(uint64_t bytes) { keep_free_ = bytes; }

 private:
  explicit SamplesWriter(ScopedFd fd, std::span<const uint8_t, 16> session_id, uint32_t next_sequence, uint64_t bytes);
  void Encode(const StoredSample& sample);
  void StartChunk();

  ScopedFd fd_;
  uint8_t session_id_[16];
  uint32_t sequence_;
  bool broken_ = false;  // a failed write could not be cut off: nothing more is appended
  std::vector<uint8_t> payload_;
  uint32_t records_ = 0;
  uint64_t first_time_ = 0;
  uint64_t last_time_ = 0;
  // Delta-encoding state, reset at each chunk so chunks decode on their own.
  StoredSample previous_;
  bool fresh_ = true;
  WriterStats stats_;
  std::optional<Error> failure_;
  std::optional<Error> last_failure_;
  uint64_t keep_free_ = 0;
};

// What a reader found wrong, chunk by chunk. Reading goes on past every problem.
struct FileProblem {
  uint64_t offset = 0;
  int64_t chunk = -1;  // chunk number if known
  std::string description;
};

struct ReadSummary {
  uint64_t samples = 0;
  uint64_t chunks = 0;           // intact chunks read
  uint64_t damaged_chunks = 0;   // failed a checksum or decoding, or torn
  uint64_t foreign_chunks = 0;   // of another session: skipped
  uint64_t repeated_chunks = 0;  // a sequence number seen before: skipped
  uint64_t missing_chunks = 0;   // sequence numbers absent from the file (damage aside)
  uint64_t skipped_bytes = 0;
  uint64_t next_sequence = 0;    // one past the highest sequence number of this session's chunks
  uint64_t intact_end = 0;       // the offset after the last chunk that was whole
  bool torn_tail = false;        // the file ends inside a chunk
  std::vector<FileProblem> problems;
  bool header_ok = false;
  uint32_t version = 0;          // of the file header, when it is intact
  uint8_t session_id[16] = {};
};

// Reads every intact chunk of a samples file, calling `on_sample` for each sample. Damaged,
// torn, truncated, foreign and repeated chunks are reported in the summary and skipped; gaps
// in the sequence are reported. A chunk belongs to the session of `session_id` when given, else
// to the file header's. Result fails only when the file cannot be read at all.
Result<ReadSummary> ReadSamplesFile(const std::string& path,
                                    const std::function<void(const StoredSample&)>& on_sample,
                                    std::optional<std::span<const uint8_t, 16>> session_id = std::nullopt);
// The same over bytes in memory (for the fuzzer and tests).
ReadSummary ReadSamples(std::span<const uint8_t> bytes,
                        const std::function<void(const StoredSample&)>& on_sample,
                        std::optional<std::span<const uint8_t, 16>> session_id = std::nullopt);

// A session id as 32 hex digits, and back (nothing for anything else).
std::string SessionIdHex(std::span<const uint8_t, 16> id);
std::optional<std::array<uint8_t, 16>> ParseSessionId(std::string_view hex);

}  // namespace hvprof::store
