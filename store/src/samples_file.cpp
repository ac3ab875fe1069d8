#include "hvprof/store/samples_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "hvprof/base/files.h"

namespace hvprof::store {
namespace {

// Record tag bits: which fields differ from the previous record of the chunk.
constexpr uint8_t kNewPlace = 1u << 0;   // domain, vcpu, pcpu
constexpr uint8_t kNewTask = 1u << 1;    // pid, tid
constexpr uint8_t kNewKind = 1u << 2;    // mode, event, flags
constexpr uint8_t kNewPeriod = 1u << 3;
constexpr uint8_t kHasFrames = 1u << 4;
constexpr uint8_t kKnownTags = 0x1F;
constexpr size_t kChunkTarget = 1u << 20;  // close a chunk after about this many bytes

uint32_t Crc(const void* data, size_t bytes) {
  return static_cast<uint32_t>(::crc32(0, static_cast<const Bytef*>(data), static_cast<uInt>(bytes)));
}

uint64_t ZigZag(int64_t value) {
  return (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
}
int64_t UnZigZag(uint64_t value) {
  return static_cast<int64_t>(value >> 1) ^ -static_cast<int64_t>(value & 1);
}

void PutVarint(std::vector<uint8_t>& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<uint8_t>(value));
}

// A bounded reader over one chunk's payload; any overrun marks it failed.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool ok() const { return ok_; }
  bool done() const { return position_ == bytes_.size(); }
  uint8_t Byte() {
    if (position_ >= bytes_.size()) return Fail();
    return bytes_[position_++];
  }
  uint64_t Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ >= bytes_.size()) return Fail();
      const uint8_t byte = bytes_[position_++];
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return Fail();
  }

 private:
  uint8_t Fail() {
    ok_ = false;
    position_ = bytes_.size();
    return 0;
  }
  std::span<const uint8_t> bytes_;
  size_t position_ = 0;
  bool ok_ = true;
};

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

}  // namespace

SamplesWriter::SamplesWriter(ScopedFd fd, uint32_t next_sequence, uint64_t bytes)
    : fd_(std::move(fd)), sequence_(next_sequence) {
  stats_.bytes = bytes;
  payload_.reserve(kChunkTarget + 4096);
}

Result<SamplesWriter> SamplesWriter::Open(const std::string& path,
                                          std::span<const uint8_t, 16> session_id) {
  HVPROF_TRY(fd, OpenRegularFile(path, O_RDWR | O_CREAT | O_APPEND, 0644));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "fstat " + path);
  uint32_t next_sequence = 0;
  if (st.st_size == 0) {
    FileHeader header{};
    std::memcpy(header.magic, kSamplesFileMagic, sizeof header.magic);
    header.version = kSamplesFileVersion;
    header.header_bytes = sizeof header;
    std::memcpy(header.session_id, session_id.data(), 16);
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    header.created_ns = static_cast<uint64_t>(now.tv_sec) * 1000000000ULL + static_cast<uint64_t>(now.tv_nsec);
    HVPROF_TRYV(WriteAll(fd.get(), std::as_bytes(std::span(&header, 1)), path));
    return SamplesWriter(std::move(fd), 0, sizeof header);
  }
  // Appending to an earlier run's file (a restarted agent): number chunks after its own.
  auto summary = ReadSamplesFile(path, [](const StoredSample&) {});
  if (!summary) return summary.error();
  if (!summary.value().header_ok) {
    return MakeError(ErrorKind::kCorrupt, "{} is not an hvprof samples file; move it away first",
                     path);
  }
  next_sequence = static_cast<uint32_t>(summary.value().chunks + summary.value().damaged_chunks);
  return SamplesWriter(std::move(fd), next_sequence, static_cast<uint64_t>(st.st_size));
}

void SamplesWriter::Append(const StoredSample& sample) {
  if (failure_) {
    ++stats_.failed;
    return;
  }
  Encode(sample);
  ++stats_.samples;
  if (payload_.size() >= kChunkTarget || records_ >= kMaxChunkRecords) {
    if (auto flushed = Flush(false); !flushed) failure_ = flushed.error();
  }
}

