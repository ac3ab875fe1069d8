// Skipping a test whose requirement the machine lacks (Xen, a hardware PMU, a readable
// /proc/kallsyms...). Under CTest the test exits with code 77, which CTest reports as
// "skipped" with the reason in its output. Run directly, the test returns early with a warning.
//
// A skip is a decision about the machine, taken before the test checks anything: SkipTest
// fails the test instead when an assertion already ran in this test case or when it is called
// inside a SECTION (a skip there would hide the failures before it, or the sections after it).
// Skip only for a named environmental cause (a missing tool, device or privilege), never for an
// error of the code under test.
#pragma once

#include <string>

namespace hvprof::testing {

// Returns true if the caller should return now. Usage, first thing in the test case:
//   if (SkipTest("needs /proc/kallsyms to be readable")) return;
bool SkipTest(const std::string& reason);

}  // namespace hvprof::testing
