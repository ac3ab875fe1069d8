// The real programs on "Xen": hvprof, hvprofd and hvprof-report as a user runs them with
// --platform=xen, with the fake Xen libraries preloaded into them (tests/xen-fake), so that
// xenoprof is hvprof-hv's engine in legacy mode. dom0, an active PV guest and a passive HVM
// guest are checked against the simulator's ground truth; so is recovery after a killed agent.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/control/commands.h"
#include "hvprof/store/samples_file.h"
#include "host_harness.h"
#include "profile_counts.h"
#include "sim_harness.h"
#include "stacks_support.h"

using namespace hvprof;
using hvprof::testing::DomainMode;
using hvprof::testing::Host;
using hvprof::testing::Load;
using hvprof::testing::ProfileByMode;
using hvprof::testing::TempDir;
using hvprof::testing::TestScenario;
using hvprof::testing::TruthByMode;

namespace {

constexpr const char* kEvent = "--event=CPU_CLK_UNHALTED:100000";

// What the programs of domain `domain` run with: the fake preloaded, talking to this host's
// hvprof-hv as that domain, and a /sys and /proc that say Xen (dom0's with control_d).
// `engine`: Xen built with hvprof's engine (xen-engine/) rather than 4.17's xenoprof.
std::vector<std::string> XenEnvironment(const Host& host, const TempDir& dir, uint16_t domain, bool engine = false) {
  const std::string root = dir.File("xen-root-" + std::to_string(domain));
  std::filesystem::create_directories(root + "/sys/hypervisor/version");
  std::filesystem::create_directories(root + "/proc/xen");
  std::ofstream(root + "/sys/hypervisor/type") << "xen\n";
  std::ofstream(root + "/sys/hypervisor/version/major") << "4\n";
  std::ofstream(root + "/sys/hypervisor/version/minor") << "17\n";
  std::ofstream(root + "/proc/xen/capabilities") << (domain == 0 ? "control_d\n" : "");
  const char* asan = std::getenv("ASAN_OPTIONS");
  std::vector<std::string> environment{
      std::string("LD_PRELOAD=") + HVPROF_FAKE_XEN_LIBRARY,
      "HVPROF_FAKE_XEN_RUN_DIR=" + host.run_dir(),
      "HVPROF_FAKE_XEN_DOMAIN=" + std::to_string(domain),
      "HVPROF_XEN_ROOT=" + root,
      // The fake is preloaded ahead of the sanitizer runtime the programs link.
      std::string("ASAN_OPTIONS=") + (asan != nullptr ? std::string(asan) + ":" : "") + "verify_asan_link_order=0"};
  if (engine) environment.push_back("HVPROF_FAKE_XEN_ENGINE=1");
  return environment;
}

// Runs the simulated machine for `ms` milliseconds in small steps, giving the agents, which
// poll Xen's rings on a timer, time to drain between them.
void RunMachine(const Host& host, int ms) {
  auto clock = host.Connect(0);
  for (int step = 0; step < ms; ++step) {
    REQUIRE(clock->SimRunFor(1'000'000).has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(4));
  }
}

void Require(const testing::CommandResult& result) {
  INFO(result.out << result.err);
  REQUIRE(result.status == 0);
}

// Every sample of `domains` in `session` is there, as the ground truth counted it, and no
// sample of any other domain.
void CheckDomains(const std::string& session, const context::GroundTruth& truth, const std::set<uint16_t>& domains,
                  const std::string& ring_format = "xenoprof") {
  const report::Profile profile = Load(session);
  const auto expected = TruthByMode(truth, profile.metadata().events.at(0).counter);
  const auto seen = ProfileByMode(profile);
  uint64_t compared = 0;
  for (const auto& [key, count] : expected) {
    if (domains.count(key.first) == 0) continue;
    INFO("domain " << key.first << ", " << key.second << " mode");
    CHECK(seen.count(key) == 1);
    if (seen.count(key) != 0) CHECK(seen.at(key) == count);
    compared += count;
  }
  CHECK(compared > 1000);
  for (const auto& [key, count] : seen) {
    INFO("domain " << key.first << " in " << session);
    CHECK(domains.count(key.first) == 1);
  }
  CHECK(profile.metadata().ring_format == ring_format);
  CHECK(profile.metadata().losses.ring_full == 0);
}

}  // namespace

