// A session written here with the store's own writers, for report tests that need samples of a
// known shape: one dom0 with the given processes, CPU_CLOCK every 1 ms, chains of up to 16.
#pragma once

#include <string>
#include <vector>

#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"

namespace hvprof::testing {

// Writes session.json and samples.hvs into `directory` (created) and returns it.
std::string WriteSyntheticSession(const std::string& directory, const std::string& platform,
                                  const std::vector<store::ProcessRecord>& processes,
                                  const std::vector<store::StoredSample>& samples);

}  // namespace hvprof::testing
