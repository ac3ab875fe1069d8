// hvprofd --role=guest: the profiler of an active domain. `--start` joins the profiling dom0
// set up (init as a non-primary, get_buffer, enable_virq); from then on the agent drains its
// own rings into its own session, symbolized with what only this domain has: its kernel and
// its processes. `--publish` hands the symbolized profile to dom0.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvprof/agent/agent_daemon.h"
#include "hvprof/base/result.h"
#include "hvprof/setup/setup.h"

namespace hvprof::guest {

class GuestAgent final : public agent::AgentDaemon {
 public:
  // Connects to the hypervisor as domain `setup.domain` and listens for `hvprof`; nothing is
  // asked of the hypervisor until --start.
  static Result<std::unique_ptr<GuestAgent>> Create(const setup::SetupOptions& setup,
                                                    const std::string& hvprof_version,
                                                    std::unique_ptr<agent::HypervisorLink> link);

  std::string Describe() const override;

 private:
  GuestAgent(setup::SetupOptions setup, std::string version, std::unique_ptr<agent::HypervisorLink> link);

  Result<agent::Json> Start() override;
  Result<agent::Json> Stop() override;
  Result<agent::Json> Shutdown() override;
  Result<agent::AgentStatus> Status() override;
  Result<agent::Json> HandleOther(const std::string& action, const agent::Json& request) override;
  uint32_t PollIntervalMs() const override;

  // Hands the profile `hvprof --publish` made of this domain's session (request's "profile") to
  // dom0; under Xen 4.17, which carries nothing between domains, writes it into the session for
  // the admin to copy.
  Result<agent::Json> Publish(const agent::Json& request);
  // Checks that dom0 has set profiling up with this domain active, and says what to run if not.
  Result<void> CheckJoinable(const hvpmu::Status& status) const;
  // What the counters count: as dom0 set them up (the engine says), or as this agent's --event
  // options say (Xen tells a guest nothing).
  std::vector<store::EventRecord> EventsOf(const hvpmu::InitV2& init, const hvpmu::Status& status) const;
  Result<std::vector<store::EventRecord>> EventsFromSetup(const hvpmu::InitV2& init) const;
  Result<store::SessionMetadata> SessionDescription(const hvpmu::InitV2& init, std::vector<store::EventRecord> events,
                                                    uint32_t backtrace_depth);
  Result<agent::Json> StartXenoprof();
  // Opens the session this domain profiles into once it has joined.
  Result<agent::Json> BeginSession(store::SessionMetadata metadata);
  Result<agent::Json> LeaveXenoprof();
  std::string Label() const;

  setup::SetupOptions setup_;
  std::string version_;
  std::string name_;  // this domain's name, as the platform knows it
  uint32_t capacity_ = 0;
  uint32_t watermark_ = 0;
  double peak_rate_ = 0;  // agent::PeakSampleRate of dom0's events, summed
  bool activated_ = false;
  // Xen: this agent's get_buffer succeeded and its rings are mapped (enable_virq may not have).
  bool xen_buffer_ = false;
  std::optional<store::SessionMetadata> xen_session_;
};

}  // namespace hvprof::guest