// A guest kernel with the XSA-482 fix, its privcmd loaded without unrestricted=1, passes no
// hypercall: the guest agent says so when it starts, instead of blaming Xen at --start (seen on
// Debian 12's kernel in tests/qemu's qemu_xen_guest).
TEST_CASE("xen: a guest whose kernel restricts privcmd is told how to lift it", "[xen]") {
  Host host(TestScenario("intel-arch-v4", 52));
  TempDir dir;
  auto guest = XenEnvironment(host, dir, 1);
  guest.push_back("HVPROF_FAKE_XEN_PRIVCMD=restricted");
  const auto refused = host.GuestHvprof(1, {"--platform=xen", "--start-daemon", kEvent}, guest);
  CHECK(refused.status != 0);
  INFO(refused.err);
  CHECK(refused.err.find("lets no hypercall through /dev/xen/privcmd") != std::string::npos);
  CHECK(refused.err.find("xen_privcmd.unrestricted=1") != std::string::npos);
  CHECK(refused.err.find("--passive-domains") != std::string::npos);
  // Nothing was left running: the same guest starts once its privcmd lets hypercalls through.
  guest.pop_back();
  Require(host.GuestHvprof(1, {"--platform=xen", "--start-daemon", kEvent}, guest));
  Require(host.GuestHvprof(1, {"--shutdown"}, guest));
}

TEST_CASE("xen: dom0, an active PV guest and a passive HVM guest match the ground truth", "[xen][e2e]") {
  Host host(TestScenario("intel-arch-v4", 51));
  TempDir dir;
  const auto dom0 = XenEnvironment(host, dir, 0);
  const auto guest = XenEnvironment(host, dir, 1);

  // A guest that joins before dom0 set anything up is told what to run in dom0.
  Require(host.GuestHvprof(1, {"--platform=xen", "--start-daemon", kEvent}, guest));
  const auto early = host.GuestHvprof(1, {"--start"}, guest);
  CHECK(early.status != 0);
  CHECK(early.err.find("--active-domains=1") != std::string::npos);

  Require(host.Hvprof({"--platform=xen", "--start-daemon", "--active-domains=guest1", "--passive-domains=guest2",
                       "--no-vmlinux", kEvent},
                      dom0));
  // Xen refuses start until every active domain has joined, and cannot say which has not.
  const auto refused = host.Hvprof({"--start"}, dom0);
  CHECK(refused.status != 0);
  CHECK(refused.err.find("every active domain has joined (dom1 (guest1))") != std::string::npos);

  Require(host.GuestHvprof(1, {"--start"}, guest));
  Require(host.Hvprof({"--start"}, dom0));
  (void)host.GroundTruth(true);
  RunMachine(host, 150);
  const auto status = host.Hvprof({"--status"}, dom0);
  Require(status);
  CHECK(status.out.find("records to full rings") != std::string::npos);
  CHECK(status.out.find("Xen reports no state or losses of its own") != std::string::npos);
  // Xen refuses a guest's disable_virq while dom0 profiles: the agent stays, and says why.
  const auto too_soon = host.GuestHvprof(1, {"--shutdown"}, guest);
  CHECK(too_soon.status != 0);
  CHECK(too_soon.err.find("dom0 is still profiling") != std::string::npos);
  Require(host.Hvprof({"--stop"}, dom0));
  const context::GroundTruth truth = host.GroundTruth(false);
  Require(host.GuestHvprof(1, {"--stop"}, guest));
  CheckDomains(host.current(), truth, {0, 2});
  CheckDomains(host.guest_current(1), truth, {1});

  // The whole host: the guest's profile reaches dom0 as a file the admin copies.
  const auto missing = host.Report({"--all-domains"});
  INFO(missing.out << missing.err);
  CHECK(missing.status != 0);
  CHECK(missing.out.find("copy the file it names to") != std::string::npos);
  CHECK(missing.out.find("published/domain-1.json") != std::string::npos);
  const auto published = host.GuestHvprof(1, {"--publish"}, guest);
  Require(published);
  const std::string file = host.guest_current(1) + "/published-domain-1.json";
  CHECK(published.out.find(file) != std::string::npos);
  std::filesystem::create_directories(host.current() + "/published");
  std::filesystem::copy_file(file, host.current() + "/published/domain-1.json");
  const report::Profile whole = Load(host.current(), true);
  CHECK(whole.problems().empty());
  const auto counter = whole.metadata().events.at(0).counter;
  const auto expected = TruthByMode(truth, counter);
  const auto seen = ProfileByMode(whole);
  for (uint16_t domain : {0, 1, 2}) {
    for (const char* mode : {"user", "kernel", "hypervisor"}) {
      INFO("domain " << domain << ", " << mode << " mode, whole host");
      CHECK(seen.count({domain, mode}) == 1);
      if (seen.count({domain, mode}) != 0) CHECK(seen.at({domain, mode}) == expected.at({domain, mode}));
    }
  }
  Require(host.Report({"--all-domains"}));
  Require(host.GuestHvprof(1, {"--shutdown"}, guest));
  Require(host.Hvprof({"--shutdown"}, dom0));
}

