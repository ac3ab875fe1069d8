#include "hvprof/linux/domain_map.h"

#include <algorithm>
#include <charconv>
#include <limits>

namespace hvprof::linux_host {

using hvpmu::DomainId;
using hvpmu::kDomainInvalid;
using hvpmu::kMaxDomainId;

using hvprof::ErrorKind;
using hvprof::MakeError;

namespace {

constexpr std::string_view kSyntax =
    "use pid:PID=DOMAIN, cgroup:/PATH=DOMAIN or kvm:PID=DOMAIN, separated by commas";

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

template <typename T>
bool ParseDecimal(std::string_view text, T* out) {
  if (text.empty() || text.size() > 10) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return false;
  if (value > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
  *out = static_cast<T>(value);
  return true;
}

}  // namespace

bool NormalizeCgroupPath(std::string_view in, std::string* out) {
  if (in.empty() || in.front() != '/') return false;
  std::string path;
  size_t i = 0;
  while (i < in.size()) {
    while (i < in.size() && in[i] == '/') ++i;
    const size_t start = i;
    while (i < in.size() && in[i] != '/') ++i;
    if (i > start) {
      path += '/';
      path.append(in.substr(start, i - start));
    }
  }
  *out = path.empty() ? "/" : path;
  return true;
}

std::optional<DomainId> DomainMap::PidRule(uint32_t pid) const {
  for (const DomainMapEntry& entry : entries) {
    if (entry.kind == DomainMapEntry::Kind::kPid && entry.pid == pid) return entry.domain;
  }
  return std::nullopt;
}

bool CgroupWithin(std::string_view cgroup, std::string_view rule) {
  return rule == "/" || cgroup == rule ||
         (cgroup.size() > rule.size() && cgroup.substr(0, rule.size()) == rule &&
          cgroup[rule.size()] == '/');
}

std::optional<DomainId> DomainMap::CgroupRule(std::string_view cgroup) const {
  const DomainMapEntry* best = nullptr;
  for (const DomainMapEntry& entry : entries) {
    if (entry.kind != DomainMapEntry::Kind::kCgroup || !CgroupWithin(cgroup, entry.cgroup)) {
      continue;
    }
    if (best == nullptr || entry.cgroup.size() > best->cgroup.size()) best = &entry;
  }
  if (best == nullptr) return std::nullopt;
  return best->domain;
}

std::optional<DomainId> DomainMap::KvmRule(uint32_t vmm_pid) const {
  for (const DomainMapEntry& entry : entries) {
    if (entry.kind == DomainMapEntry::Kind::kKvm && entry.pid == vmm_pid) return entry.domain;
  }
  return std::nullopt;
}

DomainId DomainMap::MaxDomain() const {
  DomainId max = 0;
  for (const DomainMapEntry& entry : entries) max = std::max(max, entry.domain);
  return max;
}

hvprof::Result<DomainMap> ParseDomainMap(std::string_view text) {
  DomainMap map;
  if (Trim(text).empty()) return map;
  size_t index = 0;
  while (true) {
    ++index;
    const size_t comma = text.find(',');
    const std::string_view item = Trim(text.substr(0, comma));
    if (item.empty()) {
      return MakeError(ErrorKind::kInvalidArgument, "--domain-map: entry {} is empty; {}", index,
                       kSyntax);
    }
    DomainMapEntry entry;
    entry.text = std::string(item);
    const size_t colon = item.find(':');
    const size_t equals = item.rfind('=');
    if (colon == std::string_view::npos || equals == std::string_view::npos || equals < colon) {
      return MakeError(ErrorKind::kInvalidArgument, "--domain-map: '{}' is not KIND:TARGET=DOMAIN; {}",
                       item, kSyntax);
    }
    const std::string_view kind = item.substr(0, colon);
    const std::string_view target = Trim(item.substr(colon + 1, equals - colon - 1));
    const std::string_view domain_text = Trim(item.substr(equals + 1));
    if (kind == "pid") {
      entry.kind = DomainMapEntry::Kind::kPid;
    } else if (kind == "cgroup") {
      entry.kind = DomainMapEntry::Kind::kCgroup;
    } else if (kind == "kvm") {
      entry.kind = DomainMapEntry::Kind::kKvm;
    } else {
      return MakeError(ErrorKind::kInvalidArgument, "--domain-map: '{}': unknown kind '{}'; {}",
                       item, kind, kSyntax);
    }
    if (entry.kind == DomainMapEntry::Kind::kCgroup) {
      if (!NormalizeCgroupPath(target, &entry.cgroup)) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "--domain-map: '{}': the cgroup must be an absolute path such as "
                         "/machine.slice/vm.scope",
                         item);
      }
    } else if (!ParseDecimal(target, &entry.pid) || entry.pid == 0) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--domain-map: '{}': '{}' is not a process id (a positive decimal number)",
                       item, target);
    }
    uint32_t domain = 0;
    if (!ParseDecimal(domain_text, &domain) || domain > kMaxDomainId) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--domain-map: '{}': '{}' is not a domain id (0 to {})", item, domain_text,
                       kMaxDomainId);
    }
    entry.domain = static_cast<DomainId>(domain);
    if (entry.kind == DomainMapEntry::Kind::kKvm && entry.domain == 0) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--domain-map: '{}': domain 0 is the host; give the guest its own id", item);
    }
    for (const DomainMapEntry& other : map.entries) {
      const bool same_target =
          other.kind == entry.kind &&
          (entry.kind == DomainMapEntry::Kind::kCgroup ? other.cgroup == entry.cgroup
                                                       : other.pid == entry.pid);
      if (same_target) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "--domain-map: '{}' and '{}' map the same {} twice", other.text, item,
                         entry.kind == DomainMapEntry::Kind::kCgroup ? "cgroup" : "process");
      }
      const bool guest = entry.kind == DomainMapEntry::Kind::kKvm;
      const bool other_guest = other.kind == DomainMapEntry::Kind::kKvm;
      if (other.domain == entry.domain && (guest || other_guest)) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "--domain-map: '{}' and '{}' both use domain {}; a KVM guest needs a "
                         "domain of its own",
                         other.text, item, entry.domain);
      }
    }
    map.entries.push_back(std::move(entry));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return map;
}

