// The framing that the session's record files (samples.hvs, sched.hvs) share: a file header,
// then append-only chunks, each with a checksummed header (magic, sequence number, session id)
// and a checksummed payload that decodes on its own. What a payload holds is each file's own
// (samples_file.h, sched_file.h); this part writes chunks (buffering, cutting a chunk that could
// not be written off again, keeping room free), reads them back (damage, torn tails, foreign,
// repeated and missing chunks) and continues a file. docs/session-format.md has the bytes.
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

#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof::store {

inline constexpr uint32_t kMaxChunkRecords = 65536;
inline constexpr uint32_t kMaxChunkPayload = 8u << 20;

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

// Version 1's chunk header (samples.hvs of hvprof 0.1): the same fields without the session id.
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

// What tells one kind of chunk file from another, and how messages name it.
struct ChunkFormat {
  const char* file_magic;   // 8 bytes, no NUL
  uint32_t version;         // of the file header this hvprof writes; its chunks carry the session id
  uint32_t legacy_version;  // also read, with chunks without the session id (ChunkHeaderV1); 0: none
  uint32_t chunk_magic;
  const char* file_name;    // "samples.hvs"
  const char* what;         // the file in messages: "samples file"
  const char* records;      // its records in messages: "samples"
};

// What a reader found wrong, chunk by chunk. Reading goes on past every problem.
struct FileProblem {
  uint64_t offset = 0;
  int64_t chunk = -1;  // chunk number if known
  std::string description;
};

struct ChunkReadSummary {
  uint64_t records = 0;          // delivered by the decoder
  uint64_t chunks = 0;           // intact chunks read
  uint64_t damaged_chunks = 0;   // failed a checksum or decoding, or torn
  uint64_t foreign_chunks = 0;   // of another session: skipped
  uint64_t repeated_chunks = 0;  // a sequence number seen before: skipped
  uint64_t missing_chunks = 0;   // sequence numbers absent from the file (damage aside)
  uint64_t skipped_bytes = 0;
  uint64_t next_sequence = 0;    // one past the highest sequence number of this session's chunks
  uint64_t intact_end = 0;       // the offset after the last chunk that was whole
  // The span of the times the chunks' headers give (the earliest and the latest record time of
  // any chunk of this session); chunks_timed false when none gave one.
  uint64_t first_time_ns = 0;
  uint64_t last_time_ns = 0;
  bool chunks_timed = false;
  bool torn_tail = false;        // the file ends inside a chunk
  uint64_t torn_bytes = 0;       // with torn_tail: the bytes of that last chunk in the file
  bool foreign_file = false;     // the file header names another session than the one asked for
  std::vector<FileProblem> problems;
  bool header_ok = false;
  uint32_t version = 0;          // of the file header, when it is intact
  uint8_t session_id[16] = {};
};

// What a decoder made of the payload of one chunk.
struct ChunkDecode {
  bool ok = true;             // it holds the records its header counts, all well-formed
  uint64_t delivered = 0;     // records passed on
  uint64_t well_formed = 0;   // records before the first malformed one (all, when ok)
};
// Decodes the payload of one chunk whose checksums hold, of `records` records, and delivers
// them (a decoder may deliver those before a malformed one, or none of a malformed chunk).
using ChunkDecoder = std::function<ChunkDecode(std::span<const uint8_t> payload, uint32_t records)>;

// Reads every intact chunk of a chunk file of `format`, passing each payload to `decode`.
// Damaged, torn, truncated, foreign and repeated chunks are reported in the summary and skipped;
// gaps in the sequence are reported. A chunk belongs to the session of `session_id` when given,
// else to the file header's.
ChunkReadSummary ReadChunks(std::span<const uint8_t> bytes, const ChunkFormat& format, const ChunkDecoder& decode,
                            std::optional<std::span<const uint8_t, 16>> session_id);
// The same over the file at `path`; fails only when it cannot be read at all, or, with
// `refuse_foreign`, when its header names another session than `session_id` (nothing read).
Result<ChunkReadSummary> ReadChunkFile(const std::string& path, const ChunkFormat& format, const ChunkDecoder& decode,
                                       std::optional<std::span<const uint8_t, 16>> session_id,
                                       bool refuse_foreign = false);
// ReadChunkFile with the payloads checked and decoded by one thread per decoder: decoder `w` gets
// the w-th of as many runs of consecutive chunks, of about equal bytes, in file order. The
// summary is the same as one decoder's (the chunks' headers are checked first, on this thread).
// `verified`, when given, is told what the headers' checks found (the chunks' time span among it)
// before any payload is decoded.
using ChunksVerified = std::function<void(const ChunkReadSummary& headers)>;
Result<ChunkReadSummary> ReadChunkFileInParallel(const std::string& path, const ChunkFormat& format,
                                                 std::span<const ChunkDecoder> decoders,
                                                 std::optional<std::span<const uint8_t, 16>> session_id,
                                                 bool refuse_foreign = false, const ChunksVerified& verified = {});

