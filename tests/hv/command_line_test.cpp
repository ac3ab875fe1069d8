// hvprof-hv's command line (hvprof/hv/command_line.h): every refusal rule, each with the words
// its message must carry, and the daemon options of accepted commands.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/hv/command_line.h"

using namespace hvprof;
using hv::HvCommand;

namespace {

void RequireRefusal(const std::vector<std::string>& args, const std::string& words) {
  std::string shown;
  for (const std::string& arg : args) shown += arg + " ";
  INFO("hvprof-hv " << shown);
  auto command = hv::ParseHvCommand(args);
  REQUIRE_FALSE(command.has_value());
  CHECK(command.error().kind() == ErrorKind::kInvalidArgument);
  INFO("message: " << command.error().message());
  CHECK(command.error().message().find(words) != std::string::npos);
  CHECK(command.error().message().find("Try 'hvprof-hv --help'.") != std::string::npos);
}

HvCommand Accept(const std::vector<std::string>& args) {
  auto command = hv::ParseHvCommand(args);
  if (!command) FAIL("refused: " << command.error().message());
  return command.value();
}

}  // namespace

TEST_CASE("hvprof-hv refuses what it cannot honour", "[hv][cli]") {
  RequireRefusal({"--no-such-option"}, "no-such-option");
  RequireRefusal({"--platform=xen"}, "--platform must be sim or linux, not 'xen'");
  RequireRefusal({"--log-level=loud"}, "--log-level must be debug, info, warning or error");
  for (const std::string option : {"--scenario=default", "--speed=max", "--duration=1s", "--seed=4",
                                   "--ground-truth=/tmp/t.json"}) {
    RequireRefusal({"--platform=linux", option}, option.substr(0, option.find('=')) + " is for --platform=sim");
  }
  RequireRefusal({"--platform=linux", "--sample-source=timer"}, "--sample-source is for --platform=sim");
  RequireRefusal({"--platform=sim", "--domain-map=pid:1=1"}, "--domain-map and --software-events are for --platform=linux");
  RequireRefusal({"--software-events"}, "--domain-map and --software-events are for --platform=linux");
  RequireRefusal({"--sample-source=tsc"}, "--sample-source must be auto, pmu or timer");
  for (const char* speed : {"--speed=fast", "--speed=0", "--speed=1001", "--speed=2x"}) {
    RequireRefusal({speed}, "--speed must be realtime, max or a factor between 0.001 and 1000");
  }
  RequireRefusal({"--duration=later"}, "--duration: 'later' is not a duration");
}

TEST_CASE("hvprof-hv's accepted commands, as daemon options", "[hv][cli]") {
  SECTION("the defaults: the sim's default scenario, in real time") {
    const HvCommand c = Accept({});
    CHECK(c.kind == HvCommand::Kind::kRun);
    CHECK(c.options.platform == "sim");
    CHECK(c.options.scenario_path.empty());
    CHECK(c.options.sample_source == "auto");
    CHECK_FALSE(c.options.speed.has_value());
    CHECK_FALSE(c.options.seed.has_value());
    CHECK(c.log_level == LogLevel::kInfo);
  }
  SECTION("a simulated machine, ten times faster, for 2 s, with a seed and the timer") {
    const HvCommand c = Accept({"--scenario=two-guests", "--speed=10", "--duration=2s", "--seed=7",
                                "--sample-source=timer", "--ground-truth=t.json", "--log-level=debug"});
    CHECK(c.options.scenario_path == "two-guests");
    CHECK(c.options.speed == sim::Speed::kRealtime);
    CHECK(c.options.factor == 10.0);
    CHECK(c.options.duration_ns == 2'000'000'000);
    CHECK(c.options.seed == 7u);
    CHECK(c.options.sample_source == "timer");
    CHECK(c.options.ground_truth_path == "t.json");
    CHECK(c.log_level == LogLevel::kDebug);
    CHECK(Accept({"--speed=max"}).options.speed == sim::Speed::kMax);
  }
  SECTION("this host, with domains for a process tree and a cgroup, on the timer") {
    const HvCommand c = Accept({"--platform=linux", "--domain-map=pid:42=1,cgroup:/vm.scope=2", "--software-events",
                                "--run-dir=/tmp/r"});
    CHECK(c.options.platform == "linux");
    CHECK(c.options.domain_map == "pid:42=1,cgroup:/vm.scope=2");
    CHECK(c.options.force_software);
    CHECK(c.options.run_dir == "/tmp/r");
  }
  SECTION("--help and --version win over the rest") {
    CHECK(Accept({"--help", "--platform=xen"}).kind == HvCommand::Kind::kHelp);
    CHECK(Accept({"--version"}).kind == HvCommand::Kind::kVersion);
    CHECK(hv::HvUsage().find("Usage: hvprof-hv --platform=sim") != std::string::npos);
  }
}
