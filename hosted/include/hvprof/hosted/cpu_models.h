// CPUID answers (and the few MSRs that describe the PMU) of the CPU models hvprof can emulate
// or fake. Shared by the simulated machine and the test fakes so both speak the same CPUs.
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>

#include "hvpmu/platform.h"

namespace hvprof::hosted {

using hvpmu::CpuidResult;

struct CpuModel {
  std::map<std::pair<uint32_t, uint32_t>, CpuidResult> leaves;  // (leaf, subleaf)
  std::map<uint32_t, uint64_t> initial_msrs;                    // e.g. IA32_PERF_CAPABILITIES
  CpuidResult Cpuid(uint32_t leaf, uint32_t subleaf) const;
};

// Intel architectural perfmon: `version`, `gp` general counters and `fixed` fixed counters of
// `width` bits; full-width counter writes advertised through IA32_PERF_CAPABILITIES.
CpuModel IntelArchPerfmonModel(uint32_t version = 4, uint32_t gp = 4, uint32_t fixed = 3,
                               uint32_t width = 48, bool full_width_writes = true);
// AMD of the given display family; family 15h+ advertise PerfCtrExtCore (6 counters).
CpuModel AmdModel(uint32_t family, bool perf_ctr_ext_core = true);
CpuModel HygonModel();
CpuModel UnknownVendorModel();

}  // namespace hvprof::hosted