DomainRegistry::DomainRegistry(DomainMap map, uint16_t host_vcpus, bool auto_kvm)
    : map_(std::move(map)), host_vcpus_(host_vcpus), auto_kvm_(auto_kvm) {
  next_auto_ = static_cast<DomainId>(map_.MaxDomain() + 1);
  DomainDesc dom0;
  dom0.id = 0;
  dom0.name = "Domain-0";
  dom0.vcpus = host_vcpus_;
  domains_.push_back(dom0);
  for (const DomainMapEntry& entry : map_.entries) {
    if (Find(entry.domain) != nullptr) continue;
    DomainDesc desc;
    desc.id = entry.domain;
    desc.vcpus = host_vcpus_;
    switch (entry.kind) {
      case DomainMapEntry::Kind::kPid: desc.name = "pid-" + std::to_string(entry.pid); break;
      case DomainMapEntry::Kind::kCgroup: {
        const size_t slash = entry.cgroup.rfind('/');
        const std::string leaf = entry.cgroup.substr(slash + 1);
        desc.name = "cgroup-" + (leaf.empty() ? std::string("root") : leaf);
        break;
      }
      case DomainMapEntry::Kind::kKvm:
        desc.name = "kvm-" + std::to_string(entry.pid);
        desc.guest = true;
        desc.vmm_pid = entry.pid;
        break;
    }
    domains_.push_back(desc);
  }
  std::sort(domains_.begin(), domains_.end(),
            [](const DomainDesc& a, const DomainDesc& b) { return a.id < b.id; });
}

const DomainDesc* DomainRegistry::Find(DomainId id) const {
  for (const DomainDesc& desc : domains_) {
    if (desc.id == id) return &desc;
  }
  return nullptr;
}

DomainId DomainRegistry::GuestDomainFor(uint32_t vmm_pid, bool create) {
  for (const DomainDesc& desc : domains_) {
    if (desc.guest && desc.vmm_pid == vmm_pid) return desc.id;
  }
  if (!create || !auto_kvm_) return kDomainInvalid;
  while (next_auto_ <= kMaxDomainId && Find(next_auto_) != nullptr) ++next_auto_;
  if (next_auto_ > kMaxDomainId) return kDomainInvalid;
  DomainDesc desc;
  desc.id = next_auto_++;
  desc.name = "kvm-" + std::to_string(vmm_pid);
  desc.guest = true;
  desc.vmm_pid = vmm_pid;
  desc.vcpus = host_vcpus_;
  desc.automatic = true;
  domains_.push_back(desc);
  std::sort(domains_.begin(), domains_.end(),
            [](const DomainDesc& a, const DomainDesc& b) { return a.id < b.id; });
  return desc.id;
}

void DomainRegistry::NoteGuestVcpus(DomainId id, uint16_t vcpus) {
  for (DomainDesc& desc : domains_) {
    if (desc.id == id && desc.guest) desc.vcpus = std::max(desc.vcpus, vcpus);
  }
}

void DomainRegistry::NameGuest(DomainId id, std::string_view comm) {
  for (DomainDesc& desc : domains_) {
    if (desc.id == id && desc.guest && desc.name == "kvm-" + std::to_string(desc.vmm_pid) &&
        !comm.empty()) {
      desc.name = "kvm-" + std::string(comm) + "-" + std::to_string(desc.vmm_pid);
    }
  }
}

}  // namespace hvprof::linux_host
