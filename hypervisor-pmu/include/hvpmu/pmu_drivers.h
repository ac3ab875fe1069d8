// The PMU drivers: Intel architectural perfmon (v1-v5) and AMD core counters (K7 legacy MSRs
// and the family 15h+/Zen MSRs). Both program the hardware only through Platform MSR calls.
#pragma once

#include <cstdint>

#include "hvpmu/engine.h"
#include "hvpmu/platform.h"

namespace hvpmu {

class IntelArchPerfmon final : public PmuDriver {
 public:
  static constexpr uint32_t kMaxGp = 8;
  static constexpr uint32_t kMaxFixed = 3;

  explicit IntelArchPerfmon(Platform& platform) : platform_(platform) {}
  // Reads CPUID; true if this is an Intel CPU with architectural perfmon and two or more
  // general-purpose counters.
  bool Probe();

  PmuKind kind() const override { return PmuKind::kIntelArchPerfmon; }
  const char* cpu_type() const override { return "i386/arch_perfmon"; }
  uint32_t num_counters() const override { return num_gp_ + num_fixed_; }
  void Describe(InitV2* init) const override;
  ErrorCode Validate(uint32_t index, const CounterConfig& config) const override;
  ErrorCode Reserve() override;
  void Release() override;
  ErrorCode Setup(const CounterConfig* counters, uint32_t count) override;
  void Start() override;
  void Stop() override;
  uint32_t CollectOverflows(uint32_t cpu) override;

  uint32_t version() const { return version_; }
  uint32_t num_gp() const { return num_gp_; }
  uint32_t num_fixed() const { return num_fixed_; }
  bool full_width_writes() const { return full_width_; }
  uint64_t MaxCount() const;

 private:
  struct SavedRegisters {
    uint64_t event_select[kMaxGp];
    uint64_t counter[kMaxGp];
    uint64_t fixed_counter[kMaxFixed];
    uint64_t fixed_ctrl;
    uint64_t global_ctrl;
  };

  bool WriteGpCounter(uint32_t cpu, uint32_t index, uint64_t count);
  bool WriteFixedCounter(uint32_t cpu, uint32_t index, uint64_t count);
  uint64_t GlobalEnableBits() const;

  Platform& platform_;
  uint32_t num_cpus_ = 0;
  uint32_t version_ = 0;
  uint32_t num_gp_ = 0;
  uint32_t num_fixed_ = 0;
  uint32_t gp_width_ = 0;
  uint32_t fixed_width_ = 0;
  uint32_t unavailable_events_ = 0;  // CPUID.0AH:EBX, with bits past the vector length set
  bool full_width_ = false;
  bool reserved_ = false;
  uint32_t enabled_ = 0;  // logical counters set up
  CounterConfig config_[kMaxGp + kMaxFixed];
  SavedRegisters saved_[kMaxCpus];
};

class AmdCorePmu final : public PmuDriver {
 public:
  static constexpr uint32_t kMaxCounters = 6;

  explicit AmdCorePmu(Platform& platform) : platform_(platform) {}
  // Reads CPUID; true for AMD families 0Fh-17h and 19h, and Hygon 18h.
  bool Probe();

  PmuKind kind() const override { return core_msrs_ ? PmuKind::kAmdCore : PmuKind::kAmdLegacy; }
  const char* cpu_type() const override { return cpu_type_; }
  uint32_t num_counters() const override { return num_counters_; }
  void Describe(InitV2* init) const override;
  ErrorCode Validate(uint32_t index, const CounterConfig& config) const override;
  ErrorCode Reserve() override;
  void Release() override;
  ErrorCode Setup(const CounterConfig* counters, uint32_t count) override;
  void Start() override;
  void Stop() override;
  uint32_t CollectOverflows(uint32_t cpu) override;

  uint32_t family() const { return family_; }
  uint32_t ControlMsr(uint32_t index) const;
  uint32_t CounterMsr(uint32_t index) const;
  // The event select value for `config`, without the enable bit.
  static uint64_t EncodeControl(const CounterConfig& config);

 private:
  struct SavedRegisters {
    uint64_t control[kMaxCounters];
    uint64_t counter[kMaxCounters];
  };

  Platform& platform_;
  uint32_t num_cpus_ = 0;
  uint32_t family_ = 0;
  uint32_t num_counters_ = 0;
  bool core_msrs_ = false;
  bool reserved_ = false;
  uint32_t enabled_ = 0;
  char cpu_type_[32] = {};
  CounterConfig config_[kMaxCounters];
  SavedRegisters saved_[kMaxCpus];
};

// Both drivers, so a host can pick the right one without a heap.
struct PmuDrivers {
  explicit PmuDrivers(Platform& platform) : intel(platform), amd(platform) {}
  IntelArchPerfmon intel;
  AmdCorePmu amd;
  // Probes the CPU and returns the matching driver, or nullptr if none fits.
  PmuDriver* Detect();
};

// The reload value that makes a `width`-bit counter overflow after `count` events.
constexpr uint64_t ReloadValue(uint64_t count, uint32_t width) {
  const uint64_t mask = width >= 64 ? ~0ULL : (1ULL << width) - 1;
  return (0 - count) & mask;
}

}  // namespace hvpmu
