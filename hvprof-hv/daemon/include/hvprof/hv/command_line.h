// hvprof-hv's command line, read into the daemon's options. Every rule that refuses a
// combination lives here (tests/hv/command_line_test.cpp); the main answers --help and
// --version, finds the scenario and runs the daemon.
#pragma once

#include <string>
#include <vector>

#include "hvprof/base/log.h"
#include "hvprof/base/result.h"
#include "hvprof/hv/daemon.h"

namespace hvprof::hv {

struct HvCommand {
  enum class Kind { kHelp, kVersion, kRun } kind = Kind::kRun;
  DaemonOptions options;  // kRun; scenario_path as given (a file or a name; empty: the default)
  LogLevel log_level = LogLevel::kInfo;
};

// Reads hvprof-hv's arguments (without the program's name). A combination it cannot honour is
// refused (kInvalidArgument) with what to do instead: exit status 2.
Result<HvCommand> ParseHvCommand(const std::vector<std::string>& args);

// --help's text.
std::string HvUsage();

}  // namespace hvprof::hv
