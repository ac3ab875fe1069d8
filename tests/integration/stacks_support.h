// What the stack tests share: the default scenario at max speed, a session profiled with call
// chains, and folded output read back.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_harness.h"

namespace hvprof::testing {

// examples/default.json, run as fast as the host can.
nlohmann::json DefaultScenario();

// dom0 active, domains 1 and 2 passive, `depth` frames of call chain, `sim_time` of the sim;
// the ground truth is reset when profiling starts.
// `extra` goes to --start-daemon (events, say).
void ProfileWithChains(Host& host, uint32_t depth, const std::string& sim_time = "300ms",
                       const std::vector<std::string>& extra = {});

// Folded lines as stack -> count; each stack must be on one line only.
std::map<std::string, uint64_t> ParseFolded(const std::string& text);

// A folded stack's frames, root first.
std::vector<std::string> SplitFrames(const std::string& stack);

}  // namespace hvprof::testing