void SamplesWriter::Encode(const StoredSample& sample) {
  if (records_ == 0) {
    first_time_ = sample.time_ns;
    fresh_ = true;
  }
  first_time_ = std::min(first_time_, sample.time_ns);
  last_time_ = std::max(last_time_, sample.time_ns);
  const StoredSample& p = previous_;
  uint8_t tag = 0;
  if (fresh_ || sample.domain != p.domain || sample.vcpu != p.vcpu || sample.pcpu != p.pcpu) tag |= kNewPlace;
  if (fresh_ || sample.pid != p.pid || sample.tid != p.tid) tag |= kNewTask;
  if (fresh_ || sample.mode != p.mode || sample.event != p.event || sample.flags != p.flags) tag |= kNewKind;
  if (fresh_ || sample.period != p.period) tag |= kNewPeriod;
  const size_t nframes = std::min<size_t>(sample.frames.size(), kMaxFrames);
  if (nframes != 0) tag |= kHasFrames;
  const uint64_t previous_ip = fresh_ ? 0 : p.ip;
  const uint64_t previous_time = fresh_ ? 0 : p.time_ns;
  payload_.push_back(tag);
  PutVarint(payload_, ZigZag(static_cast<int64_t>(sample.ip - previous_ip)));
  PutVarint(payload_, ZigZag(static_cast<int64_t>(sample.time_ns - previous_time)));
  if (tag & kNewPlace) {
    PutVarint(payload_, sample.domain);
    PutVarint(payload_, sample.vcpu);
    PutVarint(payload_, sample.pcpu);
  }
  if (tag & kNewTask) {
    PutVarint(payload_, uint64_t{sample.pid} + 1);
    PutVarint(payload_, uint64_t{sample.tid} + 1);
  }
  if (tag & kNewKind) {
    payload_.push_back(sample.mode);
    payload_.push_back(sample.event);
    PutVarint(payload_, sample.flags);
  }
  if (tag & kNewPeriod) PutVarint(payload_, sample.period);
  if (tag & kHasFrames) {
    PutVarint(payload_, nframes);
    for (size_t i = 0; i < nframes; ++i) {
      PutVarint(payload_, ZigZag(static_cast<int64_t>(sample.frames[i] - sample.ip)));
    }
  }
  previous_ = sample;
  previous_.frames = {};
  fresh_ = false;
  ++records_;
}

Result<void> SamplesWriter::Flush(bool sync) {
  if (failure_) return *failure_;
  if (records_ != 0) {
    ChunkHeader header{};
    header.magic = kChunkMagic;
    header.version = 1;
    header.header_bytes = sizeof header;
    header.sequence = sequence_;
    header.records = records_;
    header.payload_bytes = static_cast<uint32_t>(payload_.size());
    header.payload_crc = Crc(payload_.data(), payload_.size());
    header.first_time_ns = first_time_;
    header.last_time_ns = last_time_;
    header.header_crc = Crc(&header, offsetof(ChunkHeader, header_crc));
    // One write for header and payload, so a crash tears at most this chunk.
    std::vector<uint8_t> buffer(sizeof header + payload_.size());
    std::memcpy(buffer.data(), &header, sizeof header);
    std::memcpy(buffer.data() + sizeof header, payload_.data(), payload_.size());
    auto written = WriteAll(fd_.get(), std::as_bytes(std::span(buffer)), "samples file");
    if (!written) {
      stats_.failed += records_;
      stats_.samples -= records_;
      failure_ = written.error();
      payload_.clear();
      records_ = 0;
      return *failure_;
    }
    stats_.bytes += buffer.size();
    ++stats_.chunks;
    ++sequence_;
    payload_.clear();
    records_ = 0;
  }
  if (sync && ::fdatasync(fd_.get()) != 0) {
    failure_ = ErrnoError(errno, "cannot sync the samples file");
    return *failure_;
  }
  return Ok();
}

