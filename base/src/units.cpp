#include "hvprof/base/units.h"

#include <charconv>
#include <cmath>
#include <ctime>
#include <string>

#include <fmt/format.h>

namespace hvprof {

Result<uint64_t> ParseDurationNs(std::string_view text) {
  size_t split = 0;
  while (split < text.size() && (std::isdigit(static_cast<unsigned char>(text[split])) || text[split] == '.')) {
    ++split;
  }
  const std::string number(text.substr(0, split));
  const std::string_view unit = text.substr(split);
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1e9;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ns") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60e9;
  else if (unit == "h") scale = 3600e9;
  else if (unit == "d") scale = 86400e9;
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale == 0 || number.empty() || end != number.c_str() + number.size() || value < 0 ||
      !std::isfinite(value * scale) || value * scale > 1e18) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a duration; write it like 500ms, 2s, 1.5m, 1h or 7d", text);
  }
  return static_cast<uint64_t>(std::llround(value * scale));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return value < 10 ? fmt::format("{:.1f} {}", value, kUnits[unit]) : fmt::format("{:.0f} {}", value, kUnits[unit]);
}

std::string FormatDuration(uint64_t ns) {
  if (ns < 1'000'000'000) return fmt::format("{}ms", ns / 1'000'000);
  uint64_t seconds = ns / 1'000'000'000;
  std::string out;
  for (auto [unit, name] : {std::pair{uint64_t{86400}, "d"}, std::pair{uint64_t{3600}, "h"},
                            std::pair{uint64_t{60}, "m"}, std::pair{uint64_t{1}, "s"}}) {
    if (seconds >= unit) {
      out += fmt::format("{}{}", seconds / unit, name);
      seconds %= unit;
    }
  }
  return out;
}

std::string FormatLocalTime(uint64_t ns) {
  if (ns == 0) return "?";
  const std::time_t seconds = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm local{};
  if (::localtime_r(&seconds, &local) == nullptr) return "?";
  char text[32];
  return std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local) == 0 ? "?" : std::string(text);
}

Result<uint64_t> ParseUnsigned(std::string_view text) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return MakeError(ErrorKind::kInvalidArgument, "'{}' is not a number", text);
  }
  return value;
}

}  // namespace hvprof
