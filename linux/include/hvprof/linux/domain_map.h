// Domains on a Linux host. The host is dom0; `--domain-map` carves other domains out of it:
//
//   pid:N=D            process N and all its descendants (tracked through fork) are domain D
//   cgroup:/PATH=D     processes whose cgroup (v2 path, or v1 systemd path) is PATH or below
//   kvm:N=D            KVM guest samples of the VMM process N (its vCPU threads) are domain D
//
// Entries are separated by commas. Precedence for a host process: the nearest pid: rule on its
// ancestry (itself included), else the longest matching cgroup: rule, else its parent's domain,
// else dom0. A domain id is either host processes (pid:/cgroup:, several entries may share
// it) or one KVM guest (kvm:), never both.
//
// VMM processes without a kvm: entry are numbered automatically (DomainRegistry, when
// auto_kvm is on): after the largest id of the map, in order of discovery (pid order at start,
// then first guest sample).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvpmu/abi/ops.h"
#include "hvprof/base/result.h"

namespace hvprof::linux_host {

using hvpmu::DomainId;

struct DomainMapEntry {
  enum class Kind : uint8_t { kPid, kCgroup, kKvm };
  Kind kind = Kind::kPid;
  uint32_t pid = 0;    // kPid, kKvm
  std::string cgroup;  // kCgroup: absolute, normalized (no trailing or doubled slashes)
  DomainId domain = 0;
  std::string text;    // the entry as written
};

struct DomainMap {
  std::vector<DomainMapEntry> entries;

  bool empty() const { return entries.empty(); }
  std::optional<DomainId> PidRule(uint32_t pid) const;
  // The longest cgroup: rule that is `cgroup` or one of its ancestors.
  std::optional<DomainId> CgroupRule(std::string_view cgroup) const;
  std::optional<DomainId> KvmRule(uint32_t vmm_pid) const;
  DomainId MaxDomain() const;  // 0 for an empty map
};

// Parses "pid:1234=1,cgroup:/machine.slice/vm.scope=2,kvm:4321=3". Errors start with
// "--domain-map: " and name the entry.
hvprof::Result<DomainMap> ParseDomainMap(std::string_view text);

// Normalizes a cgroup path ("/a//b/" -> "/a/b"); returns false if it is not absolute.
bool NormalizeCgroupPath(std::string_view in, std::string* out);
// Whether normalized `cgroup` is `rule` or below it, on path components.
bool CgroupWithin(std::string_view cgroup, std::string_view rule);

// What the platform tells the engine and the agents about one domain.
struct DomainDesc {
  DomainId id = 0;
  std::string name;
  bool guest = false;     // a KVM guest (HVM); otherwise host processes (dom0-like)
  uint16_t vcpus = 0;
  uint32_t vmm_pid = 0;   // guests
  bool automatic = false; // numbered by auto_kvm, not by the map
};

class DomainRegistry {
 public:
  // `host_vcpus`: the vCPU count of host domains (one ring per host CPU).
  DomainRegistry(DomainMap map, uint16_t host_vcpus, bool auto_kvm);

  const DomainMap& map() const { return map_; }
  const std::vector<DomainDesc>& domains() const { return domains_; }
  const DomainDesc* Find(DomainId id) const;
  bool auto_kvm() const { return auto_kvm_; }

  // The guest domain of VMM `vmm_pid`: its kvm: entry, an earlier automatic number, or (with
  // `create` and auto_kvm) a new number. kDomainInvalid if it has none.
  DomainId GuestDomainFor(uint32_t vmm_pid, bool create);
  // Raises a guest's vCPU count to at least `vcpus` (discovered from its threads).
  void NoteGuestVcpus(DomainId id, uint16_t vcpus);
  // Sets a guest's name (the VMM's comm) if it still has the default one.
  void NameGuest(DomainId id, std::string_view comm);

 private:
  DomainMap map_;
  uint16_t host_vcpus_;
  bool auto_kvm_;
  DomainId next_auto_;
  std::vector<DomainDesc> domains_;  // sorted by id
};

}  // namespace hvprof::linux_host
