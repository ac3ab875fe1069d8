#include "hvprof/linux/perf_records.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <vector>

namespace hvprof::linux_host {

static_assert(static_cast<uint32_t>(RecordType::kMmap) == PERF_RECORD_MMAP);
static_assert(static_cast<uint32_t>(RecordType::kLost) == PERF_RECORD_LOST);
static_assert(static_cast<uint32_t>(RecordType::kComm) == PERF_RECORD_COMM);
static_assert(static_cast<uint32_t>(RecordType::kExit) == PERF_RECORD_EXIT);
static_assert(static_cast<uint32_t>(RecordType::kThrottle) == PERF_RECORD_THROTTLE);
static_assert(static_cast<uint32_t>(RecordType::kUnthrottle) == PERF_RECORD_UNTHROTTLE);
static_assert(static_cast<uint32_t>(RecordType::kFork) == PERF_RECORD_FORK);
static_assert(static_cast<uint32_t>(RecordType::kSample) == PERF_RECORD_SAMPLE);
static_assert(static_cast<uint32_t>(RecordType::kMmap2) == PERF_RECORD_MMAP2);
static_assert(static_cast<uint32_t>(RecordType::kLostSamples) == PERF_RECORD_LOST_SAMPLES);
static_assert(static_cast<uint32_t>(RecordType::kSwitch) == PERF_RECORD_SWITCH);
static_assert(static_cast<uint32_t>(RecordType::kSwitchCpuWide) == PERF_RECORD_SWITCH_CPU_WIDE);
static_assert(kMiscSwitchOut == PERF_RECORD_MISC_SWITCH_OUT);
static_assert(kSampleIp == PERF_SAMPLE_IP && kSampleTid == PERF_SAMPLE_TID);
static_assert(kSampleTime == PERF_SAMPLE_TIME && kSampleAddr == PERF_SAMPLE_ADDR);
static_assert(kSampleCallchain == PERF_SAMPLE_CALLCHAIN && kSampleId == PERF_SAMPLE_ID);
static_assert(kSampleCpu == PERF_SAMPLE_CPU && kSamplePeriod == PERF_SAMPLE_PERIOD);
static_assert(kSampleStreamId == PERF_SAMPLE_STREAM_ID && kSampleRaw == PERF_SAMPLE_RAW);
static_assert(kSampleIdentifier == PERF_SAMPLE_IDENTIFIER);
static_assert(kMiscGuestKernel == PERF_RECORD_MISC_GUEST_KERNEL);
static_assert(kMiscGuestUser == PERF_RECORD_MISC_GUEST_USER);
static_assert(kMiscCommExec == PERF_RECORD_MISC_COMM_EXEC);
static_assert(kMiscMmapBuildId == PERF_RECORD_MISC_MMAP_BUILD_ID);
static_assert(kContextUser == static_cast<uint64_t>(PERF_CONTEXT_USER));
static_assert(kContextKernel == static_cast<uint64_t>(PERF_CONTEXT_KERNEL));
static_assert(kContextGuestKernel == static_cast<uint64_t>(PERF_CONTEXT_GUEST_KERNEL));
static_assert(kContextMax == static_cast<uint64_t>(PERF_CONTEXT_MAX));

namespace {
// The sample_type bits that make up the sample_id trailer of non-sample records.
constexpr uint64_t kSampleIdBits =
    kSampleTid | kSampleTime | kSampleId | kSampleStreamId | kSampleCpu | kSampleIdentifier;
}  // namespace

uint32_t RecordLayout::SampleIdBytes() const {
  if (!sample_id_all) return 0;
  uint32_t bytes = 0;
  if (sample_type & kSampleTid) bytes += 8;
  if (sample_type & kSampleTime) bytes += 8;
  if (sample_type & kSampleId) bytes += 8;
  if (sample_type & kSampleStreamId) bytes += 8;
  if (sample_type & kSampleCpu) bytes += 8;
  if (sample_type & kSampleIdentifier) bytes += 8;
  return bytes;
}

bool RecordLayout::Supported() const {
  if ((sample_type & ~kSupportedSampleBits) != 0) return false;
  if (other_ids.empty()) return true;
  return (other_sample_type & ~kSupportedSampleBits) == 0 && (sample_type & kSampleIdentifier) != 0 &&
         (other_sample_type & kSampleIdentifier) != 0 &&
         (sample_type & kSampleIdBits) == (other_sample_type & kSampleIdBits);
}

uint64_t RecordLayout::SampleTypeOf(const uint8_t* body, size_t size) const {
  if (other_ids.empty() || size < 8) return sample_type;
  uint64_t id = 0;
  std::memcpy(&id, body, 8);
  return std::binary_search(other_ids.begin(), other_ids.end(), id) ? other_sample_type : sample_type;
}

namespace {

// A bounds-checked reader over one record's body.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool ok() const { return ok_; }
  size_t left() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  template <typename T>
  T Read() {
    T value{};
    if (!ok_ || left() < sizeof(T)) {
      ok_ = false;
      return value;
    }
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  void Skip(size_t bytes) {
    if (!ok_ || left() < bytes) {
      ok_ = false;
      return;
    }
    pos_ += bytes;
  }
  void Fail() { ok_ = false; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Reads the sample_id trailer from the last SampleIdBytes() of a record body; shrinks `body`
// to what precedes it.
bool ReadSampleId(const RecordLayout& layout, const uint8_t* body, size_t* body_size,
                  SampleId* sid) {
  const uint32_t trailer = layout.SampleIdBytes();
  if (trailer == 0) return true;
  if (*body_size < trailer) return false;
  *body_size -= trailer;
  Cursor cursor(body + *body_size, trailer);
  const uint64_t type = layout.sample_type;
  if (type & kSampleTid) {
    sid->pid = cursor.Read<uint32_t>();
    sid->tid = cursor.Read<uint32_t>();
  }
  if (type & kSampleTime) {
    sid->time = cursor.Read<uint64_t>();
    sid->has_time = true;
  }
  if (type & kSampleId) sid->id = cursor.Read<uint64_t>();
  if (type & kSampleStreamId) cursor.Read<uint64_t>();
  if (type & kSampleCpu) {
    sid->cpu = cursor.Read<uint32_t>();
    cursor.Read<uint32_t>();
  }
  if (type & kSampleIdentifier) sid->id = cursor.Read<uint64_t>();
  return cursor.ok();
}

// A NUL-terminated string in a padded field: the text up to the first NUL, which must exist.
bool ReadString(Cursor& cursor, std::string_view* out) {
  const size_t left = cursor.left();
  const auto* start = reinterpret_cast<const char*>(cursor.here());
  const void* nul = std::memchr(start, 0, left);
  if (nul == nullptr) return false;
  *out = std::string_view(start, static_cast<size_t>(static_cast<const char*>(nul) - start));
  cursor.Skip(left);
  return true;
}

bool ParseSample(const RecordLayout& layout, uint16_t misc, const uint8_t* body, size_t size,
                 PerfSample* sample) {
  Cursor cursor(body, size);
  const uint64_t type = layout.SampleTypeOf(body, size);
  sample->misc = misc;
  if (type & kSampleIdentifier) sample->id = cursor.Read<uint64_t>();
  if (type & kSampleIp) sample->ip = cursor.Read<uint64_t>();
  if (type & kSampleTid) {
    // pid and tid with one store: the router copies them with one 8-byte load, which two 4-byte
    // stores could not forward (a stall per sample; DEVELOPMENT.md, hot paths).
    const uint64_t pid_tid = cursor.Read<uint64_t>();
    static_assert(offsetof(PerfSample, tid) == offsetof(PerfSample, pid) + 4 && std::endian::native == std::endian::little);
    std::memcpy(&sample->pid, &pid_tid, sizeof pid_tid);
  }
  if (type & kSampleTime) sample->time = cursor.Read<uint64_t>();
  if (type & kSampleAddr) cursor.Read<uint64_t>();
  if (type & kSampleId) sample->id = cursor.Read<uint64_t>();
  if (type & kSampleStreamId) cursor.Read<uint64_t>();
  if (type & kSampleCpu) {
    sample->cpu = cursor.Read<uint32_t>();
    cursor.Read<uint32_t>();
  }
  if (type & kSamplePeriod) sample->period = cursor.Read<uint64_t>();
  if (type & kSampleCallchain) {
    const uint64_t nr = cursor.Read<uint64_t>();
    if (!cursor.ok() || nr > cursor.left() / 8) return false;
    // The buffer is 8-byte aligned (ParseRecords guarantees it) and so is every record.
    sample->callchain = std::span<const uint64_t>(
        reinterpret_cast<const uint64_t*>(cursor.here()), static_cast<size_t>(nr));
    cursor.Skip(static_cast<size_t>(nr) * 8);
  }
  if (type & kSampleRaw) {
    // A u32 size, then that many bytes (the kernel pads size + data to a multiple of 8).
    const uint32_t raw_size = cursor.Read<uint32_t>();
    if (!cursor.ok() || raw_size > cursor.left()) return false;
    sample->raw = std::span<const uint8_t>(cursor.here(), raw_size);
    cursor.Skip(raw_size);
  }
  return cursor.ok();
}

// An MMAP2 record: a mapping with its file's identity (device and inode, or build-id).
bool ParseMmap2(const RecordLayout& layout, uint16_t misc, const uint8_t* body, size_t size, RecordVisitor& visitor) {
  PerfMmap2 record;
  if (!ReadSampleId(layout, body, &size, &record.sid)) return false;
  Cursor cursor(body, size);
  record.misc = misc;
  record.pid = cursor.Read<uint32_t>();
  record.tid = cursor.Read<uint32_t>();
  record.addr = cursor.Read<uint64_t>();
  record.len = cursor.Read<uint64_t>();
  record.pgoff = cursor.Read<uint64_t>();
  if (misc & kMiscMmapBuildId) {
    const auto id_size = cursor.Read<uint8_t>();
    cursor.Skip(3);
    uint8_t id[20];
    for (uint8_t& byte : id) byte = cursor.Read<uint8_t>();
    if (id_size > sizeof id) return false;
    static constexpr char kHex[] = "0123456789abcdef";
    for (uint8_t i = 0; i < id_size; ++i) {
      record.build_id += kHex[id[i] >> 4];
      record.build_id += kHex[id[i] & 0xF];
    }
  } else {
    record.maj = cursor.Read<uint32_t>();
    record.min = cursor.Read<uint32_t>();
    record.ino = cursor.Read<uint64_t>();
    record.ino_generation = cursor.Read<uint64_t>();
  }
  record.prot = cursor.Read<uint32_t>();
  record.flags = cursor.Read<uint32_t>();
  if (!cursor.ok() || !ReadString(cursor, &record.filename)) return false;
  visitor.OnMmap2(record);
  return true;
}

bool ParseOne(const RecordLayout& layout, uint32_t type, uint16_t misc, const uint8_t* body,
              size_t size, RecordVisitor& visitor, bool* known) {
  *known = true;
  switch (static_cast<RecordType>(type)) {
    case RecordType::kSample: {
      PerfSample sample;
      if (!ParseSample(layout, misc, body, size, &sample)) return false;
      visitor.OnSample(sample);
      return true;
    }
    case RecordType::kMmap2:
      return ParseMmap2(layout, misc, body, size, visitor);
    case RecordType::kComm: {
      PerfComm record;
      if (!ReadSampleId(layout, body, &size, &record.sid)) return false;
      Cursor cursor(body, size);
      record.pid = cursor.Read<uint32_t>();
      record.tid = cursor.Read<uint32_t>();
      record.exec = (misc & kMiscCommExec) != 0;
      if (!cursor.ok() || !ReadString(cursor, &record.comm)) return false;
      visitor.OnComm(record);
      return true;
    }
    case RecordType::kFork:
    case RecordType::kExit: {
      PerfTask record;
      if (!ReadSampleId(layout, body, &size, &record.sid)) return false;
      Cursor cursor(body, size);
      record.fork = type == static_cast<uint32_t>(RecordType::kFork);
      record.pid = cursor.Read<uint32_t>();
      record.ppid = cursor.Read<uint32_t>();
      record.tid = cursor.Read<uint32_t>();
      record.ptid = cursor.Read<uint32_t>();
      record.time = cursor.Read<uint64_t>();
      if (!cursor.ok() || cursor.left() != 0) return false;
      visitor.OnTask(record);
      return true;
    }
    case RecordType::kLost: {
      PerfLost record;
      if (!ReadSampleId(layout, body, &size, &record.sid)) return false;
      Cursor cursor(body, size);
      record.id = cursor.Read<uint64_t>();
      record.lost = cursor.Read<uint64_t>();
      if (!cursor.ok() || cursor.left() != 0) return false;
      visitor.OnLost(record);
      return true;
    }
    case RecordType::kThrottle:
    case RecordType::kUnthrottle: {
      PerfThrottle record;
      if (!ReadSampleId(layout, body, &size, &record.sid)) return false;
      Cursor cursor(body, size);
      record.throttle = type == static_cast<uint32_t>(RecordType::kThrottle);
      record.time = cursor.Read<uint64_t>();
      record.id = cursor.Read<uint64_t>();
      record.stream_id = cursor.Read<uint64_t>();
      if (!cursor.ok() || cursor.left() != 0) return false;
      visitor.OnThrottle(record);
      return true;
    }
    case RecordType::kLostSamples: {
      PerfLostSamples record;
      if (!ReadSampleId(layout, body, &size, &record.sid)) return false;
      Cursor cursor(body, size);
      record.lost = cursor.Read<uint64_t>();
      if (!cursor.ok() || cursor.left() != 0) return false;
      visitor.OnLostSamples(record);
      return true;
    }
    case RecordType::kSwitch:
    case RecordType::kSwitchCpuWide: {
      PerfSwitch record;
      if (!ReadSampleId(layout, body, &size, &record.sid)) return false;
      Cursor cursor(body, size);
      record.out = (misc & kMiscSwitchOut) != 0;
      if (type == static_cast<uint32_t>(RecordType::kSwitchCpuWide)) {
        record.other_pid = cursor.Read<uint32_t>();
        record.other_tid = cursor.Read<uint32_t>();
      }
      if (!cursor.ok() || cursor.left() != 0) return false;
      visitor.OnSwitch(record);
      return true;
    }
    case RecordType::kMmap:
      break;  // not asked for (mmap2 is)
  }
  *known = false;
  return true;
}

}  // namespace

namespace {

// The time a record is ordered by, as the parsers above read it, without parsing the rest: a
// sample's TIME field; FORK/EXIT and THROTTLE/UNTHROTTLE their own time; other records their
// sample_id trailer's. False for a record without one (an unknown type, no TIME asked for) or
// too short to hold it.
bool TimeOf(const RecordLayout& layout, uint32_t type, const uint8_t* body, size_t size, uint64_t* time) {
  uint64_t sample_type = layout.sample_type;
  size_t offset = 0;
  switch (static_cast<RecordType>(type)) {
    case RecordType::kSample:
      sample_type = layout.SampleTypeOf(body, size);
      if (!(sample_type & kSampleTime)) return false;
      offset = (sample_type & kSampleIdentifier ? 8 : 0) + (sample_type & kSampleIp ? 8 : 0) +
               (sample_type & kSampleTid ? 8 : 0);
      break;
    case RecordType::kThrottle:
    case RecordType::kUnthrottle: {
      const uint32_t trailer = layout.SampleIdBytes();
      if (size < trailer) return false;
      offset = 0;
      break;
    }
    case RecordType::kFork:
    case RecordType::kExit:
      if (!(sample_type & kSampleTime) || !layout.sample_id_all) {
        offset = 16;  // pid, ppid, tid, ptid, then the record's own time
        break;
      }
      [[fallthrough]];
    case RecordType::kMmap2:
    case RecordType::kComm:
    case RecordType::kLost:
    case RecordType::kLostSamples:
    case RecordType::kSwitch:
    case RecordType::kSwitchCpuWide: {
      if (!(sample_type & kSampleTime) || !layout.sample_id_all) return false;
      const uint32_t trailer = layout.SampleIdBytes();
      if (size < trailer) return false;
      offset = size - trailer + (sample_type & kSampleTid ? 8 : 0);
      break;
    }
    default:
      return false;
  }
  if (offset + 8 > size) return false;
  std::memcpy(time, body + offset, 8);
  return true;
}

}  // namespace

void HeldRecord::Replay(RecordVisitor& visitor) const {
  switch (kind) {
    case kNone: break;
    case kSample: visitor.OnSample(sample); break;
    case kMmap2: visitor.OnMmap2(mmap); break;
    case kComm: visitor.OnComm(comm); break;
    case kTask: visitor.OnTask(task); break;
    case kLost: visitor.OnLost(lost); break;
    case kThrottle: visitor.OnThrottle(throttle); break;
    case kLostSamples: visitor.OnLostSamples(lost_samples); break;
    case kSwitch: visitor.OnSwitch(context_switch); break;
  }
}

bool HeldRecord::Advance(RecordReader& reader) {
  kind = kNone;
  while (reader.Next(*this)) {
    if (kind != kNone) return true;
  }
  return false;
}

RingScan ScanRecords(std::span<const uint8_t> bytes, const RecordLayout& layout, bool check_order) {
  RingScan scan;
  uint64_t last = 0;
  size_t pos = 0;
  while (bytes.size() - pos >= sizeof(perf_event_header)) {
    perf_event_header header;
    std::memcpy(&header, bytes.data() + pos, sizeof header);
    if (header.size < sizeof header || header.size > bytes.size() - pos) break;  // the parser says so
    switch (static_cast<RecordType>(header.type)) {
      case RecordType::kMmap2:
      case RecordType::kComm:
      case RecordType::kFork:
      case RecordType::kExit:
        scan.side_band = true;
        break;
      default:
        break;
    }
    uint64_t time = 0;
    if (check_order && scan.in_order &&
        TimeOf(layout, header.type, bytes.data() + pos + sizeof header, header.size - sizeof header, &time)) {
      scan.in_order = time >= last;
      last = time;
    }
    pos += header.size;
  }
  return scan;
}


RecordReader::RecordReader(std::span<const uint8_t> bytes, const RecordLayout& layout)
    : bytes_(bytes), layout_(layout) {
  if (!layout_.Supported()) {
    stats_.malformed = bytes_.empty() ? 0 : 1;
    stats_.dropped_bytes = bytes_.size();
    pos_ = bytes_.size();
    return;
  }
  // Callchains are handed out as spans of u64: parse from 8-byte-aligned memory.
  if (reinterpret_cast<uintptr_t>(bytes_.data()) % alignof(uint64_t) != 0) {
    aligned_.resize((bytes_.size() + 7) / 8);
    std::memcpy(aligned_.data(), bytes_.data(), bytes_.size());
    bytes_ = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(aligned_.data()), bytes_.size());
  }
}

bool RecordReader::Next(RecordVisitor& visitor) {
  while (pos_ < bytes_.size()) {
    const size_t left = bytes_.size() - pos_;
    perf_event_header header;
    if (left < sizeof header) {
      ++stats_.malformed;
      stats_.dropped_bytes += left;
      pos_ = bytes_.size();
      return false;
    }
    std::memcpy(&header, bytes_.data() + pos_, sizeof header);
    // The kernel writes whole records of a multiple of 8 bytes; anything else is garbage.
    if (header.size < sizeof header || header.size > left || header.size % 8 != 0) {
      ++stats_.malformed;
      stats_.dropped_bytes += left;
      pos_ = bytes_.size();
      return false;
    }
    bool known = true;
    const uint8_t* body = bytes_.data() + pos_ + sizeof header;
    const size_t body_size = header.size - sizeof header;
    pos_ += header.size;
    if (!ParseOne(layout_, header.type, header.misc, body, body_size, visitor, &known)) {
      // A record whose own size is plausible but whose body is not: skip just this one.
      ++stats_.malformed;
      stats_.dropped_bytes += header.size;
      continue;
    }
    ++stats_.records;
    if (!known) ++stats_.unknown;
    return true;
  }
  return false;
}

ParseStats ParseRecords(std::span<const uint8_t> bytes, const RecordLayout& layout,
                        RecordVisitor& visitor) {
  RecordReader reader(bytes, layout);
  while (reader.Next(visitor)) {
  }
  return reader.stats();
}

}  // namespace hvprof::linux_host
