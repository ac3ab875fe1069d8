// The simulated machine driven by the real engine and drivers: determinism, accuracy against
// ground truth, counting by privilege level, fixed counters, stop, both CPU models.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <catch2/catch.hpp>

#include "sim_harness.h"

using namespace hvpmu;
namespace sim = hvprof::sim;
using hvprof::testing::SimHost;
using hvprof::testing::TestScenario;

namespace {

constexpr uint16_t kCycles = 0x3C;
constexpr uint16_t kInstructions = 0xC0;

struct FunctionKey {
  DomainId domain;
  hvprof::Mode mode;
  uint32_t image;
  uint32_t function;
  auto operator<=>(const FunctionKey&) const = default;
};

FunctionKey KeyOf(const sim::SimMachine& machine, size_t row) {
  const sim::TruthKey& key = machine.truth_keys()[row];
  return {key.domain, key.mode, key.image, key.function};
}

// For one event (logical counter): the exact share of each function in the ground truth, and
// its share of the samples.
struct Shares {
  std::map<FunctionKey, double> truth;
  std::map<FunctionKey, double> sampled;
  uint64_t samples = 0;
  uint64_t unattributed = 0;
};

Shares Compare(const SimHost& host, uint32_t counter) {
  Shares shares;
  const auto& machine = *host.machine;
  double total = 0;
  for (size_t row = 0; row < machine.truth_rows().size(); ++row) {
    const double events = static_cast<double>(machine.truth_rows()[row].events[counter]);
    shares.truth[KeyOf(machine, row)] += events;
    total += events;
  }
  for (auto& [key, value] : shares.truth) value /= total;
  for (const auto& seen : host.samples) {
    if (seen.record.event != counter) continue;
    ++shares.samples;
    const int64_t row = machine.TruthRowAt(seen.record.domain, seen.record.vcpu,
                                           static_cast<hvprof::Mode>(seen.record.mode),
                                           seen.record.ip);
    if (row < 0) {
      ++shares.unattributed;
      continue;
    }
    shares.sampled[KeyOf(machine, static_cast<size_t>(row))] += 1.0;
  }
  for (auto& [key, value] : shares.sampled) value /= static_cast<double>(shares.samples);
  return shares;
}

void CheckTopShares(const SimHost& host, uint32_t counter, uint64_t min_samples) {
  Shares shares = Compare(host, counter);
  INFO("counter " << counter << ": " << shares.samples << " samples");
  REQUIRE(shares.samples >= min_samples);
  CHECK(shares.unattributed == 0);
  std::vector<std::pair<double, FunctionKey>> top;
  for (const auto& [key, share] : shares.truth) top.emplace_back(share, key);
  std::sort(top.rbegin(), top.rend());
  top.resize(std::min<size_t>(top.size(), 20));
  for (const auto& [truth, key] : top) {
    const double sampled = shares.sampled[key];
    INFO(host.machine->function_names()[key.function] << " in "
         << host.machine->image_names()[key.image] << " (domain " << key.domain << ", "
         << hvprof::sample_mode::Name(key.mode) << "): truth " << 100 * truth << "% sampled "
         << 100 * sampled << "%");
    CHECK(std::fabs(sampled - truth) <= 0.01);
  }
}

// Samples per truth row and counter must equal the overflows the machine counted, exactly,
// when no ring overflowed.
void CheckExactOverflows(const SimHost& host) {
  const auto& machine = *host.machine;
  std::map<std::pair<int64_t, uint8_t>, uint64_t> seen;
  for (const auto& sample : host.samples) {
    const int64_t row = machine.TruthRowAt(sample.record.domain, sample.record.vcpu,
                                           static_cast<hvprof::Mode>(sample.record.mode),
                                           sample.record.ip);
    ++seen[{row, sample.record.event}];
  }
  uint64_t mismatches = 0;
  uint64_t overflows = 0;
  for (size_t row = 0; row < machine.truth_rows().size(); ++row) {
    for (uint8_t counter = 0; counter < sim::PmuModel::kMaxCounters; ++counter) {
      const uint64_t expected = machine.truth_rows()[row].overflows[counter];
      overflows += expected;
      mismatches += seen[{static_cast<int64_t>(row), counter}] != expected;
    }
  }
  CHECK(overflows == host.samples.size());
  for (size_t row = 0; row < machine.truth_rows().size() && mismatches != 0; ++row) {
    for (uint8_t counter = 0; counter < sim::PmuModel::kMaxCounters; ++counter) {
      const uint64_t expected = machine.truth_rows()[row].overflows[counter];
      const uint64_t got = seen[{static_cast<int64_t>(row), counter}];
      if (got != expected) {
        UNSCOPED_INFO("row " << row << " counter " << int(counter) << ": " << got << " samples, "
                             << expected << " overflows");
      }
    }
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("the same seed gives the same sample stream, bit for bit", "[sim]") {
  auto run = [](uint64_t seed) {
    auto host = SimHost::Create(TestScenario("intel-arch-v4", seed));
    host->StartProfiling({1}, {2, 3}, {{0, kCycles, 0, 20000}, {4, kInstructions, 0, 50000}});
    host->Run(100'000'000, 7'000'000);
    host->StopProfiling();
    return host;
  };
  auto first = run(7);
  auto second = run(7);
  auto other = run(8);
  REQUIRE(first->samples.size() > 10000);
  REQUIRE(first->samples.size() == second->samples.size());
  bool identical = true;
  for (size_t i = 0; i < first->samples.size(); ++i) {
    identical &= std::memcmp(&first->samples[i].record, &second->samples[i].record,
                             sizeof(ring::SampleRecord)) == 0 &&
                 first->samples[i].owner == second->samples[i].owner;
  }
  CHECK(identical);
  CHECK(hvprof::context::ToJson(first->machine->GroundTruth()) ==
        hvprof::context::ToJson(second->machine->GroundTruth()));
  bool differs = other->samples.size() != first->samples.size();
  for (size_t i = 0; !differs && i < first->samples.size(); ++i) {
    differs = first->samples[i].record.ip != other->samples[i].record.ip;
  }
  CHECK(differs);
}

TEST_CASE("sampled shares match ground truth: cycles and instructions (Intel)", "[sim][accuracy]") {
  auto host = SimHost::Create(TestScenario("intel-arch-v4", 11));
  // General counter 0 counts cycles; fixed counter 0 (logical 4) counts instructions, whose
  // per-function rates differ from cycles through each function's IPC.
  host->StartProfiling({1}, {2, 3}, {{0, kCycles, 0, 6000}, {4, kInstructions, 0, 7000}});
  host->Run(250'000'000);
  host->StopProfiling();
  CHECK(host->malformed == 0);
  CheckTopShares(*host, 0, 200000);
  CheckTopShares(*host, 4, 200000);
  CheckExactOverflows(*host);
  // Instructions and cycles rank functions differently: their shares are not the same.
  Shares cycles = Compare(*host, 0);
  Shares instructions = Compare(*host, 4);
  double difference = 0;
  for (const auto& [key, share] : cycles.truth) difference += std::fabs(share - instructions.truth[key]);
  CHECK(difference > 0.1);
}

TEST_CASE("sampled shares match ground truth on AMD Zen", "[sim][accuracy][amd]") {
  auto host = SimHost::Create(TestScenario("amd-zen", 12));
  host->StartProfiling({1}, {2, 3}, {{5, 0x76, 0, 6000}, {0, 0xC0, 0, 7000}});
  host->Run(250'000'000);
  host->StopProfiling();
  CheckTopShares(*host, 5, 200000);
  CheckTopShares(*host, 0, 200000);
  CheckExactOverflows(*host);
}

TEST_CASE("counters count only at the privilege levels they were set for", "[sim][modes]") {
  // USR counts CPL > 0: user code, 64-bit PV guest kernels (CPL 3) and 32-bit PV guest
  // kernels (CPL 1). OS counts CPL 0: the hypervisor and HVM guest kernels.
  auto count_modes = [](bool kernel, bool user) {
    auto host = SimHost::Create(TestScenario("intel-arch-v4", 3));
    host->StartProfiling({1}, {2, 3}, {{0, kCycles, 0, 20000, kernel, user}});
    host->Run(50'000'000);
    host->StopProfiling();
    std::map<std::pair<DomainId, int>, uint64_t> per;
    for (const auto& seen : host->samples) ++per[{seen.record.domain, seen.record.mode}];
    return per;
  };
  const int kUser = 0, kKernel = 1, kHyp = 2;
  auto usr = count_modes(false, true);
  CHECK(usr[{0, kUser}] > 0);
  CHECK(usr[{0, kKernel}] > 0);   // PV64 kernel at CPL 3
  CHECK(usr[{3, kKernel}] > 0);   // PV32 kernel at CPL 1
  CHECK(usr[{2, kUser}] > 0);     // HVM user
  CHECK(usr[{2, kKernel}] == 0);  // HVM kernel at CPL 0
  CHECK(usr[{0, kHyp}] == 0);
  CHECK(usr[{kDomainIdle, kHyp}] == 0);
  auto os = count_modes(true, false);
  CHECK(os[{0, kHyp}] > 0);
  CHECK(os[{2, kKernel}] > 0);
  CHECK(os[{kDomainIdle, kHyp}] > 0);
  CHECK(os[{0, kUser}] == 0);
  CHECK(os[{0, kKernel}] == 0);
  CHECK(os[{3, kKernel}] == 0);
  CHECK(os[{2, kUser}] == 0);
}

TEST_CASE("fixed counters sample, and samples stop after stop", "[sim]") {
  auto host = SimHost::Create(TestScenario("intel-arch-v4", 5));
  // Fixed counter 2: reference cycles; fixed counter 1: core cycles.
  host->StartProfiling({1}, {}, {{6, 0x3C, 0x01, 30000}, {5, 0x3C, 0x00, 30000}});
  host->Run(30'000'000);
  uint64_t by_counter[8] = {};
  for (const auto& seen : host->samples) ++by_counter[seen.record.event];
  CHECK(by_counter[6] > 1000);
  CHECK(by_counter[5] > 1000);
  CHECK(by_counter[0] == 0);
  host->StopProfiling();
  const size_t before = host->samples.size();
  const uint64_t pmis = host->machine->pmis_delivered();
  auto counted = [&] {
    uint64_t total = 0;
    for (const auto& row : host->machine->truth_rows()) {
      for (uint64_t events : row.events) total += events;
    }
    return total;
  };
  const uint64_t counted_before = counted();
  const uint64_t time_before = host->machine->now_ns();
  host->Run(30'000'000);
  CHECK(host->machine->now_ns() == time_before + 30'000'000);
  CHECK(host->samples.size() == before);
  CHECK(host->machine->pmis_delivered() == pmis);
  // The counters are disabled: nothing more is counted, though the clock moved on.
  CHECK(counted() == counted_before);
}

TEST_CASE("idle time is charged to the idle domain and halted time counts no cycles", "[sim]") {
  auto json = TestScenario("intel-arch-v4", 9);
  for (auto& domain : json["domains"]) domain["load"] = 0.05;  // a mostly idle machine
  auto host = SimHost::Create(json);
  host->StartProfiling({1}, {2, 3}, {{0, kCycles, 0, 20000}});
  host->Run(100'000'000);
  host->StopProfiling();
  uint64_t idle = 0;
  for (const auto& seen : host->samples) {
    if (seen.record.domain != kDomainIdle) continue;
    ++idle;
    CHECK(seen.owner == 0);  // dom0's pCPU rings
    CHECK(seen.record.mode == static_cast<uint8_t>(ring::Mode::kHypervisor));
  }
  CHECK(idle > 0);
  // With the CPUs halted half of the idle time, the idle loop gets far fewer cycles than its
  // share of time: 4 CPUs x 100 ms at 2 GHz would be 800M cycles, mostly idle.
  uint64_t counted = 0;
  for (const auto& row : host->machine->truth_rows()) counted += row.events[0];
  CHECK(counted < 600'000'000);
  CHECK(counted > 200'000'000);
}

TEST_CASE("a CPU without a PMU is sampled by the engine's timer: a tick each period, where the time went",
          "[sim][timer]") {
  auto json = TestScenario("none", 13);
  for (auto& domain : json["domains"]) domain["load"] = 0.6;  // idle and halted time too
  auto host = SimHost::Create(json);
  REQUIRE(host->timer != nullptr);  // the drivers found no PMU
  constexpr uint64_t kPeriod = 100'000;  // ns: 10 kHz per CPU
  constexpr uint64_t kRun = 1'000'000'000;
  host->StartProfiling({1}, {2, 3}, {{0, kTimerEventCode, 0, kPeriod}});
  host->Run(kRun);
  host->StopProfiling();
  const auto& machine = *host->machine;
  const uint64_t cpus = host->scenario.machine.cpus;
  CHECK(host->malformed == 0);
  CHECK(machine.pmis_delivered() == 0);
  // A tick every period of every CPU's time, busy, idle or halted; none made up, none missed.
  CHECK(machine.ticks_delivered() == cpus * (kRun / kPeriod));
  CHECK(host->samples.size() == machine.ticks_delivered());

  // Each sample where its tick came due, exactly; and the time each function ran, in ns.
  std::map<int64_t, uint64_t> seen;
  std::map<FunctionKey, double> sampled;
  for (const auto& sample : host->samples) {
    CHECK(sample.record.event == 0);
    const int64_t row = machine.TruthRowAt(sample.record.domain, sample.record.vcpu,
                                           static_cast<hvprof::Mode>(sample.record.mode), sample.record.ip);
    REQUIRE(row >= 0);
    ++seen[row];
    sampled[KeyOf(machine, static_cast<size_t>(row))] += 1.0 / static_cast<double>(host->samples.size());
  }
  uint64_t mismatches = 0;
  uint64_t time_ns = 0;
  std::map<FunctionKey, double> truth;
  for (size_t row = 0; row < machine.truth_rows().size(); ++row) {
    const sim::TruthRow& truth_row = machine.truth_rows()[row];
    mismatches += seen[static_cast<int64_t>(row)] != truth_row.ticks;
    time_ns += machine.NsOf(truth_row.timer_cycles);
    truth[KeyOf(machine, row)] += static_cast<double>(machine.NsOf(truth_row.timer_cycles));
  }
  CHECK(mismatches == 0);
  // Every CPU's whole time, up to a nanosecond of rounding per row.
  CHECK(time_ns <= cpus * kRun);
  CHECK(time_ns + machine.truth_rows().size() >= cpus * kRun);
  // Each function's share of the samples is its share of the time, within a point.
  uint64_t compared = 0;
  double idle_truth = 0;
  for (auto& [key, ns] : truth) {
    const double share = ns / static_cast<double>(time_ns);
    if (key.domain == kDomainIdle) idle_truth += share;
    if (share < 0.01) continue;
    ++compared;
    INFO(machine.function_names()[key.function] << " (domain " << key.domain << ", " << hvprof::sample_mode::Name(key.mode)
                                                 << "): time " << 100 * share << "%, samples "
                                                 << 100 * sampled[key] << "%");
    CHECK(std::fabs(sampled[key] - share) <= 0.01);
  }
  CHECK(compared >= 5);
  CHECK(idle_truth > 0.05);

  // The timer's time is the scheduler's: each domain's is its vCPUs' running time, and the idle
  // loop's (halted time included, which no cycle counter sees) is the pCPUs' idle time.
  // Through its codec, as hvprof-hv writes it and dom0 reads it.
  const auto truth_json = hvprof::context::ToJson(machine.GroundTruth());
  auto parsed = hvprof::context::ParseGroundTruth(
      hvprof::json::Node::Root(truth_json, "the ground truth", hvprof::ErrorKind::kCorrupt));
  REQUIRE(parsed.has_value());
  const hvprof::context::GroundTruth& written = parsed.value();
  std::map<DomainId, double> running;
  for (const auto& vcpu : written.sched.vcpus) running[vcpu.domain] += static_cast<double>(vcpu.running_ns);
  for (const auto& cpu : written.sched.cpus) running[kDomainIdle] += static_cast<double>(cpu.idle_ns);
  std::map<DomainId, double> timed;
  for (const auto& [key, ns] : truth) timed[key.domain] += ns;
  for (const auto& [domain, ns] : running) {
    INFO("domain " << domain << ": running " << ns << " ns, timer's time " << timed[domain] << " ns");
    CHECK(std::fabs(timed[domain] - ns) <= 1e-6 * static_cast<double>(cpus * kRun));
  }

  // One counter, TIMER, in ns and ticks.
  CHECK(written.timer);
  REQUIRE(written.counters.size() == 1);
  CHECK(written.counters[0].counts == "time_ns");
  uint64_t written_ticks = 0;
  for (const auto& row : written.rows) written_ticks += row.overflows.at(0);
  CHECK(written_ticks == machine.ticks_delivered());
}

TEST_CASE("the simulator names its processes in samples, and its status op says so", "[sim]") {
  auto host = SimHost::Create(TestScenario("intel-arch-v4", 15));
  auto status = std::make_unique<Status>();
  status->struct_size = sizeof(Status);
  status->abi_version = kAbiVersion;
  REQUIRE(host->Op(0, kOpStatus, status.get(), sizeof(Status)) == ErrorCode::kOk);
  CHECK((status->flags & kStatusNamesTasks) != 0);
  host->StartProfiling({}, {1}, {{0, kCycles, 0, 20000}});
  host->Run(10'000'000);
  host->StopProfiling();
  uint64_t named = 0;
  for (const auto& seen : host->samples) named += seen.record.mode == static_cast<uint8_t>(ring::Mode::kUser) && seen.record.pid != ring::kNoPid;
  CHECK(named > 0);
  REQUIRE(host->Op(0, kOpStatus, status.get(), sizeof(Status)) == ErrorCode::kOk);
  CHECK(status->now_ns == host->machine->now_ns());
}

TEST_CASE("frame-pointer backtraces walk the simulated stacks", "[sim]") {
  auto json = TestScenario("intel-arch-v4", 4);
  json["domains"][1]["workload"]["hypervisor"]["functions"][0]["stack"] =
      nlohmann::json::array({"pv_hypercall", "do_event_channel_op"});
  auto host = SimHost::Create(json);
  legacy::BacktraceDepthArg depth = 8;
  legacy::Init init{};
  REQUIRE(host->Op(0, legacy::kOpInit, &init, sizeof init) == ErrorCode::kOk);
  REQUIRE(host->Op(0, legacy::kOpSetBacktrace, &depth, sizeof depth) == ErrorCode::kOk);
  host->StartProfiling({1}, {}, {{0, kCycles, 0, 10000}});
  host->Run(30'000'000);
  host->StopProfiling();
  // Frames are not part of SampleRecord; re-run a drain-level check through nframes.
  uint64_t with_frames = 0;
  for (const auto& seen : host->samples) {
    if (seen.record.domain == 1 && seen.record.mode == 2 && seen.record.nframes == 2) ++with_frames;
  }
  CHECK(with_frames > 0);
}

TEST_CASE("scheduling records, replayed, give every vCPU's exact time in each state", "[sim][sched]") {
  auto json = TestScenario("intel-arch-v4", 12);
  // More vCPUs than CPUs, some often idle: every state occurs.
  const double loads[] = {0.5, 0.95, 0.35, 0.8};
  for (size_t d = 0; d < json["domains"].size(); ++d) json["domains"][d]["load"] = loads[d % 4];
  auto host = SimHost::Create(json);
  host->StartProfiling({}, {1, 2, 3}, {{0, kCycles, 0, 2'000'000}}, 16384, /*sched=*/true);
  host->machine->ResetGroundTruth();
  const uint64_t start_ns = host->machine->now_ns();
  host->Run(2'000'000'000);
  const uint64_t end_ns = host->machine->now_ns();
  host->StopProfiling();
  REQUIRE(host->malformed == 0);
  REQUIRE_FALSE(host->sched.empty());
  const hvprof::context::SchedTruth truth = host->machine->GroundTruth().sched;

  // Replay: in time order; at one instant (records of different pCPUs have no other order),
  // states as they stand first, then whoever leaves a pCPU, then the rest.
  std::vector<ring::SchedRecord> records = host->sched;
  std::stable_sort(records.begin(), records.end(), [](const ring::SchedRecord& a, const ring::SchedRecord& b) {
    const auto rank = [](const ring::SchedRecord& r) {
      if (r.old_state == r.new_state) return 0;
      return r.old_state == static_cast<uint8_t>(ring::Runstate::kRunning) ? 1 : 2;
    };
    return a.time_ns != b.time_ns ? a.time_ns < b.time_ns : rank(a) < rank(b);
  });
  struct Replayed {
    uint8_t state = 0;
    uint64_t since = 0;
    bool known = false;
    uint64_t ns[ring::kRunstateCount] = {};
    uint64_t wakeups = 0;
    uint64_t migrations = 0;
  };
  std::map<std::pair<DomainId, uint16_t>, Replayed> entities;
  uint64_t inconsistent = 0;
  for (const ring::SchedRecord& record : records) {
    CHECK(record.time_ns >= start_ns);
    CHECK(record.time_ns <= end_ns);
    Replayed& entity = entities[{record.domain, record.vcpu}];
    if (!entity.known) {
      entity = Replayed{record.old_state, start_ns, true, {}, 0, 0};
    }
    if (record.type == static_cast<uint8_t>(ring::SchedType::kWakeup)) ++entity.wakeups;
    if (record.type == static_cast<uint8_t>(ring::SchedType::kMigrate)) ++entity.migrations;
    if (record.type != static_cast<uint8_t>(ring::SchedType::kRunstate)) continue;
    inconsistent += record.old_state != entity.state;
    entity.ns[entity.state] += record.time_ns - entity.since;
    entity.state = record.new_state;
    entity.since = record.time_ns;
  }
  CHECK(inconsistent == 0);
  const double duration = static_cast<double>(end_ns - start_ns);
  REQUIRE(truth.vcpus.size() == 7);
  for (const hvprof::context::TruthVcpu& expected : truth.vcpus) {
    const std::pair<DomainId, uint16_t> key{expected.domain, expected.vcpu};
    INFO("dom" << key.first << " vcpu " << key.second);
    REQUIRE(entities.count(key) == 1);  // the snapshot names even a vCPU that never changes
    Replayed& entity = entities[key];
    entity.ns[entity.state] += end_ns - entity.since;
    const uint64_t states[] = {expected.running_ns, expected.runnable_ns, expected.blocked_ns, expected.offline_ns};
    uint64_t total = 0;
    for (uint32_t s = 0; s < ring::kRunstateCount; ++s) {
      total += states[s];
      CHECK(std::abs(static_cast<double>(entity.ns[s]) - static_cast<double>(states[s])) <= 0.01 * duration);
    }
    CHECK(total == Approx(duration).margin(1));  // the truth accounts for every nanosecond
    CHECK(entity.wakeups == expected.wakeups);
    CHECK(entity.migrations == expected.migrations);
  }
  // Every state occurred somewhere, or the test proves little.
  uint64_t runnable = 0;
  uint64_t blocked = 0;
  uint64_t migrations = 0;
  for (const hvprof::context::TruthVcpu& expected : truth.vcpus) {
    runnable += expected.runnable_ns;
    blocked += expected.blocked_ns;
    migrations += expected.migrations;
  }
  CHECK(runnable > 0);
  CHECK(blocked > 0);
  CHECK(migrations > 0);
  // Each pCPU: busy (a vCPU of a domain ran) plus idle (its idle vCPU ran) is the whole window.
  for (const hvprof::context::TruthCpu& cpu : truth.cpus) {
    const uint16_t c = cpu.cpu;
    Replayed& idle = entities[{kDomainIdle, c}];
    idle.ns[idle.state] += 0;  // closed above only for guests: close here
    const uint64_t idle_ns = idle.ns[0] + (idle.state == 0 ? end_ns - idle.since : 0);
    CHECK(std::abs(static_cast<double>(idle_ns) - static_cast<double>(cpu.idle_ns)) <= 0.01 * duration);
    CHECK(cpu.idle_ns + cpu.busy_ns == Approx(duration).margin(1));
  }
}

TEST_CASE("scheduling records do not change the machine: the same seed, the same samples", "[sim][sched]") {
  auto run = [](bool sched) {
    auto host = SimHost::Create(TestScenario("intel-arch-v4", 3));
    host->StartProfiling({}, {1, 2, 3}, {{0, kCycles, 0, 100000}}, 16384, sched);
    host->Run(50'000'000);
    host->StopProfiling();
    std::vector<std::tuple<uint64_t, uint64_t, uint16_t>> seen;
    for (const auto& s : host->samples) seen.emplace_back(s.record.time_ns, s.record.ip, s.record.pcpu);
    return std::make_pair(seen, host->sched.size());
  };
  const auto [without, none] = run(false);
  const auto [with, some] = run(true);
  CHECK(none == 0);
  CHECK(some > 0);
  CHECK(without == with);
}