// Xen built with hvprof's engine (xen-engine/; issue 39) answers the v2 ops: the same commands
// then get v2 rings, with each sample's CPU and time and hypervisor call chains, and the engine's
// own status and losses; scheduling still comes from Xen's trace buffers.
TEST_CASE("xen with hvprof's engine: the same commands get v2 rings, call chains and the engine's status, and "
          "every domain matches the ground truth",
          "[xen][engine][e2e]") {
  nlohmann::json scenario = TestScenario("intel-arch-v4", 53);
  Host host(scenario);
  TempDir dir;
  const auto dom0 = XenEnvironment(host, dir, 0, /*engine=*/true);
  const auto guest = XenEnvironment(host, dir, 1, /*engine=*/true);

  Require(host.GuestHvprof(1, {"--platform=xen", "--start-daemon", kEvent}, guest));
  Require(host.Hvprof({"--platform=xen", "--start-daemon", "--active-domains=guest1", "--passive-domains=guest2",
                       "--no-vmlinux", "--callgraph=8", "--sched", kEvent},
                      dom0));
  Require(host.GuestHvprof(1, {"--start"}, guest));
  Require(host.Hvprof({"--start"}, dom0));
  (void)host.GroundTruth(true);
  RunMachine(host, 150);
  const auto status = host.Hvprof({"--status"}, dom0);
  Require(status);
  INFO(status.out);
  CHECK(status.out.find("with hvprof's engine") != std::string::npos);
  // The engine reports its own state and losses, which Xen 4.17's xenoprof cannot.
  CHECK(status.out.find("Xen reports no state or losses of its own") == std::string::npos);
  CHECK(status.out.find("scheduling records from xentrace") != std::string::npos);
  Require(host.Hvprof({"--stop"}, dom0));
  const context::GroundTruth truth = host.GroundTruth(false);
  Require(host.GuestHvprof(1, {"--stop"}, guest));
  // dom0, the primary, also gets the idle domain's samples in its pCPU rings (xenoprof drops them).
  CheckDomains(host.current(), truth, {0, 2, hvpmu::kDomainIdle}, "v2");
  CheckDomains(host.guest_current(1), truth, {1}, "v2");

  const report::Profile profile = Load(host.current());
  CHECK(profile.metadata().backtrace_depth == 8);
  CHECK(profile.metadata().machine.find("with hvprof's engine") != std::string::npos);
  const nlohmann::json metadata = nlohmann::json::parse(std::ifstream(host.current() + "/session.json"));
  REQUIRE(metadata.contains("sched"));
  CHECK(metadata["sched"]["source"] == "xentrace");
  CHECK(metadata["sched"]["records"].get<uint64_t>() > 0);
  // v2 samples carry the CPU they were taken on and the platform's time of taking (xenoprof's
  // carry neither: the legacy tests see every CPU unknown).
  uint64_t samples = 0, unknown_cpu = 0, untimed = 0;
  auto read = store::ReadSamplesFile(host.current() + "/samples.hvs", [&](const store::StoredSample& sample) {
    ++samples;
    unknown_cpu += sample.pcpu == hvpmu::ring::kUnknownPcpu ? 1 : 0;
    untimed += sample.time_ns == 0 ? 1 : 0;
  });
  REQUIRE(read.has_value());
  CHECK(read.value().problems.empty());
  CHECK(samples > 1000);
  CHECK(unknown_cpu == 0);
  CHECK(untimed == 0);
  CHECK(profile.metadata().last_sample_ns > profile.metadata().first_sample_ns);
  Require(host.GuestHvprof(1, {"--shutdown"}, guest));
  Require(host.Hvprof({"--shutdown"}, dom0));
}

