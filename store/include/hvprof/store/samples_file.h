// The raw-sample file of a session (samples.hvs): append-only chunks, each checksummed and
// decodable on its own, so a crash loses at most the chunk being written and a reader can skip
// a damaged chunk and read the rest (the framing is chunk_file.h's). The byte format is in
// docs/session-format.md.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "hvprof/base/result.h"
#include "hvprof/facts/sample.h"
#include "hvprof/store/chunk_file.h"

namespace hvprof::store {

inline constexpr char kSamplesFileMagic[8] = {'H', 'V', 'P', 'R', 'O', 'F', 'S', '1'};
// Version 2 chunks carry the session id; version 1 files (hvprof 0.1) are still read.
inline constexpr uint32_t kSamplesFileVersion = 2;
inline constexpr uint32_t kChunkMagic = 0x4B435648;  // "HVCK"
inline constexpr uint32_t kMaxFrames = 64;

// One sample as the store keeps it.
struct StoredSample {
  uint64_t ip = 0;
  uint64_t time_ns = 0;
  uint64_t period = 0;
  uint32_t pid = kNoPid;
  uint32_t tid = kNoTid;
  uint16_t domain = 0;
  uint16_t vcpu = 0;
  uint16_t pcpu = 0;
  uint8_t mode = sample_mode::kUser;  // sample_mode::
  uint8_t event = 0;
  uint16_t flags = 0;
  std::span<const uint64_t> frames;  // innermost first

  // Sets domain, vcpu, pcpu, mode and event with one 8-byte store. A sample built field by field
  // in one file and encoded in another (SamplesWriter::Append) has these reloaded by wider loads
  // than the stores that wrote them, which the CPU cannot forward from its store buffer: a stall
  // on every sample, a fifth of the agent's time per sample (bench/agent_bench).
  void SetPlace(uint16_t in_domain, uint16_t in_vcpu, uint16_t in_pcpu, uint8_t in_mode, uint8_t in_event) {
    const uint64_t word = uint64_t{in_domain} | uint64_t{in_vcpu} << 16 | uint64_t{in_pcpu} << 32 |
                          uint64_t{in_mode} << 48 | uint64_t{in_event} << 56;
    std::memcpy(&domain, &word, sizeof word);
  }
};
static_assert(offsetof(StoredSample, vcpu) == offsetof(StoredSample, domain) + 2 &&
                  offsetof(StoredSample, pcpu) == offsetof(StoredSample, domain) + 4 &&
                  offsetof(StoredSample, mode) == offsetof(StoredSample, domain) + 6 &&
                  offsetof(StoredSample, event) == offsetof(StoredSample, domain) + 7 &&
                  std::endian::native == std::endian::little,
              "SetPlace writes the five fields as one little-endian word");

struct WriterStats {
  uint64_t samples = 0;   // in the file and the chunk in progress (an existing file's included)
  uint64_t chunks = 0;    // written to the file (an existing file's included)
  uint64_t bytes = 0;     // file size
  uint64_t failed = 0;    // samples lost because the file could not be written
  uint64_t failed_chunks = 0;
  uint64_t torn_bytes = 0;  // a torn tail an earlier writer left, cut off by Open
};

class SamplesWriter : public RecordFileWriter {
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
  Result<void> Flush(bool sync) { return chunks_.Flush(sync); }
  WriterStats stats() const;

 private:
  explicit SamplesWriter(ChunkWriter chunks) : RecordFileWriter(std::move(chunks)) {}

  // Delta-encoding state, reset at each chunk so chunks decode on their own.
  StoredSample previous_;
};

struct ReadSummary : ChunkReadSummary {
  uint64_t samples = 0;  // delivered (= records)
};

// Reads every intact chunk of a samples file, calling `on_sample` for each sample. Damaged,
// torn, truncated, foreign and repeated chunks are reported in the summary and skipped; gaps
// in the sequence are reported. A chunk belongs to the session of `session_id` when given, else
// to the file header's. Result fails only when the file cannot be read at all.
Result<ReadSummary> ReadSamplesFile(const std::string& path,
                                    const std::function<void(const StoredSample&)>& on_sample,
                                    std::optional<std::span<const uint8_t, 16>> session_id = std::nullopt);
// ReadSamplesFile with the caller's chunk decoders, one thread each (ReadChunkFileInParallel),
// and `verified` told of the chunks' headers before they are decoded.
Result<ReadSummary> ReadSamplesFileDecoding(const std::string& path, std::span<const ChunkDecoder> decoders,
                                            std::optional<std::span<const uint8_t, 16>> session_id = std::nullopt,
                                            const ChunksVerified& verified = {});
// The same over bytes in memory (for the fuzzer and tests).
ReadSummary ReadSamples(std::span<const uint8_t> bytes,
                        const std::function<void(const StoredSample&)>& on_sample,
                        std::optional<std::span<const uint8_t, 16>> session_id = std::nullopt);

}  // namespace hvprof::store