struct ChunkWriterStats {
  uint64_t records = 0;   // in the file and the chunk in progress (an existing file's included)
  uint64_t chunks = 0;    // written to the file (an existing file's included)
  uint64_t bytes = 0;     // file size
  uint64_t failed = 0;    // records lost because the file could not be written
  uint64_t failed_chunks = 0;
  uint64_t torn_bytes = 0;  // a torn tail an earlier writer left, cut off by Open
};

// Appends chunks to a chunk file. The file's writer (SamplesWriter, SchedWriter) encodes each
// record and hands its bytes over; a record is never split between chunks.
class ChunkWriter {
 public:
  // Opens `path` for appending, creating it with a file header if it is new. An existing file
  // must be a current-version file of the same session; its chunks are passed to `existing`,
  // new chunks are numbered after its own, and a torn tail (an earlier writer died mid-chunk)
  // is cut off and counted in stats().torn_bytes. `format` must outlive the writer.
  static Result<ChunkWriter> Open(const std::string& path, const ChunkFormat& format,
                                  std::span<const uint8_t, 16> session_id, const ChunkDecoder& existing);

  // Whether the next record is the first of its chunk: it must then be encoded whole, without
  // reference to the records before it.
  bool starts_chunk() const { return records_ == 0; }
  // A record is encoded in place: Reserve gives room for one of at most `bytes` at the end of
  // the chunk in progress, the caller encodes it there, and Commit adds it (`end` is one past its
  // last byte) as a record of time `time_ns`, writing the chunk when it is full. Nothing is
  // added once the file is broken (counted as failed).
  uint8_t* Reserve(size_t bytes) {
    if (chunk_.size() - used_ < bytes) chunk_.resize(used_ + bytes);
    return chunk_.data() + used_;
  }
  void Commit(const uint8_t* end, uint64_t time_ns);
  // Writes the chunk in progress (if any); with `sync`, fdatasync()s the file too. A chunk that
  // cannot be written (a full disk...) is cut off the file again and its records counted as
  // failed; the next chunk is tried afresh, so writing resumes once there is space.
  Result<void> Flush(bool sync);

  const ChunkWriterStats& stats() const { return stats_; }
  uint64_t pending() const { return records_; }
  uint32_t next_sequence() const { return sequence_; }
  void SkipTo(uint32_t sequence) { sequence_ = std::max(sequence_, sequence); }
  const std::optional<Error>& failure() const { return failure_; }
  const std::optional<Error>& last_failure() const { return last_failure_; }
  void set_keep_free(uint64_t bytes) { keep_free_ = bytes; }

 private:
  ChunkWriter(ScopedFd fd, const ChunkFormat& format, std::span<const uint8_t, 16> session_id, uint32_t next_sequence,
              uint64_t bytes);

  ScopedFd fd_;
  const ChunkFormat* format_;
  uint8_t session_id_[16];
  uint32_t sequence_;
  bool broken_ = false;  // a failed write could not be cut off: nothing more is appended
  // The chunk in progress: room for its header, then its payload (one write, no copy); its
  // first used_ bytes hold them, the rest is room for the next records.
  std::vector<uint8_t> chunk_;
  size_t used_ = 0;
  uint32_t records_ = 0;
  uint64_t first_time_ = 0;
  uint64_t last_time_ = 0;
  ChunkWriterStats stats_;
  std::optional<Error> failure_;
  std::optional<Error> last_failure_;
  uint64_t keep_free_ = 0;
};

// What a record file's writer (SamplesWriter, SchedWriter) has of its chunk writer.
class RecordFileWriter {
 public:
  // Records added but not yet in the file (the chunk in progress).
  uint64_t pending() const { return chunks_.pending(); }
  // The sequence number the next chunk will carry.
  uint32_t next_sequence() const { return chunks_.next_sequence(); }
  // Numbers the next chunk at least `sequence` (after chunks an earlier writer recorded but
  // the file lost), so that the loss stays a visible gap.
  void SkipTo(uint32_t sequence) { chunks_.SkipTo(sequence); }
  // The latest write error, while writes fail; cleared by the next chunk written.
  const std::optional<Error>& failure() const { return chunks_.failure(); }
  // The latest write error ever, kept after writing works again.
  const std::optional<Error>& last_failure() const { return chunks_.last_failure(); }
  // A chunk is not written when it would leave less than `bytes` free on the filesystem
  // (kNoSpace, counted as failed like any write error): room kept for the session's metadata.
  void set_keep_free(uint64_t bytes) { chunks_.set_keep_free(bytes); }
  const ChunkWriterStats& chunk_stats() const { return chunks_.stats(); }

 protected:
  explicit RecordFileWriter(ChunkWriter chunks) : chunks_(std::move(chunks)) {}
  ChunkWriter chunks_;
};

// A session id as 32 hex digits, and back (nothing for anything else).
std::string SessionIdHex(std::span<const uint8_t, 16> id);
std::optional<std::array<uint8_t, 16>> ParseSessionId(std::string_view hex);
// The session id a reader of `path` checks its chunks against: none for an empty `hex`, an error
// naming the file for anything but 32 hex digits.
Result<std::optional<std::array<uint8_t, 16>>> SessionIdToCheck(const std::string& path, std::string_view hex);

}  // namespace hvprof::store
