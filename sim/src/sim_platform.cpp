// SimPlatform: the simulated machine as the engine's platform.
#include "machine_parts.h"

namespace hvprof::sim {

// ---- the platform

uint32_t SimPlatform::NumCpus() { return static_cast<uint32_t>(machine_.cpus_.size()); }

CpuidResult SimPlatform::Cpuid(uint32_t, uint32_t leaf, uint32_t subleaf) {
  static const hosted::CpuModel kModels[] = {CpuModelFor(PmuModelKind::kIntelArchV4),
                                             CpuModelFor(PmuModelKind::kAmdZen),
                                             CpuModelFor(PmuModelKind::kAmdZen4),
                                             CpuModelFor(PmuModelKind::kNone)};
  return kModels[static_cast<int>(machine_.scenario_.machine.pmu)].Cpuid(leaf, subleaf);
}

bool SimPlatform::ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) {
  if (cpu >= machine_.cpus_.size()) return false;
  return machine_.cpus_[cpu]->pmu.ReadMsr(msr, value);
}

bool SimPlatform::WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) {
  if (cpu >= machine_.cpus_.size()) return false;
  return machine_.cpus_[cpu]->pmu.WriteMsr(msr, value);
}

void SimPlatform::SetPmiRouting(uint32_t cpu, bool deliver_as_nmi) {
  if (cpu >= machine_.cpus_.size()) return;
  machine_.cpus_[cpu]->pmi_routed = deliver_as_nmi;
  machine_.cpus_[cpu]->pmi_masked = false;
}

void SimPlatform::RearmPmi(uint32_t cpu) {
  if (cpu < machine_.cpus_.size()) machine_.cpus_[cpu]->pmi_masked = false;
}

uint64_t SimPlatform::NowNs() {
  const int cpu = machine_.nmi_cpu_;
  return machine_.NsOf(cpu >= 0 ? machine_.cpus_[cpu]->time : machine_.now_);
}

bool SimPlatform::StartSampleTimer(uint64_t period_ns) {
  const uint64_t cycles =
      static_cast<uint64_t>(static_cast<unsigned __int128>(period_ns) * machine_.scenario_.machine.mhz / 1000);
  machine_.tick_cycles_ = std::max<uint64_t>(cycles, 1);
  machine_.timer_sampled_ = true;
  for (auto& cpu : machine_.cpus_) cpu->next_tick = cpu->time + machine_.tick_cycles_;
  return true;
}

void SimPlatform::StopSampleTimer() { machine_.tick_cycles_ = 0; }

bool SimPlatform::GetDomainInfo(DomainId domain, DomainInfo* info) {
  const SimMachine::Domain* found = machine_.FindDomain(domain);
  if (found == nullptr) return false;
  info->num_vcpus = found->vcpus;
  info->type = found->type;
  info->is_hardware_domain = domain == 0;
  return true;
}

bool SimPlatform::GetInterruptedContext(uint32_t cpu, InterruptedContext* context) {
  if (cpu >= machine_.cpus_.size() || machine_.nmi_cpu_ != static_cast<int>(cpu)) return false;
  *context = machine_.cpus_[cpu]->context;
  return true;
}

bool SimPlatform::ReadGuestMemory(DomainId domain, uint16_t, uint64_t address, void* buffer,
                                  uint32_t bytes) {
  // The only memory the simulation has is the synthetic frame chain of the function the
  // current PMI interrupted: frame k at base + 16k holds {next frame, return address k}.
  const int cpu_index = machine_.nmi_cpu_;
  if (cpu_index < 0) return false;
  const SimMachine::Cpu& cpu = *machine_.cpus_[cpu_index];
  const InterruptedContext& context = cpu.context;
  const bool hypervisor = domain == kDomainXen;
  if (hypervisor != context.in_hypervisor || context.frame_pointer == 0) return false;
  if (!hypervisor && domain != context.domain) return false;
  const std::vector<uint64_t>& stack = cpu.function->stack;
  const uint64_t base = context.frame_pointer;
  if (address < base || (address - base) % 16 != 0 || bytes > 16) return false;
  const uint64_t frame = (address - base) / 16;
  if (frame >= stack.size()) return false;
  // A churned run's return addresses are its own: its mappings' shift added.
  const uint64_t words[2] = {frame + 1 < stack.size() ? base + 16 * (frame + 1) : 0,
                             stack[frame] + (hypervisor ? 0 : cpu.user_offset)};
  if (bytes == 16) {
    std::memcpy(buffer, words, 16);
  } else if (bytes == 8) {
    // A 32-bit walk reads two 4-byte words.
    const uint32_t narrow[2] = {static_cast<uint32_t>(words[0]), static_cast<uint32_t>(words[1])};
    std::memcpy(buffer, narrow, 8);
  } else {
    return false;
  }
  return true;
}

}  // namespace hvprof::sim
