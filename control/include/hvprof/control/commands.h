// The actions of `hvprof`, the opcontrol-like command: each one is safe to repeat, and each
// wrong order of use gets its own message saying what to run instead.
#pragma once

#include <optional>
#include <string>

#include "hvprof/agent/agent_status.h"
#include "hvprof/agent/control_channel.h"
#include "hvprof/base/result.h"
#include "hvprof/control/hypervisor.h"
#include "hvprof/setup/setup.h"
#include "hvprof/store/session.h"

namespace hvprof::control {

using agent::Json;

// What a command printed and how it should exit.
struct Outcome {
  std::string message;  // for stdout
  int exit_code = 0;
  std::vector<std::string> warnings = {};  // for stderr: what went wrong without failing the command
};

struct AgentProcess {
  int pid = 0;
  bool running = false;    // alive: answering, or holding its lock
  bool answering = false;  // answered a ping on its control socket
  bool stale = false;      // a lock file names a dead agent
};

// Whether an hvprofd serves `paths` (its lock and control socket).
AgentProcess FindAgent(const store::SessionPaths& paths);

// --start-daemon: checks the setup, writes daemonrc.json, starts `hvprofd_path` and waits for
// it to report that profiling is set up (or why not). With `own_hypervisor`, a dom0 on sim or
// linux that no hvprof-hv serves starts one as it says (hypervisor.h), which --shutdown ends.
Result<Outcome> StartDaemon(const setup::SetupOptions& setup, const std::string& hvprofd_path,
                            const HypervisorSpec* own_hypervisor = nullptr);
// --reload: the running hvprofd's settings (daemonrc.json) become `setup`, when all that differs
// is what hvprofd can change while it runs (setup::CompareSettings); else refused, changing
// nothing. hvprofd says what it took.
Result<Outcome> Reload(const setup::SetupOptions& setup);
// --start, --stop, --dump, --shutdown, --reset, --save=NAME, --status. --shutdown finishes in
// bounded time: an hvprofd that does not answer within 5 s is terminated (SIGTERM, then
// SIGKILL), keeping what it had written; then the hvprof-hv --start-daemon started, if any, ends.
Result<Outcome> Start(const store::SessionPaths& paths);
Result<Outcome> Stop(const store::SessionPaths& paths);
Result<Outcome> Dump(const store::SessionPaths& paths);
// `end_own_hypervisor`: also end the hvprof-hv that --start-daemon started for `paths`, once
// hvprofd has gone (`hvprof run` keeps its own across repeats).
Result<Outcome> Shutdown(const store::SessionPaths& paths, bool end_own_hypervisor = true);
Result<Outcome> Reset(const store::SessionPaths& paths);
// The current session under `name`. One without samples is refused (kEmpty) unless `allow_empty`
// (hvprof run's own save of each run).
Result<Outcome> Save(const store::SessionPaths& paths, const std::string& name, bool allow_empty = false);
Result<Outcome> Status(const store::SessionPaths& paths);
// Advances a simulated machine by `duration_ns` with the agent draining as it goes.
Result<Outcome> RunSim(const store::SessionPaths& paths, uint64_t duration_ns);
// --list-events: the events of `cpu_type` (offline), or of the CPU that `platform`'s runs use
// when it is empty, with the default event as those runs take it. sim and linux ask the
// hvprof-hv serving `hv_run_dir`; on linux, when none serves, one started for the question
// (`hv_path`) and ended again.
struct EventListing {
  std::string cpu_type;
  std::string platform;
  std::string hv_run_dir;
  std::string hv_path;
};
Result<Outcome> ListEvents(const EventListing& listing);

// `hvprof --status`'s text: an agent's status, with what the agent names escaped for the
// terminal.
std::string FormatStatus(const agent::AgentStatus& status);
// A guest: hands its symbolized profile to dom0 (`hvprof --publish`).
Result<Outcome> Publish(const store::SessionPaths& paths);

}  // namespace hvprof::control
