// The producer side of one ring, in either format. Its state is private to the engine: the
// shared memory is written, and only the consumer's index is ever read back from it.
#pragma once

#include <cstdint>

#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"
#include "hvpmu/abi/xenoprof_legacy.h"

namespace hvpmu {

// Private statistics of one ring. Written by the ring's single producer; read with relaxed
// loads by the status op.
struct RingStats {
  uint64_t samples[ring::kModeCount] = {};
  uint64_t lost[ring::kLossSlots] = {};
  uint64_t notifications = 0;
  uint64_t max_fill = 0;
  uint64_t sched_written = 0;  // v3 rings: scheduling records
  uint64_t sched_lost[ring::kLossSlots] = {};
};

struct SampleToWrite {
  ring::Mode mode;
  uint8_t event;
  uint16_t flags;
  uint16_t pcpu;
  uint16_t domain;
  uint16_t vcpu;
  uint64_t ip;
  uint64_t time_ns;
  uint64_t period;
  uint64_t address_space;
  uint32_t pid;
  uint32_t tid;
  const uint64_t* frames;  // innermost first
  uint32_t nframes;
  bool backtrace_group;  // backtraces are on: a legacy ring gets an escape record first
};

class RingWriter {
 public:
  enum class Result : uint8_t { kWritten, kFull, kCorruptIndex };

  // Lays out a v2 ring at `base` (ring::RingBytes(capacity) bytes, zeroed); with `sched`, a v3
  // ring that also takes scheduling records (WriteSched).
  void AttachV2(void* base, uint32_t capacity, uint32_t watermark, DomainId domain,
                uint16_t index, ring::RingKind kind, bool sched = false);
  // Lays out a legacy ring at `base` (48 + 16 * size bytes) holding up to size - 1 records.
  void AttachLegacy(void* base, uint32_t size, uint32_t watermark, uint32_t vcpu_id);
  void Detach();
  bool attached() const { return base_ != nullptr; }
  RingFormat format() const { return format_; }

  // Empties the ring (both indices to 0) and clears its statistics. Only while the producer
  // is not writing to it.
  void Reset();

  // Writes one sample and its backtrace. `notify` is set when the consumer should be woken:
  // the fill level reached the watermark and the consumer has not been told since it last
  // made progress.
  Result Write(const SampleToWrite& sample, bool* notify);
  // The same, inlined into its caller: defined in src/ring_writer_inline.h, for the engine's
  // sample path.
  inline Result WriteInline(const SampleToWrite& sample, bool* notify);

  // Writes one scheduling record (v3 rings): `record` with everything but kind, slots and
  // pcpu, which the writer fills in. Records lost since the last one written (full ring,
  // corrupt index) are counted, and a kLost record telling how many goes in first.
  Result WriteSched(const ring::SchedRecord& record, uint16_t pcpu, bool* notify);

  // Records a loss that the ring itself did not cause (NoRing, UnprofiledDomain) in the
  // shared statistics, as the total `count` the engine keeps privately.
  void PublishLoss(ring::LossReason reason, uint64_t count);

  const RingStats& stats() const { return stats_; }
  uint32_t capacity() const { return capacity_; }
  // Slots (v2) or records (legacy) written and not yet consumed, as the consumer's index says
  // now; a corrupt index counts as full.
  uint64_t Fill() const;

 private:
  // Room for a group of `group` slots (a pad first where the array ends): the result, the
  // consumer's tail, and the slot the group starts at. Writes the pad; counts nothing.
  struct Reservation {
    Result result;
    uint64_t tail;
    uint32_t pad;
    uint32_t slot;
  };
  Reservation Reserve(uint32_t group);
  // Slot `slot` of the record array.
  uint8_t* Slot(uint32_t slot) const;
  // Hands the reserved group (and its pad) to the consumer; the ring's fill after it.
  uint64_t Publish(const Reservation& room, uint32_t group);
  Result WriteV2(const SampleToWrite& sample, bool* notify);
  Result WriteLegacy(const SampleToWrite& sample, bool* notify);
  void CountLoss(ring::LossReason reason);
  void CountSchedLoss(ring::LossReason reason, uint64_t time_ns);
  void CountSample(ring::Mode mode);
  void UpdateNotify(uint64_t fill, uint64_t tail, bool* notify);

  RingFormat format_ = RingFormat::kNone;
  uint8_t* base_ = nullptr;
  uint32_t capacity_ = 0;   // v2: slots; legacy: records in the array (holds capacity_ - 1)
  uint32_t watermark_ = 0;
  uint64_t head_ = 0;       // private copy of the producer index
  uint64_t told_tail_ = 0;  // consumer index when it was last notified
  bool notify_armed_ = true;
  uint64_t sched_pending_lost_ = 0;  // lost since the last record written, not yet reported
  uint64_t sched_first_lost_ns_ = 0;
  RingStats stats_;
};

}  // namespace hvpmu
