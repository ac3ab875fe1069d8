#include "stacks_support.h"

#include <fstream>
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

std::vector<std::string> SplitFrames(const std::string& stack) {
  std::vector<std::string> frames;
  std::istringstream in(stack);
  for (std::string frame; std::getline(in, frame, ';');) frames.push_back(frame);
  return frames;
}

}  // namespace hvprof::testing
