// Minimal leveled logging to stderr (or a file, for daemons). Thread-safe.
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace hvprof {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Daemons log with a timestamp and program name; CLIs without.
void SetLogPrefix(std::string_view program, bool with_timestamp);
void LogMessage(LogLevel level, std::string_view message);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (level < GetLogLevel()) return;
  LogMessage(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace hvprof
