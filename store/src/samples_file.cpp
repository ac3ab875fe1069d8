#include "hvprof/store/samples_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "hvprof/base/files.h"
#include "hvprof/base/probes.h"

HVPROF_PROBE_SEMAPHORE(chunk__written);
HVPROF_PROBE_SEMAPHORE(store__failed);

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

// Writes `value` at `out` (room for kMaxVarint bytes) and returns the end.
constexpr size_t kMaxVarint = 10;
uint8_t* PutVarint(uint8_t* out, uint64_t value) {
  while (value >= 0x80) {
    *out++ = static_cast<uint8_t>(value | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<uint8_t>(value);
  return out;
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

SamplesWriter::SamplesWriter(ScopedFd fd, std::span<const uint8_t, 16> session_id, uint32_t next_sequence,
                             uint64_t bytes)
    : fd_(std::move(fd)), sequence_(next_sequence) {
  std::memcpy(session_id_, session_id.data(), sizeof session_id_);
  stats_.bytes = bytes;
  payload_.reserve(kChunkTarget + 4096);
}

Result<SamplesWriter> SamplesWriter::Open(const std::string& path, std::span<const uint8_t, 16> session_id,
                                          const std::function<void(const StoredSample&)>& on_existing) {
  HVPROF_TRY(fd, OpenRegularFile(path, O_RDWR | O_CREAT | O_APPEND, 0644));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "fstat " + path);
  if (st.st_size == 0) {
    FileHeader header{};
    std::memcpy(header.magic, kSamplesFileMagic, sizeof header.magic);
    header.version = kSamplesFileVersion;
    header.header_bytes = sizeof header;
    std::memcpy(header.session_id, session_id.data(), 16);
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    header.created_ns = static_cast<uint64_t>(now.tv_sec) * 1000000000ULL + static_cast<uint64_t>(now.tv_nsec);
    if (auto written = WriteAll(fd.get(), std::as_bytes(std::span(&header, 1)), path); !written) {
      (void)::ftruncate(fd.get(), 0);  // no half header: the next Open starts afresh
      return written.error();
    }
    return SamplesWriter(std::move(fd), session_id, 0, sizeof header);
  }
  // Appending to an earlier writer's file (a restarted agent): only to this session's.
  auto summary = ReadSamplesFile(path, on_existing ? on_existing : [](const StoredSample&) {}, session_id);
  if (!summary) return summary.error();
  const ReadSummary& found = summary.value();
  if (!found.header_ok) {
    return MakeError(ErrorKind::kCorrupt, "{} is not an hvprof samples file; move it away first", path);
  }
  if (found.version != kSamplesFileVersion) {
    return MakeError(ErrorKind::kBadState,
                     "{} was written by an older hvprof (samples file version {}); keep it with `hvprof "
                     "--save=NAME` or remove it with `hvprof --reset` before profiling on",
                     path, found.version);
  }
  if (std::memcmp(found.session_id, session_id.data(), 16) != 0) {
    return MakeError(ErrorKind::kBadState,
                     "{} holds the samples of session {}, not of this one ({}); move it away or run `hvprof --reset`",
                     path, SessionIdHex(std::span<const uint8_t, 16>(found.session_id, 16)), SessionIdHex(session_id));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t torn = 0;
  if (found.torn_tail && found.intact_end < size) {
    // The earlier writer died mid-chunk: that chunk is lost, and appending after it would bury
    // the next chunks behind its false length.
    if (::ftruncate(fd.get(), static_cast<off_t>(found.intact_end)) != 0) {
      return ErrnoError(errno, fmt::format("cannot cut the torn chunk off the end of {}", path));
    }
    torn = size - found.intact_end;
    size = found.intact_end;
  }
  if (found.next_sequence >= UINT32_MAX) {
    return MakeError(ErrorKind::kBadState, "{} holds the most chunks a session may have; start a new session", path);
  }
  SamplesWriter writer(std::move(fd), session_id, static_cast<uint32_t>(found.next_sequence), size);
  writer.stats_.samples = found.samples;
  writer.stats_.chunks = found.chunks;
  writer.stats_.torn_bytes = torn;
  return writer;
}

void SamplesWriter::Append(const StoredSample& sample) {
  if (broken_) {
    ++stats_.failed;
    return;
  }
  Encode(sample);
  ++stats_.samples;
  if (payload_.size() >= kChunkTarget || records_ >= kMaxChunkRecords) (void)Flush(false);
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
  payload_.insert(payload_.end(), record, out);
  previous_ = sample;
  previous_.frames = {};
  fresh_ = false;
  ++records_;
}

Result<void> SamplesWriter::Flush(bool sync) {
  if (broken_) return *failure_;
  if (records_ != 0) {
    ChunkHeader header{};
    header.magic = kChunkMagic;
    header.version = 2;
    header.header_bytes = sizeof header;
    header.sequence = sequence_;
    header.records = records_;
    header.payload_bytes = static_cast<uint32_t>(payload_.size());
    header.payload_crc = Crc(payload_.data(), payload_.size());
    header.first_time_ns = first_time_;
    header.last_time_ns = last_time_;
    std::memcpy(header.session_id, session_id_, sizeof header.session_id);
    header.header_crc = Crc(&header, offsetof(ChunkHeader, header_crc));
    // One write for header and payload, so a crash tears at most this chunk.
    std::vector<uint8_t> buffer(sizeof header + payload_.size());
    std::memcpy(buffer.data(), &header, sizeof header);
    std::memcpy(buffer.data() + sizeof header, payload_.data(), payload_.size());
    const uint32_t records = records_;
    payload_.clear();
    records_ = 0;
    Result<void> written = Ok();
    struct statvfs fs {};
    if (keep_free_ != 0 && ::fstatvfs(fd_.get(), &fs) == 0 &&
        uint64_t{fs.f_bavail} * fs.f_frsize < buffer.size() + keep_free_) {
      written = MakeError(ErrorKind::kNoSpace,
                          "the disk is full: {} bytes free, less than a chunk of samples ({} bytes) and the {} "
                          "bytes kept free for the session's metadata",
                          uint64_t{fs.f_bavail} * fs.f_frsize, buffer.size(), keep_free_);
    } else {
      written = WriteAll(fd_.get(), std::as_bytes(std::span(buffer)), "samples file");
    }
    if (!written) {
      // What did reach the file is cut off again, so the file stays a sequence of whole chunks
      // and the next chunk (same sequence number) can follow once there is space.
      stats_.failed += records;
      stats_.samples -= records;
      ++stats_.failed_chunks;
      failure_ = written.error();
      last_failure_ = failure_;
      HVPROF_PROBE(store__failed, sequence_, records, stats_.failed, failure_->message().c_str());
      if (::ftruncate(fd_.get(), static_cast<off_t>(stats_.bytes)) != 0) {
        broken_ = true;
        failure_ = failure_->WithContext("and the partial chunk could not be cut off; nothing more is written");
        last_failure_ = failure_;
      }
      return *failure_;
    }
    failure_.reset();
    stats_.bytes += buffer.size();
    ++stats_.chunks;
    HVPROF_PROBE(chunk__written, sequence_, records, buffer.size(), stats_.bytes);
    ++sequence_;
  }
  if (sync && ::fdatasync(fd_.get()) != 0) {
    failure_ = ErrnoError(errno, "cannot sync the samples file");
    return *failure_;
  }
  return Ok();
}

namespace {

// A chunk header as the reader needs it, whatever its version.
struct ChunkInfo {
  uint32_t header_bytes = 0;
  uint32_t sequence = 0;
  uint32_t records = 0;
  uint32_t payload_bytes = 0;
  uint32_t payload_crc = 0;
  bool has_id = false;
  uint8_t session_id[16] = {};
};

// The chunk header at the start of `bytes` if it is whole and its own checksum holds. With
// `version` 0 (the file header is damaged), either version is tried.
std::optional<ChunkInfo> ParseChunkHeader(std::span<const uint8_t> bytes, uint32_t version) {
  uint32_t magic = 0;
  if (bytes.size() < sizeof magic) return std::nullopt;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  if (magic != kChunkMagic) return std::nullopt;
  auto sane = [](const ChunkInfo& info) {
    return info.records <= kMaxChunkRecords && info.payload_bytes <= kMaxChunkPayload;
  };
  if ((version == 0 || version == 2) && bytes.size() >= sizeof(ChunkHeader)) {
    ChunkHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    if (h.version == 2 && h.header_bytes == sizeof h && h.header_crc == Crc(&h, offsetof(ChunkHeader, header_crc))) {
      ChunkInfo info{sizeof h, h.sequence, h.records, h.payload_bytes, h.payload_crc, true, {}};
      std::memcpy(info.session_id, h.session_id, sizeof info.session_id);
      if (sane(info)) return info;
    }
  }
  if ((version == 0 || version == 1) && bytes.size() >= sizeof(ChunkHeaderV1)) {
    ChunkHeaderV1 h;
    std::memcpy(&h, bytes.data(), sizeof h);
    if (h.version == 1 && h.header_bytes == sizeof h && h.header_crc == Crc(&h, offsetof(ChunkHeaderV1, header_crc))) {
      ChunkInfo info{sizeof h, h.sequence, h.records, h.payload_bytes, h.payload_crc, false, {}};
      if (sane(info)) return info;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string SessionIdHex(std::span<const uint8_t, 16> id) {
  std::string out;
  for (uint8_t byte : id) out += fmt::format("{:02x}", byte);
  return out;
}

std::optional<std::array<uint8_t, 16>> ParseSessionId(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  std::array<uint8_t, 16> id{};
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return std::nullopt;
    id[i / 2] = static_cast<uint8_t>(id[i / 2] << 4 | digit);
  }
  return id;
}

ReadSummary ReadSamples(std::span<const uint8_t> bytes, const std::function<void(const StoredSample&)>& on_sample,
                        std::optional<std::span<const uint8_t, 16>> session_id) {
  ReadSummary summary;
  uint64_t position = 0;
  auto problem = [&](uint64_t offset, int64_t chunk, std::string description) {
    if (summary.problems.size() < 100) summary.problems.push_back({offset, chunk, std::move(description)});
  };
  uint32_t version = 0;  // unknown until the file header says
  if (bytes.size() >= sizeof(FileHeader)) {
    FileHeader header;
    std::memcpy(&header, bytes.data(), sizeof header);
    if (std::memcmp(header.magic, kSamplesFileMagic, 8) == 0 && header.header_bytes == sizeof header &&
        (header.version == 1 || header.version == 2)) {
      summary.header_ok = true;
      summary.version = version = header.version;
      std::memcpy(summary.session_id, header.session_id, 16);
      position = sizeof header;
    }
  }
  if (!summary.header_ok) {
    problem(0, -1,
            bytes.empty() ? "the file is empty"
            : bytes.size() >= sizeof(FileHeader) && std::memcmp(bytes.data(), kSamplesFileMagic, 8) == 0
                ? "the file header is of an unknown version (a newer hvprof wrote it?) or damaged"
                : "the file header is missing or damaged");
  }
  // Whose chunks count: the caller's session, else the file header's.
  uint8_t owner[16] = {};
  const bool know_owner = session_id.has_value() || summary.header_ok;
  if (session_id) {
    std::memcpy(owner, session_id->data(), 16);
    if (summary.header_ok && std::memcmp(owner, summary.session_id, 16) != 0) {
      problem(0, -1, fmt::format("the file belongs to session {}, not to this session ({}): it was copied in "
                                 "from another one",
                                 SessionIdHex(std::span<const uint8_t, 16>(summary.session_id, 16)),
                                 SessionIdHex(*session_id)));
    }
  } else if (summary.header_ok) {
    std::memcpy(owner, summary.session_id, 16);
  }
  summary.intact_end = position;
  uint64_t next = 0;                // the sequence number the next chunk should carry
  uint64_t damaged_since_good = 0;  // chunks whose number was lost with their header
  while (position < bytes.size()) {
    const uint64_t start = position;
    const auto info = ParseChunkHeader(bytes.subspan(position), version);
    if (!info) {
      const uint64_t whole = version == 1 ? sizeof(ChunkHeaderV1) : sizeof(ChunkHeader);
      if (bytes.size() - position < whole) {
        problem(start, static_cast<int64_t>(next),
                fmt::format("{} bytes at the end are a torn chunk header (the writer stopped mid-chunk)",
                            bytes.size() - position));
        summary.skipped_bytes += bytes.size() - position;
        ++summary.damaged_chunks;
        summary.torn_tail = true;
        break;
      }
      // Resynchronise: find the next chunk header whose own checksum holds.
      uint64_t resume = position + 1;
      while (resume < bytes.size() && !ParseChunkHeader(bytes.subspan(resume), version)) ++resume;
      problem(start, -1, fmt::format("damaged chunk header; skipped {} bytes to the next intact chunk", resume - start));
      summary.skipped_bytes += resume - start;
      ++summary.damaged_chunks;
      ++damaged_since_good;
      position = resume;
      continue;
    }
    position += info->header_bytes;
    if (bytes.size() - position < info->payload_bytes) {
      problem(start, info->sequence,
              fmt::format("chunk {} is truncated: {} of its {} bytes are in the file (the writer "
                          "stopped mid-chunk); its {} samples are lost",
                          info->sequence, bytes.size() - position, info->payload_bytes, info->records));
      summary.skipped_bytes += bytes.size() - start;
      ++summary.damaged_chunks;
      summary.torn_tail = true;
      break;
    }
    const auto payload = bytes.subspan(position, info->payload_bytes);
    position += info->payload_bytes;
    if (know_owner && info->has_id && std::memcmp(info->session_id, owner, 16) != 0) {
      problem(start, info->sequence,
              fmt::format("chunk {} ({} samples) belongs to session {}, not this one: it was not counted",
                          info->sequence, info->records,
                          SessionIdHex(std::span<const uint8_t, 16>(info->session_id, 16))));
      summary.skipped_bytes += position - start;
      ++summary.foreign_chunks;
      summary.intact_end = position;
      continue;
    }
    if (info->sequence < next) {
      problem(start, info->sequence,
              fmt::format("chunk {} ({} samples) repeats a chunk read before: it was not counted again",
                          info->sequence, info->records));
      summary.skipped_bytes += position - start;
      ++summary.repeated_chunks;
      summary.intact_end = position;
      continue;
    }
    if (info->sequence > next) {
      const uint64_t absent = info->sequence - next;
      if (absent > damaged_since_good) {
        const uint64_t missing = absent - damaged_since_good;
        summary.missing_chunks += missing;
        problem(start, info->sequence,
                missing == 1 && damaged_since_good == 0
                    ? fmt::format("chunk {} is missing before byte {} (removed from the file); its samples are lost",
                                  next, start)
                    : fmt::format("{} chunks between chunk {} and chunk {} are missing (removed from the file); their "
                                  "samples are lost",
                                  missing, next == 0 ? 0 : next - 1, info->sequence));
      }
    }
    damaged_since_good = 0;
    next = uint64_t{info->sequence} + 1;
    summary.intact_end = position;
    if (Crc(payload.data(), payload.size()) != info->payload_crc) {
      problem(start, info->sequence,
              fmt::format("chunk {} fails its checksum (damaged); its {} samples are skipped", info->sequence,
                          info->records));
      summary.skipped_bytes += position - start;
      ++summary.damaged_chunks;
      continue;
    }
    uint64_t decoded = 0;
    if (!DecodeChunk(payload, info->records, on_sample, &decoded)) {
      problem(start, info->sequence,
              fmt::format("chunk {} has a valid checksum but malformed records after {} of {}", info->sequence,
                          decoded, info->records));
      ++summary.damaged_chunks;
    } else {
      ++summary.chunks;
    }
    summary.samples += decoded;
  }
  summary.next_sequence = next;
  return summary;
}

Result<ReadSummary> ReadSamplesFile(const std::string& path, const std::function<void(const StoredSample&)>& on_sample,
                                    std::optional<std::span<const uint8_t, 16>> session_id) {
  HVPROF_TRY(fd, OpenRegularFile(path, O_RDONLY));
  HVPROF_TRY(mapping, ScopedMmap::MapFileReadOnly(fd.get()));
  const auto* data = static_cast<const uint8_t*>(mapping.data());
  return ReadSamples(std::span<const uint8_t>(data, mapping.size()), on_sample, session_id);
}

}  // namespace hvprof::store
