#include "hvprof/agent/ring_set.h"

#include <unistd.h>

namespace hvprof::agent {

namespace ring = hvpmu::ring;

Result<void> RingSet::AddV2(HypervisorLink& link, hvpmu::DomainId owner,
                            const hvpmu::BufferV2& buffer, bool notify) {
  HVPROF_TRY(region, link.MapRegion(buffer.region_handle));
  if (region.bytes < uint64_t{buffer.nbuf} * buffer.ring_bytes) {
    return MakeError(ErrorKind::kCorrupt, "region of domain {} is {} bytes, smaller than {} rings of {}",
                     owner, region.bytes, buffer.nbuf, buffer.ring_bytes);
  }
  for (uint32_t i = 0; i < buffer.nbuf; ++i) {
    HVPROF_TRY(reader, RingReader::Attach(region.base() + uint64_t{i} * buffer.ring_bytes,
                                          buffer.ring_bytes, buffer.capacity));
    const auto kind = i < buffer.nbuf_vcpu ? ring::RingKind::kVcpu : ring::RingKind::kPcpu;
    rings_.push_back(RingState{owner, i, kind, std::move(reader)});
  }
  regions_.push_back(std::move(region));
  capacity_ = buffer.capacity;
  if (notify) {
    HVPROF_TRY(fds, link.NotificationFds(buffer.region_handle, 0, buffer.nbuf));
    for (ScopedFd& fd : fds) notifications_.push_back(std::move(fd));
  }
  return Ok();
}

void RingSet::ClearNotifications() {
  for (const ScopedFd& fd : notifications_) {
    uint64_t value;
    while (::read(fd.get(), &value, sizeof value) == sizeof value) {
    }
  }
}

void RingSet::Clear() {
  rings_.clear();
  notifications_.clear();
  regions_.clear();
}

}  // namespace hvprof::agent
