// The PMU drivers on a fake MSR bus. Expected register values are written out as literal
// numbers from the Intel SDM and AMD BKDG/PPR bit layouts, not derived from hvpmu/msr.h, so a
// wrong constant there fails here.
#include <algorithm>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/fake/fake_platform.h"
#include "hvpmu/pmu_drivers.h"

using namespace hvpmu;
namespace fake = hvprof::fake;
using fake::FakePlatform;
using fake::MsrWrite;

namespace {

CounterConfig Config(uint16_t event, uint8_t unit_mask, uint64_t count, bool kernel = true,
                     bool user = true) {
  CounterConfig config;
  config.enabled = true;
  config.event = event;
  config.unit_mask = unit_mask;
  config.count = count;
  config.kernel = kernel;
  config.user = user;
  return config;
}

bool Wrote(const FakePlatform& platform, uint32_t cpu, uint32_t msr, uint64_t value) {
  const auto& writes = platform.msr_writes();
  return std::find(writes.begin(), writes.end(), MsrWrite{cpu, msr, value}) != writes.end();
}

constexpr uint64_t kTwo48 = 1ULL << 48;

}  // namespace

TEST_CASE("Intel v4 model probes as 4 general and 3 fixed counters", "[pmu][intel]") {
  FakePlatform platform(2, fake::IntelArchPerfmonModel(4, 4, 3, 48, true));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  REQUIRE(driver == &drivers.intel);
  CHECK(driver->kind() == PmuKind::kIntelArchPerfmon);
  CHECK(std::string(driver->cpu_type()) == "i386/arch_perfmon");
  CHECK(drivers.intel.version() == 4);
  CHECK(drivers.intel.num_gp() == 4);
  CHECK(drivers.intel.num_fixed() == 3);
  CHECK(driver->num_counters() == 7);
  CHECK(drivers.intel.full_width_writes());
  InitV2 init{};
  driver->Describe(&init);
  CHECK(init.gp_counter_width == 48);
  CHECK(init.fixed_counter_width == 48);
  CHECK(init.max_count == (1ULL << 47));
}

TEST_CASE("Intel: exact event select, counter and fixed-control values", "[pmu][intel]") {
  FakePlatform platform(2, fake::IntelArchPerfmonModel(4, 4, 3, 48, true));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  REQUIRE(driver != nullptr);
  REQUIRE(driver->Reserve() == ErrorCode::kOk);

  std::vector<CounterConfig> counters(7);
  counters[0] = Config(0x3C, 0x00, 100000);                // CPU_CLK_UNHALTED, OS+USR
  counters[1] = Config(0x2E, 0x41, 6000, false, true);     // LLC_MISSES, user only
  counters[4] = Config(0xC0, 0x00, 2000000, true, false);  // INST_RETIRED on fixed counter 0
  counters[6] = Config(0x3C, 0x01, 50000, true, true);     // reference cycles on fixed counter 2
  for (uint32_t i = 0; i < counters.size(); ++i) {
    INFO("counter " << i);
    CHECK(driver->Validate(i, counters[i]) == ErrorCode::kOk);
  }
  platform.ClearMsrWrites();
  REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    INFO("cpu " << cpu);
    // IA32_PERFEVTSEL0 (0x186): event 0x3C, USR bit 16, OS bit 17, INT bit 20, EN clear.
    CHECK(Wrote(platform, cpu, 0x186, 0x13003C));
    // IA32_PERFEVTSEL1: event 0x2E, unit mask 0x41 in bits 15:8, USR, INT.
    CHECK(Wrote(platform, cpu, 0x187, 0x11412E));
    // Full-width writes go to IA32_A_PMCx (0x4C1): 2^48 - count.
    CHECK(Wrote(platform, cpu, 0x4C1, kTwo48 - 100000));
    CHECK(Wrote(platform, cpu, 0x4C2, kTwo48 - 6000));
    // IA32_FIXED_CTR0 (0x309) and IA32_FIXED_CTR2 (0x30B).
    CHECK(Wrote(platform, cpu, 0x309, kTwo48 - 2000000));
    CHECK(Wrote(platform, cpu, 0x30B, kTwo48 - 50000));
    // IA32_FIXED_CTR_CTRL (0x38D): counter 0 = OS|PMI (0x9), counter 2 = OS|USR|PMI (0xB).
    CHECK(platform.GetMsr(cpu, 0x38D) == 0xB09);
    CHECK(platform.GetMsr(cpu, 0x38F) == 0);  // GLOBAL_CTRL stays 0 until start
  }

  platform.ClearMsrWrites();
  driver->Start();
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    CHECK(platform.GetMsr(cpu, 0x186) == (0x13003C | (1u << 22)));  // EN, bit 22
    CHECK(platform.GetMsr(cpu, 0x187) == (0x11412E | (1u << 22)));
    CHECK(platform.GetMsr(cpu, 0x188) == 0);
    // IA32_PERF_GLOBAL_CTRL (0x38F): PMC0, PMC1 and fixed counters 0 and 2 (bits 32, 34).
    CHECK(platform.GetMsr(cpu, 0x38F) == (0x3ULL | (1ULL << 32) | (1ULL << 34)));
  }
  driver->Stop();
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    CHECK(platform.GetMsr(cpu, 0x38F) == 0);
    CHECK(platform.GetMsr(cpu, 0x186) == 0x13003C);
  }
}

