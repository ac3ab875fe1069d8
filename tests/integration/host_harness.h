// A simulated host run by the real programs: hvprof-hv (at maximum speed, so the clock only
// moves when asked), and hvprof / hvprof-report invoked as a user would.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/context/context_event.h"
#include "hvprof/context/ground_truth.h"
#include "programs.h"
#include "temp_dir.h"

namespace hvprof::testing {

class Host {
 public:
  // `seed`: hvprof-hv --seed, the run's randomness (the workload stays the scenario's).
  explicit Host(const nlohmann::json& scenario, std::optional<uint64_t> seed = {});
  ~Host();

  // hvprof with --run-dir and --session-dir of this host added (and `environment`).
  CommandResult Hvprof(std::vector<std::string> args, const std::vector<std::string>& environment = {});
  // hvprof as run inside guest `domain`: --domain=N and that guest's own session root.
  CommandResult GuestHvprof(uint16_t domain, std::vector<std::string> args,
                            const std::vector<std::string>& environment = {});
  std::string guest_root(uint16_t domain) const { return dir_.File("guest-" + std::to_string(domain)); }
  std::string guest_current(uint16_t domain) const { return guest_root(domain) + "/samples/current"; }
  pid_t GuestAgentPid(uint16_t domain) const;
  // hvprof-report on this host's session root.
  CommandResult Report(std::vector<std::string> args);
  std::unique_ptr<agent::HypervisorLink> Connect(uint16_t domain) const;
  // The sim's ground truth (`reset`: counted again from now); REQUIREs that hvprof-hv gives it.
  context::GroundTruth GroundTruth(bool reset) const;
  pid_t AgentPid() const;  // from the session root's lock file
  pid_t HypervisorPid() const { return hv_pid_; }
  // Ends hvprof-hv as a crash would (SIGKILL) and reaps it.
  void KillHypervisor();

  const std::string& run_dir() const { return run_dir_; }
  const std::string& session_root() const { return session_root_; }
  std::string current() const { return session_root_ + "/samples/current"; }

 private:
  TempDir dir_;
  std::string run_dir_;
  std::string session_root_;
  pid_t hv_pid_ = -1;
  std::vector<uint16_t> guests_;  // whose agents to shut down at the end
};

// Rewrites the context.hvc of the session in `directory` with `edit` applied to each of its events
// (in the platform's form: a mapping names its file by path): what a test that forges the
// processes a session saw does. REQUIREs that the file reads and is written back.
void EditContext(const std::string& directory, const std::function<void(context::ContextEvent&)>& edit);

// Waits (up to 10 s) until the hvprofd of `session_root` says profiling is on; whether it did.
bool WaitForProfiling(const std::string& session_root);

}  // namespace hvprof::testing
