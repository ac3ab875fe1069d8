// LinuxPlatform: this host as the engine's platform.
#include "machine_parts.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace hvprof::linux_host {

CpuidResult LinuxPlatform::Cpuid(uint32_t, uint32_t leaf, uint32_t subleaf) {
  CpuidResult result{};
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __cpuid_count(leaf, subleaf, eax, ebx, ecx, edx);
  result = {eax, ebx, ecx, edx};
#else
  (void)leaf;
  (void)subleaf;
#endif
  return result;
}

uint64_t LinuxPlatform::NowNs() { return in_sample_ ? sample_time_ : MonotonicNs(); }

bool LinuxPlatform::GetDomainInfo(DomainId domain, DomainInfo* info) {
  const DomainDesc* desc = domains_.Find(domain);
  if (desc == nullptr) return false;
  info->num_vcpus = static_cast<uint16_t>(
      std::clamp<uint32_t>(desc->vcpus, 1, kMaxVcpus));
  info->type = desc->guest ? DomainType::kHvm : DomainType::kPv64;
  info->is_hardware_domain = domain == 0;
  return true;
}

void LinuxPlatform::BeginSample(uint64_t time_ns, std::span<const uint64_t> frames) {
  in_sample_ = true;
  sample_time_ = time_ns;
  frames_ = frames;
}

void LinuxPlatform::EndSample() {
  in_sample_ = false;
  frames_ = {};
}

bool LinuxPlatform::ReadGuestMemory(DomainId, uint16_t, uint64_t address, void* buffer,
                                    uint32_t bytes) {
  if (!in_sample_ || bytes != 16 || address < kFrameBase || (address - kFrameBase) % 16 != 0) {
    return false;
  }
  const uint64_t index = (address - kFrameBase) / 16;
  if (index >= frames_.size()) return false;
  const uint64_t words[2] = {index + 1 < frames_.size() ? address + 16 : 0, frames_[index]};
  std::memcpy(buffer, words, sizeof words);
  return true;
}

// ---- the machine

}  // namespace hvprof::linux_host
