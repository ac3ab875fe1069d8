// Event tables per CPU type: names, codes, unit masks, minimum counts and the default event.
// The engine validates counter ops against them; user space uses the same tables for
// --list-events and to parse event specs, so both sides always agree.
#pragma once

#include <cstdint>

namespace hvpmu {

struct UnitMaskDef {
  const char* name;
  uint8_t value;
  const char* description;
};

enum class UnitMaskKind : uint8_t {
  kExclusive,  // the unit mask is exactly one of the listed values
  kBitmask,    // the unit mask is any non-empty combination of the listed bits
};

inline constexpr int8_t kNoFixedCounter = -1;

struct EventDef {
  const char* name;
  uint16_t code;          // event select; AMD codes may use bits 11:8
  uint8_t default_unit_mask;
  UnitMaskKind unit_mask_kind;
  uint32_t min_count;     // smaller counts would flood the machine with PMIs
  int8_t fixed_counter;   // Intel fixed counter that counts exactly this event, or kNoFixedCounter
  const UnitMaskDef* unit_masks;
  uint8_t num_unit_masks;
  const char* description;
};

struct CpuEventTable {
  const char* cpu_type;
  const EventDef* events;
  uint32_t num_events;
  const char* default_event;  // its name; count from default_count
  uint64_t default_count;
  // What takes the samples where no hardware counter overflows: a timer ("" for counters).
  // Reports say it, since a timer's samples miss what runs with interrupts masked.
  const char* sampled_by;
};

// The cpu_type of hosts sampled with Linux's cpu-clock timer, for want of a hardware PMU.
inline constexpr const char kLinuxSoftwareCpuType[] = "linux/software";
// The cpu_type of the engine's timer source (timer_source.h): one event, TIMER, whose count is
// the sampling period in nanoseconds of each CPU's time.
inline constexpr const char kTimerCpuType[] = "timer";
inline constexpr uint16_t kTimerEventCode = 0x01;
inline constexpr uint64_t kTimerMinPeriodNs = 100'000;        // 10 kHz per CPU at most
inline constexpr uint64_t kTimerMaxPeriodNs = 1'000'000'000;  // 1 Hz per CPU at least
inline constexpr uint64_t kTimerDefaultPeriodNs = 1'000'000;  // 1 kHz per CPU

// The table for a cpu_type string ("i386/arch_perfmon", "x86-64/family17h", ...), or nullptr.
const CpuEventTable* FindEventTable(const char* cpu_type);
// All tables, for tools that list events of every CPU type.
const CpuEventTable* const* AllEventTables(uint32_t* count);

const EventDef* FindEventByCode(const CpuEventTable& table, uint16_t code, uint8_t unit_mask);
const EventDef* FindEventByName(const CpuEventTable& table, const char* name);
// Whether `unit_mask` is allowed for `event` under its UnitMaskKind.
bool UnitMaskAllowed(const EventDef& event, uint64_t unit_mask);

}  // namespace hvpmu
