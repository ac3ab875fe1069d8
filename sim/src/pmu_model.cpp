#include "hvprof/sim/pmu_model.h"

#include "hvpmu/msr.h"

namespace hvprof::sim {

namespace msr = hvpmu::msr;

namespace {

constexpr uint32_t kIntelGp = 4;
constexpr uint32_t kIntelFixed = 3;
constexpr uint32_t kWidth = 48;

Quantity IntelEvent(uint8_t event, uint8_t unit_mask) {
  switch (event) {
    case 0x3C: return unit_mask == 0x01 ? kRefCycles : unit_mask == 0x00 ? kCycles : kNoQuantity;
    case 0xC0: return kInstructions;
    case 0x2E: return unit_mask == 0x4F ? kCacheRefs : unit_mask == 0x41 ? kCacheMisses : kNoQuantity;
    case 0xC4: return kBranches;
    case 0xC5: return kBranchMisses;
    default: return kNoQuantity;
  }
}

Quantity AmdEvent(uint16_t event) {
  switch (event) {
    case 0x076: return kCycles;
    case 0x0C0: return kInstructions;
    case 0x0C2: return kBranches;
    case 0x0C3: return kBranchMisses;
    case 0x040:
    case 0x029: return kCacheRefs;
    case 0x041:
    case 0x064:
    case 0x07E: return kCacheMisses;
    case 0x1A0: return kDispatchStalls;
    default: return kNoQuantity;
  }
}

}  // namespace

const char* QuantityName(Quantity quantity) {
  switch (quantity) {
    case kCycles: return "cycles";
    case kRefCycles: return "ref_cycles";
    case kInstructions: return "instructions";
    case kBranches: return "branches";
    case kBranchMisses: return "branch_misses";
    case kCacheRefs: return "cache_refs";
    case kCacheMisses: return "cache_misses";
    case kDispatchStalls: return "dispatch_stalls";
    default: return "none";
  }
}

hosted::CpuModel CpuModelFor(PmuModelKind kind) {
  switch (kind) {
    case PmuModelKind::kIntelArchV4:
      return hosted::IntelArchPerfmonModel(4, kIntelGp, kIntelFixed, kWidth, true);
    case PmuModelKind::kAmdZen: return hosted::AmdModel(0x17);
    case PmuModelKind::kAmdZen4: return hosted::AmdModel(0x19);
    case PmuModelKind::kNone: return hosted::IntelArchPerfmonModel(0, 0, 0);  // leaf 0xA: version 0
  }
  return hosted::UnknownVendorModel();
}

PmuModel::PmuModel(PmuModelKind kind) : kind_(kind) {
  mask_ = (uint64_t{1} << kWidth) - 1;
  if (kind_ == PmuModelKind::kNone) {
    num_gp_ = num_counters_ = 0;
  } else if (intel()) {
    num_gp_ = kIntelGp;
    num_counters_ = kIntelGp + kIntelFixed;
    perf_capabilities_ = msr::kIntelPerfCapFullWidthWrite;
  } else {
    num_gp_ = num_counters_ = 6;
  }
  Recompute();
}

bool PmuModel::ReadMsr(uint32_t msr, uint64_t* value) const {
  if (kind_ == PmuModelKind::kNone) return false;  // no PMU: every counter MSR faults
  if (intel()) {
    if (msr >= msr::kIntelPmc0 && msr < msr::kIntelPmc0 + num_gp_) {
      *value = counter_[msr - msr::kIntelPmc0];
    } else if (msr >= msr::kIntelFullPmc0 && msr < msr::kIntelFullPmc0 + num_gp_) {
      *value = counter_[msr - msr::kIntelFullPmc0];
    } else if (msr >= msr::kIntelEventSel0 && msr < msr::kIntelEventSel0 + num_gp_) {
      *value = control_[msr - msr::kIntelEventSel0];
    } else if (msr >= msr::kIntelFixedCtr0 && msr < msr::kIntelFixedCtr0 + kIntelFixed) {
      *value = counter_[num_gp_ + msr - msr::kIntelFixedCtr0];
    } else if (msr == msr::kIntelFixedCtrCtrl) {
      *value = fixed_ctrl_;
    } else if (msr == msr::kIntelGlobalCtrl) {
      *value = global_ctrl_;
    } else if (msr == msr::kIntelGlobalStatus) {
      *value = global_status_;
    } else if (msr == msr::kIntelGlobalOvfCtrl) {
      *value = 0;
    } else if (msr == msr::kIntelPerfCapabilities) {
      *value = perf_capabilities_;
    } else {
      return false;
    }
    return true;
  }
  // AMD: the core MSRs, and the legacy K7 addresses that alias counters 0-3.
  if (msr >= msr::kAmdCoreCtl0 && msr < msr::kAmdCoreCtl0 + 2 * num_gp_) {
    const uint32_t index = (msr - msr::kAmdCoreCtl0) / 2;
    *value = (msr - msr::kAmdCoreCtl0) % 2 == 0 ? control_[index] : counter_[index];
  } else if (msr >= msr::kAmdLegacyEventSel0 && msr < msr::kAmdLegacyEventSel0 + 4) {
    *value = control_[msr - msr::kAmdLegacyEventSel0];
  } else if (msr >= msr::kAmdLegacyCtr0 && msr < msr::kAmdLegacyCtr0 + 4) {
    *value = counter_[msr - msr::kAmdLegacyCtr0];
  } else {
    return false;
  }
  return true;
}

bool PmuModel::WriteMsr(uint32_t msr, uint64_t value) {
  if (kind_ == PmuModelKind::kNone) return false;
  if (intel()) {
    if (msr >= msr::kIntelPmc0 && msr < msr::kIntelPmc0 + num_gp_) {
      // The legacy address writes bits 31:0 and sign-extends bit 31.
      const auto low = static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(value)));
      counter_[msr - msr::kIntelPmc0] = static_cast<uint64_t>(low) & mask_;
      return true;  // counter values do not change what counts
    } else if (msr >= msr::kIntelFullPmc0 && msr < msr::kIntelFullPmc0 + num_gp_) {
      if ((perf_capabilities_ & msr::kIntelPerfCapFullWidthWrite) == 0) return false;
      counter_[msr - msr::kIntelFullPmc0] = value & mask_;
      return true;
    } else if (msr >= msr::kIntelEventSel0 && msr < msr::kIntelEventSel0 + num_gp_) {
      if ((value >> 32) != 0) return false;  // reserved bits
      control_[msr - msr::kIntelEventSel0] = value;
    } else if (msr >= msr::kIntelFixedCtr0 && msr < msr::kIntelFixedCtr0 + kIntelFixed) {
      counter_[num_gp_ + msr - msr::kIntelFixedCtr0] = value & mask_;
      return true;
    } else if (msr == msr::kIntelFixedCtrCtrl) {
      if ((value >> (4 * kIntelFixed)) != 0) return false;
      fixed_ctrl_ = value;
    } else if (msr == msr::kIntelGlobalCtrl) {
      global_ctrl_ = value & (((uint64_t{1} << kIntelGp) - 1) |
                              (((uint64_t{1} << kIntelFixed) - 1) << msr::kIntelFixedShift));
    } else if (msr == msr::kIntelGlobalOvfCtrl) {
      global_status_ &= ~value;
      return true;
    } else {
      return false;  // includes GLOBAL_STATUS and PERF_CAPABILITIES, which are read-only
    }
    Recompute();
    return true;
  }
  if (msr >= msr::kAmdCoreCtl0 && msr < msr::kAmdCoreCtl0 + 2 * num_gp_) {
    const uint32_t index = (msr - msr::kAmdCoreCtl0) / 2;
    if ((msr - msr::kAmdCoreCtl0) % 2 != 0) {
      counter_[index] = value & mask_;
      return true;
    }
    control_[index] = value;
  } else if (msr >= msr::kAmdLegacyEventSel0 && msr < msr::kAmdLegacyEventSel0 + 4) {
    control_[msr - msr::kAmdLegacyEventSel0] = value;
  } else if (msr >= msr::kAmdLegacyCtr0 && msr < msr::kAmdLegacyCtr0 + 4) {
    counter_[msr - msr::kAmdLegacyCtr0] = value & mask_;
    return true;
  } else {
    return false;
  }
  Recompute();
  return true;
}

