// The engine's domain table: slots, ring allocation and sharing, routing.
#include "hvpmu/engine.h"

#include "freestanding.h"

namespace hvpmu {

using detail::LoadRelaxed;
using detail::Min;
using detail::StoreRelaxed;
using detail::StoreRelease;

namespace {
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxRegionBytes = 256ULL << 20;  // per domain
constexpr uint32_t kDefaultCapacity = 4096;
}  // namespace

Engine::Engine(Platform& platform, PmuDriver* driver) : platform_(platform), driver_(driver) {
  detail::Zero(slot_of_domain_, sizeof slot_of_domain_);
  num_cpus_ = Min(platform.NumCpus(), kMaxCpus);
}

Engine::DomainSlot* Engine::FindOrCreateSlot(DomainId domain) {
  if (DomainSlot* slot = FindSlot(domain)) return slot;
  if (domain > kMaxDomainId) return nullptr;
  for (uint32_t i = 0; i < kMaxListedDomains; ++i) {
    DomainSlot& slot = slots_[i];
    if (slot.in_use) continue;
    slot.in_use = true;
    if (i >= slots_taken_) slots_taken_ = i + 1;
    slot.id = domain;
    slot.role = DomainRole::kIgnored;
    slot.activated = false;
    slot.holds_ref = false;
    slot.format = RingFormat::kNone;
    slot.shared = false;
    slot.consumer = kDomainInvalid;
    StoreRelaxed(&slot.no_ring_losses, uint64_t{0});
    StoreRelaxed(&slot.routing, uint8_t{0});
    StoreRelease(&slot_of_domain_[domain], static_cast<uint16_t>(i + 1));
    return &slot;
  }
  return nullptr;
}

void Engine::MaybeFreeSlot(DomainSlot* slot) {
  if (!slot->in_use || slot->role != DomainRole::kIgnored || slot->format != RingFormat::kNone ||
      slot->holds_ref) {
    return;
  }
  StoreRelease(&slot_of_domain_[slot->id], uint16_t{0});
  platform_.QuiesceSamplers();  // nobody may still be looking at the slot before it is reused
  slot->in_use = false;
  slot->id = kDomainInvalid;
}

void Engine::PublishRouting(DomainSlot* slot) {
  const bool deliver = slot->format != RingFormat::kNone &&
                       ((slot->role == DomainRole::kActive && slot->activated) ||
                        slot->role == DomainRole::kPassive);
  const uint8_t old_routing = LoadRelaxed(&slot->routing);
  StoreRelease(&slot->routing, static_cast<uint8_t>(deliver));
  if (slot->id == primary_) {
    StoreRelease(&pcpu_routing_, static_cast<uint8_t>(deliver && num_pcpu_rings_ != 0));
  }
  // Once routing is off, wait for samplers that read the old value before anything changes.
  if (old_routing != 0 && !deliver) platform_.QuiesceSamplers();
}

void Engine::Deactivate(DomainSlot* slot) {
  slot->activated = false;
  PublishRouting(slot);
}

void Engine::RemoveFromActiveList(DomainSlot* slot) {
  slot->role = DomainRole::kIgnored;
  Deactivate(slot);
  if (slot->holds_ref) {
    platform_.ReleaseDomain(slot->id);
    slot->holds_ref = false;
  }
  MaybeFreeSlot(slot);
}

void Engine::RemoveFromPassiveList(DomainSlot* slot) {
  slot->role = DomainRole::kIgnored;
  PublishRouting(slot);
  UnshareRings(slot);
  FreeRings(slot);
  if (slot->holds_ref) {
    platform_.ReleaseDomain(slot->id);
    slot->holds_ref = false;
  }
  MaybeFreeSlot(slot);
}

uint32_t Engine::CountListed(DomainRole role) const {
  uint32_t count = 0;
  for (const DomainSlot& slot : TakenSlots()) count += slot.in_use && slot.role == role;
  return count;
}

uint32_t Engine::CountActivated() const {
  uint32_t count = 0;
  for (const DomainSlot& slot : TakenSlots()) {
    count += slot.in_use && slot.role == DomainRole::kActive && slot.activated;
  }
  return count;
}

ErrorCode Engine::AllocateRings(DomainSlot* slot, RingFormat format, uint32_t capacity,
                                uint32_t watermark, bool with_pcpu_rings, bool with_sched_rings,
                                DomainId consumer) {
  DomainInfo info{};
  if (!platform_.GetDomainInfo(slot->id, &info) || info.num_vcpus == 0) {
    return ErrorCode::kNoSuchDomain;
  }
  const uint32_t nvcpu = Min<uint32_t>(info.num_vcpus, kMaxVcpus);
  const uint32_t npcpu = with_pcpu_rings ? num_cpus_ : 0;
  const uint32_t nsched = with_pcpu_rings && with_sched_rings ? num_cpus_ : 0;
  uint64_t ring_bytes = 0;
  uint64_t region_bytes = 0;

  if (format == RingFormat::kV2) {
    if (capacity == 0) capacity = kDefaultCapacity;
    if (capacity > ring::kMaxCapacity) return ErrorCode::kBadBufferSize;
    capacity = detail::RoundUpPowerOfTwo(Min(detail::Max(capacity, ring::kMinCapacity),
                                             ring::kMaxCapacity));
    // Shrink to the per-domain cap rather than fail; the caller sees the effective capacity.
    while (capacity > ring::kMinCapacity &&
           (nvcpu + npcpu + nsched) * ring::RingBytes(capacity) > kMaxRegionBytes) {
      capacity /= 2;
    }
    ring_bytes = ring::RingBytes(capacity);
    region_bytes = (nvcpu + npcpu + nsched) * ring_bytes;
    watermark = watermark == 0 ? capacity / 2 : Min(watermark, capacity);
  } else {
    const auto requested = static_cast<int32_t>(capacity);
    if (requested < 2) return ErrorCode::kBadBufferSize;
    const legacy::LegacyBufferLayout layout = legacy::ComputeLegacyBufferLayout(nvcpu, requested);
    capacity = static_cast<uint32_t>(layout.max_samples);
    ring_bytes = static_cast<uint64_t>(layout.bufsize);
    region_bytes = layout.npages * kPage;
    watermark = capacity / 2;
  }

  RingWriter* writers = TakeRingWriters(nvcpu);
  if (writers == nullptr) return ErrorCode::kNoMemory;
  if (pmu_claims_ == 0 && !platform_.ClaimPmu()) {
    ReturnRingWriters(writers, nvcpu);
    return ErrorCode::kBusy;
  }
  ++pmu_claims_;
  SharedRegion region;
  if (!platform_.AllocateShared(slot->id, region_bytes, &region)) {
    ReturnRingWriters(writers, nvcpu);
    if (--pmu_claims_ == 0) platform_.ReleasePmu();
    return ErrorCode::kNoMemory;
  }
  slot->rings = writers;

  auto* base = static_cast<uint8_t*>(region.base);
  for (uint32_t i = 0; i < nvcpu; ++i) {
    if (format == RingFormat::kV2) {
      slot->rings[i].AttachV2(base + i * ring_bytes, capacity, watermark, slot->id,
                              static_cast<uint16_t>(i), ring::RingKind::kVcpu);
    } else {
      slot->rings[i].AttachLegacy(base + i * ring_bytes, capacity, watermark, i);
    }
  }
  for (uint32_t cpu = 0; cpu < npcpu; ++cpu) {
    pcpu_rings_[cpu].AttachV2(base + (nvcpu + cpu) * ring_bytes, capacity, watermark, slot->id,
                              static_cast<uint16_t>(cpu), ring::RingKind::kPcpu);
  }
  for (uint32_t cpu = 0; cpu < nsched; ++cpu) {
    sched_rings_[cpu].AttachV2(base + (nvcpu + npcpu + cpu) * ring_bytes, capacity, watermark, slot->id,
                               static_cast<uint16_t>(cpu), ring::RingKind::kSched, true);
  }
  if (with_pcpu_rings) {
    num_pcpu_rings_ = npcpu;
    pcpu_ring_base_ = nvcpu;
    num_sched_rings_ = nsched;
    sched_ring_base_ = nvcpu + npcpu;
  }

  slot->format = format;
  slot->region = region;
  slot->nbuf_vcpu = nvcpu;
  slot->nbuf = nvcpu + npcpu + nsched;
  slot->capacity = capacity;
  slot->watermark = watermark;
  slot->ring_bytes = ring_bytes;
  slot->num_vcpus = info.num_vcpus;
  slot->consumer = consumer;
  StoreRelaxed(&slot->no_ring_losses, uint64_t{0});
  return ErrorCode::kOk;
}

ErrorCode Engine::ShareRings(DomainSlot* slot, DomainId consumer) {
  if (slot->shared && slot->consumer == consumer) return ErrorCode::kOk;
  UnshareRings(slot);
  if (!platform_.ShareWith(slot->region, consumer)) return ErrorCode::kBusy;
  slot->shared = true;
  slot->consumer = consumer;
  return ErrorCode::kOk;
}

void Engine::UnshareRings(DomainSlot* slot) {
  if (!slot->shared) return;
  platform_.Unshare(slot->region, slot->consumer);
  slot->shared = false;
}

void Engine::FreeRings(DomainSlot* slot) {
  if (slot->format == RingFormat::kNone) return;
  const bool owns_pcpu_rings = slot->id == primary_ && num_pcpu_rings_ != 0 &&
                               slot->nbuf > slot->nbuf_vcpu;
  StoreRelease(&slot->routing, uint8_t{0});
  if (owns_pcpu_rings) {
    StoreRelease(&pcpu_routing_, uint8_t{0});
    StoreRelease(&sched_routing_, uint8_t{0});
  }
  platform_.QuiesceSamplers();
  UnshareRings(slot);
  for (uint32_t i = 0; i < slot->nbuf_vcpu; ++i) slot->rings[i].Detach();
  ReturnRingWriters(slot->rings, slot->nbuf_vcpu);
  slot->rings = nullptr;
  if (owns_pcpu_rings) {
    for (uint32_t cpu = 0; cpu < num_pcpu_rings_; ++cpu) pcpu_rings_[cpu].Detach();
    for (uint32_t cpu = 0; cpu < num_sched_rings_; ++cpu) sched_rings_[cpu].Detach();
    num_pcpu_rings_ = 0;
    num_sched_rings_ = 0;
  }
  platform_.FreeShared(&slot->region);
  slot->region = SharedRegion{};
  slot->format = RingFormat::kNone;
  slot->nbuf = slot->nbuf_vcpu = slot->capacity = 0;
  slot->consumer = kDomainInvalid;
  if (--pmu_claims_ == 0) platform_.ReleasePmu();
}

RingWriter* Engine::TakeRingWriters(uint32_t count) {
  // First fit. Domains come and go between sessions rather than during one, so the pool does
  // not fragment in practice; when it does, a free run is still found if one exists.
  uint32_t run = 0;
  for (uint32_t i = 0; i < kMaxVcpuRings; ++i) {
    run = ring_taken_[i] ? 0 : run + 1;
    if (run == count) {
      const uint32_t first = i + 1 - count;
      for (uint32_t j = first; j <= i; ++j) ring_taken_[j] = true;
      return &ring_pool_[first];
    }
  }
  return nullptr;
}

void Engine::ReturnRingWriters(RingWriter* first, uint32_t count) {
  if (first == nullptr) return;
  const auto index = static_cast<uint32_t>(first - ring_pool_);
  for (uint32_t i = index; i < index + count && i < kMaxVcpuRings; ++i) ring_taken_[i] = false;
}

void Engine::ResetRings(DomainSlot* slot) {
  for (uint32_t i = 0; i < slot->nbuf_vcpu; ++i) slot->rings[i].Reset();
  if (slot->id == primary_) {
    for (uint32_t cpu = 0; cpu < num_pcpu_rings_; ++cpu) pcpu_rings_[cpu].Reset();
    for (uint32_t cpu = 0; cpu < num_sched_rings_; ++cpu) sched_rings_[cpu].Reset();
  }
  StoreRelaxed(&slot->no_ring_losses, uint64_t{0});
}

void Engine::NotifyAllConsumers() {
  for (DomainSlot& slot : TakenSlots()) {
    if (!slot.in_use || !slot.shared || LoadRelaxed(&slot.routing) == 0) continue;
    for (uint32_t i = 0; i < slot.nbuf; ++i) platform_.Notify(slot.consumer, slot.id, i);
  }
}

void Engine::OnConsumerGone(DomainId domain) {
  DomainSlot* slot = FindSlot(domain);
  if (slot == nullptr) return;
  if (slot->role == DomainRole::kActive && slot->activated) Deactivate(slot);
  if (slot->role != DomainRole::kPassive) FreeRings(slot);
  if (domain == primary_) {
    // Passive rings keep filling (and count what they cannot hold) until a new agent
    // takes over or resets the passive list; only the mapping goes away.
    for (DomainSlot& other : TakenSlots()) {
      if (other.in_use && other.role == DomainRole::kPassive) UnshareRings(&other);
    }
  }
  MaybeFreeSlot(slot);
}

void Engine::OnDomainDestroyed(DomainId domain) {
  if (domain == primary_) {
    // Nobody is left to drive the profiler: undo everything, as a clean shutdown would.
    if (state_ == EngineState::kProfiling) OpStop();
    if (state_ == EngineState::kReady || state_ == EngineState::kCountersReserved) {
      OpReleaseCounters();
    }
    OpResetActiveList();
    OpResetPassiveList();
    if (DomainSlot* slot = FindSlot(domain)) FreeRings(slot);
    primary_ = kDomainInvalid;
    state_ = EngineState::kIdle;
  }
  DomainSlot* slot = FindSlot(domain);
  if (slot == nullptr) return;
  if (slot->role == DomainRole::kActive) RemoveFromActiveList(slot);
  if (slot->role == DomainRole::kPassive) RemoveFromPassiveList(slot);
  FreeRings(slot);
  MaybeFreeSlot(slot);
}

uint32_t Engine::FullestRingPercent(DomainId except) const {
  uint32_t fullest = 0;
  for (const DomainSlot& slot : TakenSlots()) {
    if (!slot.in_use || !slot.shared || slot.consumer == except) continue;
    for (uint32_t i = 0; i < slot.nbuf_vcpu; ++i) {
      const RingWriter& ring = slot.rings[i];
      if (ring.capacity() == 0) continue;
      const auto percent = static_cast<uint32_t>(100 * ring.Fill() / ring.capacity());
      if (percent > fullest) fullest = percent;
    }
  }
  return fullest;
}

}  // namespace hvpmu
