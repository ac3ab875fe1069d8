#include "hvprof/agent/ring_set.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>

HVPROF_PROBE_SEMAPHORE(ring__drained);

namespace hvprof::agent {

namespace ring = hvpmu::ring;

Result<MappedRegion> RingSet::MapRings(HypervisorLink& link, uint64_t handle, uint64_t bytes) {
  HVPROF_TRY(region, link.MapRegion(handle, bytes));
  regions_.push_back(region);
  return region;
}

Result<void> RingSet::Subscribe(HypervisorLink& link, uint64_t handle, uint32_t rings) {
  HVPROF_TRY(fds, link.NotificationFds(handle, 0, rings));
  for (ScopedFd& fd : fds) notifications_.push_back(std::move(fd));
  return Ok();
}

Result<void> RingSet::AddV2(HypervisorLink& link, hvpmu::DomainId owner,
                            const hvpmu::BufferV2& buffer, bool notify) {
  HVPROF_TRY(region, MapRings(link, buffer.region_handle, uint64_t{buffer.nbuf} * buffer.ring_bytes));
  for (uint32_t i = 0; i < buffer.nbuf; ++i) {
    HVPROF_TRY(reader, RingReader::Attach(region.base() + uint64_t{i} * buffer.ring_bytes,
                                          buffer.ring_bytes, buffer.capacity));
    // vCPU rings, then the primary's pCPU rings, then its scheduling rings (when it asked).
    const auto kind = i < buffer.nbuf_vcpu                        ? ring::RingKind::kVcpu
                      : i + buffer.nbuf_sched >= buffer.nbuf ? ring::RingKind::kSched
                                                                  : ring::RingKind::kPcpu;
    rings_.push_back(RingState{owner, i, kind, std::move(reader)});
  }
  capacity_ = buffer.capacity;
  return notify ? Subscribe(link, buffer.region_handle, buffer.nbuf) : Ok();
}

Result<void> RingSet::AddLegacy(HypervisorLink& link, hvpmu::DomainId owner, const LegacyBuffer& buffer,
                                bool notify) {
  namespace legacy = hvpmu::legacy;
  if (buffer.nbuf <= 0 || buffer.bufsize <= static_cast<int32_t>(legacy::kBufHeaderSize)) {
    return MakeError(ErrorKind::kCorrupt, "the hypervisor described domain {}'s buffer as {} rings of {} bytes",
                     owner, buffer.nbuf, buffer.bufsize);
  }
  const auto ring_bytes = static_cast<uint64_t>(buffer.bufsize);
  HVPROF_TRY(region, MapRings(link, buffer.machine_address, static_cast<uint64_t>(buffer.nbuf) * ring_bytes));
  const auto size = static_cast<uint32_t>((ring_bytes - legacy::kBufHeaderSize) / sizeof(legacy::EventLog));
  for (int32_t i = 0; i < buffer.nbuf; ++i) {
    HVPROF_TRY(reader, LegacyRingReader::Attach(region.base() + static_cast<uint64_t>(i) * ring_bytes, ring_bytes, size));
    legacy_rings_.push_back(LegacyRingState{owner, static_cast<uint32_t>(i), std::move(reader)});
  }
  // One slot always stays empty; Xen sizes each domain's rings by its vCPUs.
  capacity_ = capacity_ == 0 ? size - 1 : std::min(capacity_, size - 1);
  return notify ? Subscribe(link, buffer.machine_address, static_cast<uint32_t>(buffer.nbuf)) : Ok();
}

void RingSet::ResyncLegacy() {
  for (LegacyRingState& ring : legacy_rings_) {
    ring.reader.Resync();
    ring.baseline = {};
    ring.baseline = CountsOf(ring);
  }
}

LegacyRingCounts CountsOf(const LegacyRingState& ring) {
  const auto& header = ring.reader.header();
  auto since = [](const uint64_t& now, uint64_t then) {
    const uint64_t value = __atomic_load_n(&now, __ATOMIC_RELAXED);
    return value >= then ? value - then : value;  // a counter that went back was reset by Xen
  };
  return {since(header.user_samples, ring.baseline.user),
          since(header.kernel_samples, ring.baseline.kernel),
          since(header.xen_samples, ring.baseline.xen),
          since(header.lost_samples, ring.baseline.lost)};
}

ring::SampleRecord RingSet::ToSampleRecord(const LegacyRingState& state, const LegacySample& sample,
                                           uint64_t now_ns) const {
  ring::SampleRecord record{};
  record.kind = static_cast<uint8_t>(ring::RecordKind::kSample);
  record.mode = sample.mode;
  record.event = sample.event;
  record.nframes = static_cast<uint8_t>(sample.frames.size());
  record.pcpu = ring::kUnknownPcpu;
  record.ip = sample.ip;
  record.time_ns = now_ns;
  record.period = sample.event < legacy_periods_.size() ? legacy_periods_[sample.event] : 0;
  record.pid = ring::kNoPid;
  record.tid = ring::kNoPid;
  record.domain = state.owner;
  record.vcpu = static_cast<uint16_t>(state.index);
  return record;
}

DomainRingsStatus LegacyRingsStatus(const RingSet& rings, hvpmu::DomainId owner) {
  uint64_t user = 0, kernel = 0, hypervisor = 0, lost = 0, fullest = 0, count = 0, capacity = 0;
  for (const LegacyRingState& ring : rings.legacy_rings()) {
    if (ring.owner != owner) continue;
    capacity = ring.reader.size() - 1;  // Xen sizes all of one domain's rings alike
    const LegacyRingCounts counts = CountsOf(ring);
    user += counts.user;
    kernel += counts.kernel;
    hypervisor += counts.xen;
    lost += counts.lost;
    fullest = std::max(fullest, ring.max_pending);
    ++count;
  }
  DomainRingsStatus status;
  status.id = owner;
  status.rings = static_cast<uint32_t>(count);
  status.capacity = capacity;
  status.max_fill = fullest;
  status.samples[sample_mode::kUser] = user;
  status.samples[sample_mode::kKernel] = kernel;
  status.samples[sample_mode::kHypervisor] = hypervisor;
  status.lost.ring_full = lost;
  return status;
}

uint64_t LostOf(const RingState& ring) {
  uint64_t lost = 0;
  for (const uint64_t& count : ring.reader.header().lost) lost += ring::LoadRelaxed(&count);
  return lost;
}

uint64_t MonotonicNs() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}

void RingSet::ClearNotifications() {
  for (const ScopedFd& fd : notifications_) {
    uint64_t value;
    while (::read(fd.get(), &value, sizeof value) == sizeof value) {
    }
  }
}

void RingSet::Clear() {
  capacity_ = 0;
  rings_.clear();
  legacy_rings_.clear();
  notifications_.clear();
  regions_.clear();
}

}  // namespace hvprof::agent
