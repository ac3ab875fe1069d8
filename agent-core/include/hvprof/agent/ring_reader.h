// Consumers of the engine's rings, in both formats. A reader keeps its own copy of the
// consumer index, validates everything it reads from shared memory, and publishes the new
// tail with release ordering once the records are copied out. See docs/abi.md.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "hvpmu/abi/ring.h"
#include "hvpmu/abi/xenoprof_legacy.h"
#include "hvprof/base/result.h"
#include "hvprof/facts/sample.h"

namespace hvprof::agent {

// What one drain saw. `malformed` counts slots or records that broke the format and were
// skipped; it should always be 0 with a well-behaved producer.
struct DrainStats {
  uint64_t samples = 0;
  uint64_t slots = 0;      // slots (v2) or records (legacy) consumed
  uint64_t malformed = 0;
  uint64_t sched = 0;          // scheduling records (v3 rings)
  uint64_t sched_unknown = 0;  // scheduling records of a type this reader does not know: skipped
};

// The largest scheduling record group a reader accepts (slots); a longer one is malformed.
inline constexpr uint32_t kMaxSchedSlots = 8;

class RingReader {
 public:
  // Checks the header of a v2 ring (or a v3 scheduling ring) mapped at `base` (`bytes` long)
  // against the capacity the engine reported, and positions the reader at the ring's current
  // tail.
  static Result<RingReader> Attach(void* base, uint64_t bytes, uint32_t expected_capacity);

  // Calls on_sample(const hvpmu::ring::SampleRecord&, std::span<const uint64_t> frames) for
  // every published sample and on_sched(const hvpmu::ring::SchedRecord&) for every scheduling
  // record of a known type, in order, then publishes the tail. At most `max_slots` slots are
  // consumed (to throttle or to bound work per call).
  template <typename OnSample, typename OnSched>
  DrainStats DrainRecords(OnSample&& on_sample, OnSched&& on_sched, uint64_t max_slots = UINT64_MAX);
  // Samples only: scheduling records are counted in DrainStats::sched and dropped.
  template <typename OnSample>
  DrainStats Drain(OnSample&& on_sample, uint64_t max_slots = UINT64_MAX) {
    return DrainRecords(std::forward<OnSample>(on_sample), [](const hvpmu::ring::SchedRecord&) {}, max_slots);
  }
  // A version 3 ring: it holds scheduling records.
  bool sched() const { return header_->version == hvpmu::ring::kVersionSched; }

  // Published slots not yet consumed.
  uint64_t Pending() const;
  const hvpmu::ring::RingHeader& header() const { return *header_; }
  uint32_t capacity() const { return capacity_; }

 private:
  RingReader(hvpmu::ring::RingHeader* header, uint32_t capacity);
  const uint8_t* Slot(uint64_t index) const { return slots_ + (index & (capacity_ - 1)) * hvpmu::ring::kRecordSize; }

  hvpmu::ring::RingHeader* header_;
  const uint8_t* slots_;
  uint32_t capacity_;
  uint64_t tail_;
};

// One record of a legacy ring, after escape-group decoding: a sample with its backtrace.
struct LegacySample {
  uint64_t ip;
  uint8_t mode;   // hvpmu::legacy::Mode
  uint8_t event;  // counter index
  std::span<const uint64_t> frames;
};

class LegacyRingReader {
 public:
  // `size` is the ring size in records: Xen's event_size for this vCPU, computed by the
  // caller from get_buffer's bufsize ((bufsize - 48) / 16), never read from the ring.
  static Result<LegacyRingReader> Attach(void* base, uint64_t bytes, uint32_t size);

  // Calls on_sample(const LegacySample&) for every complete sample. With backtraces on, a
  // sample's frames run until the next escape record, so the last group is held back until
  // the next escape arrives or Flush is called.
  template <typename OnSample>
  DrainStats Drain(OnSample&& on_sample, uint64_t max_records = UINT64_MAX);
  template <typename OnSample>
  void Flush(OnSample&& on_sample);

  // Records published and not yet consumed; 0 while Xen's head is impossible.
  uint32_t Pending() const;
  // Takes the shared tail again. Xen zeroes both indices in get_buffer and enable_virq, so a
  // reader attached before those calls resyncs after them.
  void Resync();

  uint32_t size() const { return size_; }
  const hvpmu::legacy::XenoprofBuf& header() const { return *buf_; }

 private:
  LegacyRingReader(hvpmu::legacy::XenoprofBuf* buf, uint32_t size);

