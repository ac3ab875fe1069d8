#include "hvprof/base/units.h"

#include <charconv>
#include <cmath>
#include <string>

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
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale == 0 || number.empty() || end != number.c_str() + number.size() || value < 0 ||
      !std::isfinite(value * scale) || value * scale > 1e18) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a duration; write it like 500ms, 2s, 1.5m or 1h", text);
  }
  return static_cast<uint64_t>(std::llround(value * scale));
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