TEST_CASE("Intel: overflow from GLOBAL_STATUS is reloaded and acknowledged", "[pmu][intel]") {
  FakePlatform platform(1, fake::IntelArchPerfmonModel(4, 4, 3, 48, true));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  std::vector<CounterConfig> counters(7);
  counters[1] = Config(0x3C, 0x00, 100000);
  counters[4] = Config(0xC0, 0x00, 300000);
  REQUIRE(driver->Reserve() == ErrorCode::kOk);
  REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
  driver->Start();

  // PMC1 and fixed counter 0 overflowed; bit 62 (DS buffer) is set too.
  const uint64_t status = (1ULL << 1) | (1ULL << 32) | (1ULL << 62);
  platform.SetMsr(0, 0x38E, status);
  platform.SetMsr(0, 0x4C2, 5);  // wrapped past zero
  platform.ClearMsrWrites();
  const uint32_t overflowed = driver->CollectOverflows(0);
  CHECK(overflowed == ((1u << 1) | (1u << 4)));  // logical counters 1 and 4
  CHECK(Wrote(platform, 0, 0x4C2, kTwo48 - 100000));
  CHECK(Wrote(platform, 0, 0x309, kTwo48 - 300000));
  CHECK(Wrote(platform, 0, 0x390, status));  // IA32_PERF_GLOBAL_OVF_CTRL gets every set bit

  platform.SetMsr(0, 0x38E, 0);
  CHECK(driver->CollectOverflows(0) == 0);  // not our PMI
}

TEST_CASE("Intel without full-width writes uses the sign-extending address", "[pmu][intel]") {
  FakePlatform platform(1, fake::IntelArchPerfmonModel(3, 2, 3, 40, false));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  REQUIRE(driver != nullptr);
  CHECK_FALSE(drivers.intel.full_width_writes());
  CHECK(drivers.intel.MaxCount() == (1ULL << 31));
  CHECK(driver->Validate(0, Config(0x3C, 0, (1ULL << 31) + 1)) == ErrorCode::kCountTooLarge);
  std::vector<CounterConfig> counters(5);
  counters[0] = Config(0x3C, 0, 100000);
  REQUIRE(driver->Reserve() == ErrorCode::kOk);
  platform.ClearMsrWrites();
  REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
  // IA32_PMC0 (0xC1) takes bits 31:0, and hardware sign-extends bit 31.
  CHECK(Wrote(platform, 0, 0xC1, 0x100000000ULL - 100000));
}

TEST_CASE("Intel version 1: no fixed counters, overflow from the counter's top bit", "[pmu][intel]") {
  FakePlatform platform(1, fake::IntelArchPerfmonModel(1, 2, 0, 40, false));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  REQUIRE(driver != nullptr);
  CHECK(driver->num_counters() == 2);
  std::vector<CounterConfig> counters(2);
  counters[0] = Config(0x3C, 0, 10000);
  counters[1] = Config(0xC0, 0, 10000);
  REQUIRE(driver->Reserve() == ErrorCode::kOk);
  REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
  driver->Start();
  CHECK(platform.GetMsr(0, 0x38F) == 0);  // no GLOBAL_CTRL write on v1
  platform.SetMsr(0, 0xC1, (1ULL << 40) - 3);  // still counting up: top bit (39) set
  platform.SetMsr(0, 0xC2, 2);                 // wrapped: top bit clear
  platform.ClearMsrWrites();
  CHECK(driver->CollectOverflows(0) == 0x2u);
  CHECK(Wrote(platform, 0, 0xC2, 0x100000000ULL - 10000));
}

