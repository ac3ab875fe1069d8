// The timer sampling source: OProfile's timer mode, for hosts whose PMU is missing or cannot be
// used (QEMU's software CPU, nested virtualization, a PMU someone else owns).
//
// It is a PmuDriver with one logical counter that counts nothing. Its only event, TIMER
// (cpu_type kTimerCpuType, code kTimerEventCode; events.h, event_tables.cpp), takes the sampling
// period in nanoseconds as its count. Start asks the platform for an interrupt every period on
// every CPU (Platform::StartSampleTimer); the host calls Engine::HandlePmi(cpu) from it, and
// CollectOverflows reports counter 0 while the source runs. Each sample stands for `count` ns of
// that CPU's time (SampleRecord::period), idle time included.
//
// Bias: a timer interrupt samples only where interrupts are enabled. Code that runs with them
// masked (interrupt handlers, the hypervisor's critical sections and context switches, NMI
// handlers) is never sampled: its time is charged to where the interrupt is taken once they
// are unmasked, usually the instruction after. A CPU that sleeps through its ticks (a deep
// C-state whose wake-up the timer does not force) is sampled once when it wakes, not once per
// period. A hardware PMU (interrupts as NMIs) has neither bias.
#pragma once

#include <cstdint>

#include "hvpmu/engine.h"
#include "hvpmu/events.h"
#include "hvpmu/platform.h"

namespace hvpmu {

class TimerSource final : public PmuDriver {
 public:
  static constexpr uint64_t kMinPeriodNs = kTimerMinPeriodNs;
  static constexpr uint64_t kMaxPeriodNs = kTimerMaxPeriodNs;
  static constexpr uint64_t kDefaultPeriodNs = kTimerDefaultPeriodNs;

  // constexpr: a host may keep it in constant-initialized static storage.
  constexpr explicit TimerSource(Platform& platform) : platform_(platform) {}

  PmuKind kind() const override { return PmuKind::kTimer; }
  const char* cpu_type() const override { return kTimerCpuType; }
  uint32_t num_counters() const override { return 1; }
  void Describe(InitV2* init) const override;
  // Counter 0 only; TIMER with unit mask 0 and a count in [kMinPeriodNs, kMaxPeriodNs]. The
  // counter's kernel and user bits are ignored: a timer samples every mode.
  ErrorCode Validate(uint32_t index, const CounterConfig& config) const override;
  ErrorCode Reserve() override;
  void Release() override;
  ErrorCode Setup(const CounterConfig* counters, uint32_t count) override;
  void Start() override;
  void Stop() override;
  // NMI (or timer interrupt) context: counter 0 while running, else 0.
  uint32_t CollectOverflows(uint32_t cpu) override;

  // The period Setup took, in ns (0 before).
  uint64_t period_ns() const { return period_ns_; }
  // Whether the last Start got its timer from the platform (and no Stop came since).
  bool running() const { return __atomic_load_n(&running_, __ATOMIC_RELAXED) != 0; }

 private:
  Platform& platform_;
  uint64_t period_ns_ = 0;
  uint32_t running_ = 0;  // read by the sample path
};

}  // namespace hvpmu
