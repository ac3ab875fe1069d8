// What the stack tests share: the default scenario at max speed, a session profiled with call
// chains, and folded output read back.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/context/ground_truth.h"
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

// The functions a scenario names (the ones with callers among them).
std::set<std::string> NamedFunctions(const nlohmann::json& scenario);

// A folded stack as compared with the truth: itself when its leaf is a named function, else
// "DOMAIN;[MODE];*" (automatic picks may be named by another alias of the same address, and
// dom0 cannot name a passive domain's user space), so those are compared per domain and mode.
std::string Bucket(const std::string& stack, const std::set<std::string>& named);

// What the ground truth says each stack should count, as folded names them with
// --stack-root=domain, for the walk's `depth` (0: no chains), for the domains named.
std::map<std::string, uint64_t> TruthStacks(const context::GroundTruth& truth, uint32_t counter, uint32_t depth,
                                            const std::map<int, std::string>& domain_names);

// `go tool pprof -top` of `file` (with `extra` options) as function -> flat samples.
std::map<std::string, uint64_t> PprofTop(const std::string& file, const std::vector<std::string>& extra);

// A folded stack's frames, root first.
std::vector<std::string> SplitFrames(const std::string& stack);

}  // namespace hvprof::testing
