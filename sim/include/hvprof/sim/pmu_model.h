// One CPU's performance-monitoring unit, emulated at the MSR level so that the engine's real
// drivers program it: event selects, counters of the right width with the legacy sign-extending
// and full-width write addresses, fixed counters and global control/status/overflow registers
// (Intel arch perfmon v4), and the six core counters with their legacy aliases (AMD Zen).
#pragma once

#include <cstdint>

#include "hvprof/hosted/cpu_models.h"
#include "hvprof/sim/scenario.h"

namespace hvprof::sim {

using hvpmu::kMaxCounters;

// What the simulated machine can count. Each programmed event maps to one of these.
enum Quantity : uint8_t {
  kCycles,          // unhalted core cycles
  kRefCycles,       // unhalted reference cycles
  kInstructions,
  kBranches,
  kBranchMisses,
  kCacheRefs,
  kCacheMisses,
  kDispatchStalls,  // empty dispatch slots (AMD Zen 4's 0x1A0)
  kQuantityCount,
  kNoQuantity = 0xFF,  // an event the simulation does not model: it counts nothing
};
const char* QuantityName(Quantity quantity);

hosted::CpuModel CpuModelFor(PmuModelKind kind);

class PmuModel {
 public:
  static constexpr uint32_t kMaxCounters = 7;

  explicit PmuModel(PmuModelKind kind);

  // MSR access as the engine's drivers see it. False means the access would fault (#GP).
  bool ReadMsr(uint32_t msr, uint64_t* value) const;
  bool WriteMsr(uint32_t msr, uint64_t value);

  uint32_t num_counters() const { return num_counters_; }
  // Counters that count right now at privilege level `cpl` (bit i: counter i).
  uint32_t counting_mask(uint8_t cpl) const { return cpl == 0 ? counting_os_ : counting_usr_; }
  // Quantities any counter counts, at any privilege level (bit q: Quantity q).
  uint32_t used_quantities() const { return used_quantities_; }
  Quantity quantity(uint32_t counter) const { return quantity_[counter]; }
  // Events until counter `counter` wraps.
  uint64_t UntilOverflow(uint32_t counter) const { return (mask_ - counter_[counter]) + 1; }
  // Counts `events` on `counter`; returns true if it wrapped (overflow status is then set).
  bool Add(uint32_t counter, uint64_t events);
  // Whether an overflow of `counter` raises a PMI (the INT / PMI bit).
  bool raises_pmi(uint32_t counter) const { return (pmi_ >> counter) & 1; }

  // Description for the ground truth: event select code, unit mask and mode bits.
  struct CounterInfo {
    bool enabled;
    uint16_t event;
    uint8_t unit_mask;
    bool os;
    bool usr;
    bool fixed;
  };
  CounterInfo Describe(uint32_t counter) const;

 private:
  bool intel() const { return kind_ == PmuModelKind::kIntelArchV4; }
  void Recompute();

  PmuModelKind kind_;
  uint32_t num_counters_ = 0;
  uint32_t num_gp_ = 0;
  uint64_t mask_ = 0;                     // counter width mask
  uint64_t counter_[kMaxCounters] = {};
  uint64_t control_[kMaxCounters] = {};   // event select / PERF_CTL of general counters
  uint64_t fixed_ctrl_ = 0;
  uint64_t global_ctrl_ = 0;
  uint64_t global_status_ = 0;
  uint64_t perf_capabilities_ = 0;
  Quantity quantity_[kMaxCounters] = {};
  uint32_t counting_os_ = 0;
  uint32_t counting_usr_ = 0;
  uint32_t pmi_ = 0;
  uint32_t used_quantities_ = 0;
};

}  // namespace hvprof::sim
