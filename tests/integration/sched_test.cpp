// Scheduling end to end on the sim (issue 21): `hvprof --start-daemon --sched` on the real
// programs, the records through the engine's scheduling rings, hvprofd and the session, and
// hvprof-report --sched and --timeline against the machine's ground truth.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "host_harness.h"
#include "sim_harness.h"

using hvprof::testing::Host;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

namespace {

// A busy host: 7 vCPUs on 4 pCPUs, each domain runnable part of the time.
Json BusyScenario() {
  Json scenario = TestScenario("intel-arch-v4", 21);
  const double loads[] = {0.6, 0.95, 0.4, 0.85};
  for (size_t d = 0; d < scenario["domains"].size(); ++d) scenario["domains"][d]["load"] = loads[d % 4];
  return scenario;
}

}  // namespace

TEST_CASE("hvprof --sched on the sim: the report's time in each state is the machine's, per vCPU within 1%",
          "[sched][e2e]") {
  Host host(BusyScenario());
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=all", "--sched", "-e", "CPU_CLK_UNHALTED:1000000"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);  // the truth counts from here, as the session does
  REQUIRE(host.Hvprof({"--run-sim=2s"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  const Json truth = host.GroundTruth(false)["sched"];
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);

  const Json metadata = Json::parse(std::ifstream(host.current() + "/session.json"));
  REQUIRE(metadata.contains("sched"));
  CHECK(metadata["sched"]["records"].get<uint64_t>() > 0);

  auto report = host.Report({"--sched", "--format=json", "--top=5"});
  INFO(report.err);
  REQUIRE(report.status == 0);
  const Json sched = Json::parse(report.out);
  REQUIRE(sched["schema"] == "hvprof-sched");
  const double window = sched["window"]["ns"].get<double>();
  const double truth_window = static_cast<double>(truth["now_ns"].get<uint64_t>() - truth["since_ns"].get<uint64_t>());
  CHECK(std::abs(window - truth_window) <= 0.01 * truth_window);
  CHECK(sched["records"]["inconsistent"] == 0);
  CHECK(sched["records"]["backwards"] == 0);
  CHECK(sched["records"]["lost_records"] == 0);

  std::map<std::pair<int, int>, Json> entities;
  for (const Json& entity : sched["entities"]) entities[{entity["domain"].get<int>(), entity["vcpu"].get<int>()}] = entity;
  REQUIRE(truth["vcpus"].size() == 7);
  for (const Json& expected : truth["vcpus"]) {
    const std::pair<int, int> key{expected["domain"].get<int>(), expected["vcpu"].get<int>()};
    INFO(fmt::format("dom{} vcpu {}", key.first, key.second));
    REQUIRE(entities.count(key) == 1);
    const Json& got = entities[key];
    for (const char* state : {"running_ns", "runnable_ns", "blocked_ns", "offline_ns"}) {
      INFO(state);
      CHECK(std::abs(got[state].get<double>() - expected[state].get<double>()) <= 0.01 * truth_window);
    }
    CHECK(got["wakeups"].get<uint64_t>() == expected["wakeups"].get<uint64_t>());
  }
  // The pCPUs account for the whole window: 4 pCPUs x 2 s = 8 s, within 2%.
  double accounted = 0;
  for (const Json& cpu : sched["pcpus"]) {
    accounted += cpu["busy_ns"].get<double>() + cpu["idle_ns"].get<double>();
    const Json& expected = truth["cpus"][cpu["pcpu"].get<size_t>()];
    CHECK(std::abs(cpu["idle_ns"].get<double>() - expected["idle_ns"].get<double>()) <= 0.01 * truth_window);
  }
  CHECK(std::abs(accounted - 4 * truth_window) <= 0.02 * 4 * truth_window);

  // Text and CSV say the same, and the time line's slices add up to the running time.
  auto text = host.Report({"--sched"});
  REQUIRE(text.status == 0);
  CHECK(text.out.find("dom1") != std::string::npos);
  auto csv = host.Report({"--sched", "--format=csv"});
  REQUIRE(csv.status == 0);
  CHECK(csv.out.find("running") != std::string::npos);
  auto trace = host.Report({"--timeline", "--format=perfetto"});
  INFO(trace.err);
  REQUIRE(trace.status == 0);
  const Json events = Json::parse(trace.out);
  std::map<std::string, double> slice_us;
  for (const Json& event : events["traceEvents"]) {
    if (event["ph"] == "X") slice_us[event["args"].contains("domain") ? fmt::format("{}/{}", event["args"]["domain"].get<int>(), event["args"]["vcpu"].get<int>()) : std::string("?")] += event["dur"].get<double>();
  }
  for (const Json& expected : truth["vcpus"]) {
    const std::string key = fmt::format("{}/{}", expected["domain"].get<int>(), expected["vcpu"].get<int>());
    INFO(key);
    CHECK(std::abs(slice_us[key] * 1000 - expected["running_ns"].get<double>()) <= 0.01 * truth_window);
  }
}

TEST_CASE("scheduling: --sched is refused where it cannot record yet, and a session without it says so", "[sched][e2e]") {
  Host host(TestScenario("intel-arch-v4", 22));
  // Where nothing records scheduling yet, before anything starts.
  auto linux_host = host.Hvprof({"--start-daemon", "--platform=linux", "--sched"});
  CHECK(linux_host.status != 0);
  CHECK(linux_host.err.find("--sched is not available on linux yet") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(host.session_root() + "/daemonrc.json"));
  auto guest = host.GuestHvprof(1, {"--start-daemon", "--sched"});
  CHECK(guest.status != 0);
  CHECK(guest.err.find("--sched is set up in dom0") != std::string::npos);
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=all"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=20ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  auto report = host.Report({"--sched"});
  CHECK(report.status != 0);
  CHECK(report.err.find("recorded no scheduling") != std::string::npos);
}
