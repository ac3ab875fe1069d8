// The parts of the Platform interface that every hosted machine (sim, linux) implements the
// same way: rings in memfd shared memory, sharing tracked per consumer domain, notifications as
// eventfds, domain references and PMU ownership as counters.
//
// Locking: none inside. hvprof-hv holds its machine lock both while the machine samples (the
// "NMI" side) and while it serves an operation, so ops always run with the machine stopped and
// QuiesceSamplers has nothing to wait for.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "hvpmu/platform.h"
#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof::hosted {

using hvpmu::DomainId;
using hvpmu::Platform;
using hvpmu::SharedRegion;

class HostedPlatform : public Platform {
 public:
  bool AllocateShared(DomainId owner, uint64_t bytes, SharedRegion* region) override;
  void FreeShared(SharedRegion* region) override;
  bool ShareWith(const SharedRegion& region, DomainId consumer) override;
  void Unshare(const SharedRegion& region, DomainId consumer) override;
  void QuiesceSamplers() override {}
  bool AcquireDomain(DomainId domain) override;
  void ReleaseDomain(DomainId domain) override;
  bool ClaimPmu() override;
  void ReleasePmu() override;
  void Notify(DomainId consumer, DomainId owner, uint32_t ring_index) override;
  bool NamesTasks() override { return true; }  // the sim's processes, the host's tasks

  // --- for the server
  // The memfd of region `handle` if it is shared with `requester` (the platform keeps
  // ownership of the descriptor; send it, do not close it).
  hvprof::Result<int> RegionFd(uint64_t handle, DomainId requester, uint64_t* bytes) const;
  // Eventfds for rings [first, first + count) of region `handle`, created on first request,
  // if the region is shared with `requester`.
  hvprof::Result<std::vector<int>> NotificationFds(uint64_t handle, DomainId requester,
                                                   uint32_t first, uint32_t count);
  int references(DomainId domain) const;
  bool pmu_claimed() const { return pmu_claimed_; }
  // Set when another PMU user (a vPMU) holds the counters: ClaimPmu then fails.
  void set_pmu_held_elsewhere(bool held) { pmu_held_elsewhere_ = held; }
  uint64_t notifications_sent() const { return notifications_sent_; }

 protected:
  // `populate_rings`: allocate and map every page of the rings when they are made, so that the
  // engine writes samples without taking page faults (several microseconds each, with the
  // clearing: the collector's own time on a live host, as perf's kernel-allocated rings never
  // fault). The sim leaves it off: its hundreds of domains' rings are touched only as used.
  explicit HostedPlatform(bool populate_rings = false) : populate_rings_(populate_rings) {}
  ~HostedPlatform();

 private:
  struct Region {
    hvprof::ScopedFd memfd;
    hvprof::ScopedMmap mapping;
    DomainId owner;
    std::set<DomainId> consumers;
    std::vector<hvprof::ScopedFd> eventfds;  // per ring, created on demand
  };

  std::map<uint64_t, Region> regions_;
  std::map<DomainId, uint64_t> region_of_owner_;
  std::map<DomainId, int> references_;
  uint64_t next_handle_ = 1;
  bool pmu_claimed_ = false;
  bool pmu_held_elsewhere_ = false;
  uint64_t notifications_sent_ = 0;
  bool populate_rings_ = false;
};

}  // namespace hvprof::hosted