  hvpmu::legacy::XenoprofBuf* buf_;
  const hvpmu::legacy::EventLog* log_;
  uint32_t size_;
  uint32_t tail_;
  // The group being assembled (backtrace mode).
  bool in_group_ = false;
  bool have_sample_ = false;
  bool expect_sample_ = false;
  LegacySample pending_{};
  uint32_t pending_frames_ = 0;
  uint64_t frames_[hvpmu::ring::kMaxBacktraceDepth] = {};
};

// ---- implementation of the templates

template <typename OnSample, typename OnSched>
DrainStats RingReader::DrainRecords(OnSample&& on_sample, OnSched&& on_sched, uint64_t max_slots) {
  namespace ring = hvpmu::ring;
  DrainStats stats;
  const uint64_t head = ring::LoadAcquire(&header_->head);
  if (head < tail_ || head - tail_ > capacity_) {
    // The producer's index is impossible: resynchronise rather than read garbage.
    stats.malformed = 1;
    tail_ = head;
    ring::StoreRelease(&header_->tail, tail_);
    return stats;
  }
  const uint64_t limit = head - tail_ > max_slots ? tail_ + max_slots : head;
  uint64_t frames[ring::kMaxBacktraceDepth];
  uint64_t tail = tail_;
  while (tail < limit) {
    const uint8_t* slot = Slot(tail);
    const uint64_t position = tail & (capacity_ - 1);
    const auto kind = static_cast<ring::RecordKind>(slot[0]);
    if (kind == ring::RecordKind::kPad) {
      ring::PadRecord pad;
      __builtin_memcpy(&pad, slot, sizeof pad);
      if (pad.slots == 0 || pad.slots > capacity_ - position || tail + pad.slots > head) {
        ++stats.malformed;
        tail = head;
        break;
      }
      tail += pad.slots;
      stats.slots += pad.slots;
      continue;
    }
    if (kind == ring::RecordKind::kSched) {
      ring::SchedRecord record;
      __builtin_memcpy(&record, slot, sizeof record);
      const uint32_t group = record.slots;
      if (group == 0 || group > kMaxSchedSlots || position + group > capacity_ || tail + group > head) {
        ++stats.malformed;
        tail = head;
        break;
      }
      if (group > limit - tail) break;  // do not split a group at max_slots
      bool continued = true;
      for (uint32_t i = 1; i < group; ++i) {
        continued &= Slot(tail + i)[0] == static_cast<uint8_t>(ring::RecordKind::kSchedMore);
      }
      tail += group;
      stats.slots += group;
      if (!continued) {
        ++stats.malformed;
      } else if (record.type == 0 || record.type > ring::kMaxSchedType) {
        ++stats.sched_unknown;
      } else {
        ++stats.sched;
        on_sched(static_cast<const ring::SchedRecord&>(record));
      }
      continue;
    }
    if (kind != ring::RecordKind::kSample) {
      ++stats.malformed;
      ++tail;
      ++stats.slots;
      continue;
    }
    ring::SampleRecord sample;
    __builtin_memcpy(&sample, slot, sizeof sample);
    const uint32_t nframes = sample.nframes;
    const uint64_t group = 1 + ring::FrameRecordsFor(nframes);
    if (nframes > ring::kMaxBacktraceDepth || position + group > capacity_ ||
        tail + group > head) {
      ++stats.malformed;
      tail = head;
      break;
    }
    if (group > limit - tail) break;  // do not split a group at max_slots
    uint32_t got = 0;
    bool frames_ok = true;
    for (uint64_t i = 1; i < group; ++i) {
      ring::FramesRecord record;
      __builtin_memcpy(&record, Slot(tail + i), sizeof record);
      if (record.kind != static_cast<uint8_t>(ring::RecordKind::kFrames) || record.count == 0 ||
          record.count > ring::kFramesPerRecord || got + record.count > nframes) {
        frames_ok = false;
        break;
      }
      for (uint32_t k = 0; k < record.count; ++k) frames[got++] = record.ip[k];
    }
    tail += group;
    stats.slots += group;
    // A mode no engine writes is a corrupt record, not a hypervisor sample (as DrainLegacy
    // refuses one of the legacy rings).
    if (!frames_ok || got != nframes || !sample_mode::IsValid(sample.mode)) {
      ++stats.malformed;
      continue;
    }
    ++stats.samples;
    on_sample(static_cast<const ring::SampleRecord&>(sample),
              std::span<const uint64_t>(frames, nframes));
  }
  tail_ = tail;
  ring::StoreRelease(&header_->tail, tail_);
  return stats;
}

template <typename OnSample>
DrainStats LegacyRingReader::Drain(OnSample&& on_sample, uint64_t max_records) {
  namespace legacy = hvpmu::legacy;
  DrainStats stats;
  const uint32_t head = __atomic_load_n(&buf_->event_head, __ATOMIC_ACQUIRE);
  if (head >= size_) {
    stats.malformed = 1;  // an impossible producer index: skip nothing, read nothing
    return stats;
  }
  uint32_t tail = tail_;
  while (tail != head && stats.slots < max_records) {
    legacy::EventLog entry;
    __builtin_memcpy(&entry, &log_[tail], sizeof entry);
    tail = tail + 1 == size_ ? 0 : tail + 1;
    ++stats.slots;
    if (entry.eip == legacy::kEscapeCode) {
      if (entry.event != legacy::kTraceBegin) {
        ++stats.malformed;
        continue;
      }
      if (have_sample_) {
        pending_.frames = std::span<const uint64_t>(frames_, pending_frames_);
        on_sample(static_cast<const LegacySample&>(pending_));
        ++stats.samples;
      }
      in_group_ = true;
      expect_sample_ = true;
      have_sample_ = false;
      pending_frames_ = 0;
      continue;
    }
    if (!in_group_) {
      pending_ = LegacySample{entry.eip, entry.mode, entry.event, {}};
      on_sample(static_cast<const LegacySample&>(pending_));
      ++stats.samples;
      continue;
    }
    if (expect_sample_) {
      pending_ = LegacySample{entry.eip, entry.mode, entry.event, {}};
      have_sample_ = true;
      expect_sample_ = false;
    } else if (have_sample_ && pending_frames_ < hvpmu::ring::kMaxBacktraceDepth) {
      frames_[pending_frames_++] = entry.eip;
    } else {
      ++stats.malformed;
    }
  }
  tail_ = tail;
  __atomic_store_n(&buf_->event_tail, tail_, __ATOMIC_RELEASE);
  return stats;
}

template <typename OnSample>
void LegacyRingReader::Flush(OnSample&& on_sample) {
  if (have_sample_) {
    pending_.frames = std::span<const uint64_t>(frames_, pending_frames_);
    on_sample(static_cast<const LegacySample&>(pending_));
  }
  have_sample_ = false;
  expect_sample_ = false;
  in_group_ = false;
  pending_frames_ = 0;
}

}  // namespace hvprof::agent