void PmuModel::Recompute() {
  counting_os_ = counting_usr_ = pmi_ = used_quantities_ = 0;
  for (uint32_t i = 0; i < num_counters_; ++i) {
    bool enabled;
    bool os;
    bool usr;
    bool pmi;
    Quantity quantity;
    if (i < num_gp_) {
      const uint64_t control = control_[i];
      enabled = (control & msr::kEvtSelEnable) != 0 &&
                (!intel() || ((global_ctrl_ >> i) & 1) != 0);
      os = (control & msr::kEvtSelOs) != 0;
      usr = (control & msr::kEvtSelUsr) != 0;
      pmi = (control & msr::kEvtSelInt) != 0;
      const auto unit_mask = static_cast<uint8_t>(control >> msr::kEvtSelUnitMaskShift);
      if (intel()) {
        quantity = IntelEvent(static_cast<uint8_t>(control), unit_mask);
      } else {
        const auto event = static_cast<uint16_t>((control & 0xFF) |
                                                 (((control >> msr::kAmdEventHighShift) & 0xF) << 8));
        quantity = AmdEvent(event);
      }
    } else {
      const uint32_t j = i - num_gp_;
      const uint64_t bits = (fixed_ctrl_ >> (4 * j)) & 0xF;
      os = (bits & msr::kFixedCtrlOs) != 0;
      usr = (bits & msr::kFixedCtrlUsr) != 0;
      pmi = (bits & msr::kFixedCtrlPmi) != 0;
      enabled = (os || usr) && ((global_ctrl_ >> (msr::kIntelFixedShift + j)) & 1) != 0;
      static constexpr Quantity kFixed[kIntelFixed] = {kInstructions, kCycles, kRefCycles};
      quantity = kFixed[j];
    }
    quantity_[i] = quantity;
    if (!enabled || quantity == kNoQuantity) continue;
    if (os) counting_os_ |= 1u << i;
    if (usr) counting_usr_ |= 1u << i;
    if (pmi) pmi_ |= 1u << i;
    used_quantities_ |= 1u << quantity;
  }
}

