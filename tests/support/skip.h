// Skipping a test whose requirement the machine lacks (Xen, a hardware PMU, a readable
// /proc/kallsyms...). Under CTest the test exits with code 77, which CTest reports as
// "skipped" with the reason in its output. Run directly, the test returns early with a warning.
#pragma once

#include <string>

namespace hvprof::testing {

// Returns true if the caller should return now. Usage:
//   if (SkipTest("needs /proc/kallsyms to be readable")) return;
bool SkipTest(const std::string& reason);

}  // namespace hvprof::testing
