// Every ring an agent consumes, with the mapping that keeps it alive and its notification
// descriptors, drained in one pass.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "hvprof/agent/agent_status.h"
#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/agent/ring_reader.h"
#include "hvprof/base/probes.h"
#include "hvpmu/abi/ops.h"

// The probe of DrainAll (docs/probes.md); ring_set.cpp defines its semaphore.
HVPROF_PROBE_SEMAPHORE_DECLARE(ring__drained);

namespace hvprof::agent {

struct RingState {
  hvpmu::DomainId owner;       // whose region the ring is in
  uint32_t index;              // ring number in the region
  hvpmu::ring::RingKind kind;  // vCPU, pCPU or scheduling ring
  RingReader reader;
  uint64_t drained = 0;        // samples, or scheduling records of a scheduling ring
  uint64_t malformed = 0;
  uint64_t sched_unknown = 0;  // scheduling records of types this agent does not know
  uint64_t max_pending = 0;    // the fullest the agent found it
};

// A ring in Xen's legacy format (16-byte records, one vCPU each). Its samples are handed on as
// SampleRecords: the domain is the ring's owner, the vCPU its index, the time when the agent
// read it; Xen records no process or physical CPU.
// A legacy ring's counters (from its header): user, kernel and Xen samples, and lost records.
struct LegacyRingCounts {
  uint64_t user = 0, kernel = 0, xen = 0, lost = 0;
};

struct LegacyRingState {
  hvpmu::DomainId owner;
  uint32_t index;
  LegacyRingReader reader;
  uint64_t drained = 0;
  uint64_t malformed = 0;
  uint64_t max_pending = 0;
  // Xen zeroes a ring's counters only when it allocates the buffer, which lives as long as the
  // domain: what they said when this session's profiling began.
  LegacyRingCounts baseline{};
};

// A legacy ring's counters since this session's profiling began.
LegacyRingCounts CountsOf(const LegacyRingState& ring);
// Samples the engine could not put in a v2 ring since it was set up, for every reason.
uint64_t LostOf(const RingState& ring);

// A legacy buffer as get_buffer or set_passive describe it.
struct LegacyBuffer {
  uint64_t machine_address = 0;  // buf_gmaddr
  int32_t nbuf = 0;
  int32_t bufsize = 0;           // bytes per ring, header included
};

class RingSet {
 public:
  // Maps `buffer`'s region through `link` and adds its rings; with `notify`, also asks for
  // their notification descriptors.
  Result<void> AddV2(HypervisorLink& link, hvpmu::DomainId owner, const hvpmu::BufferV2& buffer,
                     bool notify);

  // The same for a legacy buffer: its rings hold (bufsize - 48) / 16 records each.
  Result<void> AddLegacy(HypervisorLink& link, hvpmu::DomainId owner, const LegacyBuffer& buffer, bool notify);
  // Legacy records carry the counter's index only: the period each counter samples at.
  void SetLegacyPeriods(const std::array<uint64_t, 8>& periods) { legacy_periods_ = periods; }
  // After Xen zeroed the legacy rings' indices (enable_virq): the readers take the shared tail
  // again, and the counters start from what they say now.
  void ResyncLegacy();

