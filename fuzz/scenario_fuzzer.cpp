// Fuzzes the sim scenario parser and validator (docs/sim-scenarios.md): any text must give a
// scenario or an error naming the field, never a crash.
#include <string_view>

#include "hvprof/sim/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)hvprof::sim::ParseScenario(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  return 0;
}