ReadSummary ReadSamples(std::span<const uint8_t> bytes,
                        const std::function<void(const StoredSample&)>& on_sample) {
  ReadSummary summary;
  uint64_t position = 0;
  auto problem = [&](uint64_t offset, int64_t chunk, std::string description) {
    if (summary.problems.size() < 100) summary.problems.push_back({offset, chunk, std::move(description)});
  };
  if (bytes.size() >= sizeof(FileHeader)) {
    FileHeader header;
    std::memcpy(&header, bytes.data(), sizeof header);
    if (std::memcmp(header.magic, kSamplesFileMagic, 8) == 0 && header.version == kSamplesFileVersion &&
        header.header_bytes == sizeof header) {
      summary.header_ok = true;
      std::memcpy(summary.session_id, header.session_id, 16);
      position = sizeof header;
    }
  }
  if (!summary.header_ok) {
    problem(0, -1, bytes.empty() ? "the file is empty" : "the file header is missing or damaged");
  }
  int64_t expected_sequence = 0;
  while (position < bytes.size()) {
    const uint64_t start = position;
    ChunkHeader header;
    const bool whole_header = bytes.size() - position >= sizeof header;
    if (whole_header) std::memcpy(&header, bytes.data() + position, sizeof header);
    const bool header_valid = whole_header && header.magic == kChunkMagic &&
                              header.header_crc == Crc(&header, offsetof(ChunkHeader, header_crc)) &&
                              header.header_bytes == sizeof header && header.records <= kMaxChunkRecords &&
                              header.payload_bytes <= kMaxChunkPayload;
    if (!header_valid) {
      if (!whole_header) {
        problem(start, expected_sequence, fmt::format("{} bytes at the end are a torn chunk header (the writer stopped mid-chunk)",
                                                      bytes.size() - position));
        summary.skipped_bytes += bytes.size() - position;
        ++summary.damaged_chunks;
        break;
      }
      // Resynchronise: find the next chunk header whose own checksum holds.
      uint64_t next = position + 1;
      for (; next + sizeof header <= bytes.size(); ++next) {
        uint32_t magic;
        std::memcpy(&magic, bytes.data() + next, sizeof magic);
        if (magic != kChunkMagic) continue;
        ChunkHeader candidate;
        std::memcpy(&candidate, bytes.data() + next, sizeof candidate);
        if (candidate.header_crc == Crc(&candidate, offsetof(ChunkHeader, header_crc))) break;
      }
      if (next + sizeof header > bytes.size()) next = bytes.size();
      problem(start, expected_sequence,
              fmt::format("damaged chunk header; skipped {} bytes to the next intact chunk", next - start));
      summary.skipped_bytes += next - start;
      ++summary.damaged_chunks;
      position = next;
      ++expected_sequence;
      continue;
    }
    position += sizeof header;
    if (bytes.size() - position < header.payload_bytes) {
      problem(start, header.sequence,
              fmt::format("chunk {} is truncated: {} of its {} bytes are in the file (the writer "
                          "stopped mid-chunk); its {} samples are lost",
                          header.sequence, bytes.size() - position, header.payload_bytes, header.records));
      summary.skipped_bytes += bytes.size() - start;
      ++summary.damaged_chunks;
      break;
    }
    const auto payload = bytes.subspan(position, header.payload_bytes);
    position += header.payload_bytes;
    expected_sequence = static_cast<int64_t>(header.sequence) + 1;
    if (Crc(payload.data(), payload.size()) != header.payload_crc) {
      problem(start, header.sequence,
              fmt::format("chunk {} fails its checksum (damaged); its {} samples are skipped",
                          header.sequence, header.records));
      summary.skipped_bytes += sizeof header + header.payload_bytes;
      ++summary.damaged_chunks;
      continue;
    }
    uint64_t decoded = 0;
    if (!DecodeChunk(payload, header.records, on_sample, &decoded)) {
      problem(start, header.sequence,
              fmt::format("chunk {} has a valid checksum but malformed records after {} of {}",
                          header.sequence, decoded, header.records));
      ++summary.damaged_chunks;
    } else {
      ++summary.chunks;
    }
    summary.samples += decoded;
  }
  return summary;
}

Result<ReadSummary> ReadSamplesFile(const std::string& path,
                                    const std::function<void(const StoredSample&)>& on_sample) {
  HVPROF_TRY(fd, OpenRegularFile(path, O_RDONLY));
  HVPROF_TRY(mapping, ScopedMmap::MapFileReadOnly(fd.get()));
  const auto* data = static_cast<const uint8_t*>(mapping.data());
  return ReadSamples(std::span<const uint8_t>(data, mapping.size()), on_sample);
}

}  // namespace hvprof::store
