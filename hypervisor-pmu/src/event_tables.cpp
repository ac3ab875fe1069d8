// Event tables. Codes come from the Intel SDM (architectural events, vol. 3B 20.2) and the
// AMD BKDGs/PPRs; minimum counts follow OProfile's tables so that no event can be set to
// interrupt the machine every few cycles.
#include "hvpmu/events.h"

#include "freestanding.h"

namespace hvpmu {
namespace {

constexpr UnitMaskDef kZeroMask[] = {{"zero", 0x00, "no unit mask"}};

// --- Intel architectural perfmon (cpu_type i386/arch_perfmon)
constexpr UnitMaskDef kLlcRefsMask[] = {{"demand", 0x4F, "demand requests from this core"}};
constexpr UnitMaskDef kLlcMissesMask[] = {{"demand", 0x41, "demand requests that missed"}};
constexpr UnitMaskDef kRefCyclesMask[] = {{"ref", 0x01, "reference (TSC-rate) cycles"}};

// The architectural events that take a general counter, on every Intel table.
#define INTEL_GENERAL_EVENTS                                                                    \
  {"LLC_REFS", 0x2E, 0x4F, UnitMaskKind::kExclusive, 6000, kNoFixedCounter, kLlcRefsMask, 1,    \
   "last-level cache references"},                                                              \
      {"LLC_MISSES", 0x2E, 0x41, UnitMaskKind::kExclusive, 6000, kNoFixedCounter, kLlcMissesMask, \
       1, "last-level cache misses"},                                                           \
      {"BR_INST_RETIRED", 0xC4, 0x00, UnitMaskKind::kExclusive, 500, kNoFixedCounter, kZeroMask, \
       1, "branch instructions retired"},                                                       \
      {"BR_MISS_PRED_RETIRED", 0xC5, 0x00, UnitMaskKind::kExclusive, 500, kNoFixedCounter,      \
       kZeroMask, 1, "mispredicted branch instructions retired"}

constexpr EventDef kIntelArchEvents[] = {
    {"CPU_CLK_UNHALTED", 0x3C, 0x00, UnitMaskKind::kExclusive, 6000, 1, kZeroMask, 1,
     "core cycles while the logical CPU is not halted"},
    {"INST_RETIRED", 0xC0, 0x00, UnitMaskKind::kExclusive, 6000, 0, kZeroMask, 1,
     "instructions retired"},
    {"UNHALTED_REFERENCE_CYCLES", 0x3C, 0x01, UnitMaskKind::kExclusive, 6000, 2, kRefCyclesMask,
     1, "reference cycles while not halted, at the TSC rate"},
    INTEL_GENERAL_EVENTS,
};

// --- Intel Core 2 (cpu_type i386/core_2): what Xen's xenoprof reports for family 6 model 15
// (Merom). Its driver there is the P6 one: two general counters and no fixed ones, so every
// event takes a general counter. The codes are the architectural ones.
constexpr EventDef kIntelCore2Events[] = {
    {"CPU_CLK_UNHALTED", 0x3C, 0x00, UnitMaskKind::kExclusive, 6000, kNoFixedCounter, kZeroMask, 1,
     "core cycles while the CPU is not halted"},
    {"INST_RETIRED", 0xC0, 0x00, UnitMaskKind::kExclusive, 6000, kNoFixedCounter, kZeroMask, 1,
     "instructions retired"},
    INTEL_GENERAL_EVENTS,
};

#undef INTEL_GENERAL_EVENTS

// --- AMD: events common to K8 .. family 16h
constexpr UnitMaskDef kAmdL2MissMask[] = {
    {"instructions", 0x01, "instruction fetches"},
    {"data", 0x02, "data accesses"},
    {"tlb_walk", 0x04, "page table walks"},
    {"prefetch", 0x08, "hardware prefetches"},
};

#define AMD_COMMON_EVENTS                                                                      \
  {"CPU_CLK_UNHALTED", 0x76, 0x00, UnitMaskKind::kExclusive, 3000, kNoFixedCounter, kZeroMask, \
   1, "cycles while the core is not halted"},                                                  \
      {"RETIRED_INSTRUCTIONS", 0xC0, 0x00, UnitMaskKind::kExclusive, 3000, kNoFixedCounter,    \
       kZeroMask, 1, "instructions retired"},                                                  \
      {"RETIRED_BRANCH_INSTRUCTIONS", 0xC2, 0x00, UnitMaskKind::kExclusive, 500,               \
       kNoFixedCounter, kZeroMask, 1, "branch instructions retired"},                          \
      {"RETIRED_MISPREDICTED_BRANCH_INSTRUCTIONS", 0xC3, 0x00, UnitMaskKind::kExclusive, 500,  \
       kNoFixedCounter, kZeroMask, 1, "mispredicted branch instructions retired"}

constexpr EventDef kAmdLegacyEvents[] = {
    AMD_COMMON_EVENTS,
    {"DATA_CACHE_ACCESSES", 0x40, 0x00, UnitMaskKind::kExclusive, 500, kNoFixedCounter,
     kZeroMask, 1, "L1 data cache accesses"},
    {"DATA_CACHE_MISSES", 0x41, 0x00, UnitMaskKind::kExclusive, 500, kNoFixedCounter, kZeroMask,
     1, "L1 data cache misses"},
    {"L2_CACHE_MISS", 0x7E, 0x07, UnitMaskKind::kBitmask, 500, kNoFixedCounter, kAmdL2MissMask,
     4, "L2 cache misses"},
};

// --- AMD Zen (families 17h, 18h and 19h)
constexpr UnitMaskDef kZenL2ReqMask[] = {
    {"dc_read_miss", 0x08, "data cache reads that missed the L2"},
    {"ic_fill_miss", 0x01, "instruction cache fills that missed the L2"},
};
constexpr UnitMaskDef kZenNoDispatchMask[] = {
    {"frontend", 0x01, "slots empty because the front end supplied no ops"},
    {"backend", 0x1E, "slots empty because the back end was stalled"},
    {"smt", 0x60, "slots given to the other SMT thread"},
};

#define ZEN_COMMON_EVENTS                                                                      \
  AMD_COMMON_EVENTS,                                                                           \
      {"DATA_CACHE_ACCESSES", 0x29, 0x07, UnitMaskKind::kExclusive, 500, kNoFixedCounter,      \
       kZeroMask7, 1, "load/store dispatches"},                                                \
      {"L2_CACHE_REQUEST_MISSES", 0x64, 0x08, UnitMaskKind::kBitmask, 500, kNoFixedCounter,    \
       kZenL2ReqMask, 2, "L2 cache requests that missed"}

constexpr UnitMaskDef kZeroMask7[] = {{"all", 0x07, "loads, stores and load-op-stores"}};

constexpr EventDef kAmdZenEvents[] = {ZEN_COMMON_EVENTS};
constexpr EventDef kAmdZen4Events[] = {
    ZEN_COMMON_EVENTS,
    {"DISPATCH_SLOTS_EMPTY", 0x1A0, 0x01, UnitMaskKind::kExclusive, 6000, kNoFixedCounter,
     kZenNoDispatchMask, 3, "dispatch slots that went unused, by cause (Zen 4 top-down)"},
};

#undef ZEN_COMMON_EVENTS
#undef AMD_COMMON_EVENTS

// --- Linux without a hardware PMU (cpu_type linux/software): the hosted linux platform samples
// with perf's cpu-clock timer. CPU_CLK_UNHALTED keeps cycle counts, turned into a period at the
// CPU's nominal frequency; CPU_CLOCK takes the period in nanoseconds. The kernel will not time
// below 10 us, which 50000 cycles are up to 5 GHz.
constexpr EventDef kLinuxSoftwareEvents[] = {
    {"CPU_CLK_UNHALTED", 0x3C, 0x00, UnitMaskKind::kExclusive, 50000, kNoFixedCounter, kZeroMask,
     1, "CPU cycles, sampled by the cpu-clock timer: one sample per count cycles at the nominal "
     "frequency (idle time included)"},
    {"CPU_CLOCK", 0x01, 0x00, UnitMaskKind::kExclusive, 10000, kNoFixedCounter, kZeroMask, 1,
     "nanoseconds on the CPU, sampled by the cpu-clock timer: one sample per count ns"},
};

// --- No usable PMU at all (cpu_type timer): TimerSource samples with a periodic timer
// interrupt, OProfile's timer mode. TIMER takes the period in nanoseconds (100 us to 1 s).
constexpr EventDef kTimerEvents[] = {
    {"TIMER", kTimerEventCode, 0x00, UnitMaskKind::kExclusive, static_cast<uint32_t>(kTimerMinPeriodNs),
     kNoFixedCounter, kZeroMask, 1,
     "nanoseconds of each CPU's time, sampled by a timer interrupt every count ns (idle time "
     "included; code that runs with interrupts masked is not sampled)"},
};

template <uint32_t N>
constexpr CpuEventTable MakeTable(const char* cpu_type, const EventDef (&events)[N],
                                  const char* default_event, uint64_t default_count = 100000,
                                  const char* sampled_by = "") {
  return {cpu_type, events, N, default_event, default_count, sampled_by};
}

constexpr CpuEventTable kTables[] = {
    MakeTable("i386/arch_perfmon", kIntelArchEvents, "CPU_CLK_UNHALTED"),
    MakeTable("i386/core_2", kIntelCore2Events, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/hammer", kAmdLegacyEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family10", kAmdLegacyEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family11h", kAmdLegacyEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family12h", kAmdLegacyEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family14h", kAmdLegacyEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family15h", kAmdLegacyEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family16h", kAmdLegacyEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family17h", kAmdZenEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family18h", kAmdZenEvents, "CPU_CLK_UNHALTED"),
    MakeTable("x86-64/family19h", kAmdZen4Events, "CPU_CLK_UNHALTED"),
    MakeTable("linux/software", kLinuxSoftwareEvents, "CPU_CLK_UNHALTED", 100000, "Linux's cpu-clock timer"),
    MakeTable(kTimerCpuType, kTimerEvents, "TIMER", kTimerDefaultPeriodNs, "the engine's timer interrupt"),
};

constexpr const CpuEventTable* kTablePointers[] = {
    &kTables[0], &kTables[1], &kTables[2], &kTables[3], &kTables[4],  &kTables[5],
    &kTables[6], &kTables[7], &kTables[8], &kTables[9], &kTables[10], &kTables[11], &kTables[12],
    &kTables[13],
};
static_assert(sizeof kTablePointers / sizeof kTablePointers[0] ==
              sizeof kTables / sizeof kTables[0]);

}  // namespace

const CpuEventTable* FindEventTable(const char* cpu_type) {
  for (const CpuEventTable& table : kTables) {
    if (detail::StrEqual(table.cpu_type, cpu_type)) return &table;
  }
  return nullptr;
}

const CpuEventTable* const* AllEventTables(uint32_t* count) {
  *count = sizeof kTablePointers / sizeof kTablePointers[0];
  return kTablePointers;
}

bool UnitMaskAllowed(const EventDef& event, uint64_t unit_mask) {
  if (unit_mask > 0xFF) return false;
  if (event.unit_mask_kind == UnitMaskKind::kExclusive) {
    for (uint8_t i = 0; i < event.num_unit_masks; ++i) {
      if (event.unit_masks[i].value == unit_mask) return true;
    }
    return false;
  }
  uint64_t allowed = 0;
  for (uint8_t i = 0; i < event.num_unit_masks; ++i) allowed |= event.unit_masks[i].value;
  return unit_mask != 0 && (unit_mask & ~allowed) == 0;
}

const EventDef* FindEventByCode(const CpuEventTable& table, uint16_t code, uint8_t unit_mask) {
  for (uint32_t i = 0; i < table.num_events; ++i) {
    const EventDef& event = table.events[i];
    if (event.code == code && UnitMaskAllowed(event, unit_mask)) return &event;
  }
  return nullptr;
}

const EventDef* FindEventByName(const CpuEventTable& table, const char* name) {
  for (uint32_t i = 0; i < table.num_events; ++i) {
    if (detail::StrEqual(table.events[i].name, name)) return &table.events[i];
  }
  return nullptr;
}

}  // namespace hvpmu
