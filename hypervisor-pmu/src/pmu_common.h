// Validation shared by the PMU drivers.
#pragma once

#include "hvpmu/abi/errors.h"
#include "hvpmu/engine.h"
#include "hvpmu/events.h"

namespace hvpmu::detail {

// Checks an enabled counter's event, unit mask and count against `table`. On success stores
// the matching event in *event.
inline ErrorCode ValidateEvent(const CpuEventTable* table, const CounterConfig& config,
                               uint64_t max_count, const EventDef** event) {
  if (table == nullptr) return ErrorCode::kUnknownEvent;
  const EventDef* found = FindEventByCode(*table, config.event, config.unit_mask);
  if (found == nullptr) {
    for (uint32_t i = 0; i < table->num_events; ++i) {
      if (table->events[i].code == config.event) return ErrorCode::kBadUnitMask;
    }
    return ErrorCode::kUnknownEvent;
  }
  if (config.count == 0 || config.count < found->min_count) return ErrorCode::kCountTooSmall;
  if (config.count > max_count) return ErrorCode::kCountTooLarge;
  *event = found;
  return ErrorCode::kOk;
}

}  // namespace hvpmu::detail
