// The dom0 agent, the session store and `hvprof`, as separate processes on a simulated host:
// counts against ground truth, exact loss accounting, a crashed agent, wrong orders of use and
// bad options.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>
#include <tuple>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/agent/ring_set.h"
#include "hvprof/report/load.h"
#include "hvprof/store/samples_file.h"
#include "host_harness.h"
#include "sim_harness.h"

using namespace hvprof;
using hvprof::testing::Host;
using hvprof::testing::TestScenario;

namespace {

// Activates `domain` the way a guest agent would, and keeps its rings mapped.
struct TestGuest {
  TestGuest(const Host& host, uint16_t domain) : link(host.Connect(domain)) {
    hvpmu::legacy::Init init{};
    REQUIRE(agent::RunOp(*link, hvpmu::legacy::kOpInit, &init).value() == hvpmu::ErrorCode::kOk);
    hvpmu::BufferV2 buffer{};
    buffer.struct_size = sizeof buffer;
    buffer.abi_version = hvpmu::kAbiVersion;
    buffer.capacity = 65536;
    REQUIRE(agent::RunOp(*link, hvpmu::kOpGetBufferV2, &buffer).value() == hvpmu::ErrorCode::kOk);
    REQUIRE(rings.AddV2(*link, domain, buffer, false).has_value());
    REQUIRE(agent::RunOp(*link, hvpmu::legacy::kOpEnableVirq).value() == hvpmu::ErrorCode::kOk);
  }
  std::map<uint8_t, uint64_t> Drain() {
    std::map<uint8_t, uint64_t> per_mode;
    rings.DrainAll([&](const hvpmu::ring::SampleRecord& record,
                       std::span<const uint64_t>) { ++per_mode[record.mode]; });
    return per_mode;
  }
  std::unique_ptr<agent::HypervisorLink> link;
  agent::RingSet rings;
};

using Key = std::tuple<uint16_t, std::string, std::string>;  // domain, mode, image path

const char* ModeName(uint8_t mode) {
  static constexpr const char* kNames[] = {"user", "kernel", "hypervisor"};
  return kNames[mode];
}

uint32_t FirstCounter(const std::string& session) {
  auto opened = store::OpenSession(session);
  REQUIRE(opened.has_value());
  REQUIRE(!opened.value().metadata.events.empty());
  return opened.value().metadata.events[0].counter;
}

}  // namespace

