#include "stacks_support.h"

#include <fstream>
#include <regex>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

namespace hvprof::testing {

nlohmann::json DefaultScenario() {
  std::ifstream in(std::string(HVPROF_SOURCE_DIR) + "/examples/default.json");
  nlohmann::json scenario = nlohmann::json::parse(in, nullptr, false);
  REQUIRE(scenario.is_object());
  scenario["run"] = {{"speed", "max"}};
  return scenario;
}

void ProfileWithChains(Host& host, uint32_t depth, const std::string& sim_time, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--start-daemon", "--passive-domains=1,2", fmt::format("--callgraph={}", depth)};
  args.insert(args.end(), extra.begin(), extra.end());
  REQUIRE(host.Hvprof(args).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);  // the truth counts from here, as the session does
  REQUIRE(host.Hvprof({"--run-sim=" + sim_time}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
}

std::map<std::string, uint64_t> ParseFolded(const std::string& text) {
  std::map<std::string, uint64_t> stacks;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    CHECK(stacks.count(line.substr(0, space)) == 0);  // each stack once
    stacks[line.substr(0, space)] = std::stoull(line.substr(space + 1));
  }
  return stacks;
}

std::set<std::string> NamedFunctions(const nlohmann::json& scenario) {
  std::set<std::string> names;
  for (const nlohmann::json& domain : scenario["domains"]) {
    if (!domain.contains("workload")) continue;
    for (const auto& [mode, workload] : domain["workload"].items()) {
      if (!workload.is_object()) continue;
      for (const nlohmann::json& function : workload.value("functions", nlohmann::json::array())) {
        if (function.contains("name")) names.insert(function["name"].get<std::string>());
      }
    }
  }
  return names;
}

std::string Bucket(const std::string& stack, const std::set<std::string>& named) {
  const bool passive_user = stack.rfind("dom1 (build-vm);[user];", 0) == 0 || stack.rfind("dom2 (web-vm);[user];", 0) == 0;
  const std::string leaf = stack.substr(stack.rfind(';') + 1);
  if (!passive_user && named.count(leaf) != 0) return stack;
  const size_t mode_end = stack.find("];");
  return stack.substr(0, mode_end + 2) + "*";
}

std::map<std::string, uint64_t> TruthStacks(const context::GroundTruth& truth, uint32_t counter, uint32_t depth,
                                            const std::map<int, std::string>& domain_names) {
  std::map<std::string, uint64_t> stacks;
  for (const context::TruthRow& row : truth.rows) {
    const int domain = row.domain;
    if (domain_names.count(domain) == 0) continue;
    const uint64_t count = row.overflows.at(counter);
    if (count == 0) continue;
    std::vector<std::string> callers = row.callers;
    // The engine walks frames of active domains only, as Xenoprof does.
    if (domain != 0 || callers.size() > depth) callers.resize(domain != 0 ? 0 : std::min<size_t>(depth, callers.size()));
    std::string stack = domain_names.at(domain) + ";[" + std::string(sample_mode::Name(row.mode)) + "]";
    for (auto caller = callers.rbegin(); caller != callers.rend(); ++caller) stack += ";" + *caller;
    stacks[stack + ";" + row.function] += count;
  }
  return stacks;
}

std::map<std::string, uint64_t> PprofTop(const std::string& file, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {"/usr/bin/go", "tool", "pprof", "-top", "-nodecount=100000", "-nodefraction=0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(file);
  const CommandResult result = hvprof::testing::RunProgram(argv);
  INFO(result.err);
  REQUIRE(result.status == 0);
  std::map<std::string, uint64_t> flat;
  const std::regex row(R"(^\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+\d+\s+[\d.]+%\s+(.+)$)");
  std::istringstream lines(result.out);
  std::string line;
  std::smatch match;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, match, row)) flat[match[2]] += std::stoull(match[1]);
  }
  return flat;
}

std::vector<std::string> SplitFrames(const std::string& stack) {
  std::vector<std::string> frames;
  std::istringstream in(stack);
  for (std::string frame; std::getline(in, frame, ';');) frames.push_back(frame);
  return frames;
}

}  // namespace hvprof::testing