  // Calls on_sample(const SampleRecord&, std::span<const uint64_t>) for every published sample
  // of every ring, and on_sched(const SchedRecord&) for every scheduling record. `final` also
  // hands on a legacy ring's last backtrace group, which otherwise waits for the next escape
  // record. Returns the number of samples.
  template <typename OnSample>
  uint64_t DrainAll(OnSample&& on_sample, bool final = false) {
    return DrainAll(std::forward<OnSample>(on_sample), [](const hvpmu::ring::SchedRecord&) {}, final);
  }
  template <typename OnSample, typename OnSched>
  uint64_t DrainAll(OnSample&& on_sample, OnSched&& on_sched, bool final) {
    uint64_t total = DrainLegacy(on_sample, final);
    for (RingState& ring : rings_) {
      const uint64_t pending = ring.reader.Pending();
      if (pending > ring.max_pending) ring.max_pending = pending;
      if (pending == 0) continue;
      const DrainStats stats = ring.reader.DrainRecords(
          [&](const hvpmu::ring::SampleRecord& record, std::span<const uint64_t> frames) {
            on_sample(record, frames);
          },
          [&](const hvpmu::ring::SchedRecord& record) { on_sched(record); });
      ring.drained += stats.samples + stats.sched;
      ring.malformed += stats.malformed;
      ring.sched_unknown += stats.sched_unknown;
      total += stats.samples;
      if (HVPROF_PROBE_ENABLED(ring__drained)) {
        HVPROF_PROBE(ring__drained, ring.owner, ring.index, static_cast<int>(ring.kind == hvpmu::ring::RingKind::kPcpu),
                     stats.samples, stats.slots * hvpmu::ring::kRecordSize, LostOf(ring));
      }
    }
    return total;
  }

  // Descriptors to poll for notifications, and reading them empty after a wake-up.
  const std::vector<ScopedFd>& notification_fds() const { return notifications_; }
  void ClearNotifications();

  const std::vector<RingState>& rings() const { return rings_; }
  const std::vector<LegacyRingState>& legacy_rings() const { return legacy_rings_; }
  size_t size() const { return rings_.size() + legacy_rings_.size(); }
  // Samples per ring: the v2 rings' capacity, or the smallest legacy ring's.
  uint32_t capacity() const { return capacity_; }
  void Clear();

 private:
  // Maps a buffer's rings and keeps the mapping for as long as the rings.
  Result<MappedRegion> MapRings(HypervisorLink& link, uint64_t handle, uint64_t bytes);
  Result<void> Subscribe(HypervisorLink& link, uint64_t handle, uint32_t rings);
  template <typename OnSample>
  uint64_t DrainLegacy(OnSample& on_sample, bool final);
  hvpmu::ring::SampleRecord ToSampleRecord(const LegacyRingState& ring, const LegacySample& sample,
                                           uint64_t now_ns) const;

  std::vector<MappedRegion> regions_;
  std::vector<RingState> rings_;
  std::vector<LegacyRingState> legacy_rings_;
  std::array<uint64_t, 8> legacy_periods_{};
  std::vector<ScopedFd> notifications_;
  uint32_t capacity_ = 0;
};

uint64_t MonotonicNs();

// What the headers of `owner`'s legacy rings say, as `hvprof --status` shows a domain: its
// rings, their capacity and fullest fill, the samples by mode and the full rings' losses (the
// caller names the domain and its role).
DomainRingsStatus LegacyRingsStatus(const RingSet& rings, hvpmu::DomainId owner);

template <typename OnSample>
uint64_t RingSet::DrainLegacy(OnSample& on_sample, bool final) {
  if (legacy_rings_.empty()) return 0;
  const uint64_t now = MonotonicNs();
  uint64_t total = 0;
  for (LegacyRingState& ring : legacy_rings_) {
    const uint64_t pending = ring.reader.Pending();
    if (pending > ring.max_pending) ring.max_pending = pending;
    auto hand_on = [&](const LegacySample& sample) {
      if (!sample_mode::IsValid(sample.mode)) {
        ++ring.malformed;
        return;
      }
      ++ring.drained;
      ++total;
      on_sample(ToSampleRecord(ring, sample, now), sample.frames);
    };
    const uint64_t drained_before = ring.drained;
    const DrainStats stats = ring.reader.Drain(hand_on);
    if (final) ring.reader.Flush(hand_on);
    ring.malformed += stats.malformed;
    if (HVPROF_PROBE_ENABLED(ring__drained) && stats.slots != 0) {
      HVPROF_PROBE(ring__drained, ring.owner, ring.index, 0, ring.drained - drained_before,
                   stats.slots * sizeof(hvpmu::legacy::EventLog), CountsOf(ring).lost);
    }
  }
  return total;
}

}  // namespace hvprof::agent
