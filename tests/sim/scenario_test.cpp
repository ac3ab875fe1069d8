// Scenario validation: every mistake gets a message that names the field and the problem.
#include <catch2/catch.hpp>

#include "sim_harness.h"

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

}  // namespace

TEST_CASE("the test scenario is valid and builds", "[sim][scenario]") {
  CHECK(ParseError(TestScenario()).empty());
  CHECK(BuildError(TestScenario()).empty());
}

TEST_CASE("scenario errors name the field and the problem", "[sim][scenario]") {
  struct Case {
    const char* what;
    std::function<void(Json&)> change;
    std::vector<std::string> expected;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {"unknown PMU", [](Json& j) { j["machine"]["pmu"] = "pentium4"; },
       {"machine.pmu", "unknown PMU model 'pentium4'", "intel-arch-v4"}},
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
  for (const Case& c : cases) {
    INFO(c.what);
    Json json = TestScenario();
    c.change(json);
    const std::string message = ParseError(json);
    INFO(message);
    REQUIRE(!message.empty());
    CHECK(message.rfind("s.json: ", 0) == 0);
    for (const std::string& part : c.expected) CHECK(message.find(part) != std::string::npos);
  }
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

TEST_CASE("the example scenario parses", "[sim][scenario]") {
  auto scenario = hvprof::sim::LoadScenario(std::string(HVPROF_SOURCE_DIR) + "/examples/default.json");
  REQUIRE(scenario.has_value());
  CHECK(scenario.value().domains.size() == 4);
  CHECK(scenario.value().machine.cpus == 4);
}
