// Samples per domain and mode, from the simulator's ground truth and from a stored session, for
// the end-to-end tests that compare the two.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "hvprof/context/ground_truth.h"
#include "hvprof/report/load.h"

namespace hvprof::testing {

using DomainMode = std::pair<uint16_t, std::string>;  // domain, "user" / "kernel" / "hypervisor"

// Overflows of `counter` per domain and mode, from the ground truth.
std::map<DomainMode, uint64_t> TruthByMode(const context::GroundTruth& truth, uint32_t counter);
// Samples per domain and mode in a loaded session.
std::map<DomainMode, uint64_t> ProfileByMode(const report::Profile& profile);
// Loads a session; a failure fails the test with the loader's message.
report::Profile Load(const std::string& session, bool all_domains = false);

}  // namespace hvprof::testing