TEST_CASE("xen: a killed dom0 agent leaves xenoprof state that the next one recovers", "[xen][recovery]") {
  nlohmann::json scenario = TestScenario("intel-arch-v4", 52);
  // Xen's hypercall handlers get a caller, so that call chains have something to walk.
  for (nlohmann::json& domain : scenario["domains"]) {
    domain["workload"]["hypervisor"]["functions"][0]["stack"] = {"pv_hypercall"};
  }
  Host host(scenario);
  TempDir dir;
  const auto dom0 = XenEnvironment(host, dir, 0);
  // With call chains: Xen's escape records and frames go through the same path.
  const std::vector<std::string> setup = {"--platform=xen", "--start-daemon", "--passive-domains=guest2",
                                          "--no-vmlinux", "--callgraph=4", kEvent};
  Require(host.Hvprof(setup, dom0));
  Require(host.Hvprof({"--start"}, dom0));
  RunMachine(host, 20);
  const pid_t agent = host.AgentPid();
  REQUIRE(agent > 0);
  REQUIRE(::kill(agent, SIGKILL) == 0);
  for (int i = 0; i < 200 && ::kill(agent, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  // Xen still profiles, with dom0's old buffer shared: the next agent unwinds that first.
  Require(host.Hvprof(setup, dom0));
  Require(host.Hvprof({"--reset"}, dom0));
  Require(host.Hvprof({"--start"}, dom0));
  (void)host.GroundTruth(true);
  RunMachine(host, 60);
  Require(host.Hvprof({"--stop"}, dom0));
  const context::GroundTruth truth = host.GroundTruth(false);
  CheckDomains(host.current(), truth, {0, 2});
  const report::Profile profile = Load(host.current());
  CHECK(profile.metadata().backtrace_depth == 4);
  uint64_t with_callers = 0, unknown_cpu = 0, samples = 0;
  auto read = store::ReadSamplesFile(host.current() + "/samples.hvs", [&](const store::StoredSample& sample) {
    ++samples;
    with_callers += sample.frames.empty() ? 0 : 1;
    unknown_cpu += sample.pcpu == hvpmu::ring::kUnknownPcpu ? 1 : 0;
  });
  REQUIRE(read.has_value());
  CHECK(read.value().problems.empty());
  CHECK(with_callers > samples / 20);
  CHECK(unknown_cpu == samples);  // Xen does not say which CPU
  const std::vector<std::string> notes = profile.metadata().notes;
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& note) {
    return note.find("recovered the xenoprof state an earlier hvprofd left behind (it was still profiling)") !=
           std::string::npos;
  }));
  Require(host.Hvprof({"--shutdown"}, dom0));
}

