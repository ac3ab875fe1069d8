// Scheduling end to end on the sim (issue 21): `hvprof --start-daemon --sched` on the real
// programs, the records through the engine's scheduling rings, hvprofd and the session, and
// hvprof-report --sched and --timeline against the machine's ground truth.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "browser_support.h"
#include "hvprof/base/files.h"
#include "host_harness.h"
#include "sim_harness.h"
#include "skip.h"

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
  const hvprof::context::SchedTruth truth = host.GroundTruth(false).sched;
  // --status says how many scheduling records sched.hvs holds and what was lost: session.json's counts.
  const auto status = host.Hvprof({"--status"});
  REQUIRE(status.status == 0);
  std::smatch said;
  REQUIRE(std::regex_search(status.out, said,
                            std::regex(R"(sched: +(\d+) scheduling records from engine stored; (\d+) lost)")));
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);

  const Json metadata = Json::parse(std::ifstream(host.current() + "/session.json"));
  REQUIRE(metadata.contains("sched"));
  CHECK(metadata["sched"]["records"].get<uint64_t>() > 0);
  CHECK(std::stoull(said[1]) == metadata["sched"]["records"].get<uint64_t>());
  uint64_t lost = 0;
  for (const auto& [cause, count] : metadata["sched"]["lost"].items()) lost += count.get<uint64_t>();
  CHECK(std::stoull(said[2]) == lost);

  auto report = host.Report({"--sched", "--format=json", "--top=5"});
  INFO(report.err);
  REQUIRE(report.status == 0);
  const Json sched = Json::parse(report.out);
  REQUIRE(sched["schema"] == "hvprof-sched");
  const double window = sched["window"]["ns"].get<double>();
  const double truth_window = static_cast<double>(truth.now_ns - truth.since_ns);
  CHECK(std::abs(window - truth_window) <= 0.01 * truth_window);
  CHECK(sched["records"]["inconsistent"] == 0);
  CHECK(sched["records"]["backwards"] == 0);
  CHECK(sched["records"]["lost_records"] == 0);

  std::map<std::pair<int, int>, Json> entities;
  for (const Json& entity : sched["entities"]) entities[{entity["domain"].get<int>(), entity["vcpu"].get<int>()}] = entity;
  REQUIRE(truth.vcpus.size() == 7);
  for (const hvprof::context::TruthVcpu& expected : truth.vcpus) {
    const std::pair<int, int> key{expected.domain, expected.vcpu};
    INFO(fmt::format("dom{} vcpu {}", key.first, key.second));
    REQUIRE(entities.count(key) == 1);
    const Json& got = entities[key];
    const std::pair<const char*, uint64_t> states[] = {{"running_ns", expected.running_ns},
                                                       {"runnable_ns", expected.runnable_ns},
                                                       {"blocked_ns", expected.blocked_ns},
                                                       {"offline_ns", expected.offline_ns}};
    for (const auto& [state, ns] : states) {
      INFO(state);
      CHECK(std::abs(got[state].get<double>() - static_cast<double>(ns)) <= 0.01 * truth_window);
    }
    CHECK(got["wakeups"].get<uint64_t>() == expected.wakeups);
  }
  // The pCPUs account for the whole window: 4 pCPUs x 2 s = 8 s, within 2%.
  double accounted = 0;
  for (const Json& cpu : sched["pcpus"]) {
    accounted += cpu["busy_ns"].get<double>() + cpu["idle_ns"].get<double>();
    const hvprof::context::TruthCpu& expected = truth.cpus.at(cpu["pcpu"].get<size_t>());
    CHECK(std::abs(cpu["idle_ns"].get<double>() - static_cast<double>(expected.idle_ns)) <= 0.01 * truth_window);
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
  for (const hvprof::context::TruthVcpu& expected : truth.vcpus) {
    const std::string key = fmt::format("{}/{}", expected.domain, expected.vcpu);
    INFO(key);
    CHECK(std::abs(slice_us[key] * 1000 - static_cast<double>(expected.running_ns)) <= 0.01 * truth_window);
  }
}

TEST_CASE("the HTML time line opens offline in headless Chromium and its lanes hold the report's times",
          "[sched][e2e][browser]") {
  const std::string chromium = hvprof::testing::Chromium();
  if (chromium.empty() && hvprof::testing::SkipTest("needs Chromium (Debian package chromium) to open the page")) {
    return;
  }
  Host host(BusyScenario());
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=all", "--sched", "-e", "CPU_CLK_UNHALTED:1000000"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=300ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  const std::string file = host.session_root() + "/../lanes.html";
  const auto written = host.Report({"--timeline", "--format=html", "-o", file});
  INFO(written.err);
  REQUIRE(written.status == 0);
  const auto read = hvprof::ReadFileToString(file, 64 << 20);
  REQUIRE(read.has_value());
  // Nothing in the file points anywhere: no address, no element that loads one.
  CHECK_FALSE(std::regex_search(read.value(), std::regex(R"(\b(https?|ftp|wss?):)", std::regex::icase)));
  for (const char* loader : {"src=", "href=", "<link", "<img", "<iframe", "@import", "url("}) {
    INFO(loader);
    CHECK(read.value().find(loader) == std::string::npos);
  }

  const Json sched = Json::parse(host.Report({"--sched", "--format=json"}).out);
  const hvprof::testing::Page page = hvprof::testing::Open(chromium, file, "");
  hvprof::testing::CheckClean(page);
  // What the page summed from the slices it drew: each pCPU's busy time and each vCPU's running
  // time, to the nanosecond what --sched says.
  std::map<int, uint64_t> busy;
  const std::regex pcpu_row(R"re(data-pcpu="(\d+)" data-busy-ns="(\d+)")re");
  for (std::sregex_iterator m(page.dom.begin(), page.dom.end(), pcpu_row), end; m != end; ++m) {
    busy[std::stoi((*m)[1])] = std::stoull((*m)[2]);
  }
  REQUIRE(busy.size() == sched["pcpus"].size());
  for (const Json& pcpu : sched["pcpus"]) {
    INFO("pCPU " << pcpu["pcpu"]);
    CHECK(busy[pcpu["pcpu"].get<int>()] == pcpu["busy_ns"].get<uint64_t>());
  }
  std::map<std::string, uint64_t> running;
  const std::regex entity_row(R"re(data-entity="\d+" data-label="([^"]*)" data-running-ns="(\d+)")re");
  for (std::sregex_iterator m(page.dom.begin(), page.dom.end(), entity_row), end; m != end; ++m) {
    running[(*m)[1]] = std::stoull((*m)[2]);
  }
  size_t ran = 0;
  for (const Json& entity : sched["entities"]) {
    if (entity["running_ns"].get<uint64_t>() == 0) continue;
    ++ran;
    const std::string label = entity["label"].get<std::string>();
    INFO(label);
    REQUIRE(running.contains(label));
    CHECK(running[label] == entity["running_ns"].get<uint64_t>());
  }
  CHECK(ran == 7);
  CHECK(running.size() == ran);
  // The lanes were drawn: every slice of the whole window.
  std::smatch drawn;
  REQUIRE(std::regex_search(page.dom, drawn, std::regex(R"re(data-drawn-slices="(\d+)")re")));
  CHECK(std::stoull(drawn[1]) > 100);
}

TEST_CASE("scheduling: --sched is refused in a guest, and a session without it says so", "[sched][e2e]") {
  Host host(TestScenario("intel-arch-v4", 22));
  // Scheduling is dom0's to record, before anything starts.
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
