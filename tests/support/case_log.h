// What the running Catch test case has done so far, kept by a listener registered beside
// Catch's main (catch_main.cpp, linked into every test binary), and the log of cases and skips
// that scripts/check-test-count.py reads.
#pragma once

#include <cstdint>
#include <string>

namespace hvprof::testing {

struct CaseState {
  std::string name;
  uint64_t assertions = 0;  // passing and failing, since the case started
  int section_depth = 0;    // the test case itself is the outermost section
};

const CaseState& CurrentCase();

// Under CTest, one line to BUILD_DIR/Testing/hvprof-cases.log, "KIND\tBINARY\tCASE[\tEXTRA]":
// "case" when a case starts, "skip" with the reason when it skips.
void LogCaseEvent(const std::string& kind, const std::string& extra);

}  // namespace hvprof::testing