TEST_CASE("xen: a second dom0 agent is refused while one drives xenoprof", "[xen][refusal]") {
  Host host(TestScenario("intel-arch-v4", 53));
  TempDir dir;
  const auto dom0 = XenEnvironment(host, dir, 0);
  Require(host.Hvprof({"--platform=xen", "--start-daemon", "--no-vmlinux", kEvent}, dom0));
  // Another session directory, the same Xen: it must not take the live agent's state for a
  // crashed one's.
  const auto second = testing::RunProgram({testing::Binary("hvprof"), "--run-dir=" + host.run_dir(),
                                           "--session-dir=" + dir.File("other"), "--platform=xen",
                                           "--start-daemon", "--no-vmlinux", kEvent},
                                          dom0);
  CHECK(second.status != 0);
  CHECK(second.err.find("already drives domain 0's profiler on this host") != std::string::npos);
  CHECK(second.err.find("session directory " + host.session_root()) != std::string::npos);
  CHECK(second.err.find("/run/hvprof/xenoprof.lock") != std::string::npos);
  Require(host.Hvprof({"--start"}, dom0));
  Require(host.Hvprof({"--shutdown"}, dom0));

  // Off Xen, --platform=xen says so and what to use instead.
  std::vector<std::string> not_xen = dom0;
  not_xen[3] = "HVPROF_XEN_ROOT=" + dir.File("no-such-root");
  const auto refused = host.Hvprof({"--platform=xen", "--start-daemon", "--no-vmlinux", kEvent}, not_xen);
  CHECK(refused.status != 0);
  CHECK(refused.err.find("does not run on Xen") != std::string::npos);
  CHECK(refused.err.find("--platform=linux") != std::string::npos);
}

TEST_CASE("xen: samples that find a ring full are counted as lost, and stored plus lost is the truth",
          "[xen][loss]") {
  Host host(TestScenario("intel-arch-v4", 54));
  TempDir dir;
  const auto dom0 = XenEnvironment(host, dir, 0);
  // Rings of 15 samples, polled twice a second: most of the passive domain's samples cannot be
  // written.
  Require(host.Hvprof({"--platform=xen", "--start-daemon", "--passive-domains=guest2", "--no-vmlinux",
                       "--buffer-size=15", "--poll-interval=500", kEvent},
                      dom0));
  Require(host.Hvprof({"--start"}, dom0));
  (void)host.GroundTruth(true);
  RunMachine(host, 20);
  Require(host.Hvprof({"--stop"}, dom0));
  const context::GroundTruth truth = host.GroundTruth(false);

  const report::Profile profile = Load(host.current());
  const auto& m = profile.metadata();
  CHECK(m.ring_capacity == 15);
  const auto expected = TruthByMode(truth, m.events.at(0).counter);
  std::map<uint16_t, uint64_t> truth_per_domain, stored_per_domain, lost_per_domain;
  for (const auto& [key, count] : expected) truth_per_domain[key.first] += count;
  for (const auto& [key, count] : ProfileByMode(profile)) stored_per_domain[key.first] += count;
  for (const store::RingRecord& ring : m.rings) {
    lost_per_domain[ring.owner] += ring.lost[static_cast<int>(hvpmu::ring::LossReason::kRingFull)];
  }
  uint64_t lost = 0;
  for (uint16_t domain : {0, 2}) {
    INFO("domain " << domain);
    CHECK(stored_per_domain[domain] + lost_per_domain[domain] == truth_per_domain[domain]);
    lost += lost_per_domain[domain];
  }
  // Nothing wakes dom0 for a passive domain's rings (dom0's own may be drained on its VIRQ).
  CHECK(lost_per_domain[2] > 0);
  CHECK(m.losses.ring_full == lost);
  // The report says so.
  const auto report = host.Report({});
  CHECK(report.out.find("Lost samples: none") == std::string::npos);
  Require(host.Hvprof({"--shutdown"}, dom0));
}

