#include "skip.h"

#include <cstdio>
#include <cstdlib>

#include <catch2/catch.hpp>

#include "case_log.h"

namespace hvprof::testing {

bool SkipTest(const std::string& reason) {
  const CaseState& state = CurrentCase();
  if (state.assertions != 0) {
    FAIL("SkipTest(\"" << reason << "\") after " << state.assertions
         << " assertion(s): a skip comes before the test checks anything, or it hides what was "
            "checked");
  }
  if (state.section_depth > 1) {
    FAIL("SkipTest(\"" << reason
         << "\") inside a SECTION: the sections after it would never run; skip at the start of "
            "the test case");
  }
  LogCaseEvent("skip", reason);
  if (std::getenv("HVPROF_UNDER_CTEST") != nullptr) {
    std::printf("SKIPPED: %s\n", reason.c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
  WARN("skipped: " << reason);
  return true;
}

}  // namespace hvprof::testing