bool PmuModel::Add(uint32_t counter, uint64_t events) {
  const uint64_t before = counter_[counter];
  const uint64_t after = (before + events) & mask_;
  counter_[counter] = after;
  const bool wrapped = events > mask_ - before;
  if (wrapped && intel()) {
    const uint32_t bit = counter < num_gp_ ? counter : msr::kIntelFixedShift + (counter - num_gp_);
    global_status_ |= uint64_t{1} << bit;
  }
  return wrapped;
}

PmuModel::CounterInfo PmuModel::Describe(uint32_t counter) const {
  CounterInfo info{};
  info.enabled = ((counting_os_ | counting_usr_) >> counter) & 1;
  info.os = (counting_os_ >> counter) & 1;
  info.usr = (counting_usr_ >> counter) & 1;
  if (counter < num_gp_) {
    const uint64_t control = control_[counter];
    info.event = intel() ? static_cast<uint16_t>(control & 0xFF)
                         : static_cast<uint16_t>((control & 0xFF) |
                                                 (((control >> msr::kAmdEventHighShift) & 0xF) << 8));
    info.unit_mask = static_cast<uint8_t>(control >> msr::kEvtSelUnitMaskShift);
  } else {
    info.fixed = true;
    static constexpr uint16_t kFixedEvent[kIntelFixed] = {0xC0, 0x3C, 0x3C};
    static constexpr uint8_t kFixedMask[kIntelFixed] = {0x00, 0x00, 0x01};
    info.event = kFixedEvent[counter - num_gp_];
    info.unit_mask = kFixedMask[counter - num_gp_];
  }
  return info;
}

}  // namespace hvprof::sim
