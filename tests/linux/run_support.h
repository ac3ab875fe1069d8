// Helpers for the tests that run `hvprof run --platform=linux` as a user would: the real
// programs (hvprof, its own hvprof-hv, hvprofd, hvprof-report) sampling this host, in a
// temporary session directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "live_support.h"  // PerfUsable
#include "programs.h"
#include "temp_dir.h"

namespace hvprof::testing {

class LinuxRun {
 public:
  // `hvprof run --platform=linux ARGS...`; REQUIREs it to succeed.
  CommandResult Run(std::vector<std::string> args);
  // The command line Run runs, for a test that runs it itself (with a deadline).
  std::vector<std::string> Command(std::vector<std::string> args);
  // The saved session's report (-l, JSON), with extra options.
  nlohmann::json Report(std::vector<std::string> args);
  // The saved session's call stacks (--format=folded), with extra options.
  std::string Folded(std::vector<std::string> args);
  // hvprof-report with this run's --session-dir and `args` (any session, e.g. --diff A B).
  CommandResult ReportOn(std::vector<std::string> args);
  // The pids of the saved session's processes whose name (comm) is `comm`.
  std::vector<uint32_t> Pids(const std::string& comm);
  // The run directory Command gives hvprof (an hvprof-hv may already serve it).
  std::string run_dir() const { return dir_.File("run"); }
  std::string session_root() const { return dir_.File("sessions"); }

 private:
  // hvprof-report on the newest saved session; REQUIREs a report (status 0, or 3: some other
  // image on the host lacks symbols).
  CommandResult SessionReport(std::vector<std::string> args);

  TempDir dir_;
};

}  // namespace hvprof::testing
