// hvprof-hv: the hosted hypervisor. Runs the profiling engine on a simulated machine or on this
// Linux host and serves each domain's profiling operations over that domain's socket. Thin
// main: the command line is read by hv::ParseHvCommand, the daemon is hvprof_hv's.

#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/base/process.h"
#include "hvprof/base/version.h"
#include "hvprof/hv/command_line.h"
#include "hvprof/hv/daemon.h"
#include "hvprof/sim/scenario.h"

int main(int argc, char** argv) {
  hvprof::SetLogPrefix("hvprof-hv", true);
  // A region and an eventfd per ring: thousands on a host with many domains.
  hvprof::RaiseDescriptorLimit();
  try {
    auto command = hvprof::hv::ParseHvCommand(std::vector<std::string>(argv + 1, argv + argc));
    if (!command) {
      std::cerr << "hvprof-hv: " << command.error().message() << "\n";
      return 2;
    }
    if (command.value().kind == hvprof::hv::HvCommand::Kind::kHelp) {
      std::cout << hvprof::hv::HvUsage() << "\n";
      return 0;
    }
    if (command.value().kind == hvprof::hv::HvCommand::Kind::kVersion) {
      std::cout << "hvprof-hv (hvprof) " << hvprof::kVersion << "\n";
      return 0;
    }
    hvprof::SetLogLevel(command.value().log_level);
    hvprof::hv::DaemonOptions& options = command.value().options;
    if (options.platform == "sim") {
      auto found = hvprof::sim::FindScenario(
          options.scenario_path.empty() ? hvprof::sim::kDefaultScenario : options.scenario_path,
          hvprof::sim::ScenarioDirectories(hvprof::ExecutableDirectory()));
      if (!found) {
        hvprof::Log(hvprof::LogLevel::kError, "{}", found.error().message());
        return 1;
      }
      options.scenario_path = found.value();
      hvprof::Log(hvprof::LogLevel::kInfo, "scenario {}", options.scenario_path);
    }
    auto daemon = hvprof::hv::Daemon::Create(options);
    if (!daemon) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", daemon.error().message());
      return 1;
    }
    hvprof::hv::Daemon::HandleSignals(daemon.value().get());
    if (auto ran = daemon.value()->Run(); !ran) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", ran.error().message());
      return 1;
    }
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "hvprof-hv: internal error: " << error.what() << "\n";
    return 1;
  }
}