TEST_CASE("xen: hvprof run profiles a workload and saves a session that matches the ground truth", "[xen][run]") {
  Host host(TestScenario("intel-arch-v4", 55));
  TempDir dir;
  const auto dom0 = XenEnvironment(host, dir, 0);
  (void)host.GroundTruth(true);
  // The workload is a pause; meanwhile the simulated machine runs. Its counters count only
  // while `hvprof run` profiles, so the truth needs no timing.
  std::atomic<int> steps{0};
  std::atomic<bool> profiling{false};
  std::thread machine([&] {
    auto clock = host.Connect(0);
    profiling = hvprof::testing::WaitForProfiling(host.session_root());
    for (int step = 0; step < 100; ++step) {
      if (clock->SimRunFor(1'000'000)) ++steps;
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
    }
  });
  const auto run = host.Hvprof({"run", "--platform=xen", "--passive-domains=guest2", "--no-vmlinux", kEvent,
                                "--json=" + dir.File("run.json"), "--", "/bin/sleep", "5"},
                               dom0);
  machine.join();
  Require(run);
  REQUIRE(profiling);
  CHECK(steps == 100);
  const context::GroundTruth truth = host.GroundTruth(false);
  std::ifstream json_file(dir.File("run.json"));
  const nlohmann::json summary = nlohmann::json::parse(json_file, nullptr, false);
  REQUIRE(summary.is_object());
  CHECK(summary["runs"][0]["exit_status"] == 0);
  CheckDomains(summary["runs"][0]["session"].get<std::string>(), truth, {0, 2});
  // A xen session diffs like any other (against itself: every row the same, nothing flagged);
  // its time slices are by when hvprofd read the samples, as Xen's rings carry no time.
  const std::string session = summary["runs"][0]["session"].get<std::string>();
  const auto diff = host.Report({"--diff", session, session, "-l", "--format=json"});
  INFO(diff.err);
  REQUIRE(diff.status == 0);
  const nlohmann::json parsed = nlohmann::json::parse(diff.out);
  CHECK(parsed["base"]["samples"] == summary["runs"][0]["samples"]);
  REQUIRE(!parsed["rows"].empty());
  for (const nlohmann::json& row : parsed["rows"]) {
    CHECK_FALSE(row["significant"].get<bool>());
    CHECK(row["change_points"].get<double>() == 0);
  }
}

TEST_CASE("xen: call chains through xenoprof or hvprof's engine: folded, -c, pprof and html agree with the ground "
          "truth",
          "[xen][stacks]") {
  using hvprof::testing::Bucket;
  // Xen 4.17's xenoprof (backtrace records in legacy rings), then Xen with hvprof's engine (v2).
  const bool engine = GENERATE(false, true);
  INFO((engine ? "Xen with hvprof's engine" : "Xen 4.17's xenoprof"));
  const nlohmann::json scenario = hvprof::testing::DefaultScenario();
  Host host(scenario);
  TempDir dir;
  const auto dom0 = XenEnvironment(host, dir, 0, engine);
  Require(host.Hvprof({"--platform=xen", "--start-daemon", "--callgraph=8", kEvent}, dom0));
  Require(host.Hvprof({"--start"}, dom0));
  (void)host.GroundTruth(true);
  RunMachine(host, 100);
  Require(host.Hvprof({"--stop"}, dom0));
  Require(host.Hvprof({"--shutdown"}, dom0));
  const context::GroundTruth truth = host.GroundTruth(false);
  const report::Profile profile = Load(host.current());
  CHECK(profile.metadata().ring_format == (engine ? "v2" : "xenoprof"));
  CHECK(profile.metadata().backtrace_depth == 8);
  const uint32_t counter = profile.metadata().events.at(0).counter;

  // Folded: every kernel stack of a named function as the truth has it (callers through
  // xenoprof's backtrace records), the rest per mode (dom0's user space and Xen are this test
  // machine's files, not the scenario's); nothing lost, nothing invented.
  const auto folded = host.Report({"--format=folded"});
  INFO(folded.err);
  REQUIRE(folded.status == 0);
  const std::set<std::string> all_named = hvprof::testing::NamedFunctions(scenario);
  auto bucket = [&](const std::string& stack) {
    return Bucket(stack, stack.rfind("dom0;[kernel];", 0) == 0 ? all_named : std::set<std::string>{});
  };
  std::map<std::string, uint64_t> seen, expected;
  for (const auto& [stack, count] : hvprof::testing::ParseFolded(folded.out)) seen[bucket(stack)] += count;
  for (const auto& [stack, count] : hvprof::testing::TruthStacks(truth, counter, 8, {{0, "dom0"}})) {
    expected[bucket(stack)] += count;
  }
  size_t with_callers = 0;
  uint64_t seen_total = 0, expected_total = 0;
  for (const auto& [stack, count] : expected) {
    INFO(stack);
    CHECK(seen.count(stack) == 1);
    if (seen.count(stack) != 0) CHECK(seen.at(stack) == count);
    with_callers += std::count(stack.begin(), stack.end(), ';') > 2;
    expected_total += count;
  }
  for (const auto& [stack, count] : seen) seen_total += count;
  CHECK(with_callers >= 1);
  CHECK(expected_total > 1000);
  CHECK(seen_total == expected_total);

  // -c: vfs_read is reached through ksys_read only, as the scenario says.
  uint64_t vfs_read = 0;
  for (const context::TruthRow& row : truth.rows) {
    if (row.domain == 0 && row.function == "vfs_read") vfs_read += row.overflows.at(counter);
  }
  REQUIRE(vfs_read > 0);
  const auto graph_result = host.Report({"-c", "--format=json"});
  REQUIRE(graph_result.status == 0);
  const nlohmann::json graph = nlohmann::json::parse(graph_result.out);
  bool found = false;
  for (const nlohmann::json& node : graph["nodes"]) {
    if (node["symbol"] != "vfs_read") continue;
    found = true;
    CHECK(node["samples"].get<uint64_t>() == vfs_read);
    REQUIRE(node["callers"].size() == 1);
    CHECK(node["callers"][0]["symbol"] == "ksys_read");
    CHECK(node["callers"][0]["samples"].get<uint64_t>() == vfs_read);
  }
  CHECK(found);

  // pprof, read by go tool pprof: the same total and vfs_read's flat count.
  const std::string pprof = dir.File("xen.pb.gz");
  REQUIRE(host.Report({"--format=pprof", "-o", pprof}).status == 0);
  if (std::filesystem::exists("/usr/bin/go")) {
    const auto top = hvprof::testing::PprofTop(pprof, {});
    uint64_t pprof_total = 0;
    for (const auto& [function, count] : top) pprof_total += count;
    CHECK(pprof_total == seen_total);
    CHECK(top.count("vfs_read") == 1);
    if (top.count("vfs_read") != 0) CHECK(top.at("vfs_read") == vfs_read);
  } else {
    WARN("go tool pprof (Debian golang-go) is not installed: the pprof file is not read back");
  }
  // The flame graph page carries the same stacks (the browser test runs on the sim's session).
  const std::string html = dir.File("xen.html");
  REQUIRE(host.Report({"--format=html", "-o", html}).status == 0);
  std::ifstream page(html);
  const std::string text((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"ksys_read\"") != std::string::npos);
  CHECK(text.find("[\"Platform\",\"xen") != std::string::npos);
}

