#include "freestanding.h"
#include "hvpmu/msr.h"
#include "hvpmu/pmu_drivers.h"
#include "pmu_common.h"

namespace hvpmu {
namespace {

uint64_t EventSelect(const CounterConfig& config) {
  return (config.event & 0xFFULL) | (uint64_t{config.unit_mask} << msr::kEvtSelUnitMaskShift) |
         (config.user ? msr::kEvtSelUsr : 0) | (config.kernel ? msr::kEvtSelOs : 0) |
         msr::kEvtSelInt;
}

}  // namespace

using detail::Min;

bool IntelArchPerfmon::Probe() {
  const CpuidResult vendor = platform_.Cpuid(0, cpuid::kVendorLeaf, 0);
  if (vendor.ebx != cpuid::kIntelEbx || vendor.edx != cpuid::kIntelEdx ||
      vendor.ecx != cpuid::kIntelEcx || vendor.eax < cpuid::kArchPerfmonLeaf) {
    return false;
  }
  const CpuidResult leaf = platform_.Cpuid(0, cpuid::kArchPerfmonLeaf, 0);
  version_ = leaf.eax & 0xFF;
  const uint32_t gp = (leaf.eax >> 8) & 0xFF;
  if (version_ == 0 || gp < 2) return false;  // Xen's X86_FEATURE_ARCH_PERFMON rule
  num_gp_ = Min(gp, kMaxGp);
  gp_width_ = (leaf.eax >> 16) & 0xFF;
  const uint32_t vector_length = (leaf.eax >> 24) & 0xFF;
  unavailable_events_ = leaf.ebx;
  if (vector_length < 32) unavailable_events_ |= ~((1u << vector_length) - 1);

  num_fixed_ = 0;
  fixed_width_ = 0;
  if (version_ >= 2) {
    // From v5, ECX is a bitmap of supported fixed counters beside the EDX count.
    const uint32_t contiguous = leaf.edx & 0x1F;
    const uint32_t bitmap = version_ >= 5 ? leaf.ecx : 0;
    while (num_fixed_ < kMaxFixed &&
           (num_fixed_ < contiguous || ((bitmap >> num_fixed_) & 1) != 0)) {
      ++num_fixed_;
    }
    fixed_width_ = (leaf.edx >> 5) & 0xFF;
  }

  full_width_ = false;
  const CpuidResult features = platform_.Cpuid(0, cpuid::kFeatureLeaf, 0);
  uint64_t capabilities = 0;
  if ((features.ecx & cpuid::kFeaturePdcm) != 0 &&
      platform_.ReadMsr(0, msr::kIntelPerfCapabilities, &capabilities)) {
    full_width_ = (capabilities & msr::kIntelPerfCapFullWidthWrite) != 0;
  }
  num_cpus_ = Min(platform_.NumCpus(), kMaxCpus);
  return gp_width_ >= 32 && gp_width_ <= 64;
}

uint64_t IntelArchPerfmon::MaxCount() const {
  // Without full-width writes only bits 31:0 are written and bit 31 is sign-extended.
  const uint32_t bits = full_width_ ? gp_width_ - 1 : 31;
  return 1ULL << bits;
}

void IntelArchPerfmon::Describe(InitV2* init) const {
  init->pmu_kind = static_cast<uint32_t>(kind());
  init->pmu_version = version_;
  init->num_counters = num_counters();
  init->num_gp_counters = num_gp_;
  init->num_fixed_counters = num_fixed_;
  init->gp_counter_width = gp_width_;
  init->fixed_counter_width = fixed_width_;
  init->max_count = MaxCount();
  init->flags = (full_width_ ? kPmuFullWidthWrites : 0) | (version_ >= 2 ? kPmuGlobalControl : 0);
}

ErrorCode IntelArchPerfmon::Validate(uint32_t index, const CounterConfig& config) const {
  if (index >= num_counters()) return ErrorCode::kBadCounter;
  if (!config.enabled) return ErrorCode::kOk;
  const CpuEventTable* table = FindEventTable(cpu_type());
  const bool fixed = index >= num_gp_;
  const uint64_t max_count = fixed ? 1ULL << (fixed_width_ - 1) : MaxCount();
  const EventDef* event = nullptr;
  if (ErrorCode error = detail::ValidateEvent(table, config, max_count, &event);
      error != ErrorCode::kOk) {
    return error;
  }
  // The table lists the architectural events in CPUID.0AH:EBX bit order.
  const auto arch_index = static_cast<uint32_t>(event - table->events);
  if (arch_index < 32 && ((unavailable_events_ >> arch_index) & 1) != 0) {
    return ErrorCode::kUnknownEvent;
  }
  if (fixed && event->fixed_counter != static_cast<int8_t>(index - num_gp_)) {
    return ErrorCode::kEventNotOnCounter;
  }
  return ErrorCode::kOk;
}

ErrorCode IntelArchPerfmon::Reserve() {
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    SavedRegisters& saved = saved_[cpu];
    bool ok = true;
    for (uint32_t i = 0; i < num_gp_; ++i) {
      ok &= platform_.ReadMsr(cpu, msr::kIntelEventSel0 + i, &saved.event_select[i]);
      ok &= platform_.ReadMsr(cpu, msr::kIntelPmc0 + i, &saved.counter[i]);
    }
    for (uint32_t i = 0; i < num_fixed_; ++i) {
      ok &= platform_.ReadMsr(cpu, msr::kIntelFixedCtr0 + i, &saved.fixed_counter[i]);
    }
    saved.fixed_ctrl = saved.global_ctrl = 0;
    if (num_fixed_ != 0) ok &= platform_.ReadMsr(cpu, msr::kIntelFixedCtrCtrl, &saved.fixed_ctrl);
    if (version_ >= 2) ok &= platform_.ReadMsr(cpu, msr::kIntelGlobalCtrl, &saved.global_ctrl);
    if (!ok) return ErrorCode::kHardwareFault;
  }
  reserved_ = true;
  enabled_ = 0;
  return ErrorCode::kOk;
}

