#include "hvprof/store/chunk_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <thread>

#include "hvprof/base/files.h"
#include "hvprof/base/probes.h"

HVPROF_PROBE_SEMAPHORE(chunk__written);
HVPROF_PROBE_SEMAPHORE(store__failed);

namespace hvprof::store {
namespace {

constexpr size_t kChunkTarget = 1u << 20;  // close a chunk after about this many bytes
constexpr uint16_t kChunkVersion = 2;      // ChunkHeader's layout (ChunkHeaderV1: 1)

uint32_t Crc(const void* data, size_t bytes) {
  return static_cast<uint32_t>(::crc32(0, static_cast<const Bytef*>(data), static_cast<uInt>(bytes)));
}

// A chunk header as the reader needs it, whatever its version.
struct ChunkInfo {
  uint32_t header_bytes = 0;
  uint32_t sequence = 0;
  uint32_t records = 0;
  uint32_t payload_bytes = 0;
  uint32_t payload_crc = 0;
  uint64_t first_time_ns = 0;
  uint64_t last_time_ns = 0;
  bool has_id = false;
  uint8_t session_id[16] = {};
};

bool IsLegacy(const ChunkFormat& format, uint32_t version) {
  return format.legacy_version != 0 && version == format.legacy_version;
}

// The chunk header at the start of `bytes` if it is whole and its own checksum holds. With
// `version` 0 (the file header is damaged), either layout is tried.
std::optional<ChunkInfo> ParseChunkHeader(std::span<const uint8_t> bytes, const ChunkFormat& format,
                                          uint32_t version) {
  uint32_t magic = 0;
  if (bytes.size() < sizeof magic) return std::nullopt;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  if (magic != format.chunk_magic) return std::nullopt;
  auto sane = [](const ChunkInfo& info) {
    return info.records <= kMaxChunkRecords && info.payload_bytes <= kMaxChunkPayload;
  };
  if ((version == 0 || version == format.version) && bytes.size() >= sizeof(ChunkHeader)) {
    ChunkHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    if (h.version == kChunkVersion && h.header_bytes == sizeof h &&
        h.header_crc == Crc(&h, offsetof(ChunkHeader, header_crc))) {
      ChunkInfo info{sizeof h, h.sequence, h.records, h.payload_bytes, h.payload_crc, h.first_time_ns, h.last_time_ns,
                     true, {}};
      std::memcpy(info.session_id, h.session_id, sizeof info.session_id);
      if (sane(info)) return info;
    }
  }
  if (format.legacy_version != 0 && (version == 0 || IsLegacy(format, version)) &&
      bytes.size() >= sizeof(ChunkHeaderV1)) {
    ChunkHeaderV1 h;
    std::memcpy(&h, bytes.data(), sizeof h);
    if (h.version == 1 && h.header_bytes == sizeof h && h.header_crc == Crc(&h, offsetof(ChunkHeaderV1, header_crc))) {
      ChunkInfo info{sizeof h, h.sequence, h.records, h.payload_bytes, h.payload_crc, h.first_time_ns, h.last_time_ns,
                     false, {}};
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

Result<std::optional<std::array<uint8_t, 16>>> SessionIdToCheck(const std::string& path, std::string_view hex) {
  if (hex.empty()) return std::optional<std::array<uint8_t, 16>>();
  auto id = ParseSessionId(hex);
  if (!id) {
    return MakeError(ErrorKind::kInvalidArgument, "cannot read {}: '{}' is not a session id (32 hex digits)", path, hex);
  }
  return id;
}

// ---- writing

ChunkWriter::ChunkWriter(ScopedFd fd, const ChunkFormat& format, std::span<const uint8_t, 16> session_id,
                         uint32_t next_sequence, uint64_t bytes)
    : fd_(std::move(fd)), format_(&format), sequence_(next_sequence) {
  std::memcpy(session_id_, session_id.data(), sizeof session_id_);
  stats_.bytes = bytes;
  chunk_.resize(sizeof(ChunkHeader) + kChunkTarget + 4096);
  used_ = sizeof(ChunkHeader);
}

Result<ChunkWriter> ChunkWriter::Open(const std::string& path, const ChunkFormat& format,
                                      std::span<const uint8_t, 16> session_id, const ChunkDecoder& existing) {
  HVPROF_TRY(fd, OpenRegularFile(path, O_RDWR | O_CREAT | O_APPEND, 0644));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "fstat " + path);
  if (st.st_size == 0) {
    FileHeader header{};
    std::memcpy(header.magic, format.file_magic, sizeof header.magic);
    header.version = format.version;
    header.header_bytes = sizeof header;
    std::memcpy(header.session_id, session_id.data(), 16);
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    header.created_ns = static_cast<uint64_t>(now.tv_sec) * 1000000000ULL + static_cast<uint64_t>(now.tv_nsec);
    if (auto written = WriteAll(fd.get(), std::as_bytes(std::span(&header, 1)), path); !written) {
      (void)::ftruncate(fd.get(), 0);  // no half header: the next Open starts afresh
      return written.error();
    }
    return ChunkWriter(std::move(fd), format, session_id, 0, sizeof header);
  }
  // Appending to an earlier writer's file (a restarted agent): only to this session's.
  auto summary = ReadChunkFile(path, format, existing, session_id);
  if (!summary) return summary.error();
  const ChunkReadSummary& found = summary.value();
  if (!found.header_ok) {
    return MakeError(ErrorKind::kCorrupt, "{} is not an hvprof {}; move it away first", path, format.what);
  }
  if (found.version != format.version) {
    return MakeError(ErrorKind::kBadState,
                     "{} was written by an older hvprof ({} version {}); keep it with `hvprof "
                     "--save=NAME` or remove it with `hvprof --reset` before profiling on",
                     path, format.what, found.version);
  }
  if (std::memcmp(found.session_id, session_id.data(), 16) != 0) {
    return MakeError(ErrorKind::kBadState,
                     "{} holds the {} of session {}, not of this one ({}); move it away or run `hvprof --reset`",
                     path, format.records, SessionIdHex(std::span<const uint8_t, 16>(found.session_id, 16)),
                     SessionIdHex(session_id));
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
  ChunkWriter writer(std::move(fd), format, session_id, static_cast<uint32_t>(found.next_sequence), size);
  writer.stats_.records = found.records;
  writer.stats_.chunks = found.chunks;
  writer.stats_.torn_bytes = torn;
  return writer;
}

void ChunkWriter::Commit(const uint8_t* end, uint64_t time_ns) {
  if (broken_) {
    ++stats_.failed;
    return;
  }
  if (records_ == 0) first_time_ = last_time_ = time_ns;  // the chunk's own span
  first_time_ = std::min(first_time_, time_ns);
  last_time_ = std::max(last_time_, time_ns);
  used_ = static_cast<size_t>(end - chunk_.data());
  ++records_;
  ++stats_.records;
  if (used_ - sizeof(ChunkHeader) >= kChunkTarget || records_ >= kMaxChunkRecords) (void)Flush(false);
}

Result<void> ChunkWriter::Flush(bool sync) {
  if (broken_) return *failure_;
  if (records_ != 0) {
    ChunkHeader header{};
    header.magic = format_->chunk_magic;
    header.version = kChunkVersion;
    header.header_bytes = sizeof header;
    header.sequence = sequence_;
    header.records = records_;
    const std::span<const uint8_t> payload(chunk_.data() + sizeof header, used_ - sizeof header);
    header.payload_bytes = static_cast<uint32_t>(payload.size());
    header.payload_crc = Crc(payload.data(), payload.size());
    header.first_time_ns = first_time_;
    header.last_time_ns = last_time_;
    std::memcpy(header.session_id, session_id_, sizeof header.session_id);
    header.header_crc = Crc(&header, offsetof(ChunkHeader, header_crc));
    // One write for header and payload, so a crash tears at most this chunk.
    std::memcpy(chunk_.data(), &header, sizeof header);
    const std::span<const uint8_t> buffer(chunk_.data(), used_);
    const uint32_t records = records_;
    records_ = 0;
    Result<void> written = Ok();
    struct statvfs fs {};
    if (keep_free_ != 0 && ::fstatvfs(fd_.get(), &fs) == 0 &&
        uint64_t{fs.f_bavail} * fs.f_frsize < buffer.size() + keep_free_) {
      written = MakeError(ErrorKind::kNoSpace,
                          "the disk is full: {} bytes free, less than a chunk of {} ({} bytes) and the {} "
                          "bytes kept free for the session's metadata",
                          uint64_t{fs.f_bavail} * fs.f_frsize, format_->records, buffer.size(), keep_free_);
    } else {
      written = WriteAll(fd_.get(), std::as_bytes(buffer), format_->what);
    }
    const uint64_t chunk_bytes = buffer.size();
    used_ = sizeof header;  // the next chunk's, written or not
    if (!written) {
      // What did reach the file is cut off again, so the file stays a sequence of whole chunks
      // and the next chunk (same sequence number) can follow once there is space.
      stats_.failed += records;
      stats_.records -= records;
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
    stats_.bytes += chunk_bytes;
    ++stats_.chunks;
    HVPROF_PROBE(chunk__written, sequence_, records, chunk_bytes, stats_.bytes);
    ++sequence_;
  }
  if (sync && ::fdatasync(fd_.get()) != 0) {
    failure_ = ErrnoError(errno, fmt::format("cannot sync the {}", format_->what));
    return *failure_;
  }
  return Ok();
}

// ---- reading

namespace {

// Problems kept per read: a file damaged throughout would otherwise give one per chunk.
constexpr size_t kMaxProblems = 100;

// A chunk whose header, session and place in the sequence held: its payload is to be checked
// against its checksum and decoded.
struct VerifiedChunk {
  uint64_t offset;  // of its header in the file
  uint32_t sequence;
  uint32_t records;
  std::span<const uint8_t> payload;
  uint32_t payload_crc;
  uint64_t bytes;  // header and payload
};

// The first pass of reading: every check of the chunks' headers, in file order. The payloads
// are left to the second (ReadChunksWith), which may run on threads: their checksums are most of
// the checking.
// The file header, into `summary` (header_ok, version, session id, or the problem); returns
// where the chunks start.
uint64_t VerifyFileHeader(std::span<const uint8_t> bytes, const ChunkFormat& format, ChunkReadSummary& summary) {
  if (bytes.size() >= sizeof(FileHeader)) {
    FileHeader header;
    std::memcpy(&header, bytes.data(), sizeof header);
    if (std::memcmp(header.magic, format.file_magic, 8) == 0 && header.header_bytes == sizeof header &&
        (header.version == format.version || IsLegacy(format, header.version))) {
      summary.header_ok = true;
      summary.version = header.version;
      std::memcpy(summary.session_id, header.session_id, 16);
      return sizeof header;
    }
  }
  summary.problems.push_back(
      {0, -1,
       bytes.empty() ? "the file is empty"
       : bytes.size() >= sizeof(FileHeader) && std::memcmp(bytes.data(), format.file_magic, 8) == 0
           ? "the file header is of an unknown version (a newer hvprof wrote it?) or damaged"
           : "the file header is missing or damaged"});
  return 0;
}

ChunkReadSummary VerifyChunks(std::span<const uint8_t> bytes, const ChunkFormat& format,
                              std::optional<std::span<const uint8_t, 16>> session_id,
                              std::vector<VerifiedChunk>* chunks) {
  ChunkReadSummary summary;
  const char* const noun = format.records;
  auto problem = [&](uint64_t offset, int64_t chunk, std::string description) {
    if (summary.problems.size() < kMaxProblems) summary.problems.push_back({offset, chunk, std::move(description)});
  };
  uint64_t position = VerifyFileHeader(bytes, format, summary);
  const uint32_t version = summary.version;  // 0: unknown (the file header is damaged)
  // Whose chunks count: the caller's session, else the file header's.
  uint8_t owner[16] = {};
  const bool know_owner = session_id.has_value() || summary.header_ok;
  if (session_id) {
    std::memcpy(owner, session_id->data(), 16);
    if (summary.header_ok && std::memcmp(owner, summary.session_id, 16) != 0) {
      summary.foreign_file = true;
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
    const auto info = ParseChunkHeader(bytes.subspan(position), format, version);
    if (!info) {
      const uint64_t whole = IsLegacy(format, version) ? sizeof(ChunkHeaderV1) : sizeof(ChunkHeader);
      if (bytes.size() - position < whole) {
        problem(start, static_cast<int64_t>(next),
                fmt::format("{} bytes at the end are a torn chunk header (the writer stopped mid-chunk)",
                            bytes.size() - position));
        summary.skipped_bytes += bytes.size() - position;
        ++summary.damaged_chunks;
        summary.torn_tail = true;
        summary.torn_bytes = bytes.size() - position;
        break;
      }
      // Resynchronise: find the next chunk header whose own checksum holds.
      uint64_t resume = position + 1;
      while (resume < bytes.size() && !ParseChunkHeader(bytes.subspan(resume), format, version)) ++resume;
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
                          "stopped mid-chunk); its {} {} are lost",
                          info->sequence, bytes.size() - position, info->payload_bytes, info->records, noun));
      summary.skipped_bytes += bytes.size() - start;
      ++summary.damaged_chunks;
      summary.torn_tail = true;
      summary.torn_bytes = bytes.size() - start;
      break;
    }
    const auto payload = bytes.subspan(position, info->payload_bytes);
    position += info->payload_bytes;
    if (know_owner && info->has_id && std::memcmp(info->session_id, owner, 16) != 0) {
      problem(start, info->sequence,
              fmt::format("chunk {} ({} {}) belongs to session {}, not this one: it was not counted", info->sequence,
                          info->records, noun, SessionIdHex(std::span<const uint8_t, 16>(info->session_id, 16))));
      summary.skipped_bytes += position - start;
      ++summary.foreign_chunks;
      summary.intact_end = position;
      continue;
    }
    if (info->sequence < next) {
      problem(start, info->sequence,
              fmt::format("chunk {} ({} {}) repeats a chunk read before: it was not counted again", info->sequence,
                          info->records, noun));
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
                    ? fmt::format("chunk {} is missing before byte {} (removed from the file); its {} are lost", next,
                                  start, noun)
                    : fmt::format("{} chunks between chunk {} and chunk {} are missing (removed from the file); their "
                                  "{} are lost",
                                  missing, next == 0 ? 0 : next - 1, info->sequence, noun));
      }
    }
    damaged_since_good = 0;
    next = uint64_t{info->sequence} + 1;
    summary.intact_end = position;
    chunks->push_back({start, info->sequence, info->records, payload, info->payload_crc, position - start});
    if (info->records != 0 && info->first_time_ns <= info->last_time_ns) {
      summary.first_time_ns = summary.chunks_timed ? std::min(summary.first_time_ns, info->first_time_ns) : info->first_time_ns;
      summary.last_time_ns = summary.chunks_timed ? std::max(summary.last_time_ns, info->last_time_ns) : info->last_time_ns;
      summary.chunks_timed = true;
    }
  }
  summary.next_sequence = next;
  return summary;
}

// The second pass, per chunk in file order: its checksum (`intact`) and what its decoding found.
void CountChunk(ChunkReadSummary* summary, const ChunkFormat& format, const VerifiedChunk& chunk, bool intact,
                const ChunkDecode& decoded) {
  auto problem = [&](std::string description) {
    if (summary->problems.size() < kMaxProblems) {
      summary->problems.push_back({chunk.offset, chunk.sequence, std::move(description)});
    }
  };
  if (!intact) {
    problem(fmt::format("chunk {} fails its checksum (damaged); its {} {} are skipped", chunk.sequence, chunk.records,
                        format.records));
    summary->skipped_bytes += chunk.bytes;
    ++summary->damaged_chunks;
    return;
  }
  if (!decoded.ok) {
    problem(fmt::format("chunk {} has a valid checksum but malformed records after {} of {}{}", chunk.sequence,
                        decoded.well_formed, chunk.records,
                        decoded.delivered < decoded.well_formed ? fmt::format("; its {} are skipped", format.records)
                                                                 : ""));
    ++summary->damaged_chunks;
  } else {
    ++summary->chunks;
  }
  summary->records += decoded.delivered;
}

// Both passes over `bytes`, the second on one thread per decoder: decoder `w` checks and decodes
// the w-th of as many runs of consecutive chunks, of about equal bytes, in file order (one
// decoder: this thread, in order). The summary is the same whatever the number of decoders.
ChunkReadSummary ReadChunksWith(std::span<const uint8_t> bytes, const ChunkFormat& format,
                                std::span<const ChunkDecoder> decoders,
                                std::optional<std::span<const uint8_t, 16>> session_id, const ChunksVerified& verified) {
  std::vector<VerifiedChunk> chunks;
  ChunkReadSummary summary = VerifyChunks(bytes, format, session_id, &chunks);
  if (verified) verified(summary);
  const size_t shares = std::max<size_t>(1, std::min(decoders.size(), chunks.size()));
  uint64_t total = 0;
  for (const VerifiedChunk& chunk : chunks) total += chunk.payload.size();
  std::vector<size_t> first(shares + 1, chunks.size());
  first[0] = 0;
  uint64_t seen = 0;
  size_t share = 1;
  for (size_t i = 0; i < chunks.size() && share < shares; ++i) {
    if (seen >= total / shares * share) first[share++] = i;
    seen += chunks[i].payload.size();
  }
  std::vector<ChunkDecode> results(chunks.size());
  std::vector<uint8_t> intact(chunks.size(), 0);
  const auto run = [&](size_t w) {
    for (size_t i = first[w]; i < first[w + 1]; ++i) {
      const VerifiedChunk& chunk = chunks[i];
      intact[i] = Crc(chunk.payload.data(), chunk.payload.size()) == chunk.payload_crc;
      if (intact[i]) results[i] = decoders[w](chunk.payload, chunk.records);
    }
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < shares; ++w) threads.emplace_back(run, w);
  if (!decoders.empty()) run(0);
  for (std::thread& thread : threads) thread.join();
  for (size_t i = 0; i < chunks.size(); ++i) CountChunk(&summary, format, chunks[i], intact[i] != 0, results[i]);
  // The two passes each kept their first problems in file order: merged, the first of all.
  std::stable_sort(summary.problems.begin(), summary.problems.end(),
                   [](const FileProblem& a, const FileProblem& b) { return a.offset < b.offset; });
  if (summary.problems.size() > kMaxProblems) summary.problems.resize(kMaxProblems);
  return summary;
}

}  // namespace

ChunkReadSummary ReadChunks(std::span<const uint8_t> bytes, const ChunkFormat& format, const ChunkDecoder& decode,
                            std::optional<std::span<const uint8_t, 16>> session_id) {
  return ReadChunksWith(bytes, format, std::span<const ChunkDecoder>(&decode, 1), session_id, {});
}

namespace {

// The file at `path`, mapped; with `refuse_foreign`, an error when its header names another
// session than `session_id`.
Result<ScopedMmap> MapChunkFile(const std::string& path, const ChunkFormat& format,
                                std::optional<std::span<const uint8_t, 16>> session_id, bool refuse_foreign) {
  HVPROF_TRY(fd, OpenRegularFile(path, O_RDONLY));
  HVPROF_TRY(mapping, ScopedMmap::MapFileReadOnly(fd.get()));
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(mapping.data()), mapping.size());
  if (refuse_foreign && session_id) {
    // Only the header, so that nothing of the other session is delivered.
    std::vector<VerifiedChunk> none;
    const ChunkReadSummary header =
        VerifyChunks(bytes.first(std::min(bytes.size(), sizeof(FileHeader))), format, session_id, &none);
    if (header.foreign_file) {
      return MakeError(ErrorKind::kBadState,
                       "{} holds the {} of session {}, not of this one ({}): it was copied in from another session; "
                       "move it away",
                       path, format.records, SessionIdHex(std::span<const uint8_t, 16>(header.session_id, 16)),
                       SessionIdHex(*session_id));
    }
  }
  return mapping;
}

}  // namespace

Result<ChunkReadSummary> ReadChunkFile(const std::string& path, const ChunkFormat& format, const ChunkDecoder& decode,
                                       std::optional<std::span<const uint8_t, 16>> session_id, bool refuse_foreign) {
  return ReadChunkFileInParallel(path, format, std::span<const ChunkDecoder>(&decode, 1), session_id, refuse_foreign);
}

Result<ChunkReadSummary> ReadChunkFileInParallel(const std::string& path, const ChunkFormat& format,
                                                 std::span<const ChunkDecoder> decoders,
                                                 std::optional<std::span<const uint8_t, 16>> session_id,
                                                 bool refuse_foreign, const ChunksVerified& verified) {
  HVPROF_TRY(mapping, MapChunkFile(path, format, session_id, refuse_foreign));
  return ReadChunksWith(std::span<const uint8_t>(static_cast<const uint8_t*>(mapping.data()), mapping.size()), format,
                        decoders, session_id, verified);
}

}  // namespace hvprof::store
