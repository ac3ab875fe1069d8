// `hvprof run`: one whole profile of one workload, for scripts and benchmarks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/control/commands.h"
#include "hvprof/setup/setup.h"

namespace hvprof::control {

struct RunOptions {
  setup::SetupOptions setup;
  std::string hvprofd_path;
  std::string hv_path;                   // hvprof-hv, started for a sim or linux run when none serves
  std::string domain_map;                // linux: given to that hvprof-hv
  std::string scenario;                  // sim: given to that hvprof-hv (a file or a name; empty: its
                                         // default). Its guests are profiled passively unless the
                                         // setup names domains
  uint64_t duration_ns = 1'000'000'000;  // how long to run a simulated machine, or to profile
                                         // a real one when there is no command
  uint32_t repeat = 1;
  std::string json_path;                 // the summary, if wanted
  std::string save_prefix = "run";       // sessions are saved as PREFIX-YYYYmmdd-HHMMSS[-k]
  std::vector<std::string> command;      // the workload; empty on a simulated machine is fine
  uint32_t top = 20;                     // symbols in the summary
  // --push: each run's stacks go to this Pyroscope server (push/profile.h); a failed push is a
  // warning and the summary's "push" says what happened, the sessions stay as they are.
  std::string push_url;
  std::string push_app = "hvprof";
  std::string push_tenant;
  // --baseline: after the runs, diff them (symbol by symbol) against this session (a name, a
  // path or archive:FILE), print the significant changes and put the diff in the summary.
  std::string baseline;
  // --fail-on-regression: with a baseline, a significant growth of at least this many points
  // makes the exit status kRegressionExit (negative: no gate).
  double fail_points = -1;
};

// The exit status of `hvprof run --fail-on-regression` when the gate fails and CMD succeeded.
inline constexpr int kRegressionExit = 5;
// ... and of `hvprof run --baseline` when the baseline (or a run) has no samples, so that nothing
// was compared, and CMD succeeded (hvprof-report --diff's status for it too).
inline constexpr int kEmptyBaselineExit = 6;

// Says something to the user as it is decided (on stderr), before the outcome.
using RunNotice = std::function<void(const std::string&)>;

// Runs the whole sequence and prints the report of (the last) run. Outcome::exit_code is the
// command's exit status (0 without a command). Whatever happens, hvprofd is shut down. `say`
// hears what was decided for the user on the way (an hvprof-hv of the run's own, and why).
Result<Outcome> RunProfile(const RunOptions& options, const RunNotice& say = {});

}  // namespace hvprof::control
