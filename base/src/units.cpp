#include "hvprof/base/units.h"

#include <charconv>
#include <cmath>
#include <ctime>
#include <string>

#include <fmt/format.h>

namespace hvprof {

namespace {

// One number and its unit ("1.5m"): its nanoseconds, or -1.
double DurationPart(std::string_view part, bool bare_is_seconds) {
  size_t split = 0;
  while (split < part.size() && (std::isdigit(static_cast<unsigned char>(part[split])) || part[split] == '.')) {
    ++split;
  }
  const std::string number(part.substr(0, split));
  const std::string_view unit = part.substr(split);
  double scale = 0;
  if (unit == "s" || (unit.empty() && bare_is_seconds)) scale = 1e9;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ns") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60e9;
  else if (unit == "h") scale = 3600e9;
  else if (unit == "d") scale = 86400e9;
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale == 0 || number.empty() || end != number.c_str() + number.size() || value < 0) return -1;
  return value * scale;
}

}  // namespace

Result<uint64_t> ParseDurationNs(std::string_view text) {
  // Parts of a number and a unit each, as FormatDuration writes them ("2h30m").
  double total = 0;
  size_t at = 0;
  bool ok = !text.empty();
  while (ok && at < text.size()) {
    size_t next = at;
    while (next < text.size() && (std::isdigit(static_cast<unsigned char>(text[next])) || text[next] == '.')) ++next;
    while (next < text.size() && std::isalpha(static_cast<unsigned char>(text[next]))) ++next;
    const double part = next == at ? -1 : DurationPart(text.substr(at, next - at), at == 0 && next == text.size());
    ok = part >= 0 && std::isfinite(part);
    total += part;
    at = next;
  }
  if (!ok || !std::isfinite(total) || total > 1e18) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a duration; write it like 500ms, 2s, 1.5m, 2h30m or 7d", text);
  }
  return static_cast<uint64_t>(std::llround(total));
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

Result<uint64_t> ParseTimeNs(std::string_view text, uint64_t now_ns) {
  const auto refuse = [&] {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a time; write it like 2026-11-30 14:25, 14:25 (today), @1796000000 (seconds since "
                     "1970) or -2h (before now)",
                     text);
  };
  if (text == "now") return now_ns;
  if (text.starts_with('-')) {
    auto before = ParseDurationNs(text.substr(1));
    if (!before || before.value() > now_ns) return refuse();
    return now_ns - before.value();
  }
  if (text.starts_with('@')) {
    auto seconds = ParseUnsigned(text.substr(1));
    if (!seconds || seconds.value() > UINT64_MAX / 1'000'000'000) return refuse();
    return seconds.value() * 1'000'000'000;
  }
  const std::string typed(text);
  std::tm local{};
  const std::time_t today = static_cast<std::time_t>(now_ns / 1'000'000'000);
  ::localtime_r(&today, &local);
  const char* end = nullptr;
  for (const char* format : {"%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M",
                             "%Y-%m-%d", "%H:%M:%S", "%H:%M"}) {
    std::tm parsed = local;
    parsed.tm_sec = 0;
    if (std::string_view(format).starts_with("%Y")) parsed.tm_hour = parsed.tm_min = 0;
    end = ::strptime(typed.c_str(), format, &parsed);
    if (end != nullptr && *end == '\0') {
      parsed.tm_isdst = -1;
      const std::time_t seconds = std::mktime(&parsed);
      if (seconds < 0 || static_cast<uint64_t>(seconds) > UINT64_MAX / 1'000'000'000) return refuse();
      return static_cast<uint64_t>(seconds) * 1'000'000'000;
    }
  }
  return refuse();
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
