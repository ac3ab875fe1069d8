#include "hvprof/fake/fake_platform.h"

#include <cstring>

#include "hvpmu/msr.h"

namespace hvprof::fake {

using hvpmu::CpuidResult;
using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::DomainType;
using hvpmu::InterruptedContext;
using hvpmu::SharedRegion;

FakePlatform::FakePlatform(uint32_t num_cpus, CpuModel model)
    : num_cpus_(num_cpus), model_(std::move(model)), msrs_(num_cpus), pmi_routed_(num_cpus) {
  for (auto& cpu : msrs_) cpu = model_.initial_msrs;
}

FakePlatform::~FakePlatform() = default;

void FakePlatform::AddDomain(DomainId id, uint16_t vcpus, DomainType type, bool hardware) {
  domains_[id] = DomainInfo{vcpus, type, hardware};
}

void FakePlatform::RemoveDomain(DomainId id) { domains_.erase(id); }

void FakePlatform::SetMsr(uint32_t cpu, uint32_t msr, uint64_t value) { msrs_.at(cpu)[msr] = value; }

uint64_t FakePlatform::GetMsr(uint32_t cpu, uint32_t msr) const {
  const auto& registers = msrs_.at(cpu);
  auto it = registers.find(msr);
  return it == registers.end() ? 0 : it->second;
}

void FakePlatform::MapMemory(DomainId domain, uint64_t address, std::vector<uint8_t> bytes) {
  memory_[domain][address] = std::move(bytes);
}

int FakePlatform::references(DomainId id) const {
  auto it = references_.find(id);
  return it == references_.end() ? 0 : it->second;
}

bool FakePlatform::IsSharedWith(uint64_t handle, DomainId consumer) const {
  auto it = regions_.find(handle);
  return it != regions_.end() && it->second.consumers.count(consumer) != 0;
}

void* FakePlatform::RegionBase(uint64_t handle) const {
  auto it = regions_.find(handle);
  return it == regions_.end() ? nullptr : it->second.memory.get();
}

std::vector<Notification> FakePlatform::notifications() const {
  std::lock_guard lock(notifications_mutex_);
  return notifications_;
}

void FakePlatform::ClearNotifications() {
  std::lock_guard lock(notifications_mutex_);
  notifications_.clear();
}

CpuidResult FakePlatform::Cpuid(uint32_t, uint32_t leaf, uint32_t subleaf) {
  return model_.Cpuid(leaf, subleaf);
}

bool FakePlatform::ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) {
  if (cpu >= num_cpus_ || faulting_msrs_.count(msr) != 0) return false;
  *value = GetMsr(cpu, msr);
  return true;
}

bool FakePlatform::WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) {
  if (cpu >= num_cpus_ || faulting_msrs_.count(msr) != 0) return false;
  msrs_[cpu][msr] = value;
  msr_writes_.push_back({cpu, msr, value});
  return true;
}

void FakePlatform::SetPmiRouting(uint32_t cpu, bool deliver_as_nmi) {
  pmi_routed_.at(cpu) = deliver_as_nmi;
}

void FakePlatform::RearmPmi(uint32_t) { ++rearm_count_; }

uint64_t FakePlatform::NowNs() { return now_ns_ += 100; }

bool FakePlatform::GetDomainInfo(DomainId domain, DomainInfo* info) {
  auto it = domains_.find(domain);
  if (it == domains_.end()) return false;
  *info = it->second;
  return true;
}

bool FakePlatform::AcquireDomain(DomainId domain) {
  if (domains_.count(domain) == 0) return false;
  ++references_[domain];
  return true;
}

void FakePlatform::ReleaseDomain(DomainId domain) {
  if (--references_[domain] < 0) violations_.push_back("domain reference released twice");
}

bool FakePlatform::ClaimPmu() {
  if (pmu_taken_by_other_) return false;
  if (pmu_claimed_) violations_.push_back("PMU claimed twice");
  pmu_claimed_ = true;
  return true;
}

void FakePlatform::ReleasePmu() {
  if (!pmu_claimed_) violations_.push_back("PMU released but not claimed");
  pmu_claimed_ = false;
}

bool FakePlatform::GetInterruptedContext(uint32_t cpu, InterruptedContext* context) {
  auto it = contexts_.find(cpu);
  if (it == contexts_.end()) return false;
  *context = it->second;
  return true;
}

bool FakePlatform::ReadGuestMemory(DomainId domain, uint16_t, uint64_t address, void* buffer,
                                   uint32_t bytes) {
  auto space = memory_.find(domain);
  if (space == memory_.end()) return false;
  auto it = space->second.upper_bound(address);
  if (it == space->second.begin()) return false;
  --it;
  const uint64_t offset = address - it->first;
  if (offset + bytes > it->second.size()) return false;
  std::memcpy(buffer, it->second.data() + offset, bytes);
  return true;
}

void FakePlatform::Notify(DomainId consumer, DomainId owner, uint32_t ring_index) {
  std::lock_guard lock(notifications_mutex_);
  notifications_.push_back({consumer, owner, ring_index});
}

bool FakePlatform::AllocateShared(DomainId, uint64_t bytes, SharedRegion* region) {
  if (allocation_fails_) return false;
  Region entry;
  entry.memory = std::make_unique<uint8_t[]>(bytes);  // value-initialized: zeroed
  entry.bytes = bytes;
  const uint64_t handle = next_handle_;
  next_handle_ += (bytes + 4095) / 4096 * 4096 + 4096;
  region->base = entry.memory.get();
  region->bytes = bytes;
  region->handle = handle;
  regions_.emplace(handle, std::move(entry));
  return true;
}

void FakePlatform::FreeShared(SharedRegion* region) {
  auto it = regions_.find(region->handle);
  if (it == regions_.end()) {
    violations_.push_back("freeing an unknown region");
    return;
  }
  if (!it->second.consumers.empty()) violations_.push_back("freeing a region still shared");
  regions_.erase(it);
}

bool FakePlatform::ShareWith(const SharedRegion& region, DomainId consumer) {
  if (share_busy_) return false;
  auto it = regions_.find(region.handle);
  if (it == regions_.end()) {
    violations_.push_back("sharing an unknown region");
    return false;
  }
  it->second.consumers.insert(consumer);
  return true;
}

void FakePlatform::Unshare(const SharedRegion& region, DomainId consumer) {
  auto it = regions_.find(region.handle);
  if (it == regions_.end() || it->second.consumers.erase(consumer) == 0) {
    violations_.push_back("unsharing a region that is not shared");
  }
}

}  // namespace hvprof::fake