TEST_CASE("Intel validation names every bad counter request", "[pmu][intel]") {
  FakePlatform platform(1, fake::IntelArchPerfmonModel(4, 4, 3, 48, true));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  CHECK(driver->Validate(7, Config(0x3C, 0, 100000)) == ErrorCode::kBadCounter);
  CHECK(driver->Validate(0, Config(0x77, 0, 100000)) == ErrorCode::kUnknownEvent);
  CHECK(driver->Validate(0, Config(0x2E, 0x12, 100000)) == ErrorCode::kBadUnitMask);
  CHECK(driver->Validate(0, Config(0x3C, 0, 0)) == ErrorCode::kCountTooSmall);
  CHECK(driver->Validate(0, Config(0x3C, 0, 5999)) == ErrorCode::kCountTooSmall);
  CHECK(driver->Validate(0, Config(0x3C, 0, (1ULL << 47) + 1)) == ErrorCode::kCountTooLarge);
  // Fixed counter 0 counts only INST_RETIRED.
  CHECK(driver->Validate(4, Config(0x3C, 0, 100000)) == ErrorCode::kEventNotOnCounter);
  CHECK(driver->Validate(4, Config(0xC0, 0, 100000)) == ErrorCode::kOk);
  CounterConfig disabled;
  CHECK(driver->Validate(3, disabled) == ErrorCode::kOk);
}

TEST_CASE("Intel: events CPUID marks unavailable are refused", "[pmu][intel]") {
  auto model = fake::IntelArchPerfmonModel(4, 4, 3, 48, true);
  model.leaves[{0xA, 0}].ebx = 1u << 4;  // LLC misses not available
  FakePlatform platform(1, model);
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  CHECK(driver->Validate(0, Config(0x2E, 0x41, 100000)) == ErrorCode::kUnknownEvent);
  CHECK(driver->Validate(0, Config(0x2E, 0x4F, 100000)) == ErrorCode::kOk);
}

TEST_CASE("Reserve saves and Release restores the PMU registers", "[pmu]") {
  FakePlatform platform(2, fake::IntelArchPerfmonModel(4, 4, 3, 48, true));
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    platform.SetMsr(cpu, 0x186, 0x4300C0 + cpu);  // somebody else's configuration
    platform.SetMsr(cpu, 0xC1, 1234 + cpu);
    platform.SetMsr(cpu, 0x38D, 0x3);
    platform.SetMsr(cpu, 0x38F, 0x1);
  }
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  REQUIRE(driver->Reserve() == ErrorCode::kOk);
  std::vector<CounterConfig> counters(7);
  counters[0] = Config(0x3C, 0, 100000);
  REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
  driver->Start();
  driver->Stop();
  driver->Release();
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    CHECK(platform.GetMsr(cpu, 0x186) == 0x4300C0 + cpu);
    CHECK(platform.GetMsr(cpu, 0x4C1) == 1234 + cpu);
    CHECK(platform.GetMsr(cpu, 0x38D) == 0x3);
    CHECK(platform.GetMsr(cpu, 0x38F) == 0x1);
  }
}

TEST_CASE("A faulting MSR is a HardwareFault, not a crash", "[pmu]") {
  FakePlatform platform(1, fake::IntelArchPerfmonModel(4, 4, 3, 48, true));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  platform.FaultMsr(0x187);
  CHECK(driver->Reserve() == ErrorCode::kHardwareFault);
}

TEST_CASE("AMD Zen: six counters at 0xC0010200, 48-bit reload", "[pmu][amd]") {
  FakePlatform platform(2, fake::AmdModel(0x17));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  REQUIRE(driver == &drivers.amd);
  CHECK(driver->kind() == PmuKind::kAmdCore);
  CHECK(std::string(driver->cpu_type()) == "x86-64/family17h");
  CHECK(driver->num_counters() == 6);
  std::vector<CounterConfig> counters(6);
  counters[0] = Config(0x76, 0x00, 100000);
  counters[5] = Config(0xC0, 0x00, 250000, false, true);
  REQUIRE(driver->Reserve() == ErrorCode::kOk);
  platform.ClearMsrWrites();
  REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
  // PERF_CTL0 (0xC0010200): event 0x76, USR (16), OS (17), INT (20).
  CHECK(Wrote(platform, 1, 0xC0010200, 0x130076));
  CHECK(Wrote(platform, 1, 0xC0010201, kTwo48 - 100000));
  // PERF_CTL5 (0xC001020A), counter at 0xC001020B: user only.
  CHECK(Wrote(platform, 0, 0xC001020A, 0x1100C0));
  CHECK(Wrote(platform, 0, 0xC001020B, kTwo48 - 250000));
  driver->Start();
  CHECK(platform.GetMsr(0, 0xC0010200) == (0x130076 | (1u << 22)));
  CHECK(platform.GetMsr(0, 0xC0010202) == 0);  // counter 1 unused
}

