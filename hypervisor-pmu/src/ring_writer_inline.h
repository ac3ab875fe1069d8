// The v2 sample writer, inline: included by the engine's sample path (sample_path.cpp) as well
// as ring_writer.cpp, so that LogSample's SampleToWrite never goes through memory. Built on the
// stack and passed to another file, it was reloaded with 16-byte loads spanning two 8-byte stores
// (ip and time), which cannot be forwarded from the store buffer: a stall on every sample (half
// of WriteV2's time on a live host).
#pragma once

#include "freestanding.h"
#include "hvpmu/ring_writer.h"

namespace hvpmu {
namespace detail {

inline ring::RingHeader* HeaderOf(uint8_t* base) { return reinterpret_cast<ring::RingHeader*>(base); }

}  // namespace detail

inline uint8_t* RingWriter::Slot(uint32_t slot) const {
  return base_ + ring::kHeaderSize + uint64_t{slot} * ring::kRecordSize;
}

inline RingWriter::Reservation RingWriter::Reserve(uint32_t group) {
  const uint64_t tail = ring::LoadAcquire(&detail::HeaderOf(base_)->tail);  // the only read of shared memory
  const uint64_t head = head_;
  if (tail > head || head - tail > capacity_) return {Result::kCorruptIndex, tail, 0, 0};
  const uint32_t mask = capacity_ - 1;
  const uint32_t position = static_cast<uint32_t>(head) & mask;
  const uint32_t pad = position + group > capacity_ ? capacity_ - position : 0;
  if (pad + group > capacity_ - (head - tail)) return {Result::kFull, tail, 0, 0};
  if (pad != 0) {
    auto* pad_record = reinterpret_cast<ring::PadRecord*>(Slot(position));
    __builtin_memset(pad_record, 0, sizeof *pad_record);
    pad_record->kind = static_cast<uint8_t>(ring::RecordKind::kPad);
    pad_record->slots = pad;
  }
  return {Result::kWritten, tail, pad, (position + pad) & mask};
}

inline uint64_t RingWriter::Publish(const Reservation& room, uint32_t group) {
  const uint64_t new_head = head_ + room.pad + group;
  ring::StoreRelease(&detail::HeaderOf(base_)->head, new_head);
  head_ = new_head;
  return new_head - room.tail;
}

// Always inlined: its caller's SampleToWrite stays in registers (GCC judged it too large to inline).
__attribute__((always_inline)) inline RingWriter::Result RingWriter::WriteV2(const SampleToWrite& sample, bool* notify) {
  const uint32_t nframes = sample.nframes < ring::kMaxBacktraceDepth ? sample.nframes
                                                                     : ring::kMaxBacktraceDepth;
  const uint32_t group = 1 + ring::FrameRecordsFor(nframes);
  const Reservation room = Reserve(group);
  if (room.result != Result::kWritten) {
    CountLoss(room.result == Result::kFull ? ring::LossReason::kRingFull : ring::LossReason::kCorruptIndex);
    return room.result;
  }
  const uint32_t mask = capacity_ - 1;
  uint32_t slot = room.slot;

  // Written in place, field by field: building it on the stack and copying it costs a
  // store-forwarding stall on the reload.
  auto* record = reinterpret_cast<ring::SampleRecord*>(Slot(slot));
  record->kind = static_cast<uint8_t>(ring::RecordKind::kSample);
  record->mode = static_cast<uint8_t>(sample.mode);
  record->event = sample.event;
  record->nframes = static_cast<uint8_t>(nframes);
  record->flags = sample.flags;
  record->pcpu = sample.pcpu;
  record->ip = sample.ip;
  record->time_ns = sample.time_ns;
  record->period = sample.period;
  record->address_space = sample.address_space;
  record->pid = sample.pid;
  record->tid = sample.tid;
  record->domain = sample.domain;
  record->vcpu = sample.vcpu;
  record->reserved0 = 0;
  record->reserved1 = 0;

  for (uint32_t done = 0; done < nframes; done += ring::kFramesPerRecord) {
    slot = (slot + 1) & mask;
    auto* frames = reinterpret_cast<ring::FramesRecord*>(Slot(slot));
    const uint32_t left = nframes - done;
    const uint32_t count = left < ring::kFramesPerRecord ? left : ring::kFramesPerRecord;
    frames->kind = static_cast<uint8_t>(ring::RecordKind::kFrames);
    frames->count = static_cast<uint8_t>(count);
    for (uint8_t& byte : frames->reserved) byte = 0;
    for (uint32_t i = 0; i < ring::kFramesPerRecord; ++i) {
      frames->ip[i] = i < count ? sample.frames[done + i] : 0;
    }
  }

  const uint64_t fill = Publish(room, group);
  CountSample(sample.mode);
  UpdateNotify(fill, room.tail, notify);
  return Result::kWritten;
}

__attribute__((always_inline)) inline RingWriter::Result RingWriter::WriteInline(const SampleToWrite& sample, bool* notify) {
  if (format_ == RingFormat::kV2) return WriteV2(sample, notify);
  // A copy for the out-of-line legacy writer: were `sample` itself passed, its address would
  // escape, the caller would keep it in memory, and the v2 path would reload it from there.
  const SampleToWrite legacy = sample;
  return WriteLegacy(legacy, notify);
}

}  // namespace hvpmu
