#include "freestanding.h"
#include "hvpmu/msr.h"
#include "hvpmu/pmu_drivers.h"
#include "pmu_common.h"

namespace hvpmu {
namespace {

constexpr uint64_t kCounterTopBit = 1ULL << (msr::kAmdCounterWidth - 1);

const char* AmdCpuType(uint32_t family) {
  switch (family) {
    case 0x0F: return "x86-64/hammer";
    case 0x10: return "x86-64/family10";
    case 0x11: return "x86-64/family11h";
    case 0x12: return "x86-64/family12h";
    case 0x14: return "x86-64/family14h";
    case 0x15: return "x86-64/family15h";
    case 0x16: return "x86-64/family16h";
    case 0x17: return "x86-64/family17h";
    case 0x18: return "x86-64/family18h";
    case 0x19: return "x86-64/family19h";
    default: return nullptr;
  }
}

}  // namespace

bool AmdCorePmu::Probe() {
  const CpuidResult vendor = platform_.Cpuid(0, cpuid::kVendorLeaf, 0);
  const bool amd = vendor.ebx == cpuid::kAmdEbx && vendor.edx == cpuid::kAmdEdx &&
                   vendor.ecx == cpuid::kAmdEcx;
  const bool hygon = vendor.ebx == cpuid::kHygonEbx && vendor.edx == cpuid::kHygonEdx &&
                     vendor.ecx == cpuid::kHygonEcx;
  if (!amd && !hygon) return false;
  family_ = cpuid::DisplayFamily(platform_.Cpuid(0, cpuid::kFeatureLeaf, 0).eax);
  if (hygon != (family_ == 0x18)) return false;
  const char* type = AmdCpuType(family_);
  if (type == nullptr) return false;
  detail::StrCopy(cpu_type_, type, sizeof cpu_type_);

  const CpuidResult extended = platform_.Cpuid(0, cpuid::kExtendedFeatureLeaf, 0);
  core_msrs_ = family_ >= 0x15 && (extended.ecx & cpuid::kAmdPerfCtrExtCore) != 0;
  num_counters_ = core_msrs_ ? 6 : 4;
  num_cpus_ = detail::Min(platform_.NumCpus(), kMaxCpus);
  return true;
}

uint32_t AmdCorePmu::ControlMsr(uint32_t index) const {
  return core_msrs_ ? msr::kAmdCoreCtl0 + 2 * index : msr::kAmdLegacyEventSel0 + index;
}

uint32_t AmdCorePmu::CounterMsr(uint32_t index) const {
  return core_msrs_ ? msr::kAmdCoreCtr0 + 2 * index : msr::kAmdLegacyCtr0 + index;
}

uint64_t AmdCorePmu::EncodeControl(const CounterConfig& config) {
  // Event select bits 7:0 stay in place; bits 11:8 go to 35:32. HostOnly and GuestOnly stay
  // clear so that both host and guest are counted.
  return (config.event & 0xFFULL) |
         (uint64_t{(config.event >> 8) & 0xFu} << msr::kAmdEventHighShift) |
         (uint64_t{config.unit_mask} << msr::kEvtSelUnitMaskShift) |
         (config.user ? msr::kEvtSelUsr : 0) | (config.kernel ? msr::kEvtSelOs : 0) |
         msr::kEvtSelInt;
}

void AmdCorePmu::Describe(InitV2* init) const {
  init->pmu_kind = static_cast<uint32_t>(kind());
  init->pmu_version = 0;
  init->num_counters = num_counters_;
  init->num_gp_counters = num_counters_;
  init->num_fixed_counters = 0;
  init->gp_counter_width = msr::kAmdCounterWidth;
  init->fixed_counter_width = 0;
  init->max_count = kCounterTopBit;
  init->flags = 0;
}

ErrorCode AmdCorePmu::Validate(uint32_t index, const CounterConfig& config) const {
  if (index >= num_counters_) return ErrorCode::kBadCounter;
  if (!config.enabled) return ErrorCode::kOk;
  const EventDef* event = nullptr;
  return detail::ValidateEvent(FindEventTable(cpu_type_), config, kCounterTopBit, &event);
}

ErrorCode AmdCorePmu::Reserve() {
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    bool ok = true;
    for (uint32_t i = 0; i < num_counters_; ++i) {
      ok &= platform_.ReadMsr(cpu, ControlMsr(i), &saved_[cpu].control[i]);
      ok &= platform_.ReadMsr(cpu, CounterMsr(i), &saved_[cpu].counter[i]);
    }
    if (!ok) return ErrorCode::kHardwareFault;
  }
  reserved_ = true;
  enabled_ = 0;
  return ErrorCode::kOk;
}

void AmdCorePmu::Release() {
  if (!reserved_) return;
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    for (uint32_t i = 0; i < num_counters_; ++i) {
      platform_.WriteMsr(cpu, ControlMsr(i), saved_[cpu].control[i] & ~msr::kEvtSelEnable);
      platform_.WriteMsr(cpu, CounterMsr(i), saved_[cpu].counter[i]);
      platform_.WriteMsr(cpu, ControlMsr(i), saved_[cpu].control[i]);
    }
  }
  reserved_ = false;
  enabled_ = 0;
}

ErrorCode AmdCorePmu::Setup(const CounterConfig* counters, uint32_t count) {
  enabled_ = 0;
  for (uint32_t i = 0; i < num_counters_; ++i) {
    config_[i] = i < count ? counters[i] : CounterConfig{};
    if (config_[i].enabled) enabled_ |= 1u << i;
  }
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    bool ok = true;
    for (uint32_t i = 0; i < num_counters_; ++i) {
      ok &= platform_.WriteMsr(cpu, ControlMsr(i), 0);
      if (!config_[i].enabled) continue;
      ok &= platform_.WriteMsr(cpu, CounterMsr(i),
                               ReloadValue(config_[i].count, msr::kAmdCounterWidth));
      ok &= platform_.WriteMsr(cpu, ControlMsr(i), EncodeControl(config_[i]));
    }
    if (!ok) return ErrorCode::kHardwareFault;
  }
  return ErrorCode::kOk;
}

void AmdCorePmu::Start() {
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    for (uint32_t i = 0; i < num_counters_; ++i) {
      if (((enabled_ >> i) & 1) == 0) continue;
      platform_.WriteMsr(cpu, ControlMsr(i), EncodeControl(config_[i]) | msr::kEvtSelEnable);
    }
  }
}

void AmdCorePmu::Stop() {
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    for (uint32_t i = 0; i < num_counters_; ++i) {
      if (((enabled_ >> i) & 1) == 0) continue;
      platform_.WriteMsr(cpu, ControlMsr(i), EncodeControl(config_[i]));
    }
  }
}

uint32_t AmdCorePmu::CollectOverflows(uint32_t cpu) {
  // No global status register is used: a counter that started at 2^48 - count has overflowed
  // once its top bit is clear again.
  uint32_t overflowed = 0;
  for (uint32_t i = 0; i < num_counters_; ++i) {
    if (((enabled_ >> i) & 1) == 0) continue;
    uint64_t value = 0;
    if (!platform_.ReadMsr(cpu, CounterMsr(i), &value)) continue;
    if ((value & kCounterTopBit) == 0) {
      platform_.WriteMsr(cpu, CounterMsr(i), ReloadValue(config_[i].count, msr::kAmdCounterWidth));
      overflowed |= 1u << i;
    }
  }
  return overflowed;
}

PmuDriver* PmuDrivers::Detect() {
  if (intel.Probe()) return &intel;
  if (amd.Probe()) return &amd;
  return nullptr;
}

}  // namespace hvpmu
