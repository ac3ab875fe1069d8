// Fuzzes the quantities users type (base/units.h): durations (--continuous, --keep-age, --last,
// --run-sim) and times (hvprof-report --since, --until). Whatever the text: a duration read back
// from how it is printed is the same duration to the printed unit; a time before now is not after
// it; @SECONDS is that many seconds; a refusal says what was typed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hvprof/base/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr uint64_t kNow = 1'796'000'000'000'000'000;  // 2026-11-30
  if (auto duration = hvprof::ParseDurationNs(text)) {
    const uint64_t ns = duration.value();
    auto again = hvprof::ParseDurationNs(hvprof::FormatDuration(ns));
    if (!again) std::abort();
    const uint64_t unit = ns < 1'000'000'000 ? 1'000'000 : 1'000'000'000;
    if (again.value() != ns / unit * unit) std::abort();
    std::string minus(1, '-');
    minus.append(text.data(), text.size());
    auto before = hvprof::ParseTimeNs(minus, kNow);
    if (before && (before.value() > kNow || before.value() != kNow - ns)) std::abort();
  } else if (duration.error().message().find(text.substr(0, 16)) == std::string::npos && !text.empty() &&
             text.find('\0') == std::string_view::npos) {
    std::abort();
  }
  auto time = hvprof::ParseTimeNs(text, kNow);
  if (time && text.starts_with('@')) {
    auto seconds = hvprof::ParseUnsigned(text.substr(1));
    if (!seconds || time.value() != seconds.value() * 1'000'000'000) std::abort();
  }
  (void)hvprof::FormatBytes(size * 0x9E3779B97F4A7C15ull);
  return 0;
}
