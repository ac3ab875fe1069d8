// Fuzzes the parser of the profiles guests publish to dom0 (report/published.h): to dom0 they
// are untrusted input. Whatever it accepts must also survive a round trip.
#include <string_view>

#include "hvprof/report/published.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = hvprof::report::ParsePublished(text, 1);
  if (parsed) {
    const std::string again = hvprof::report::SerializePublished(parsed.value());
    auto reparsed = hvprof::report::ParsePublished(again, 1);
    if (!reparsed || reparsed.value().samples != parsed.value().samples ||
        reparsed.value().symbols.size() != parsed.value().symbols.size()) {
      __builtin_trap();
    }
  }
  return 0;
}
