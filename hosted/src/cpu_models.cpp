#include "hvprof/hosted/cpu_models.h"

#include "hvpmu/msr.h"

namespace hvprof::hosted {

using hvpmu::CpuidResult;
namespace cpuid = hvpmu::cpuid;
namespace msr = hvpmu::msr;

namespace {

constexpr CpuidResult kIntelVendor{0x16, cpuid::kIntelEbx, cpuid::kIntelEcx, cpuid::kIntelEdx};
constexpr CpuidResult kAmdVendor{0x10, cpuid::kAmdEbx, cpuid::kAmdEcx, cpuid::kAmdEdx};
constexpr CpuidResult kHygonVendor{0x10, cpuid::kHygonEbx, cpuid::kHygonEcx, cpuid::kHygonEdx};

// CPUID.1:EAX for a display family and model.
uint32_t FamilyEax(uint32_t family, uint32_t model) {
  const uint32_t base = family >= 0xF ? 0xF : family;
  const uint32_t extended = family >= 0xF ? family - 0xF : 0;
  return (extended << 20) | ((model >> 4) << 16) | (base << 8) | ((model & 0xF) << 4);
}

}  // namespace

CpuidResult CpuModel::Cpuid(uint32_t leaf, uint32_t subleaf) const {
  auto it = leaves.find({leaf, subleaf});
  return it == leaves.end() ? CpuidResult{0, 0, 0, 0} : it->second;
}

CpuModel IntelArchPerfmonModel(uint32_t version, uint32_t gp, uint32_t fixed, uint32_t width,
                               bool full_width_writes) {
  CpuModel model;
  model.leaves[{0, 0}] = kIntelVendor;
  model.leaves[{1, 0}] = {FamilyEax(6, 0x55), 0, cpuid::kFeaturePdcm, 0};
  model.leaves[{0xA, 0}] = {version | (gp << 8) | (width << 16) | (7u << 24), 0, 0,
                            version >= 2 ? fixed | (width << 5) : 0};
  model.initial_msrs[msr::kIntelPerfCapabilities] =
      full_width_writes ? msr::kIntelPerfCapFullWidthWrite : 0;
  return model;
}

CpuModel AmdModel(uint32_t family, bool perf_ctr_ext_core) {
  CpuModel model;
  model.leaves[{0, 0}] = kAmdVendor;
  model.leaves[{1, 0}] = {FamilyEax(family, 1), 0, 0, 0};
  model.leaves[{0x80000001, 0}] = {0, 0, perf_ctr_ext_core ? cpuid::kAmdPerfCtrExtCore : 0, 0};
  return model;
}

CpuModel HygonModel() {
  CpuModel model = AmdModel(0x18);
  model.leaves[{0, 0}] = kHygonVendor;
  return model;
}

CpuModel UnknownVendorModel() {
  CpuModel model;
  model.leaves[{0, 0}] = {0xD, 0x12345678, 0x12345678, 0x12345678};
  return model;
}

}  // namespace hvprof::hosted
