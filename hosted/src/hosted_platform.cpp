#include "hvprof/hosted/hosted_platform.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "hvprof/base/log.h"
#include "hvprof/base/probes.h"

HVPROF_PROBE_SEMAPHORE(ring__wakeup);

namespace hvprof::hosted {

using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::SharedRegion;

using hvprof::ErrorKind;
using hvprof::MakeError;

HostedPlatform::~HostedPlatform() = default;

bool HostedPlatform::AllocateShared(DomainId owner, uint64_t bytes, SharedRegion* region) {
  const std::string name = "hvprof-rings-d" + std::to_string(owner);
  hvprof::ScopedFd memfd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memfd.valid()) {
    hvprof::Log(hvprof::LogLevel::kError, "memfd_create for domain {} failed: {}", owner,
                std::strerror(errno));
    return false;
  }
  if (::ftruncate(memfd.get(), static_cast<off_t>(bytes)) != 0) {
    hvprof::Log(hvprof::LogLevel::kError, "cannot size ring memory of {} bytes: {}", bytes,
                std::strerror(errno));
    return false;
  }
  // The size is fixed from now on: a consumer cannot shrink the file under the producer.
  ::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  // Populated: the pages are allocated and mapped now, before profiling starts (else MAP_POPULATE
  // alone faults them in).
  if (populate_rings_) (void)::posix_fallocate(memfd.get(), 0, static_cast<off_t>(bytes));
  auto mapping =
      hvprof::ScopedMmap::MapShared(memfd.get(), bytes, PROT_READ | PROT_WRITE, 0, populate_rings_);
  if (!mapping) {
    hvprof::Log(hvprof::LogLevel::kError, "{}", mapping.error().message());
    return false;
  }
  const uint64_t handle = next_handle_++ << 12;
  region->base = mapping.value().data();
  region->bytes = bytes;
  region->handle = handle;
  Region entry{std::move(memfd), std::move(mapping).value(), owner, {}, {}};
  regions_.emplace(handle, std::move(entry));
  region_of_owner_[owner] = handle;
  return true;
}

void HostedPlatform::FreeShared(SharedRegion* region) {
  auto it = regions_.find(region->handle);
  if (it == regions_.end()) return;
  auto owner = region_of_owner_.find(it->second.owner);
  if (owner != region_of_owner_.end() && owner->second == region->handle) {
    region_of_owner_.erase(owner);
  }
  // A consumer that still maps the memfd keeps its pages; this side lets go of them.
  regions_.erase(it);
  region->base = nullptr;
}

bool HostedPlatform::ShareWith(const SharedRegion& region, DomainId consumer) {
  auto it = regions_.find(region.handle);
  if (it == regions_.end()) return false;
  it->second.consumers.insert(consumer);
  return true;
}

void HostedPlatform::Unshare(const SharedRegion& region, DomainId consumer) {
  auto it = regions_.find(region.handle);
  if (it != regions_.end()) it->second.consumers.erase(consumer);
}

bool HostedPlatform::AcquireDomain(DomainId domain) {
  DomainInfo info{};
  if (!GetDomainInfo(domain, &info)) return false;
  ++references_[domain];
  return true;
}

void HostedPlatform::ReleaseDomain(DomainId domain) {
  auto it = references_.find(domain);
  if (it == references_.end() || it->second == 0) {
    hvprof::Log(hvprof::LogLevel::kError, "engine released domain {} more often than it took it",
                domain);
    return;
  }
  if (--it->second == 0) references_.erase(it);
}

int HostedPlatform::references(DomainId domain) const {
  auto it = references_.find(domain);
  return it == references_.end() ? 0 : it->second;
}

bool HostedPlatform::ClaimPmu() {
  if (pmu_held_elsewhere_ || pmu_claimed_) return false;
  pmu_claimed_ = true;
  return true;
}

void HostedPlatform::ReleasePmu() { pmu_claimed_ = false; }

void HostedPlatform::Notify(DomainId consumer, DomainId owner, uint32_t ring_index) {
  auto handle = region_of_owner_.find(owner);
  if (handle == region_of_owner_.end()) return;
  auto it = regions_.find(handle->second);
  if (it == regions_.end() || it->second.consumers.count(consumer) == 0) return;
  const auto& eventfds = it->second.eventfds;
  if (ring_index >= eventfds.size() || !eventfds[ring_index].valid()) return;
  const uint64_t one = 1;
  // Non-blocking: if the counter is saturated the consumer has plenty to do already.
  [[maybe_unused]] ssize_t n = ::write(eventfds[ring_index].get(), &one, sizeof one);
  ++notifications_sent_;
  HVPROF_PROBE(ring__wakeup, consumer, owner, ring_index);
}

hvprof::Result<int> HostedPlatform::RegionFd(uint64_t handle, DomainId requester,
                                             uint64_t* bytes) const {
  auto it = regions_.find(handle);
  if (it == regions_.end() || it->second.consumers.count(requester) == 0) {
    return MakeError(ErrorKind::kPermissionDenied, "region {:#x} is not shared with domain {}",
                     handle, requester);
  }
  *bytes = it->second.mapping.size();
  return it->second.memfd.get();
}

hvprof::Result<std::vector<int>> HostedPlatform::NotificationFds(uint64_t handle,
                                                                 DomainId requester,
                                                                 uint32_t first,
                                                                 uint32_t count) {
  auto it = regions_.find(handle);
  if (it == regions_.end() || it->second.consumers.count(requester) == 0) {
    return MakeError(ErrorKind::kPermissionDenied, "region {:#x} is not shared with domain {}",
                     handle, requester);
  }
  Region& region = it->second;
  if (region.eventfds.size() < uint64_t{first} + count) region.eventfds.resize(first + count);
  std::vector<int> fds;
  for (uint32_t i = first; i < first + count; ++i) {
    if (!region.eventfds[i].valid()) {
      region.eventfds[i] = hvprof::ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      if (!region.eventfds[i].valid()) return hvprof::ErrnoError(errno, "eventfd");
    }
    fds.push_back(region.eventfds[i].get());
  }
  return fds;
}

}  // namespace hvprof::hosted
