// FakePlatform: an in-memory Platform for unit tests of the engine and its drivers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hvprof/hosted/cpu_models.h"
#include "hvpmu/platform.h"

namespace hvprof::fake {

using hvpmu::CpuidResult;
using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::DomainType;
using hvpmu::InterruptedContext;
using hvpmu::Platform;
using hvpmu::SharedRegion;

using hosted::AmdModel;
using hosted::CpuModel;
using hosted::HygonModel;
using hosted::IntelArchPerfmonModel;
using hosted::UnknownVendorModel;

struct MsrWrite {
  uint32_t cpu;
  uint32_t msr;
  uint64_t value;
  bool operator==(const MsrWrite&) const = default;
};

struct Notification {
  DomainId consumer;
  DomainId owner;
  uint32_t ring;
};

class FakePlatform final : public Platform {
 public:
  FakePlatform(uint32_t num_cpus, CpuModel model);
  ~FakePlatform();

  // --- test controls
  void AddDomain(DomainId id, uint16_t vcpus, DomainType type = DomainType::kPv64,
                 bool hardware = false);
  void RemoveDomain(DomainId id);
  void SetMsr(uint32_t cpu, uint32_t msr, uint64_t value);
  uint64_t GetMsr(uint32_t cpu, uint32_t msr) const;
  void FaultMsr(uint32_t msr) { faulting_msrs_.insert(msr); }
  const std::vector<MsrWrite>& msr_writes() const { return msr_writes_; }
  void ClearMsrWrites() { msr_writes_.clear(); }
  void SetContext(uint32_t cpu, const InterruptedContext& context) { contexts_[cpu] = context; }
  // Guest memory for backtraces: `bytes` at `address` of `domain` (kDomainXen for Xen).
  void MapMemory(DomainId domain, uint64_t address, std::vector<uint8_t> bytes);
  void SetPmuTakenByOther(bool taken) { pmu_taken_by_other_ = taken; }
  void SetAllocationFails(bool fails) { allocation_fails_ = fails; }
  void SetShareBusy(bool busy) { share_busy_ = busy; }
  // Whether StartSampleTimer gets a timer (a host without one answers false).
  void SetSampleTimerAvailable(bool available) { timer_available_ = available; }
  // The sampling timer's period while it runs, 0 when stopped; how often it was started.
  uint64_t sample_timer_period_ns() const { return timer_period_ns_; }
  uint32_t sample_timer_starts() const { return timer_starts_; }

  int references(DomainId id) const;
  bool pmu_claimed() const { return pmu_claimed_; }
  size_t live_regions() const { return regions_.size(); }
  bool IsSharedWith(uint64_t handle, DomainId consumer) const;
  void* RegionBase(uint64_t handle) const;
  std::vector<Notification> notifications() const;
  void ClearNotifications();
  uint32_t quiesce_count() const { return quiesce_count_; }
  bool pmi_routed(uint32_t cpu) const { return pmi_routed_.at(cpu); }
  uint32_t rearm_count() const { return rearm_count_; }
  // Contract breaches by the engine (double release, freeing a shared region...).
  const std::vector<std::string>& violations() const { return violations_; }

  // --- Platform
  uint32_t NumCpus() override { return num_cpus_; }
  CpuidResult Cpuid(uint32_t cpu, uint32_t leaf, uint32_t subleaf) override;
  bool ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) override;
  bool WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) override;
  void SetPmiRouting(uint32_t cpu, bool deliver_as_nmi) override;
  void RearmPmi(uint32_t cpu) override;
  uint64_t NowNs() override;
  bool GetDomainInfo(DomainId domain, DomainInfo* info) override;
  bool AcquireDomain(DomainId domain) override;
  void ReleaseDomain(DomainId domain) override;
  bool ClaimPmu() override;
  void ReleasePmu() override;
  bool GetInterruptedContext(uint32_t cpu, InterruptedContext* context) override;
  bool ReadGuestMemory(DomainId domain, uint16_t vcpu, uint64_t address, void* buffer,
                       uint32_t bytes) override;
  void Notify(DomainId consumer, DomainId owner, uint32_t ring_index) override;
  bool AllocateShared(DomainId owner, uint64_t bytes, SharedRegion* region) override;
  void FreeShared(SharedRegion* region) override;
  bool ShareWith(const SharedRegion& region, DomainId consumer) override;
  void Unshare(const SharedRegion& region, DomainId consumer) override;
  void QuiesceSamplers() override { ++quiesce_count_; }
  bool StartSampleTimer(uint64_t period_ns) override {
    if (timer_period_ns_ != 0) violations_.push_back("the sampling timer was started twice");
    if (!timer_available_) return false;
    ++timer_starts_;
    timer_period_ns_ = period_ns;
    return true;
  }
  void StopSampleTimer() override { timer_period_ns_ = 0; }

 private:
  struct Region {
    std::unique_ptr<uint8_t[]> memory;
    uint64_t bytes;
    std::set<DomainId> consumers;
  };

  uint32_t num_cpus_;
  CpuModel model_;
  std::vector<std::map<uint32_t, uint64_t>> msrs_;
  std::set<uint32_t> faulting_msrs_;
  std::vector<MsrWrite> msr_writes_;
  std::map<DomainId, DomainInfo> domains_;
  std::map<DomainId, int> references_;
  std::map<uint32_t, InterruptedContext> contexts_;
  std::map<DomainId, std::map<uint64_t, std::vector<uint8_t>>> memory_;
  std::map<uint64_t, Region> regions_;
  uint64_t next_handle_ = 0x100000;
  bool pmu_claimed_ = false;
  bool pmu_taken_by_other_ = false;
  bool allocation_fails_ = false;
  bool share_busy_ = false;
  std::vector<bool> pmi_routed_;
  uint32_t quiesce_count_ = 0;
  uint32_t rearm_count_ = 0;
  bool timer_available_ = true;
  uint64_t timer_period_ns_ = 0;
  uint32_t timer_starts_ = 0;
  uint64_t now_ns_ = 0;
  mutable std::mutex notifications_mutex_;
  std::vector<Notification> notifications_;
  std::vector<std::string> violations_;
};

}  // namespace hvprof::fake