void IntelArchPerfmon::Release() {
  if (!reserved_) return;
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    const SavedRegisters& saved = saved_[cpu];
    if (version_ >= 2) platform_.WriteMsr(cpu, msr::kIntelGlobalCtrl, 0);
    for (uint32_t i = 0; i < num_gp_; ++i) {
      platform_.WriteMsr(cpu, msr::kIntelEventSel0 + i, saved.event_select[i]);
      platform_.WriteMsr(cpu, (full_width_ ? msr::kIntelFullPmc0 : msr::kIntelPmc0) + i,
                         saved.counter[i]);
    }
    for (uint32_t i = 0; i < num_fixed_; ++i) {
      platform_.WriteMsr(cpu, msr::kIntelFixedCtr0 + i, saved.fixed_counter[i]);
    }
    if (num_fixed_ != 0) platform_.WriteMsr(cpu, msr::kIntelFixedCtrCtrl, saved.fixed_ctrl);
    if (version_ >= 2) platform_.WriteMsr(cpu, msr::kIntelGlobalCtrl, saved.global_ctrl);
  }
  reserved_ = false;
  enabled_ = 0;
}

bool IntelArchPerfmon::WriteGpCounter(uint32_t cpu, uint32_t index, uint64_t count) {
  const uint64_t reload = ReloadValue(count, gp_width_);
  if (full_width_) return platform_.WriteMsr(cpu, msr::kIntelFullPmc0 + index, reload);
  // The legacy address takes bits 31:0 and sign-extends bit 31, which is set for any count
  // up to 2^31, giving the same full-width value.
  return platform_.WriteMsr(cpu, msr::kIntelPmc0 + index, reload & 0xFFFFFFFFULL);
}

bool IntelArchPerfmon::WriteFixedCounter(uint32_t cpu, uint32_t index, uint64_t count) {
  return platform_.WriteMsr(cpu, msr::kIntelFixedCtr0 + index, ReloadValue(count, fixed_width_));
}

uint64_t IntelArchPerfmon::GlobalEnableBits() const {
  uint64_t bits = 0;
  for (uint32_t i = 0; i < num_gp_; ++i) {
    if ((enabled_ >> i) & 1) bits |= 1ULL << i;
  }
  for (uint32_t j = 0; j < num_fixed_; ++j) {
    if ((enabled_ >> (num_gp_ + j)) & 1) bits |= 1ULL << (msr::kIntelFixedShift + j);
  }
  return bits;
}

