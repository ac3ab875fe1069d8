// Scenario validation: every mistake gets a message that names the field and the problem.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "sim_harness.h"
#include "temp_dir.h"

using hvprof::testing::SimHost;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

namespace {

std::string ParseError(const Json& json) {
  auto parsed = hvprof::sim::ParseScenario(json.dump(), "s.json");
  return parsed ? std::string() : parsed.error().message();
}

std::string BuildError(const Json& json) {
  auto parsed = hvprof::sim::ParseScenario(json.dump(), "s.json");
  if (!parsed) return parsed.error().message();
  hvprof::symbolizer::Symbolizer symbolizer;
  auto machine = hvprof::sim::SimMachine::Create(parsed.value(), symbolizer);
  return machine ? std::string() : machine.error().message();
}

// One change to the test scenario and what its refusal must say.
struct Case {
  const char* what;
  std::function<void(Json&)> change;
  std::vector<std::string> expected;  // substrings of the message
};

// Each case's scenario is refused when parsed (or, with `when_built`, only when the machine is
// built), with a message holding every expected part.
void CheckRefusals(const std::vector<Case>& cases, bool when_built = false) {
  for (const Case& c : cases) {
    INFO(c.what);
    Json json = TestScenario();
    c.change(json);
    if (when_built) REQUIRE(ParseError(json).empty());
    const std::string message = when_built ? BuildError(json) : ParseError(json);
    INFO(message);
    REQUIRE(!message.empty());
    if (!when_built) CHECK(message.rfind("s.json: ", 0) == 0);
    for (const std::string& part : c.expected) CHECK(message.find(part) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("the test scenario is valid and builds", "[sim][scenario]") {
  CHECK(ParseError(TestScenario()).empty());
  CHECK(BuildError(TestScenario()).empty());
}

TEST_CASE("scenario errors name the field and the problem", "[sim][scenario]") {
  const std::vector<Case> cases = {
      {"unknown PMU", [](Json& j) { j["machine"]["pmu"] = "pentium4"; },
       {"machine.pmu", "unknown PMU model 'pentium4'", "intel-arch-v4", "none"}},
      {"mode shares", [](Json& j) { j["domains"][1]["workload"]["kernel"]["share"] = 30; },
       {"domains[1].workload", "add up to 95, not 100"}},
      {"duplicate ids", [](Json& j) { j["domains"][2]["id"] = 1; },
       {"domains[2]", "duplicate domain id 1", "domains[1]"}},
      {"no dom0", [](Json& j) { j["domains"][0]["id"] = 9; }, {"domains", "needs domain 0"}},
      {"zero vCPUs", [](Json& j) { j["domains"][0]["vcpus"] = 0; },
       {"domains[0].vcpus", "expected a whole number from 1 to 128, got 0"}},
      {"bad type", [](Json& j) { j["domains"][0]["type"] = "pvh"; },
       {"domains[0].type", "unknown domain type 'pvh'"}},
      {"missing field", [](Json& j) { j["domains"][0].erase("kernel"); },
       {"domains[0].kernel: required field is missing"}},
      {"bad address", [](Json& j) { j["domains"][0]["processes"][0]["mappings"][0]["start"] = "0xnope"; },
       {"domains[0].processes[0].mappings[0].start: expected an address", "got the string \"0xnope\""}},
      {"wrong type", [](Json& j) { j["domains"][1]["name"] = 7; },
       {"domains[1].name: expected a string, got 7"}},
      {"out of range", [](Json& j) { j["machine"]["cpus"] = 100000; },
       {"machine.cpus: expected a whole number from 1 to", "got 100000"}},
      {"unknown process",
       [](Json& j) { j["domains"][0]["workload"]["user"]["auto"]["process"] = 999; },
       {"workload.user.auto", "process 999"}},
      {"share without functions",
       [](Json& j) { j["domains"][0]["workload"]["kernel"].erase("auto"); },
       {"workload.kernel", "no functions"}},
      {"wrong version", [](Json& j) { j["hvprof_scenario"] = 2; }, {"hvprof_scenario", "version 2"}},
  };
  CheckRefusals(cases);
  // Text that is not JSON, including a number too big for a double (found by fuzzing).
  for (const char* text : {"{\"hvprof_scenario\": 1,", "{\"hvprof_scenario\": 1e999999}"}) {
    auto parsed = hvprof::sim::ParseScenario(text, "s.json");
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error().message().find("s.json: not valid JSON") != std::string::npos);
  }
}

TEST_CASE("image problems are found when the machine is built", "[sim][scenario]") {
  Json missing = TestScenario();
  missing["hypervisor"]["image"] = "/nonexistent/xen-syms";
  std::string message = BuildError(missing);
  CHECK(message.find("hypervisor.image") != std::string::npos);
  CHECK(message.find("/nonexistent/xen-syms") != std::string::npos);

  Json function = TestScenario();
  function["domains"][1]["workload"]["hypervisor"]["functions"][0]["name"] = "no_such_function";
  message = BuildError(function);
  CHECK(message.find("no function 'no_such_function'") != std::string::npos);
  CHECK(message.find("hypervisor.functions[0]") != std::string::npos);

  Json kernel = TestScenario();
  kernel["domains"][0]["kernel"] = {{"system_map", "/nonexistent/System.map"}};
  message = BuildError(kernel);
  CHECK(message.find("no usable kernel symbols") != std::string::npos);
  CHECK(message.find("fetch-kernel-map") != std::string::npos);
}

TEST_CASE("an unusable kernel symbol source falls back, and says so", "[sim][scenario]") {
  Json json = TestScenario();
  json["domains"][0]["kernel"] = {{"kallsyms", "/nonexistent/kallsyms"},
                                  {"fallbacks", Json::array({Json{{"system_map", "/nonexistent/*.map"}},
                                                             Json{{"system_map", hvprof::testing::kXenMap}}})}};
  auto host = SimHost::Create(json);
  CHECK(host->machine->kernel_source(0) == hvprof::testing::kXenMap);
  bool said = false;
  for (const auto& note : host->machine->notes()) {
    said |= note.find("fallback") != std::string::npos && note.find("/nonexistent/kallsyms") != std::string::npos;
  }
  CHECK(said);
}

TEST_CASE("the example scenarios parse", "[sim][scenario]") {
  auto scenario = hvprof::sim::LoadScenario(std::string(HVPROF_SOURCE_DIR) + "/examples/default.json");
  REQUIRE(scenario.has_value());
  CHECK(scenario.value().domains.size() == 4);
  CHECK(scenario.value().machine.cpus == 4);
  // no-pmu is the default host on a CPU without counters.
  auto no_pmu = hvprof::sim::LoadScenario(std::string(HVPROF_SOURCE_DIR) + "/examples/no-pmu.json");
  REQUIRE(no_pmu.has_value());
  CHECK(no_pmu.value().machine.pmu == hvprof::sim::PmuModelKind::kNone);
  CHECK(no_pmu.value().domains.size() == scenario.value().domains.size());
}

TEST_CASE("a scenario that asks for more than the limits is refused by name", "[sim][scenario][security]") {
  namespace sim = hvprof::sim;
  using sim::kMaxFunctions;
  auto copies = [](const Json& one, size_t count) {
    Json list = Json::array();
    for (size_t i = 0; i < count; ++i) list.push_back(one);
    return list;
  };
  const std::vector<Case> cases = {
      {"too many domains (a socket each)",
       [&](Json& j) { j["domains"] = copies(j["domains"][1], sim::kMaxScenarioDomains + 1); },
       {fmt::format("domains: has {} entries; at most {} are accepted", sim::kMaxScenarioDomains + 1,
                    sim::kMaxScenarioDomains)}},
      {"too many vCPUs", [](Json& j) { j["domains"][1]["vcpus"] = 129; },
       {"domains[1].vcpus: expected a whole number from 1 to 128, got 129"}},
      {"too many processes",
       [&](Json& j) { j["domains"][0]["processes"] = copies(j["domains"][0]["processes"][0], sim::kMaxProcesses + 1); },
       {"domains[0].processes: has 1025 entries; at most 1024 are accepted"}},
      {"too many mappings",
       [&](Json& j) {
         Json& process = j["domains"][0]["processes"][0];
         process["mappings"] = copies(process["mappings"][0], sim::kMaxMappings + 1);
       },
       {"domains[0].processes[0].mappings: has 257 entries; at most 256 are accepted"}},
      {"too many named functions",
       [&](Json& j) {
         Json& hypervisor = j["domains"][1]["workload"]["hypervisor"];
         hypervisor["functions"] = copies(hypervisor["functions"][0], kMaxFunctions + 1);
       },
       {"domains[1].workload.hypervisor.functions: has 10001 entries; at most 10000 are accepted"}},
      {"too many picked functions",
       [](Json& j) { j["domains"][1]["workload"]["kernel"]["auto"]["count"] = kMaxFunctions + 1; },
       {"domains[1].workload.kernel.auto.count: expected a whole number from 1 to 10000, got 10001"}},
      {"named and picked functions together",
       [&](Json& j) {
         Json& kernel = j["domains"][1]["workload"]["kernel"];
         kernel["functions"] = copies(Json{{"name", "do_mmu_update"}}, 6000);
         kernel["auto"]["count"] = 5000;
       },
       {"domains[1].workload.kernel: names 6000 functions and picks 5000 more;",
        "at most 10000 functions run in one mode"}},
      {"too many idle functions",
       [&](Json& j) {
         Json& idle = j["hypervisor"]["idle"];
         idle["functions"] = copies(idle["functions"][0], kMaxFunctions + 1);
       },
       {"hypervisor.idle.functions: has 10001 entries; at most 10000 are accepted"}},
      {"too many callers",
       [&](Json& j) {
         Json& function = j["domains"][1]["workload"]["hypervisor"]["functions"][0];
         function["stack"] = copies("pv_hypercall", sim::kMaxCallers + 1);
       },
       {"domains[1].workload.hypervisor.functions[0].stack: has 33 entries; at most 32 are accepted"}},
      {"too many kernel fallbacks",
       [&](Json& j) {
         Json& kernel = j["domains"][2]["kernel"];
         kernel["fallbacks"] = copies(kernel, sim::kMaxKernelFallbacks + 1);
       },
       {"domains[2].kernel.fallbacks: has 17 entries; at most 16 are accepted"}},
  };
  CheckRefusals(cases);
}

TEST_CASE("a scenario cannot give two things one identity or one address", "[sim][scenario][security]") {
  const Json second_process = {
      {"pid", 100},
      {"comm", "other"},
      {"mappings", Json::array({Json{{"path", hvprof::testing::kLibz}, {"start", "0x7f2000000000"}}})}};
  const std::vector<Case> parse_cases = {
      {"duplicate domain id", [](Json& j) { j["domains"][3]["id"] = 0; },
       {"domains[3]: duplicate domain id 0 (also domains[0])"}},
      {"duplicate domain name", [](Json& j) { j["domains"][3]["name"] = "guest1"; },
       {"domains[3]: duplicate domain name 'guest1' (also domains[1])"}},
      {"duplicate pid", [&](Json& j) { j["domains"][0]["processes"].push_back(second_process); },
       {"domains[0].processes[1]: pid 100 clashes with processes[0] (pid 100): give each process its own pids"}},
      {"a churned program's pids over another process's",
       [&](Json& j) {
         Json churned = second_process;
         churned["pid"] = 90;
         churned["churn"] = {{"per_second", 100}, {"lifetime_ms", 20}, {"pids", 16}};
         j["domains"][0]["processes"].push_back(churned);
       },
       {"domains[0].processes[1]: pids 90-105 clashes with processes[0] (pid 100): give each process its own pids"}},
      {"a churned program with moments of no run alive",
       [&](Json& j) {
         Json churned = second_process;
         churned["pid"] = 1000;
         churned["churn"] = {{"per_second", 100}, {"lifetime_ms", 5}, {"pids", 16}};
         j["domains"][0]["processes"].push_back(churned);
       },
       {"domains[0].processes[1].churn.lifetime_ms: 5 ms at 100 runs a second leaves moments with no run alive: "
        "make lifetime_ms at least 10 (1000 / per_second)"}},
      {"a churned program with too few pids",
       [&](Json& j) {
         Json churned = second_process;
         churned["pid"] = 1000;
         churned["churn"] = {{"per_second", 1000}, {"lifetime_ms", 4.5}, {"pids", 5}};
         j["domains"][0]["processes"].push_back(churned);
       },
       {"domains[0].processes[1].churn.pids: 5 pids are too few for 4.5 runs alive at once: give at least 6"}},
      {"a churned program with too many runs alive at once",
       [&](Json& j) {
         Json churned = second_process;
         churned["pid"] = 1000;
         churned["churn"] = {{"per_second", 10000}, {"lifetime_ms", 500}, {"pids", 100000}};
         j["domains"][0]["processes"].push_back(churned);
       },
       {"domains[0].processes[1].churn.lifetime_ms: 500 ms at 10000 runs a second keeps 5000 runs alive at once; "
        "at most 4096 are: shorten lifetime_ms or lower per_second"}},
      {"two mappings at one address",
       [](Json& j) {
         j["domains"][0]["processes"][0]["mappings"].push_back(
             Json{{"path", hvprof::testing::kLibz}, {"start", "0x7f0000000000"}});
       },
       {"domains[0].processes[0].mappings[1]:", hvprof::testing::kLibz, "at 0x7f0000000000 overlaps mappings[0]",
        hvprof::testing::kLibc, "give each mapping its own address range"}},
      {"a mapping over the hypervisor's addresses",
       [](Json& j) { j["domains"][1]["processes"][0]["mappings"][0]["start"] = "0xffff82d040200000"; },
       {"domains[1].processes[0].mappings[0].start: 0xffff82d040200000 is outside the mappings' range",
        "below 0x7fff00000000"}},
      {"a mapping over the simulated stacks",
       [](Json& j) { j["domains"][1]["processes"][0]["mappings"][0]["start"] = "0x7fff00000000"; },
       {"domains[1].processes[0].mappings[0].start: 0x7fff00000000 is outside the mappings' range"}},
  };
  CheckRefusals(parse_cases);
  // Whole ranges are known once the images are read, when the machine is built.
  const std::vector<Case> build_cases = {
      {"a mapping inside another one",
       [](Json& j) {
         j["domains"][0]["processes"][0]["mappings"].push_back(
             Json{{"path", hvprof::testing::kLibz}, {"start", "0x7f0000010000"}});
       },
       {"domain 0 (dom0) processes[0].mappings[1]:", std::string(hvprof::testing::kLibz) + " at 0x7f0000010000-",
        "overlaps mappings[0], " + std::string(hvprof::testing::kLibc) + " at 0x7f0000000000-",
        "give each mapping its own address range"}},
      {"a mapping that runs into the stacks",
       [](Json& j) { j["domains"][1]["processes"][0]["mappings"][0]["start"] = "0x7ffefffff000"; },
       {"domain 1 (guest1) processes[0].mappings[0]:", "mapped at 0x7ffefffff000 would end beyond 0x7fff00000000",
        "map it lower"}},
      {"a function listed twice",
       [](Json& j) {
         j["domains"][1]["workload"]["hypervisor"]["functions"].push_back(Json{{"name", "do_mmu_update"}});
       },
       {"domain 1 (guest1) workload.hypervisor.functions[3]: 'do_mmu_update' at 0x",
        "is already listed as functions[0] ('do_mmu_update'): list each function once"}},
      {"an idle function listed twice",
       [](Json& j) { j["hypervisor"]["idle"]["functions"].push_back(Json{{"name", "idle_loop"}}); },
       {"hypervisor.idle.functions[2]: 'idle_loop' at 0x", "already listed as functions[1] ('idle_loop')"}},
  };
  CheckRefusals(build_cases, true);
  // The same image mapped in two processes, or at two places in one, is no overlap.
  Json twice = TestScenario();
  twice["domains"][0]["processes"][0]["mappings"].push_back(
      Json{{"path", hvprof::testing::kLibc}, {"start", "0x7f1000000000"}});
  twice["domains"][0]["processes"].push_back(second_process);
  twice["domains"][0]["processes"][1]["pid"] = 101;
  twice["domains"][0]["processes"][1]["mappings"][0]["start"] = "0x7f0000000000";
  CHECK(BuildError(twice).empty());
}

TEST_CASE("scenarios by file or by name, looked up in order", "[scenario]") {
  hvprof::testing::TempDir first, second;
  second.Write("web.json", "{}");
  second.Write("default.json", "{}");
  first.Write("default.json", "{}");
  const std::vector<std::string> directories{first.path() + "/absent", first.path(), second.path()};
  using hvprof::sim::FindScenario;
  // A path is a path, found or not: the loader says what is wrong with it.
  CHECK(FindScenario("my/host.json", directories).value() == "my/host.json");
  CHECK(FindScenario("host.json", directories).value() == "host.json");
  // A name is the first directory's NAME.json.
  CHECK(FindScenario("default", directories).value() == first.File("default.json"));
  CHECK(FindScenario("web", directories).value() == second.File("web.json"));
  auto missing = FindScenario("mail", directories);
  REQUIRE_FALSE(missing.has_value());
  const std::string message = missing.error().message();
  CHECK(message.find("no scenario named 'mail' (looked in " + first.path() + "/absent, " + first.path()) == 0);
  CHECK(message.find("; there are: default, web); give") != std::string::npos);
  CHECK(message.find("HVPROF_SCENARIO_PATH") != std::string::npos);

  // HVPROF_SCENARIO_PATH first, then share/hvprof/scenarios beside bin/.
  ::setenv("HVPROF_SCENARIO_PATH", (first.path() + "::" + second.path()).c_str(), 1);
  const auto searched = hvprof::sim::ScenarioDirectories("/opt/hvprof/bin");
  ::unsetenv("HVPROF_SCENARIO_PATH");
  CHECK(searched == std::vector<std::string>{first.path(), second.path(), "/opt/hvprof/share/hvprof/scenarios"});
}
