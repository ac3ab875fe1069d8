#include "hvpmu/timer_source.h"

#include "freestanding.h"
#include "pmu_common.h"

namespace hvpmu {

void TimerSource::Describe(InitV2* init) const {
  init->pmu_kind = static_cast<uint32_t>(PmuKind::kTimer);
  init->pmu_version = 0;
  init->num_counters = 1;
  init->num_gp_counters = 1;
  init->num_fixed_counters = 0;
  init->gp_counter_width = 64;  // a period in ns, not a hardware counter
  init->fixed_counter_width = 0;
  init->max_count = kMaxPeriodNs;
  init->flags = 0;
}

ErrorCode TimerSource::Validate(uint32_t index, const CounterConfig& config) const {
  if (index >= 1) return ErrorCode::kBadCounter;
  if (!config.enabled) return ErrorCode::kOk;
  const EventDef* event = nullptr;
  return detail::ValidateEvent(FindEventTable(kTimerCpuType), config, kMaxPeriodNs, &event);
}

ErrorCode TimerSource::Reserve() {
  // Nothing to save: the timer is the platform's.
  period_ns_ = 0;
  return ErrorCode::kOk;
}

void TimerSource::Release() {
  if (running()) Stop();
  period_ns_ = 0;
}

ErrorCode TimerSource::Setup(const CounterConfig* counters, uint32_t count) {
  period_ns_ = 0;
  if (count == 0 || !counters[0].enabled) return ErrorCode::kNoCounters;
  const uint64_t period = counters[0].count;
  if (period < kMinPeriodNs) return ErrorCode::kCountTooSmall;
  if (period > kMaxPeriodNs) return ErrorCode::kCountTooLarge;
  period_ns_ = period;
  return ErrorCode::kOk;
}

void TimerSource::Start() {
  if (period_ns_ == 0) return;
  // Running before the first tick can arrive: the platform may call HandlePmi at once.
  __atomic_store_n(&running_, 1u, __ATOMIC_RELEASE);
  if (!platform_.StartSampleTimer(period_ns_)) __atomic_store_n(&running_, 0u, __ATOMIC_RELEASE);
}

void TimerSource::Stop() {
  __atomic_store_n(&running_, 0u, __ATOMIC_RELEASE);
  platform_.StopSampleTimer();
}

uint32_t TimerSource::CollectOverflows(uint32_t cpu) {
  (void)cpu;
  return __atomic_load_n(&running_, __ATOMIC_ACQUIRE) != 0 ? 1u : 0u;
}

}  // namespace hvpmu
