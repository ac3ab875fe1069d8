#include "hvprof/store/samples_file.h"

#include <algorithm>

#include "samples_decode.h"
#include "hvprof/base/varint.h"

namespace hvprof::store {
namespace {

using namespace detail;
using namespace varint;  // the codings (hvprof/base/varint.h)

constexpr ChunkFormat kSamplesFormat{kSamplesFileMagic, kSamplesFileVersion, 1, kChunkMagic,
                                     "samples.hvs",     "samples file",      "samples"};

// Samples before a malformed one are delivered.
ChunkDecoder SampleDecoder(const std::function<void(const StoredSample&)>& on_sample) {
  return [&on_sample](std::span<const uint8_t> payload, uint32_t records) {
    return DecodeSamples(payload, records, on_sample);
  };
}

}  // namespace

Result<SamplesWriter> SamplesWriter::Open(const std::string& path, std::span<const uint8_t, 16> session_id,
                                          const std::function<void(const StoredSample&)>& on_existing) {
  const std::function<void(const StoredSample&)> ignore = [](const StoredSample&) {};
  HVPROF_TRY(chunks, ChunkWriter::Open(path, kSamplesFormat, session_id, SampleDecoder(on_existing ? on_existing : ignore)));
  return SamplesWriter(std::move(chunks));
}

WriterStats SamplesWriter::stats() const {
  const ChunkWriterStats& s = chunks_.stats();
  return {s.records, s.chunks, s.bytes, s.failed, s.failed_chunks, s.torn_bytes};
}

void SamplesWriter::Append(const StoredSample& sample) {
  const bool fresh = chunks_.starts_chunk();
  const StoredSample& p = previous_;
  uint8_t tag = 0;
  if (fresh || sample.domain != p.domain || sample.vcpu != p.vcpu || sample.pcpu != p.pcpu) tag |= kNewPlace;
  if (fresh || sample.pid != p.pid || sample.tid != p.tid) tag |= kNewTask;
  if (fresh || sample.mode != p.mode || sample.event != p.event || sample.flags != p.flags) tag |= kNewKind;
  if (fresh || sample.period != p.period) tag |= kNewPeriod;
  const size_t nframes = std::min<size_t>(sample.frames.size(), kMaxFrames);
  if (nframes != 0) tag |= kHasFrames;
  const uint64_t previous_ip = fresh ? 0 : p.ip;
  const uint64_t previous_time = fresh ? 0 : p.time_ns;
  // The record is encoded in place, at the end of the chunk in progress: room for the largest
  // one (tag, mode and event; ten varints; the frames).
  uint8_t* out = chunks_.Reserve(3 + kMaxVarint * (10 + kMaxFrames));
  *out++ = tag;
  out = PutVarint(out, ZigZag(static_cast<int64_t>(sample.ip - previous_ip)));
  out = PutVarint(out, ZigZag(static_cast<int64_t>(sample.time_ns - previous_time)));
  if (tag & kNewPlace) {
    out = PutVarint(out, sample.domain);
    out = PutVarint(out, sample.vcpu);
    out = PutVarint(out, sample.pcpu);
  }
  if (tag & kNewTask) {
    out = PutVarint(out, uint64_t{sample.pid} + 1);
    out = PutVarint(out, uint64_t{sample.tid} + 1);
  }
  if (tag & kNewKind) {
    *out++ = sample.mode;
    *out++ = sample.event;
    out = PutVarint(out, sample.flags);
  }
  if (tag & kNewPeriod) out = PutVarint(out, sample.period);
  if (tag & kHasFrames) {
    out = PutVarint(out, nframes);
    for (size_t i = 0; i < nframes; ++i) {
      out = PutVarint(out, ZigZag(static_cast<int64_t>(sample.frames[i] - sample.ip)));
    }
  }
  previous_ = sample;
  previous_.frames = {};
  chunks_.Commit(out, sample.time_ns);
}

ReadSummary ReadSamples(std::span<const uint8_t> bytes, const std::function<void(const StoredSample&)>& on_sample,
                        std::optional<std::span<const uint8_t, 16>> session_id) {
  ReadSummary summary;
  static_cast<ChunkReadSummary&>(summary) = ReadChunks(bytes, kSamplesFormat, SampleDecoder(on_sample), session_id);
  summary.samples = summary.records;
  return summary;
}

Result<ReadSummary> ReadSamplesFile(const std::string& path, const std::function<void(const StoredSample&)>& on_sample,
                                    std::optional<std::span<const uint8_t, 16>> session_id) {
  const ChunkDecoder decoder = SampleDecoder(on_sample);
  return ReadSamplesFileDecoding(path, std::span<const ChunkDecoder>(&decoder, 1), session_id);
}

Result<ReadSummary> ReadSamplesFileDecoding(const std::string& path, std::span<const ChunkDecoder> decoders,
                                            std::optional<std::span<const uint8_t, 16>> session_id,
                                            const ChunksVerified& verified) {
  HVPROF_TRY(read, ReadChunkFileInParallel(path, kSamplesFormat, decoders, session_id, false, verified));
  ReadSummary summary;
  static_cast<ChunkReadSummary&>(summary) = std::move(read);
  summary.samples = summary.records;
  return summary;
}

}  // namespace hvprof::store
