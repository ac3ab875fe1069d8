#include "hvprof/base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include <fmt/chrono.h>

namespace hvprof {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_mutex;
std::string g_program;
bool g_timestamps = false;

std::string_view LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
LogLevel GetLogLevel() { return g_level.load(std::memory_order_relaxed); }

void SetLogPrefix(std::string_view program, bool with_timestamp) {
  std::lock_guard lock(g_mutex);
  g_program = program;
  g_timestamps = with_timestamp;
}

void LogMessage(LogLevel level, std::string_view message) {
  std::lock_guard lock(g_mutex);
  std::string line;
  if (g_timestamps) {
    auto now = std::chrono::system_clock::now();
    line += fmt::format("{:%Y-%m-%dT%H:%M:%S} ",
                        std::chrono::time_point_cast<std::chrono::seconds>(now));
  }
  if (!g_program.empty()) line += fmt::format("{}: ", g_program);
  if (level != LogLevel::kInfo) line += fmt::format("{}: ", LevelName(level));
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace hvprof