TEST_CASE("dom0's session equals the ground truth for everything routed to dom0", "[agent][e2e]") {
  Host host(TestScenario("intel-arch-v4", 21));
  // Domain 1 is active (its agent is played here), guest2 passive, guest3 not profiled.
  auto setup = host.Hvprof({"--start-daemon", "--active-domains=1", "--passive-domains=guest2",
                            "--event=CPU_CLK_UNHALTED:20000"});
  INFO(setup.out << setup.err);
  REQUIRE(setup.status == 0);
  TestGuest guest(host, 1);
  auto started = host.Hvprof({"--start"});
  INFO(started.err);
  REQUIRE(started.status == 0);
  (void)host.GroundTruth(true);  // count from the start of profiling
  REQUIRE(host.Hvprof({"--run-sim=400ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  const auto guest_samples = guest.Drain();

  const context::GroundTruth truth = host.GroundTruth(false);
  const uint32_t counter = FirstCounter(host.current());
  std::map<Key, uint64_t> expected;
  std::map<std::pair<uint16_t, std::string>, uint64_t> expected_by_mode;
  for (const context::TruthRow& row : truth.rows) {
    const uint64_t overflows = row.overflows.at(counter);
    if (overflows == 0) continue;
    const uint16_t domain = row.domain;
    const std::string mode(sample_mode::Name(row.mode));
    expected[{domain, mode, row.image}] += overflows;
    expected_by_mode[{domain, mode}] += overflows;
  }

  auto profile = report::LoadProfile(host.current(), {});
  REQUIRE(profile.has_value());
  CHECK(profile.value().problems().empty());
  std::map<Key, uint64_t> seen;
  std::map<std::pair<uint16_t, std::string>, uint64_t> seen_by_mode;
  for (const report::Entry& entry : profile.value().entries()) {
    const report::Image& image = profile.value().images()[entry.image];
    seen[{entry.domain, ModeName(entry.mode), image.path}] += entry.count;
    seen_by_mode[{entry.domain, ModeName(entry.mode)}] += entry.count;
    if (entry.domain == 2) {
      INFO(image.name);
      CHECK(image.name.rfind("domain2-", 0) == 0);  // passive: domain2-kernel, -apps, -xen
    }
  }
  // dom0, the idle loop: exact per domain, mode and image.
  for (const auto& [key, count] : expected) {
    const uint16_t domain = std::get<0>(key);
    if (domain != 0 && domain != 0x7FFF) continue;
    INFO("domain " << domain << " " << std::get<1>(key) << " " << std::get<2>(key));
    CHECK(seen[key] == count);
  }
  // The passive domain: exact per mode.
  for (const char* mode : {"user", "kernel", "hypervisor"}) {
    INFO("passive domain 2, " << mode);
    CHECK(expected_by_mode[{2, mode}] > 0);
    CHECK(seen_by_mode[{2, mode}] == expected_by_mode[{2, mode}]);
  }
  // The active guest's samples went to its own rings, none to dom0; the unprofiled domain's
  // samples went nowhere.
  for (uint8_t mode = 0; mode < 3; ++mode) {
    CHECK(seen_by_mode[{1, ModeName(mode)}] == 0);
    CHECK(seen_by_mode[{3, ModeName(mode)}] == 0);
    auto it = guest_samples.find(mode);
    CHECK((it == guest_samples.end() ? 0 : it->second) == expected_by_mode[{1, ModeName(mode)}]);
  }
  CHECK(expected_by_mode[{3, "user"}] > 0);
  auto opened = store::OpenSession(host.current());
  REQUIRE(opened.has_value());
  uint64_t unprofiled = 0;
  for (const char* mode : {"user", "kernel", "hypervisor"}) unprofiled += expected_by_mode[{3, mode}];
  CHECK(opened.value().metadata.losses.unprofiled_domain == unprofiled);
  CHECK(opened.value().metadata.losses.ring_full == 0);
}

TEST_CASE("a host without a PMU is sampled by the engine's timer, by default, and the report is its time",
          "[agent][e2e][timer]") {
  // The simulated CPU offers no counters (as QEMU's software CPU, or a VM without a vPMU):
  // hvprof-hv's engine samples with its timer, as Xen with hvprof's engine does.
  Host host(TestScenario("none", 23));
  auto events = host.Hvprof({"--list-events"});
  INFO(events.out << events.err);
  REQUIRE(events.status == 0);
  CHECK(events.out.find("TIMER") != std::string::npos);
  CHECK(events.out.find("CPU_CLK_UNHALTED") == std::string::npos);
  // No --event: the timer's own default, TIMER every 1 ms.
  auto setup = host.Hvprof({"--start-daemon", "--passive-domains=2"});
  INFO(setup.out << setup.err);
  REQUIRE(setup.status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);
  REQUIRE(host.Hvprof({"--run-sim=500ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);

  auto opened = store::OpenSession(host.current());
  REQUIRE(opened.has_value());
  const auto& metadata = opened.value().metadata;
  REQUIRE(metadata.events.size() == 1);
  CHECK(metadata.events[0].name == "TIMER");
  CHECK(metadata.events[0].count == 1'000'000);
  CHECK(metadata.events[0].sampled_by == "the engine's timer interrupt");
  CHECK(metadata.losses.ring_full == 0);
  // --list-events named the default the run took.
  CHECK(events.out.find(fmt::format("(default: {}:{})", metadata.events[0].name, metadata.events[0].count)) !=
        std::string::npos);

  // Every tick of dom0, the idle loop and the passive guest, where it came due.
  const context::GroundTruth truth = host.GroundTruth(false);
  CHECK(truth.timer);
  std::map<Key, uint64_t> expected;
  uint64_t ticks = 0;
  uint64_t time_ns = 0;
  for (const context::TruthRow& row : truth.rows) {
    const uint16_t domain = row.domain;
    time_ns += row.events.at(0);
    if (domain != 0 && domain != 2 && domain != kIdleDomain) continue;
    const uint64_t count = row.overflows.at(0);
    ticks += count;
    const std::string image = domain == 2 ? std::string() : row.image;
    if (count != 0) expected[{domain, std::string(sample_mode::Name(row.mode)), image}] += count;
  }
  // 4 CPUs, 500 ms, 1 ms: every CPU ticked 500 times, whoever ran.
  CHECK(time_ns <= 4 * 500'000'000ULL);
  CHECK(time_ns + truth.rows.size() >= 4 * 500'000'000ULL);  // a ns of rounding per row
  CHECK(ticks > 0);
  auto profile = report::LoadProfile(host.current(), {});
  REQUIRE(profile.has_value());
  CHECK(profile.value().problems().empty());
  std::map<Key, uint64_t> seen;
  for (const report::Entry& entry : profile.value().entries()) {
    const std::string path = entry.domain == 2 ? std::string() : profile.value().images()[entry.image].path;
    seen[{entry.domain, ModeName(entry.mode), path}] += entry.count;
  }
  CHECK(seen == expected);

  // The report says what sampled, and its bias.
  auto report = host.Report({"-l"});
  INFO(report.out << report.err);
  REQUIRE(report.status == 0);
  CHECK(report.out.find("Sampled by the engine's timer interrupt, not a hardware counter: TIMER:1000000") !=
        std::string::npos);
  CHECK(report.out.find("interrupts") != std::string::npos);
}

TEST_CASE("hvprof-hv --sample-source: pmu is refused on a CPU without one, and the option is the sim's",
          "[hv][timer]") {
  testing::TempDir dir;
  const std::string no_pmu = std::string(HVPROF_SOURCE_DIR) + "/examples/no-pmu.json";
  auto refused = testing::RunProgram({testing::Binary("hvprof-hv"), "--platform=sim", "--scenario=" + no_pmu,
                                      "--sample-source=pmu", "--run-dir=" + dir.File("run")});
  INFO(refused.err);
  CHECK(refused.status != 0);
  CHECK(refused.err.find("--sample-source=pmu") != std::string::npos);
  CHECK(refused.err.find("use --sample-source=auto or timer") != std::string::npos);
  auto linux = testing::RunProgram({testing::Binary("hvprof-hv"), "--platform=linux", "--sample-source=timer",
                                    "--run-dir=" + dir.File("run")});
  INFO(linux.err);
  CHECK(linux.status != 0);
  CHECK(linux.err.find("--sample-source is for --platform=sim") != std::string::npos);
  auto unknown = testing::RunProgram({testing::Binary("hvprof-hv"), "--sample-source=hpet", "--run-dir=" + dir.File("run")});
  CHECK(unknown.status != 0);
  CHECK(unknown.err.find("--sample-source must be auto, pmu or timer") != std::string::npos);
}

TEST_CASE("with tiny rings and a stalled agent, produced = stored + lost, per ring", "[agent][loss]") {
  Host host(TestScenario("intel-arch-v4", 22));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=2,3", "--buffer-size=64",
                       "--event=CPU_CLK_UNHALTED:6000"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);
  const pid_t agent = host.AgentPid();
  REQUIRE(agent > 0);
  // The agent is stopped while the machine runs: its rings overflow.
  REQUIRE(::kill(agent, SIGSTOP) == 0);
  REQUIRE(host.Connect(0)->SimRunFor(20'000'000).has_value());
  REQUIRE(::kill(agent, SIGCONT) == 0);
  auto stopped = host.Hvprof({"--stop"});
  INFO(stopped.err);
  REQUIRE(stopped.status == 0);

  const context::GroundTruth truth = host.GroundTruth(false);
  const uint32_t counter = FirstCounter(host.current());
  std::map<std::pair<uint16_t, uint16_t>, uint64_t> produced;  // (domain, vCPU or CPU)
  for (const context::TruthRow& row : truth.rows) produced[{row.domain, row.vcpu}] += row.overflows.at(counter);
  std::map<std::pair<uint16_t, uint16_t>, uint64_t> stored;
  auto read = store::ReadSamplesFile(host.current() + "/samples.hvs", [&](const store::StoredSample& s) {
    ++stored[{s.domain, s.domain == 0x7FFF ? s.pcpu : s.vcpu}];
  });
  REQUIRE(read.has_value());
  CHECK(read.value().problems.empty());

  auto session = store::OpenSession(host.current());
  REQUIRE(session.has_value());
  uint64_t total_lost = 0;
  uint32_t dom0_vcpu_rings = 0;
  for (const store::RingRecord& ring : session.value().metadata.rings) {
    dom0_vcpu_rings += ring.owner == 0 && ring.kind == "vcpu";
  }
  for (const store::RingRecord& ring : session.value().metadata.rings) {
    const bool pcpu = ring.kind == "pcpu";  // dom0's rings for the idle loop, one per CPU
    const std::pair<uint16_t, uint16_t> key{
        pcpu ? uint16_t{0x7FFF} : ring.owner,
        static_cast<uint16_t>(pcpu ? ring.index - dom0_vcpu_rings : ring.index)};
    INFO("ring " << ring.index << " of domain " << ring.owner << " (" << ring.kind << ")");
    const uint64_t lost = ring.lost[0] + ring.lost[1];
    total_lost += lost;
    CHECK(ring.drained == ring.written);
    CHECK(stored[key] == ring.drained);
    CHECK(produced[key] == stored[key] + lost);
  }
  CHECK(total_lost > 0);
  CHECK(session.value().metadata.losses.ring_full == total_lost);
}

TEST_CASE("a killed agent loses at most its unflushed tail, a new one recovers", "[agent][crash]") {
  Host host(TestScenario("intel-arch-v4", 23));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=2"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=300ms"}).status == 0);
  REQUIRE(host.Hvprof({"--dump"}).status == 0);
  auto dumped = store::OpenSession(host.current());
  REQUIRE(dumped.has_value());
  const uint64_t durable = dumped.value().metadata.samples_stored;
  REQUIRE(durable > 0);
  REQUIRE(host.Hvprof({"--run-sim=200ms"}).status == 0);
  // The agent's periodic flush writes samples beyond the last dump: wait until the file holds
  // some (on a busy machine the flush may come late), then kill it.
  auto readable_samples = [&] {
    uint64_t count = 0;
    auto read = store::ReadSamplesFile(host.current() + "/samples.hvs", [&](const store::StoredSample&) { ++count; });
    REQUIRE(read.has_value());
    return count;
  };
  const auto flush_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (readable_samples() <= durable && std::chrono::steady_clock::now() < flush_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const pid_t agent = host.AgentPid();
  REQUIRE(::kill(agent, SIGKILL) == 0);
  const auto death_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::kill(agent, 0) == 0 && std::chrono::steady_clock::now() < death_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // What was written reads back, beyond the last dump.
  const uint64_t readable = readable_samples();
  CHECK(readable > durable);
  auto status = host.Hvprof({"--status"});
  CHECK(status.out.find("not running") != std::string::npos);
  CHECK(status.out.find("died without shutting down") != std::string::npos);
  CHECK(status.out.find(fmt::format("samples: {} in samples.hvs (session.json says {})", readable, durable)) !=
        std::string::npos);
  CHECK(status.out.find("incomplete: hvprofd stopped while profiling") != std::string::npos);
  // The report says the session ends early, with its exit code for "incomplete".
  auto report = host.Report({});
  INFO(report.out << report.err);
  CHECK(report.status == 3);
  CHECK(report.out.find("no hvprofd is writing it") != std::string::npos);

  // A new agent takes the hypervisor back from the state the dead one left (profiling).
  auto again = host.Hvprof({"--start-daemon", "--passive-domains=2"});
  INFO(again.out << again.err);
  REQUIRE(again.status == 0);
  CHECK(again.out.find("continues that session") != std::string::npos);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=100ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  auto session = store::OpenSession(host.current());
  REQUIRE(session.has_value());
  bool recovered = false;
  for (const std::string& note : session.value().metadata.notes) recovered |= note.find("recovered") != std::string::npos;
  CHECK(recovered);
  uint64_t after = 0;
  auto reread = store::ReadSamplesFile(host.current() + "/samples.hvs", [&](const store::StoredSample&) { ++after; });
  REQUIRE(reread.has_value());
  CHECK(after > readable);
  // The continued session counts both agents' samples, and says where the first one ended.
  const store::SessionMetadata& m = session.value().metadata;
  CHECK(m.samples_stored == after);
  uint64_t by_mode = 0;
  for (const auto& [key, count] : m.samples_by_domain_mode) by_mode += count;
  CHECK(by_mode == after);
  REQUIRE(m.incomplete.size() == 1);
  CHECK(m.incomplete[0].find("an earlier hvprofd stopped while profiling") != std::string::npos);
  REQUIRE(m.profiling.size() == 2);
  CHECK(m.profiling[0].stop_ns >= m.profiling[0].start_ns);
  CHECK(m.profiling[0].stop_ns <= m.profiling[1].start_ns);
}

TEST_CASE("every wrong order of use has its own message", "[agent][usage]") {
  Host host(TestScenario("intel-arch-v4", 24));
  auto early = host.Hvprof({"--start"});
  CHECK(early.status == 1);
  CHECK(early.err.find("--start before --start-daemon") != std::string::npos);
  CHECK(early.err.find("hvprof --start-daemon") != std::string::npos);

  REQUIRE(host.Hvprof({"--start-daemon", "--active-domains=1,guest3"}).status == 0);
  auto not_ready = host.Hvprof({"--start"});
  CHECK(not_ready.status == 1);
  CHECK(not_ready.err.find("dom1 (guest1)") != std::string::npos);
  CHECK(not_ready.err.find("dom3 (guest3)") != std::string::npos);
  CHECK(not_ready.err.find("have not joined profiling") != std::string::npos);
  CHECK(not_ready.err.find("hvprof --domain=1 --start-daemon && hvprof --domain=1 --start") != std::string::npos);
  CHECK(not_ready.err.find("hvprof --domain=3 --start-daemon") != std::string::npos);

  // The same --start-daemon again is in effect already; other settings need a new daemon.
  auto twice = host.Hvprof({"--start-daemon", "--active-domains=1,guest3"});
  CHECK(twice.status == 0);
  CHECK(twice.out.find("already running") != std::string::npos);
  CHECK(twice.out.find("nothing to do") != std::string::npos);
  auto other = host.Hvprof({"--start-daemon"});
  CHECK(other.status == 1);
  CHECK(other.err.find("with other settings") != std::string::npos);
  CHECK(other.err.find("hvprof --shutdown") != std::string::npos);

  auto stop_idle = host.Hvprof({"--stop"});
  CHECK(stop_idle.status == 0);
  CHECK(stop_idle.out.find("not on") != std::string::npos);
  // dom0's own report holds what a guest would publish: dom0's agent has no such action.
  auto publish_dom0 = host.Hvprof({"--publish"});
  CHECK(publish_dom0.status == 1);
  CHECK(publish_dom0.err.find("--publish is for active guests") != std::string::npos);

  auto first = host.Hvprof({"--shutdown"});
  CHECK(first.status == 0);
  CHECK(first.out.find("shut down") != std::string::npos);
  auto second = host.Hvprof({"--shutdown"});
  CHECK(second.status == 0);
  CHECK(second.out.find("nothing to shut down") != std::string::npos);
  // Nothing to dump without a daemon: a failure that says what to do, not "complete".
  auto dump = host.Hvprof({"--dump"});
  CHECK(dump.status == 1);
  CHECK(dump.err.find("nothing to dump") != std::string::npos);
  CHECK(dump.err.find("hvprof --start-daemon") != std::string::npos);
  auto stop_none = host.Hvprof({"--stop"});
  CHECK(stop_none.status == 0);
  CHECK(stop_none.out.find("hvprofd is not running") != std::string::npos);
  CHECK(stop_none.out.find("nothing to stop") != std::string::npos);
  auto publish_none = host.Hvprof({"--publish"});
  CHECK(publish_none.status == 1);
  CHECK(publish_none.err.find("hvprofd is not running") != std::string::npos);
  CHECK(publish_none.err.find("then publish") != std::string::npos);
  // Without a daemon, --reset empties the session directory itself.
  auto reset_none = host.Hvprof({"--reset"});
  CHECK(reset_none.status == 0);
  CHECK(reset_none.out.find("removed") != std::string::npos);
  CHECK(!std::filesystem::exists(host.current()));
  // Other events on a current session that recorded nothing: it starts again with them.
  REQUIRE(host.Hvprof({"--start-daemon", "--event=CPU_CLK_UNHALTED:50000"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  auto changed = host.Hvprof({"--start-daemon", "--event=LLC_MISSES:7000"});
  INFO(changed.err);
  CHECK(changed.status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  // The hypervisor's profiler is free again.
  CHECK(host.Hvprof({"--start-daemon"}).status == 0);
}

TEST_CASE("every bad option has its own message, and leaves nothing running", "[agent][bad-input]") {
  Host host(TestScenario("intel-arch-v4", 25));
  testing::TempDir dir;
  const std::string gzipped = dir.File("vmlinuz");
  REQUIRE(testing::RunProgram({"/bin/sh", "-c", "gzip -c /usr/lib/debug/boot/xen-syms-4.17-amd64.map > " + gzipped}).status == 0);
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {{"--event=NO_SUCH_EVENT:100000"}, {"unknown event 'NO_SUCH_EVENT'", "i386/arch_perfmon", "--list-events"}},
      {{"--event=CPU_CLK_UNHALTED:10"}, {"below", "minimum of 6000"}},
      {{"--event=CPU_CLK_UNHALTED"}, {"NAME:COUNT"}},
      {{"--event=LLC_MISSES:6000:nosuchmask"}, {"not a unit mask of LLC_MISSES", "demand"}},
      {{"--event=LLC_REFS:6000", "--event=LLC_REFS:7000", "--event=LLC_MISSES:6000", "--event=BR_INST_RETIRED:6000",
        "--event=BR_MISS_PRED_RETIRED:6000"},
       {"no counter left"}},
      {{"--xen=/nonexistent/xen-syms"}, {"hypervisor image /nonexistent/xen-syms"}},
      {{"--xen=" + gzipped}, {"hypervisor image", "uncompressed"}},
      {{"--vmlinux=/etc/hostname"}, {"kernel image /etc/hostname"}},
      {{"--active-domains=nosuch"}, {"no domain 'nosuch'", "dom0", "dom1 (guest1)"}},
      {{"--active-domains=1", "--passive-domains=1"}, {"both --active-domains and --passive-domains"}},
      {{"--passive-domains=guest2,guest3", "--passive-images=/usr/lib/debug/boot/xen-syms-4.17-amd64.map"},
       {"--passive-images has 1 images for 2 passive domains"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--start-daemon"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto result = host.Hvprof(args);
    INFO(fmt::format("{}\n-> {}", fmt::join(c.args, " "), result.err));
    CHECK(result.status != 0);
    for (const std::string& part : c.expected) CHECK(result.err.find(part) != std::string::npos);
    CHECK(host.Hvprof({"--status"}).out.find("not running") != std::string::npos);
  }
  // The hypervisor was left idle every time: a good setup still works.
  auto good = host.Hvprof({"--start-daemon", "--passive-domains=guest2"});
  INFO(good.err);
  CHECK(good.status == 0);
}

TEST_CASE("one dom0 agent per host, whatever the session directory", "[agent][safety]") {
  Host host(TestScenario("intel-arch-v4", 25));
  REQUIRE(host.Hvprof({"--start-daemon"}).status == 0);
  const pid_t first = host.AgentPid();
  testing::TempDir other;
  // The same hvprof-hv, another session directory: refused, naming the one that runs.
  const auto second = testing::RunProgram({testing::Binary("hvprof"), "--run-dir=" + host.run_dir(),
                                           "--session-dir=" + other.path(), "--start-daemon"});
  INFO(second.err);
  CHECK(second.status != 0);
  CHECK(second.err.find("another hvprofd (pid " + std::to_string(first) + ", session directory " +
                        host.session_root() + ")") != std::string::npos);
  CHECK(second.err.find("hvprof --shutdown --session-dir=" + host.session_root()) != std::string::npos);
  // The first one still runs and profiles.
  CHECK(::kill(first, 0) == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=50ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  // Once it ended, another may take the host.
  const auto after = testing::RunProgram({testing::Binary("hvprof"), "--run-dir=" + host.run_dir(),
                                          "--session-dir=" + other.path(), "--start-daemon"});
  CHECK(after.status == 0);
  testing::RunProgram({testing::Binary("hvprof"), "--run-dir=" + host.run_dir(), "--session-dir=" + other.path(),
                       "--shutdown"});
}

TEST_CASE("numeric options are refused with their range, never rounded, and leave nothing behind", "[agent][safety]") {
  testing::TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--buffer-size=1000", "power of two from 64 to 1048576 (0 for the default); the nearest is 1024"},
      {"--buffer-size=-5", "--buffer-size=-5: samples per ring must be a power of two from 64 to 1048576"},
      {"--buffer-size=99999999999", "the nearest is 1048576"},
      {"--callgraph=65", "--callgraph=65: call chains can be 0 to 64 frames deep"},
      {"--poll-interval=-1", "--poll-interval=-1: drains are 1 to 60000 ms apart"},
  };
  for (const auto& [option, message] : cases) {
    const auto result = testing::RunProgram({testing::Binary("hvprof"), "--run-dir=" + dir.File("run"),
                                             "--session-dir=" + dir.File("sessions"), "--start-daemon", option});
    INFO(option << " -> " << result.err);
    CHECK(result.status == 2);
    CHECK(result.err.find(message) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.File("sessions")));
  }
}
