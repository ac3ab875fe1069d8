// The engine's timer source (OProfile's timer mode, timer_source.h): what a host without a
// usable PMU samples with. Its one event takes a period in ns; each tick of the host's timer is
// one sample of the interrupted context standing for that period.
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/agent/ring_reader.h"
#include "hvprof/fake/fake_platform.h"
#include "hvpmu/engine.h"
#include "hvpmu/timer_source.h"

using namespace hvpmu;
using hvprof::agent::RingReader;
using hvprof::fake::FakePlatform;

namespace {

struct TimerHost {
  FakePlatform platform{2, hvprof::fake::UnknownVendorModel()};
  TimerSource timer{platform};
  Engine engine{platform, &timer};
  BufferV2 rings{};

  TimerHost() { platform.AddDomain(0, 2, DomainType::kPv64, true); }

  template <typename T>
  std::string Op(uint32_t op, T* arg) {
    return ErrorName(engine.DoOp(0, op, arg, sizeof(T)));
  }
  std::string Op(uint32_t op) { return ErrorName(engine.DoOp(0, op, nullptr, 0)); }

  InitV2 Init() {
    InitV2 init{};
    init.struct_size = sizeof init;
    init.abi_version = kAbiVersion;
    REQUIRE(Op(kOpInitV2, &init) == "Ok");
    return init;
  }
  std::string Counter(uint64_t count, uint32_t event = kTimerEventCode, uint32_t index = 0,
                      uint64_t unit_mask = 0) {
    legacy::Counter counter{};
    counter.ind = index;
    counter.count = count;
    counter.enabled = 1;
    counter.event = event;
    counter.unit_mask = unit_mask;
    counter.kernel = 1;
    counter.user = 1;
    return Op(legacy::kOpCounter, &counter);
  }
  // dom0 primary and active, counters reserved: ready for Counter.
  void SetUp() {
    Init();
    rings.struct_size = sizeof rings;
    rings.abi_version = kAbiVersion;
    rings.capacity = 64;
    REQUIRE(Op(kOpGetBufferV2, &rings) == "Ok");
    legacy::DomainIdArg self = 0;
    REQUIRE(Op(legacy::kOpSetActive, &self) == "Ok");
    REQUIRE(Op(legacy::kOpReserveCounters) == "Ok");
  }
  void Start(uint64_t period_ns) {
    REQUIRE(Counter(period_ns) == "Ok");
    REQUIRE(Op(legacy::kOpSetupEvents) == "Ok");
    REQUIRE(Op(legacy::kOpEnableVirq) == "Ok");
    REQUIRE(Op(legacy::kOpStart) == "Ok");
  }
  void Tick(uint32_t cpu, bool user, uint64_t ip) {
    InterruptedContext context{};
    context.domain = 0;
    context.vcpu = static_cast<uint16_t>(cpu);
    context.type = DomainType::kPv64;
    context.ip = ip;
    context.cpl = 3;
    context.pv_kernel_mode = !user;
    context.pid = ring::kNoPid;
    context.tid = ring::kNoPid;
    platform.SetContext(cpu, context);
    engine.HandlePmi(cpu);
  }
  std::vector<ring::SampleRecord> Drain() {
    std::vector<ring::SampleRecord> out;
    auto* base = static_cast<uint8_t*>(platform.RegionBase(rings.region_handle));
    REQUIRE(base != nullptr);
    for (uint32_t i = 0; i < rings.nbuf; ++i) {
      auto reader = RingReader::Attach(base + i * rings.ring_bytes, rings.ring_bytes, rings.capacity);
      REQUIRE(reader.has_value());
      reader.value().Drain([&](const ring::SampleRecord& record, std::span<const uint64_t>) { out.push_back(record); });
    }
    return out;
  }
};

}  // namespace

TEST_CASE("the timer source describes itself as one counter of cpu_type timer", "[timer]") {
  TimerHost host;
  const InitV2 init = host.Init();
  CHECK(init.pmu_kind == static_cast<uint32_t>(PmuKind::kTimer));
  CHECK(std::string(init.cpu_type) == kTimerCpuType);
  CHECK(init.num_counters == 1);
  CHECK(init.max_count == kTimerMaxPeriodNs);
  // Its event table is the engine's, for agents and reports alike.
  const CpuEventTable* table = FindEventTable(init.cpu_type);
  REQUIRE(table != nullptr);
  CHECK(std::string(table->default_event) == "TIMER");
  CHECK(table->default_count == kTimerDefaultPeriodNs);
  CHECK(host.platform.violations().empty());
}

TEST_CASE("TIMER takes a period of 100 us to 1 s on its one counter, and nothing else", "[timer]") {
  TimerHost host;
  host.SetUp();
  CHECK(host.Counter(kTimerMinPeriodNs - 1) == "CountTooSmall");
  CHECK(host.Counter(kTimerMaxPeriodNs + 1) == "CountTooLarge");
  CHECK(host.Counter(1'000'000, 0x3C) == "UnknownEvent");         // no cycles to count
  CHECK(host.Counter(1'000'000, kTimerEventCode, 0, 0x01) == "BadUnitMask");
  CHECK(host.Counter(1'000'000, kTimerEventCode, 1) == "BadCounter");  // one counter only
  CHECK(host.Counter(kTimerMinPeriodNs) == "Ok");
  CHECK(host.Counter(kTimerMaxPeriodNs) == "Ok");
}

TEST_CASE("each tick of the host's timer is one sample of the interrupted context, worth one period",
          "[timer]") {
  TimerHost host;
  host.SetUp();
  CHECK(host.platform.sample_timer_period_ns() == 0);
  host.Start(250'000);
  // The engine asked the host for a timer at the period given, once.
  CHECK(host.platform.sample_timer_period_ns() == 250'000);
  CHECK(host.platform.sample_timer_starts() == 1);
  for (int i = 0; i < 3; ++i) host.Tick(0, /*user=*/false, 0xffffffff81000000 + i);
  for (int i = 0; i < 2; ++i) host.Tick(1, /*user=*/true, 0x401000 + i);
  const auto samples = host.Drain();
  REQUIRE(samples.size() == 5);
  int kernel = 0, user = 0;
  for (const ring::SampleRecord& sample : samples) {
    CHECK(sample.period == 250'000);
    CHECK(sample.event == 0);
    CHECK(sample.domain == 0);
    if (sample.mode == static_cast<uint8_t>(ring::Mode::kKernel)) {
      ++kernel;
      CHECK(sample.pcpu == 0);
      CHECK(sample.ip >= 0xffffffff81000000);
    } else if (sample.mode == static_cast<uint8_t>(ring::Mode::kUser)) {
      ++user;
      CHECK(sample.pcpu == 1);
      CHECK(sample.ip >= 0x401000);
    }
  }
  CHECK(kernel == 3);
  CHECK(user == 2);

  // Stopped, the host's timer is stopped; a tick already under way samples nothing.
  REQUIRE(host.Op(legacy::kOpStop) == "Ok");
  CHECK(host.platform.sample_timer_period_ns() == 0);
  host.Tick(0, false, 0xffffffff81000000);
  CHECK(host.Drain().empty());
  CHECK(host.platform.violations().empty());
}

TEST_CASE("a host without a sampling timer records nothing rather than something made up", "[timer]") {
  TimerHost host;
  host.platform.SetSampleTimerAvailable(false);
  host.SetUp();
  host.Start(1'000'000);
  CHECK_FALSE(host.timer.running());
  host.Tick(0, false, 0xffffffff81000000);
  CHECK(host.Drain().empty());
}
