#include "hvprof/store/sched_file.h"

#include <limits>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "hvprof/base/varint.h"

namespace hvprof::store {
namespace {

using namespace varint;  // the codings (hvprof/base/varint.h)

// Record tag: the type in bits 0-2, then which fields follow.
constexpr uint8_t kTypeMask = 0x07;
constexpr uint8_t kNewFlags = 1u << 3;    // byte flags (differs from the previous record's)
constexpr uint8_t kNewPcpu = 1u << 4;     // varint pcpu
constexpr uint8_t kNewSubject = 1u << 5;  // varint domain, varint vcpu
constexpr uint8_t kHasPcpus = 1u << 6;    // varint from_pcpu, varint to_pcpu (else both unknown)
constexpr uint8_t kReserved = 1u << 7;    // must be 0
constexpr uint8_t kWhole = kNewFlags | kNewPcpu | kNewSubject;  // the first record of a chunk

constexpr ChunkFormat kSchedFormat{kSchedFileMagic, kSchedFileVersion, 0, kSchedChunkMagic,
                                   kSchedFile,      "sched.hvs file",  "scheduling records"};

// A pid or tid is kept plus one modulo 2^32, so "none" (kNoPid) takes one byte.
uint64_t TaskCode(uint32_t id) { return static_cast<uint32_t>(id + 1); }

bool DecodeRecord(Cursor& in, bool first, StoredSched* record) {
  const uint8_t tag = in.Byte();
  const uint8_t type = tag & kTypeMask;
  if (type == 0 || type > kMaxStoredSchedType || (tag & kReserved) != 0 || (first && (tag & kWhole) != kWhole)) {
    return false;
  }
  StoredSched& r = *record;
  const uint64_t previous_time = first ? 0 : r.time_ns;
  // Fields not carried forward: what this record's type and flags say.
  r.type = type;
  r.pid = r.tid = r.other_pid = r.other_tid = kNoPid;
  r.other_domain = r.other_vcpu = 0;
  r.from_pcpu = r.to_pcpu = kUnknownPcpu;
  r.count = r.aux = 0;
  r.time_ns = previous_time + static_cast<uint64_t>(UnZigZag(in.Varint()));
  const uint8_t states = in.Byte();
  r.old_state = states >> 4;
  r.new_state = states & 0x0F;
  if (tag & kNewFlags) r.flags = in.Byte();
  auto u16 = [&in](uint16_t* out) {
    const uint64_t value = in.Varint();
    *out = static_cast<uint16_t>(value);
    return value <= 0xFFFF;
  };
  auto task = [&in](uint32_t* out) {
    const uint64_t value = in.Varint();
    *out = static_cast<uint32_t>(value - 1);
    return value <= std::numeric_limits<uint32_t>::max();
  };
  // One field after the other (a cursor that ran out reads 0s, and fails the record at the end).
  bool ok = true;
  if (tag & kNewPcpu) ok = u16(&r.pcpu) && ok;
  if (tag & kNewSubject) {
    ok = u16(&r.domain) && ok;
    ok = u16(&r.vcpu) && ok;
  }
  if (r.flags & kSchedFlagTask) {
    ok = task(&r.pid) && ok;
    ok = task(&r.tid) && ok;
  }
  if (r.flags & kSchedFlagOther) {
    ok = u16(&r.other_domain) && ok;
    ok = u16(&r.other_vcpu) && ok;
    ok = task(&r.other_pid) && ok;
    ok = task(&r.other_tid) && ok;
  }
  if (tag & kHasPcpus) {
    ok = u16(&r.from_pcpu) && ok;
    ok = u16(&r.to_pcpu) && ok;
  }
  if (type == kSchedLost) {
    r.count = in.Varint();
    r.aux = r.time_ns + static_cast<uint64_t>(UnZigZag(in.Varint()));
  }
  return ok && in.ok();
}

// A chunk's records are delivered only when all of them decode: a reader never sees part of a
// damaged chunk.
ChunkDecoder SchedDecoder(const std::function<void(const StoredSched&)>& on_record,
                          std::vector<StoredSched>* buffer) {
  return [&on_record, buffer](std::span<const uint8_t> payload, uint32_t records) {
    ChunkDecode result;
    Cursor in(payload);
    buffer->clear();
    StoredSched record;
    for (uint32_t r = 0; r < records; ++r) {
      if (!DecodeRecord(in, r == 0, &record)) {
        result.ok = false;
        return result;
      }
      buffer->push_back(record);
      ++result.well_formed;
    }
    if (!in.done()) {
      result.ok = false;
      return result;
    }
    for (const StoredSched& decoded : *buffer) on_record(decoded);
    result.delivered = buffer->size();
    return result;
  };
}

}  // namespace

Result<SchedWriter> SchedWriter::Open(const std::string& directory, std::span<const uint8_t, 16> session_id) {
  std::string path = directory + "/" + kSchedFile;
  std::vector<StoredSched> buffer;
  const std::function<void(const StoredSched&)> ignore = [](const StoredSched&) {};
  HVPROF_TRY(chunks, ChunkWriter::Open(path, kSchedFormat, session_id, SchedDecoder(ignore, &buffer)));
  return SchedWriter(std::move(path), std::move(chunks));
}

SchedWriterStats SchedWriter::stats() const {
  SchedWriterStats stats;
  static_cast<ChunkWriterStats&>(stats) = chunks_.stats();
  stats.unknown_type = unknown_type_;
  return stats;
}

void SchedWriter::Add(const StoredSched& record) {
  if (record.type == 0 || record.type > kMaxStoredSchedType) {
    ++unknown_type_;
    return;
  }
  const bool first = chunks_.starts_chunk();
  const StoredSched& p = previous_;
  uint8_t tag = record.type;
  if (first || record.flags != p.flags) tag |= kNewFlags;
  if (first || record.pcpu != p.pcpu) tag |= kNewPcpu;
  if (first || record.domain != p.domain || record.vcpu != p.vcpu) tag |= kNewSubject;
  if (record.from_pcpu != kUnknownPcpu || record.to_pcpu != kUnknownPcpu) tag |= kHasPcpus;
  // Encoded in place, at the end of the chunk in progress: room for the largest record (tag,
  // states, flags, 13 varints).
  uint8_t* out = chunks_.Reserve(3 + 13 * kMaxVarint);
  *out++ = tag;
  out = PutVarint(out, ZigZag(static_cast<int64_t>(record.time_ns - (first ? 0 : p.time_ns))));
  *out++ = static_cast<uint8_t>(std::min(record.old_state, kMaxStoredState) << 4 |
                                std::min(record.new_state, kMaxStoredState));
  if (tag & kNewFlags) *out++ = record.flags;
  if (tag & kNewPcpu) out = PutVarint(out, record.pcpu);
  if (tag & kNewSubject) {
    out = PutVarint(out, record.domain);
    out = PutVarint(out, record.vcpu);
  }
  if (record.flags & kSchedFlagTask) {
    out = PutVarint(out, TaskCode(record.pid));
    out = PutVarint(out, TaskCode(record.tid));
  }
  if (record.flags & kSchedFlagOther) {
    out = PutVarint(out, record.other_domain);
    out = PutVarint(out, record.other_vcpu);
    out = PutVarint(out, TaskCode(record.other_pid));
    out = PutVarint(out, TaskCode(record.other_tid));
  }
  if (tag & kHasPcpus) {
    out = PutVarint(out, record.from_pcpu);
    out = PutVarint(out, record.to_pcpu);
  }
  if (record.type == kSchedLost) {
    out = PutVarint(out, record.count);
    out = PutVarint(out, ZigZag(static_cast<int64_t>(record.aux - record.time_ns)));
  }
  previous_ = record;
  chunks_.Commit(out, record.time_ns);
}

SchedReadSummary ReadSched(std::span<const uint8_t> bytes, const std::function<void(const StoredSched&)>& on_record,
                           std::optional<std::span<const uint8_t, 16>> session_id) {
  std::vector<StoredSched> buffer;
  SchedReadSummary summary;
  static_cast<ChunkReadSummary&>(summary) = ReadChunks(bytes, kSchedFormat, SchedDecoder(on_record, &buffer), session_id);
  summary.present = true;
  return summary;
}

Result<SchedReadSummary> ReadSchedFile(const std::string& path, std::string_view session_id,
                                       const std::function<void(const StoredSched&)>& on_record) {
  HVPROF_TRY(id, SessionIdToCheck(path, session_id));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return SchedReadSummary{};
  std::vector<StoredSched> buffer;
  HVPROF_TRY(read, ReadChunkFile(path, kSchedFormat, SchedDecoder(on_record, &buffer),
                                 id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt,
                                 /*refuse_foreign=*/true));
  SchedReadSummary summary;
  static_cast<ChunkReadSummary&>(summary) = std::move(read);
  summary.present = true;
  return summary;
}

bool HasSched(const std::string& directory) {
  struct stat st {};
  return ::lstat((directory + "/" + kSchedFile).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace hvprof::store
