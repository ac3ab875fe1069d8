#include "hvprof/store/samples_file.h"

#include <algorithm>

#include "varint.h"

namespace hvprof::store {
namespace {

using namespace detail;  // the codings (varint.h)

// Record tag bits: which fields differ from the previous record of the chunk.
constexpr uint8_t kNewPlace = 1u << 0;   // domain, vcpu, pcpu
constexpr uint8_t kNewTask = 1u << 1;    // pid, tid
constexpr uint8_t kNewKind = 1u << 2;    // mode, event, flags
constexpr uint8_t kNewPeriod = 1u << 3;
constexpr uint8_t kHasFrames = 1u << 4;
constexpr uint8_t kKnownTags = 0x1F;

constexpr ChunkFormat kSamplesFormat{kSamplesFileMagic, kSamplesFileVersion, 1, kChunkMagic,
                                     "samples.hvs",     "samples file",      "samples"};

// Decodes one verified chunk payload. Returns false (with what was decoded so far delivered)
// if the payload does not hold `records` well-formed records.
bool DecodeChunk(std::span<const uint8_t> payload, uint32_t records,
                 const std::function<void(const StoredSample&)>& on_sample, uint64_t* decoded) {
  Cursor in(payload);
  StoredSample previous;
  uint64_t frames[kMaxFrames];
  for (uint32_t r = 0; r < records; ++r) {
    StoredSample sample = previous;
    sample.frames = {};
    const uint8_t tag = in.Byte();
    if ((tag & ~kKnownTags) != 0 || (r == 0 && (tag & (kNewPlace | kNewTask | kNewKind | kNewPeriod)) !=
                                                   (kNewPlace | kNewTask | kNewKind | kNewPeriod))) {
      return false;
    }
    sample.ip = previous.ip + static_cast<uint64_t>(UnZigZag(in.Varint()));
    sample.time_ns = previous.time_ns + static_cast<uint64_t>(UnZigZag(in.Varint()));
    if (tag & kNewPlace) {
      const uint64_t domain = in.Varint(), vcpu = in.Varint(), pcpu = in.Varint();
      if (domain > 0xFFFF || vcpu > 0xFFFF || pcpu > 0xFFFF) return false;
      sample.domain = static_cast<uint16_t>(domain);
      sample.vcpu = static_cast<uint16_t>(vcpu);
      sample.pcpu = static_cast<uint16_t>(pcpu);
    }
    if (tag & kNewTask) {
      const uint64_t pid = in.Varint(), tid = in.Varint();
      if (pid > 0x100000000ULL || tid > 0x100000000ULL) return false;
      sample.pid = static_cast<uint32_t>(pid - 1);  // stored plus one, so "none" is 0
      sample.tid = static_cast<uint32_t>(tid - 1);
    }
    if (tag & kNewKind) {
      sample.mode = in.Byte();
      sample.event = in.Byte();
      const uint64_t flags = in.Varint();
      if (sample.mode > 2 || flags > 0xFFFF) return false;
      sample.flags = static_cast<uint16_t>(flags);
    }
    if (tag & kNewPeriod) sample.period = in.Varint();
    if (tag & kHasFrames) {
      const uint64_t count = in.Varint();
      if (count == 0 || count > kMaxFrames) return false;
      for (uint64_t i = 0; i < count; ++i) {
        frames[i] = sample.ip + static_cast<uint64_t>(UnZigZag(in.Varint()));
      }
      sample.frames = std::span<const uint64_t>(frames, count);
    }
    if (!in.ok()) return false;
    on_sample(sample);
    ++*decoded;
    previous = sample;
  }
  return in.done();
}

// Samples before a malformed one are delivered.
ChunkDecoder SampleDecoder(const std::function<void(const StoredSample&)>& on_sample) {
  return [&on_sample](std::span<const uint8_t> payload, uint32_t records) {
    ChunkDecode result;
    result.ok = DecodeChunk(payload, records, on_sample, &result.delivered);
    result.well_formed = result.delivered;
    return result;
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
  // The record is encoded on the stack, then appended in one copy: room for the largest one
  // (tag, mode and event; ten varints; the frames).
  uint8_t record[3 + kMaxVarint * (10 + kMaxFrames)];
  uint8_t* out = record;
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
  chunks_.Append(std::span<const uint8_t>(record, static_cast<size_t>(out - record)), sample.time_ns);
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
  HVPROF_TRY(read, ReadChunkFile(path, kSamplesFormat, SampleDecoder(on_sample), session_id));
  ReadSummary summary;
  static_cast<ChunkReadSummary&>(summary) = std::move(read);
  summary.samples = summary.records;
  return summary;
}

}  // namespace hvprof::store

namespace hvprof::store {

Result<ReadSummary> ReadSamplesFileInParallel(const std::string& path,
                                              std::span<const std::function<void(const StoredSample&)>> on_sample,
                                              std::optional<std::span<const uint8_t, 16>> session_id) {
  std::vector<ChunkDecoder> decoders;
  decoders.reserve(on_sample.size());
  for (const auto& consumer : on_sample) decoders.push_back(SampleDecoder(consumer));
  HVPROF_TRY(read, ReadChunkFileInParallel(path, kSamplesFormat, decoders, session_id));
  ReadSummary summary;
  static_cast<ChunkReadSummary&>(summary) = std::move(read);
  summary.samples = summary.records;
  return summary;
}

}  // namespace hvprof::store