ErrorCode IntelArchPerfmon::Setup(const CounterConfig* counters, uint32_t count) {
  enabled_ = 0;
  for (uint32_t i = 0; i < num_counters(); ++i) {
    config_[i] = i < count ? counters[i] : CounterConfig{};
    if (config_[i].enabled) enabled_ |= 1u << i;
  }
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    bool ok = true;
    if (version_ >= 2) ok &= platform_.WriteMsr(cpu, msr::kIntelGlobalCtrl, 0);
    uint64_t fixed_ctrl = 0;
    for (uint32_t i = 0; i < num_gp_; ++i) {
      const CounterConfig& config = config_[i];
      ok &= platform_.WriteMsr(cpu, msr::kIntelEventSel0 + i, 0);
      if (!config.enabled) continue;
      ok &= WriteGpCounter(cpu, i, config.count);
      ok &= platform_.WriteMsr(cpu, msr::kIntelEventSel0 + i, EventSelect(config));
    }
    for (uint32_t j = 0; j < num_fixed_; ++j) {
      const CounterConfig& config = config_[num_gp_ + j];
      if (!config.enabled) continue;
      ok &= WriteFixedCounter(cpu, j, config.count);
      const uint64_t bits = (config.kernel ? msr::kFixedCtrlOs : 0) |
                            (config.user ? msr::kFixedCtrlUsr : 0) | msr::kFixedCtrlPmi;
      fixed_ctrl |= bits << (4 * j);
    }
    if (num_fixed_ != 0) ok &= platform_.WriteMsr(cpu, msr::kIntelFixedCtrCtrl, fixed_ctrl);
    if (!ok) return ErrorCode::kHardwareFault;
  }
  return ErrorCode::kOk;
}

void IntelArchPerfmon::Start() {
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    for (uint32_t i = 0; i < num_gp_; ++i) {
      if (((enabled_ >> i) & 1) == 0) continue;
      platform_.WriteMsr(cpu, msr::kIntelEventSel0 + i,
                         EventSelect(config_[i]) | msr::kEvtSelEnable);
    }
    if (version_ >= 2) platform_.WriteMsr(cpu, msr::kIntelGlobalCtrl, GlobalEnableBits());
  }
}

void IntelArchPerfmon::Stop() {
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
    if (version_ >= 2) platform_.WriteMsr(cpu, msr::kIntelGlobalCtrl, 0);
    for (uint32_t i = 0; i < num_gp_; ++i) {
      if (((enabled_ >> i) & 1) == 0) continue;
      platform_.WriteMsr(cpu, msr::kIntelEventSel0 + i, EventSelect(config_[i]));
    }
  }
}

uint32_t IntelArchPerfmon::CollectOverflows(uint32_t cpu) {
  uint32_t overflowed = 0;
  if (version_ >= 2) {
    uint64_t status = 0;
    if (!platform_.ReadMsr(cpu, msr::kIntelGlobalStatus, &status) || status == 0) return 0;
    for (uint32_t i = 0; i < num_gp_; ++i) {
      if (((enabled_ >> i) & 1) != 0 && ((status >> i) & 1) != 0) {
        WriteGpCounter(cpu, i, config_[i].count);
        overflowed |= 1u << i;
      }
    }
    for (uint32_t j = 0; j < num_fixed_; ++j) {
      const uint32_t logical = num_gp_ + j;
      if (((enabled_ >> logical) & 1) != 0 && ((status >> (msr::kIntelFixedShift + j)) & 1) != 0) {
        WriteFixedCounter(cpu, j, config_[logical].count);
        overflowed |= 1u << logical;
      }
    }
    // Acknowledge everything that was set, ours or not, so the next PMI starts clean.
    platform_.WriteMsr(cpu, msr::kIntelGlobalOvfCtrl, status);
    return overflowed;
  }
  // Version 1 has no global status: a counter overflowed when its top bit is clear again.
  for (uint32_t i = 0; i < num_gp_; ++i) {
    if (((enabled_ >> i) & 1) == 0) continue;
    uint64_t value = 0;
    if (!platform_.ReadMsr(cpu, msr::kIntelPmc0 + i, &value)) continue;
    if (((value >> (gp_width_ - 1)) & 1) == 0) {
      WriteGpCounter(cpu, i, config_[i].count);
      overflowed |= 1u << i;
    }
  }
  return overflowed;
}

}  // namespace hvpmu
