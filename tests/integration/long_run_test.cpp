// Long runs on a host that forks all day (the sim's churned programs, scenario.h ChurnSpec): the
// process context stays compact and every sampled address is read by the run that was sampled.
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/report/load.h"
#include "hvprof/report/views/table.h"
#include "host_harness.h"
#include "sim_harness.h"
#include "skip.h"

using namespace hvprof;
using hvprof::testing::Host;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

TEST_CASE("A hundred thousand short-lived processes: each sample read by its own run's mappings and session.json stays small",
          "[long][context]") {
  // dom0's application run 20,000 times a second for 0.2 ms each, under 50 pids taken in turn
  // (each pid is reused 2,000 times), every run at its own address-space offset: a sample is read
  // right only by the mappings of the very run it interrupted.
  Json scenario = TestScenario("intel-arch-v4", 42);
  scenario["machine"]["burst_cycles"] = 100000;
  scenario["domains"][0]["processes"][0]["churn"] = {{"per_second", 20000}, {"lifetime_ms", 0.2}, {"pids", 50}};
  Host host(scenario);
  REQUIRE(host.Hvprof({"--start-daemon", "--event=CPU_CLK_UNHALTED:100000"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);
  // Five simulated seconds, in steps, as a long run drains as it goes.
  for (int step = 0; step < 5; ++step) REQUIRE(host.Hvprof({"--run-sim=1s"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  const context::GroundTruth truth = host.GroundTruth(false);

  // The session knows every run: 5 s x 20,000 per second, and the three guests' applications.
  const auto result = host.Report({"--domain=dom0", "--mode=user", "-l", "--format=json"});
  REQUIRE(result.status == 0);
  const Json report = Json::parse(result.out);
  INFO("session: " << report["session"].dump());
  CHECK(report["session"]["processes"].get<uint64_t>() >= 100000);
  // One file mapped 100,000 times is one image.
  CHECK(report["session"]["images"].get<uint64_t>() <= 8);

  // Metadata only: session.json does not grow with the processes.
  struct stat metadata {};
  REQUIRE(::stat((host.current() + "/session.json").c_str(), &metadata) == 0);
  CHECK(metadata.st_size < 64 * 1024);

  // dom0's user functions' shares, as the truth has them (by address in the file).
  auto profile = report::LoadProfile(host.current(), {});
  REQUIRE(profile.has_value());
  const uint32_t counter = profile.value().metadata().events[0].counter;
  std::map<uint64_t, double> truth_share;
  std::map<uint64_t, std::string> names;
  double truth_total = 0;
  for (const context::TruthRow& row : truth.rows) {
    if (row.domain != 0 || row.mode != Mode::kUser) continue;
    const double events = static_cast<double>(row.events.at(counter));
    const uint64_t address = row.image_address;
    truth_share[address] += events;
    truth_total += events;
    names[address] = row.function;
  }
  REQUIRE(truth_total > 0);
  std::map<uint64_t, double> sampled;
  double sampled_total = 0;
  uint64_t unresolved = 0;
  for (const Json& row : report["rows"]) {
    const auto samples = static_cast<double>(row["samples"][0].get<uint64_t>());
    sampled_total += samples;
    if (!row["resolved"].get<bool>()) {
      unresolved += static_cast<uint64_t>(samples);
      continue;
    }
    sampled[std::stoull(row["address"].get<std::string>(), nullptr, 16)] += samples;
  }
  REQUIRE(sampled_total > 20000);
  // Not one sample falls outside its run's mappings or is read with another run's.
  CHECK(unresolved == 0);
  for (const auto& [address, events] : truth_share) {
    const double share = events / truth_total;
    if (share < 0.02) continue;
    const double got = sampled[address] / sampled_total;
    INFO(names[address] << ": truth " << 100 * share << "% report " << 100 * got << "%");
    CHECK(std::fabs(got - share) <= 0.01);
  }
}

namespace {

// A process's resident memory in KiB (VmRSS), 0 if it is gone.
uint64_t ResidentKib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}


// The daemons' memory (hvprof-hv and hvprofd, KiB) after each of `steps` runs of 5 simulated
// seconds of `scenario`, each followed by a dump as a long run's are; and the processes the session
// knows.
struct MemoryOverTime {
  std::vector<uint64_t> kib;
  uint64_t processes = 0;
};
MemoryOverTime MeasureMemory(const Json& scenario, int steps) {
  Host host(scenario);
  REQUIRE(host.Hvprof({"--start-daemon", "--event=CPU_CLK_UNHALTED:100000", "--callgraph=8"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  const pid_t agent = host.AgentPid();
  REQUIRE(agent > 0);
  MemoryOverTime out;
  for (int step = 0; step < steps; ++step) {
    REQUIRE(host.Hvprof({"--run-sim=5s"}).status == 0);
    REQUIRE(host.Hvprof({"--dump"}).status == 0);
    out.kib.push_back(ResidentKib(agent) + ResidentKib(host.HypervisorPid()));
  }
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  const auto result = host.Report({"-l", "--format=json"});
  REQUIRE(result.status == 0);
  out.processes = Json::parse(result.out)["session"]["processes"].get<uint64_t>();
  return out;
}

}  // namespace

TEST_CASE("A long run on a churning host: the daemons hold no more than with one process", "[long][memory]") {
  // Forty simulated seconds of dom0's application run 20,000 times a second (800,000 processes),
  // beside the same forty seconds with the application one long process. What the daemons hold
  // grows with the code sampled (each address's counts per span of time); with the processes, it
  // must not: memory at the end within a small constant of the single process's.
#ifdef HVPROF_SANITIZED
  hvprof::testing::SkipTest("a sanitizer build: ASan keeps freed memory in quarantine (up to 256 MiB), so the "
                            "daemons' resident memory measures the sanitizer's allocator; the normal build checks it");
  return;
#endif
  Json plain = TestScenario("intel-arch-v4", 43);
  plain["machine"]["burst_cycles"] = 100000;
  Json churned = plain;
  churned["domains"][0]["processes"][0]["churn"] = {{"per_second", 20000}, {"lifetime_ms", 0.2}, {"pids", 50}};
  const MemoryOverTime one = MeasureMemory(plain, 8);
  const MemoryOverTime many = MeasureMemory(churned, 8);
  REQUIRE(many.processes >= 800000);
  CHECK(one.processes < 10);
  auto show = [](const MemoryOverTime& m) {
    std::string text;
    for (uint64_t kib : m.kib) text += std::to_string(kib / 1024) + " ";
    return text + "MiB";
  };
  INFO("hvprof-hv and hvprofd every 5 s: one process " << show(one) << "; 800,000 processes " << show(many));
  REQUIRE(one.kib.back() > 0);
  // Generous: the context of the last ten seconds' processes (kept for their late samples) and the
  // allocator's slack; a leak of one small record per process would be 800,000 of them.
  CHECK(many.kib.back() <= one.kib.back() + 64 * 1024);
  // And not growing at the end: the last 25 s add no more than the single process's do, with slack.
  const int64_t growth_many = static_cast<int64_t>(many.kib.back()) - static_cast<int64_t>(many.kib[2]);
  const int64_t growth_one = static_cast<int64_t>(one.kib.back()) - static_cast<int64_t>(one.kib[2]);
  CHECK(growth_many <= growth_one + 32 * 1024);
}
