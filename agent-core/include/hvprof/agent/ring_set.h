// Every ring an agent consumes, with the mapping that keeps it alive and its notification
// descriptors, drained in one pass.
#pragma once

#include <cstdint>
#include <vector>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/agent/ring_reader.h"
#include "hvpmu/abi/ops.h"

namespace hvprof::agent {

struct RingState {
  hvpmu::DomainId owner;       // whose region the ring is in
  uint32_t index;              // ring number in the region
  hvpmu::ring::RingKind kind;  // vCPU or pCPU ring
  RingReader reader;
  uint64_t drained = 0;
  uint64_t malformed = 0;
  uint64_t max_pending = 0;    // the fullest the agent found it
};

class RingSet {
 public:
  // Maps `buffer`'s region through `link` and adds its rings; with `notify`, also asks for
  // their notification descriptors.
  Result<void> AddV2(HypervisorLink& link, hvpmu::DomainId owner, const hvpmu::BufferV2& buffer,
                     bool notify);

  // Calls on_sample(const RingState&, const SampleRecord&, std::span<const uint64_t>) for every
  // published sample of every ring. Returns the number of samples.
  template <typename OnSample>
  uint64_t DrainAll(OnSample&& on_sample) {
    uint64_t total = 0;
    for (RingState& ring : rings_) {
      const uint64_t pending = ring.reader.Pending();
      if (pending > ring.max_pending) ring.max_pending = pending;
      if (pending == 0) continue;
      const DrainStats stats = ring.reader.Drain(
          [&](const hvpmu::ring::SampleRecord& record, std::span<const uint64_t> frames) {
            on_sample(static_cast<const RingState&>(ring), record, frames);
          });
      ring.drained += stats.samples;
      ring.malformed += stats.malformed;
      total += stats.samples;
    }
    return total;
  }

  // Descriptors to poll for notifications, and reading them empty after a wake-up.
  const std::vector<ScopedFd>& notification_fds() const { return notifications_; }
  void ClearNotifications();

  const std::vector<RingState>& rings() const { return rings_; }
  uint32_t capacity() const { return capacity_; }
  void Clear();

 private:
  std::vector<MappedRegion> regions_;
  std::vector<RingState> rings_;
  std::vector<ScopedFd> notifications_;
  uint32_t capacity_ = 0;
};

}  // namespace hvprof::agent
