// Model-specific registers and CPUID leaves the PMU drivers use. Shared with the simulated
// machine (hosted/sim), which emulates them.
#pragma once

#include <cstdint>

namespace hvpmu::msr {

// Intel architectural performance monitoring (SDM vol. 3B, ch. 20)
inline constexpr uint32_t kIntelPmc0 = 0xC1;         // IA32_PMCx: writes sign-extend bit 31
inline constexpr uint32_t kIntelEventSel0 = 0x186;   // IA32_PERFEVTSELx
inline constexpr uint32_t kIntelFullPmc0 = 0x4C1;    // IA32_A_PMCx: full-width writes
inline constexpr uint32_t kIntelFixedCtr0 = 0x309;   // IA32_FIXED_CTRx
inline constexpr uint32_t kIntelPerfCapabilities = 0x345;
inline constexpr uint32_t kIntelFixedCtrCtrl = 0x38D;
inline constexpr uint32_t kIntelGlobalStatus = 0x38E;
inline constexpr uint32_t kIntelGlobalCtrl = 0x38F;
inline constexpr uint32_t kIntelGlobalOvfCtrl = 0x390;  // GLOBAL_STATUS_RESET from v4

inline constexpr uint64_t kIntelPerfCapFullWidthWrite = 1ULL << 13;
inline constexpr uint64_t kIntelGlobalStatusOvfBuffer = 1ULL << 62;
inline constexpr uint64_t kIntelGlobalStatusCondChanged = 1ULL << 63;
inline constexpr uint32_t kIntelFixedShift = 32;  // fixed counter j is bit 32 + j

// Fixed counter control: four bits per counter.
inline constexpr uint64_t kFixedCtrlOs = 1u << 0;
inline constexpr uint64_t kFixedCtrlUsr = 1u << 1;
inline constexpr uint64_t kFixedCtrlAnyThread = 1u << 2;
inline constexpr uint64_t kFixedCtrlPmi = 1u << 3;

// AMD core performance counters
inline constexpr uint32_t kAmdLegacyEventSel0 = 0xC0010000;  // K7 layout: 4 selects, then 4 counters
inline constexpr uint32_t kAmdLegacyCtr0 = 0xC0010004;
inline constexpr uint32_t kAmdCoreCtl0 = 0xC0010200;  // family 15h+: CTL n at +2n, CTR n at +2n+1
inline constexpr uint32_t kAmdCoreCtr0 = 0xC0010201;
inline constexpr uint32_t kAmdCounterWidth = 48;

// Event select bits (same positions on Intel and AMD)
inline constexpr uint64_t kEvtSelUsr = 1ULL << 16;
inline constexpr uint64_t kEvtSelOs = 1ULL << 17;
inline constexpr uint64_t kEvtSelEdge = 1ULL << 18;
inline constexpr uint64_t kEvtSelInt = 1ULL << 20;
inline constexpr uint64_t kEvtSelAnyThread = 1ULL << 21;
inline constexpr uint64_t kEvtSelEnable = 1ULL << 22;
inline constexpr uint64_t kEvtSelInvert = 1ULL << 23;
inline constexpr uint32_t kEvtSelUnitMaskShift = 8;
inline constexpr uint32_t kAmdEventHighShift = 32;  // event bits 11:8 go to bits 35:32
inline constexpr uint64_t kAmdGuestOnly = 1ULL << 40;
inline constexpr uint64_t kAmdHostOnly = 1ULL << 41;

}  // namespace hvpmu::msr

namespace hvpmu::cpuid {

inline constexpr uint32_t kVendorLeaf = 0x0;
inline constexpr uint32_t kFeatureLeaf = 0x1;         // ECX bit 15: PDCM (PERF_CAPABILITIES)
inline constexpr uint32_t kArchPerfmonLeaf = 0xA;
inline constexpr uint32_t kExtendedFeatureLeaf = 0x80000001;  // ECX bit 23: PerfCtrExtCore
inline constexpr uint32_t kFeaturePdcm = 1u << 15;
inline constexpr uint32_t kAmdPerfCtrExtCore = 1u << 23;

// Vendor strings as CPUID leaf 0 returns them in EBX, EDX, ECX.
inline constexpr uint32_t kIntelEbx = 0x756E6547, kIntelEdx = 0x49656E69, kIntelEcx = 0x6C65746E;
inline constexpr uint32_t kAmdEbx = 0x68747541, kAmdEdx = 0x69746E65, kAmdEcx = 0x444D4163;
inline constexpr uint32_t kHygonEbx = 0x6F677948, kHygonEdx = 0x6E65476E, kHygonEcx = 0x656E6975;

// The display family of CPUID leaf 1 EAX.
constexpr uint32_t DisplayFamily(uint32_t eax) {
  const uint32_t base = (eax >> 8) & 0xF;
  return base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
}

}  // namespace hvpmu::cpuid
