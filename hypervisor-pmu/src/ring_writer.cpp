#include "hvpmu/ring_writer.h"

#include "freestanding.h"
#include "ring_writer_inline.h"

namespace hvpmu {
namespace {

using ring::LossReason;

using detail::HeaderOf;
legacy::XenoprofBuf* LegacyOf(uint8_t* base) {
  return reinterpret_cast<legacy::XenoprofBuf*>(base);
}

// A relaxed "load, add one, store" for counters with a single writer that others read.
inline uint64_t BumpCounter(uint64_t* counter) {
  uint64_t value = __atomic_load_n(counter, __ATOMIC_RELAXED) + 1;
  __atomic_store_n(counter, value, __ATOMIC_RELAXED);
  return value;
}

uint8_t LegacyMode(ring::Mode mode) {
  switch (mode) {
    case ring::Mode::kUser: return legacy::kModeUser;
    case ring::Mode::kKernel: return legacy::kModeKernel;
    case ring::Mode::kHypervisor: return legacy::kModeXen;
  }
  return legacy::kModeXen;
}

}  // namespace

void RingWriter::AttachV2(void* base, uint32_t capacity, uint32_t watermark, DomainId domain,
                          uint16_t index, ring::RingKind kind, bool sched) {
  format_ = RingFormat::kV2;
  base_ = static_cast<uint8_t*>(base);
  capacity_ = capacity;
  watermark_ = watermark;
  ring::RingHeader* header = HeaderOf(base_);
  header->magic = ring::kMagic;
  header->version = sched ? ring::kVersionSched : ring::kVersion;
  header->ring_kind = static_cast<uint16_t>(kind);
  header->header_bytes = ring::kHeaderSize;
  header->record_size = ring::kRecordSize;
  header->capacity = capacity;
  header->domain = domain;
  header->index = index;
  header->watermark = watermark;
  header->flags = sched ? ring::kRingHasSched : 0;
  Reset();
}

void RingWriter::AttachLegacy(void* base, uint32_t size, uint32_t watermark, uint32_t vcpu_id) {
  format_ = RingFormat::kLegacy;
  base_ = static_cast<uint8_t*>(base);
  capacity_ = size;
  watermark_ = watermark;
  legacy::XenoprofBuf* buf = LegacyOf(base_);
  buf->event_size = size;
  buf->vcpu_id = vcpu_id;
  Reset();
}

void RingWriter::Detach() {
  format_ = RingFormat::kNone;
  base_ = nullptr;
  capacity_ = 0;
  head_ = 0;
}

void RingWriter::Reset() {
  head_ = 0;
  told_tail_ = 0;
  notify_armed_ = true;
  sched_pending_lost_ = 0;
  sched_first_lost_ns_ = 0;
  stats_ = RingStats{};
  if (format_ == RingFormat::kV2) {
    ring::RingHeader* header = HeaderOf(base_);
    ring::StoreRelaxed(&header->tail, 0);
    ring::StoreRelease(&header->head, 0);
    for (uint64_t& count : header->samples) ring::StoreRelaxed(&count, 0);
    for (uint64_t& count : header->lost) ring::StoreRelaxed(&count, 0);
    ring::StoreRelaxed(&header->notifications, 0);
    ring::StoreRelaxed(&header->sched_written, 0);
    for (uint64_t& count : header->sched_lost) ring::StoreRelaxed(&count, 0);
  } else if (format_ == RingFormat::kLegacy) {
    legacy::XenoprofBuf* buf = LegacyOf(base_);
    __atomic_store_n(&buf->event_tail, 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&buf->event_head, 0u, __ATOMIC_RELEASE);
    buf->xen_samples = buf->kernel_samples = buf->user_samples = buf->lost_samples = 0;
  }
}

RingWriter::Result RingWriter::Write(const SampleToWrite& sample, bool* notify) {
  return WriteInline(sample, notify);
}

void RingWriter::CountLoss(LossReason reason) {
  const auto index = static_cast<uint32_t>(reason);
  const uint64_t value = BumpCounter(&stats_.lost[index]);
  if (format_ == RingFormat::kV2) {
    ring::StoreRelaxed(&HeaderOf(base_)->lost[index], value);
  } else if (reason == LossReason::kRingFull) {
    __atomic_store_n(&LegacyOf(base_)->lost_samples, value, __ATOMIC_RELAXED);
  }
}

void RingWriter::CountSample(ring::Mode mode) {
  const auto index = static_cast<uint32_t>(mode);
  const uint64_t value = BumpCounter(&stats_.samples[index]);
  if (format_ == RingFormat::kV2) {
    ring::StoreRelaxed(&HeaderOf(base_)->samples[index], value);
    return;
  }
  legacy::XenoprofBuf* buf = LegacyOf(base_);
  uint64_t* field = mode == ring::Mode::kUser     ? &buf->user_samples
                    : mode == ring::Mode::kKernel ? &buf->kernel_samples
                                                  : &buf->xen_samples;
  __atomic_store_n(field, value, __ATOMIC_RELAXED);
}

void RingWriter::PublishLoss(LossReason reason, uint64_t count) {
  if (format_ == RingFormat::kV2) {
    ring::StoreRelaxed(&HeaderOf(base_)->lost[static_cast<uint32_t>(reason)], count);
  }
}

void RingWriter::UpdateNotify(uint64_t fill, uint64_t tail, bool* notify) {
  if (fill > __atomic_load_n(&stats_.max_fill, __ATOMIC_RELAXED)) {
    __atomic_store_n(&stats_.max_fill, fill, __ATOMIC_RELAXED);
  }
  if (tail != told_tail_) notify_armed_ = true;  // the consumer made progress since
  if (!notify_armed_ || fill < watermark_) return;
  notify_armed_ = false;
  told_tail_ = tail;
  *notify = true;
  const uint64_t sent = BumpCounter(&stats_.notifications);
  if (format_ == RingFormat::kV2) ring::StoreRelaxed(&HeaderOf(base_)->notifications, sent);
}

void RingWriter::CountSchedLoss(LossReason reason, uint64_t time_ns) {
  const auto index = static_cast<uint32_t>(reason);
  ring::StoreRelaxed(&HeaderOf(base_)->sched_lost[index], BumpCounter(&stats_.sched_lost[index]));
  if (sched_pending_lost_++ == 0) sched_first_lost_ns_ = time_ns;
}

RingWriter::Result RingWriter::WriteSched(const ring::SchedRecord& record, uint16_t pcpu, bool* notify) {
  // A gap is reported where it is: a kLost record before the next record that fits, in the
  // same group, so that the two are published together or not at all.
  const uint32_t group = sched_pending_lost_ != 0 ? 2 : 1;
  const Reservation room = Reserve(group);
  if (room.result != Result::kWritten) {
    CountSchedLoss(room.result == Result::kFull ? LossReason::kRingFull : LossReason::kCorruptIndex, record.time_ns);
    return room.result;
  }
  uint32_t slot = room.slot;
  if (sched_pending_lost_ != 0) {
    auto* lost = reinterpret_cast<ring::SchedRecord*>(Slot(slot));
    __builtin_memset(lost, 0, sizeof *lost);
    lost->kind = static_cast<uint8_t>(ring::RecordKind::kSched);
    lost->type = static_cast<uint8_t>(ring::SchedType::kLost);
    lost->slots = 1;
    lost->pcpu = pcpu;
    lost->time_ns = record.time_ns;
    lost->domain = kDomainInvalid;
    lost->pid = lost->tid = lost->other_pid = lost->other_tid = ring::kNoPid;
    lost->from_pcpu = lost->to_pcpu = ring::kUnknownPcpu;
    lost->count = sched_pending_lost_;
    lost->aux = sched_first_lost_ns_;
    slot = (slot + 1) & (capacity_ - 1);
  }
  auto* out = reinterpret_cast<ring::SchedRecord*>(Slot(slot));
  __builtin_memcpy(out, &record, sizeof record);
  out->kind = static_cast<uint8_t>(ring::RecordKind::kSched);
  out->slots = 1;
  out->pcpu = pcpu;
  out->reserved0 = 0;

  const uint64_t fill = Publish(room, group);
  sched_pending_lost_ = 0;
  ring::StoreRelaxed(&HeaderOf(base_)->sched_written, BumpCounter(&stats_.sched_written));
  UpdateNotify(fill, room.tail, notify);
  return Result::kWritten;
}

uint64_t RingWriter::Fill() const {
  if (base_ == nullptr) return 0;
  if (format_ == RingFormat::kV2) {
    const uint64_t tail = ring::LoadAcquire(&HeaderOf(base_)->tail);
    return tail > head_ || head_ - tail > capacity_ ? capacity_ : head_ - tail;
  }
  const uint32_t tail = __atomic_load_n(&LegacyOf(base_)->event_tail, __ATOMIC_ACQUIRE);
  const auto head = static_cast<uint32_t>(head_);
  if (tail >= capacity_) return capacity_;
  return head >= tail ? head - tail : capacity_ - tail + head;
}

RingWriter::Result RingWriter::WriteLegacy(const SampleToWrite& sample, bool* notify) {
  legacy::XenoprofBuf* buf = LegacyOf(base_);
  const uint32_t size = capacity_;
  const uint32_t tail = __atomic_load_n(&buf->event_tail, __ATOMIC_ACQUIRE);
  uint32_t head = static_cast<uint32_t>(head_);
  if (tail >= size) {
    CountLoss(LossReason::kCorruptIndex);
    return Result::kCorruptIndex;
  }
  // One slot always stays empty, so a full ring (head + 1 == tail) differs from an empty one.
  uint32_t free_slots = (tail > head ? 0 : size) + tail - head - 1;
  const bool group = sample.backtrace_group;
  if (free_slots < (group ? 2u : 1u)) {
    CountLoss(LossReason::kRingFull);
    return Result::kFull;
  }

  auto* log = reinterpret_cast<legacy::EventLog*>(base_ + legacy::kBufHeaderSize);
  const uint8_t mode = LegacyMode(sample.mode);
  auto put = [&](uint64_t eip, uint8_t event) {
    legacy::EventLog entry{};
    entry.eip = eip;
    entry.mode = mode;
    entry.event = event;
    __builtin_memcpy(&log[head], &entry, sizeof entry);
    head = head + 1 == size ? 0 : head + 1;
    --free_slots;
  };
  if (group) put(legacy::kEscapeCode, legacy::kTraceBegin);
  put(sample.ip, sample.event);
  for (uint32_t i = 0; group && i < sample.nframes && free_slots > 0; ++i) {
    if (sample.frames[i] == legacy::kEscapeCode) break;  // would read as a group start
    put(sample.frames[i], 0);
  }

  __atomic_store_n(&buf->event_head, head, __ATOMIC_RELEASE);
  head_ = head;
  CountSample(sample.mode);
  const uint32_t fill = head >= tail ? head - tail : size - tail + head;
  UpdateNotify(fill, tail, notify);
  return Result::kWritten;
}

}  // namespace hvpmu