// --sched on Xen (issue 21): the real programs read Xen's trace buffers (the fake's, which
// hvprof-hv's machine fills as Xen 4.17 would), and the report's time in each state is the
// machine's, as tests/integration/sched_test.cpp checks it on the sim's own rings.
TEST_CASE("xen: --sched reads Xen's trace buffers, and the report's time in each state is the machine's, per vCPU "
          "within 1%",
          "[xen][sched][e2e]") {
  nlohmann::json scenario = TestScenario("intel-arch-v4", 21);
  const double loads[] = {0.6, 0.95, 0.4, 0.85};  // 7 vCPUs on 4 pCPUs, each domain runnable part of the time
  for (size_t d = 0; d < scenario["domains"].size(); ++d) scenario["domains"][d]["load"] = loads[d % 4];
  Host host(scenario);
  TempDir dir;
  const auto dom0 = XenEnvironment(host, dir, 0);
  // A guest sets up no scheduling: Xen's trace buffers are dom0's.
  const auto guest = host.GuestHvprof(1, {"--platform=xen", "--start-daemon", "--sched", kEvent},
                                      XenEnvironment(host, dir, 1));
  CHECK(guest.status != 0);
  CHECK(guest.err.find("--sched is set up in dom0") != std::string::npos);

  const auto started = host.Hvprof({"--platform=xen", "--start-daemon", "--sched", "--no-vmlinux", kEvent}, dom0);
  if (started.status != 0) {
    std::ifstream log(host.session_root() + "/hvprofd.log");
    INFO(std::string(std::istreambuf_iterator<char>(log), {}));
    Require(started);
  }
  Require(host.Hvprof({"--start"}, dom0));
  (void)host.GroundTruth(true);  // the truth counts from here, as the trace buffers do
  RunMachine(host, 600);
  const auto status = host.Hvprof({"--status"}, dom0);
  Require(status);
  INFO(status.out);
  CHECK(status.out.find("scheduling records from xentrace") != std::string::npos);
  CHECK(status.out.find("global trace event mask to 0x00029000") != std::string::npos);
  CHECK(status.out.find("xentrace running meanwhile competes") != std::string::npos);
  Require(host.Hvprof({"--stop"}, dom0));
  const context::SchedTruth truth = host.GroundTruth(false).sched;
  Require(host.Hvprof({"--shutdown"}, dom0));

  const nlohmann::json metadata = nlohmann::json::parse(std::ifstream(host.current() + "/session.json"));
  REQUIRE(metadata.contains("sched"));
  CHECK(metadata["sched"]["source"] == "xentrace");
  CHECK(metadata["sched"]["records"].get<uint64_t>() > 1000);
  CHECK(metadata["sched"]["lost"]["ring_full"] == 0);
  CHECK(metadata["sched"]["lost"]["malformed"] == 0);
  bool noted = false;
  for (const nlohmann::json& note : metadata["notes"]) noted |= note.get<std::string>().find("0x00029000") != std::string::npos;
  CHECK(noted);

  auto report = host.Report({"--sched", "--format=json", "--top=5"});
  INFO(report.err);
  REQUIRE(report.status == 0);
  const nlohmann::json sched = nlohmann::json::parse(report.out);
  const double window = sched["window"]["ns"].get<double>();
  const double truth_window = static_cast<double>(truth.now_ns - truth.since_ns);
  std::cout << fmt::format("xen --sched: window {} ns, truth {} ns\n", window, truth_window);
  CHECK(std::abs(window - truth_window) <= 0.01 * truth_window);
  CHECK(sched["records"]["inconsistent"] == 0);
  CHECK(sched["records"]["backwards"] == 0);
  CHECK(sched["records"]["lost_records"] == 0);

  std::map<std::pair<int, int>, nlohmann::json> entities;
  for (const nlohmann::json& entity : sched["entities"]) {
    entities[{entity["domain"].get<int>(), entity["vcpu"].get<int>()}] = entity;
  }
  REQUIRE(truth.vcpus.size() == 7);
  double worst = 0;
  for (const context::TruthVcpu& expected : truth.vcpus) {
    const std::pair<int, int> key{expected.domain, expected.vcpu};
    INFO(fmt::format("dom{} vcpu {}", key.first, key.second));
    REQUIRE(entities.count(key) == 1);
    const nlohmann::json& got = entities[key];
    const std::pair<const char*, uint64_t> states[] = {{"running_ns", expected.running_ns},
                                                       {"runnable_ns", expected.runnable_ns},
                                                       {"blocked_ns", expected.blocked_ns},
                                                       {"offline_ns", expected.offline_ns}};
    for (const auto& [state, ns] : states) {
      INFO(state);
      const double off = std::abs(got[state].get<double>() - static_cast<double>(ns));
      worst = std::max(worst, off / truth_window);
      CHECK(off <= 0.01 * truth_window);
    }
    CHECK(got["wakeups"].get<uint64_t>() == expected.wakeups);
  }
  std::cout << fmt::format("xen --sched: worst state time off by {:.4f}% of the window\n", 100 * worst);
  // The pCPUs account for the whole window: 4 pCPUs, within 2%.
  double accounted = 0;
  for (const nlohmann::json& cpu : sched["pcpus"]) {
    accounted += cpu["busy_ns"].get<double>() + cpu["idle_ns"].get<double>();
    const context::TruthCpu& expected = truth.cpus.at(cpu["pcpu"].get<size_t>());
    CHECK(std::abs(cpu["idle_ns"].get<double>() - static_cast<double>(expected.idle_ns)) <= 0.01 * truth_window);
  }
  CHECK(std::abs(accounted - 4 * truth_window) <= 0.02 * 4 * truth_window);
}
