#include "hvprof/agent/ring_reader.h"

namespace hvprof::agent {

namespace ring = hvpmu::ring;
namespace legacy = hvpmu::legacy;

RingReader::RingReader(ring::RingHeader* header, uint32_t capacity)
    : header_(header),
      slots_(reinterpret_cast<const uint8_t*>(header) + ring::kHeaderSize),
      capacity_(capacity),
      tail_(ring::LoadAcquire(&header->tail)) {}

Result<RingReader> RingReader::Attach(void* base, uint64_t bytes, uint32_t expected_capacity) {
  if (base == nullptr || bytes < ring::kHeaderSize) {
    return MakeError(ErrorKind::kCorrupt, "ring mapping of {} bytes is smaller than its header",
                     bytes);
  }
  auto* header = static_cast<ring::RingHeader*>(base);
  if (header->magic != ring::kMagic) {
    return MakeError(ErrorKind::kCorrupt, "ring has magic {:#x}, expected {:#x}", header->magic,
                     ring::kMagic);
  }
  const bool sched = header->version == ring::kVersionSched && (header->flags & ring::kRingHasSched) != 0;
  if (header->version != ring::kVersion && !sched) {
    return MakeError(ErrorKind::kUnsupported, "ring ABI version {} is not supported (want {}, or {} for scheduling)",
                     header->version, ring::kVersion, ring::kVersionSched);
  }
  if (header->header_bytes != ring::kHeaderSize || header->record_size != ring::kRecordSize) {
    return MakeError(ErrorKind::kCorrupt, "ring header size {} or record size {} is not {}/{}",
                     header->header_bytes, header->record_size, ring::kHeaderSize,
                     ring::kRecordSize);
  }
  const uint32_t capacity = header->capacity;
  if (capacity != expected_capacity || capacity == 0 || (capacity & (capacity - 1)) != 0) {
    return MakeError(ErrorKind::kCorrupt, "ring capacity {} differs from the {} the engine reported",
                     capacity, expected_capacity);
  }
  if (ring::RingBytes(capacity) > bytes) {
    return MakeError(ErrorKind::kCorrupt, "ring of {} slots does not fit its {}-byte mapping",
                     capacity, bytes);
  }
  return RingReader(header, capacity);
}

uint64_t RingReader::Pending() const {
  const uint64_t head = ring::LoadAcquire(&header_->head);
  return head >= tail_ ? head - tail_ : 0;
}

LegacyRingReader::LegacyRingReader(legacy::XenoprofBuf* buf, uint32_t size)
    : buf_(buf),
      log_(reinterpret_cast<const legacy::EventLog*>(reinterpret_cast<uint8_t*>(buf) +
                                                     legacy::kBufHeaderSize)),
      size_(size),
      tail_(0) {
  Resync();
}

void LegacyRingReader::Resync() {
  const uint32_t tail = __atomic_load_n(&buf_->event_tail, __ATOMIC_ACQUIRE);
  tail_ = tail < size_ ? tail : 0;
  in_group_ = have_sample_ = expect_sample_ = false;
  pending_frames_ = 0;
}

uint32_t LegacyRingReader::Pending() const {
  const uint32_t head = __atomic_load_n(&buf_->event_head, __ATOMIC_ACQUIRE);
  if (head >= size_) return 0;
  return head >= tail_ ? head - tail_ : size_ - tail_ + head;
}

Result<LegacyRingReader> LegacyRingReader::Attach(void* base, uint64_t bytes, uint32_t size) {
  if (base == nullptr || size < 2) {
    return MakeError(ErrorKind::kCorrupt, "legacy ring of {} records cannot hold a sample", size);
  }
  const uint64_t needed = legacy::kBufHeaderSize + uint64_t{size} * sizeof(legacy::EventLog);
  if (needed > bytes) {
    return MakeError(ErrorKind::kCorrupt, "legacy ring of {} records needs {} bytes, mapping has {}",
                     size, needed, bytes);
  }
  return LegacyRingReader(static_cast<legacy::XenoprofBuf*>(base), size);
}

}  // namespace hvprof::agent