TEST_CASE("AMD: event bits 11:8 go to PERF_CTL bits 35:32", "[pmu][amd]") {
  FakePlatform platform(1, fake::AmdModel(0x19));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  REQUIRE(driver != nullptr);
  CHECK(std::string(driver->cpu_type()) == "x86-64/family19h");
  const CounterConfig config = Config(0x1A0, 0x01, 100000);
  REQUIRE(driver->Validate(2, config) == ErrorCode::kOk);
  // Event 0x1A0: 0xA0 in bits 7:0, 0x1 in bits 35:32; unit mask 0x01 in bits 15:8. Xen's
  // encoding put the high nibble into bits 3:0, which would read 0xA1 here.
  const uint64_t expected = 0x1'0013'01A0ULL;
  CHECK(AmdCorePmu::EncodeControl(config) == expected);
  std::vector<CounterConfig> counters(6);
  counters[2] = config;
  REQUIRE(driver->Reserve() == ErrorCode::kOk);
  REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
  CHECK(platform.GetMsr(0, 0xC0010204) == expected);
  // The same event is unknown on Zen 1/2 (family 17h).
  FakePlatform zen2(1, fake::AmdModel(0x17));
  PmuDrivers zen2_drivers(zen2);
  CHECK(zen2_drivers.Detect()->Validate(0, config) == ErrorCode::kUnknownEvent);
}

TEST_CASE("AMD: overflow when bit 47 clears, not ours when none did", "[pmu][amd]") {
  FakePlatform platform(1, fake::AmdModel(0x17));
  PmuDrivers drivers(platform);
  PmuDriver* driver = drivers.Detect();
  std::vector<CounterConfig> counters(6);
  counters[0] = Config(0x76, 0, 100000);
  counters[3] = Config(0xC2, 0, 5000);
  REQUIRE(driver->Reserve() == ErrorCode::kOk);
  REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
  driver->Start();
  CHECK(driver->CollectOverflows(0) == 0);  // both counters still near 2^48
  platform.SetMsr(0, 0xC0010207, 17);       // counter 3 wrapped
  platform.ClearMsrWrites();
  CHECK(driver->CollectOverflows(0) == (1u << 3));
  CHECK(Wrote(platform, 0, 0xC0010207, kTwo48 - 5000));
}

TEST_CASE("AMD legacy families use the K7 MSRs and four counters", "[pmu][amd]") {
  for (uint32_t family : {0x0Fu, 0x10u, 0x16u}) {
    INFO("family " << family);
    FakePlatform platform(1, fake::AmdModel(family, false));
    PmuDrivers drivers(platform);
    PmuDriver* driver = drivers.Detect();
    REQUIRE(driver != nullptr);
    CHECK(driver->kind() == PmuKind::kAmdLegacy);
    CHECK(driver->num_counters() == 4);
    CHECK(driver->Validate(4, Config(0x76, 0, 100000)) == ErrorCode::kBadCounter);
    std::vector<CounterConfig> counters(4);
    counters[3] = Config(0x7E, 0x03, 5000);  // L2_CACHE_MISS instructions|data
    REQUIRE(driver->Reserve() == ErrorCode::kOk);
    platform.ClearMsrWrites();
    REQUIRE(driver->Setup(counters.data(), counters.size()) == ErrorCode::kOk);
    CHECK(Wrote(platform, 0, 0xC0010003, 0x13037E));
    CHECK(Wrote(platform, 0, 0xC0010007, kTwo48 - 5000));
  }
}

TEST_CASE("Detection: Hygon is family 18h, unknown CPUs have no driver", "[pmu]") {
  FakePlatform hygon(1, fake::HygonModel());
  PmuDrivers hygon_drivers(hygon);
  REQUIRE(hygon_drivers.Detect() != nullptr);
  CHECK(std::string(hygon_drivers.Detect()->cpu_type()) == "x86-64/family18h");

  FakePlatform unknown(1, fake::UnknownVendorModel());
  PmuDrivers unknown_drivers(unknown);
  CHECK(unknown_drivers.Detect() == nullptr);

  FakePlatform zen5(1, fake::AmdModel(0x1A));
  PmuDrivers zen5_drivers(zen5);
  CHECK(zen5_drivers.Detect() == nullptr);

  // An Intel CPU whose arch perfmon has a single counter is not supported (as in Xen).
  FakePlatform tiny(1, fake::IntelArchPerfmonModel(2, 1, 0, 40, false));
  PmuDrivers tiny_drivers(tiny);
  CHECK(tiny_drivers.Detect() == nullptr);
}
