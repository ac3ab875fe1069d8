// hvprofd --role=dom0: the primary profiler. It recovers whatever a crashed predecessor left in
// the hypervisor, configures profiling (the Xenoprof sequence: init, buffers, active and
// passive lists, counters, enable_virq), then drains its own, its pCPU and the passive
// domains' rings into the session store, and answers `hvprof` over its control socket.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvprof/agent/agent_daemon.h"
#include "hvprof/base/result.h"
#include "hvprof/setup/setup.h"

namespace hvprof::dom0 {

class Dom0Agent final : public agent::AgentDaemon {
 public:
  // Everything up to dom0's enable_virq, through `link` (hvprof-hv's, or Xen's). A failure
  // leaves the hypervisor as it was found (recovered to idle) and says what to fix.
  static Result<std::unique_ptr<Dom0Agent>> Create(const setup::SetupOptions& setup,
                                                   const std::string& hvprof_version,
                                                   std::unique_ptr<agent::HypervisorLink> link,
                                                   agent::SetupProgress progress = {});

  std::string Describe() const override;

 private:
  Dom0Agent(setup::SetupOptions setup, std::unique_ptr<agent::HypervisorLink> link);

  // Unwinds what an earlier hvprofd left behind (`own_setup` false: noted as such), or what
  // this one set up before its setup failed.
  Result<void> Recover(bool own_setup = false);
  Result<void> RecoverXenoprof(bool own_setup);
  // Xen's teardown, each step allowed to fail: what it found.
  struct Unwound {
    bool was_profiling = false;
    bool was_primary = false;  // a primary that had not shut down
  };
  Result<Unwound> UnwindXenoprof();
  // init: the PMU as the agent needs to know it.
  Result<hvpmu::InitV2> Identify();
  Result<void> Configure(const std::string& hvprof_version);
  // Configure's parts.
  Result<void> ChooseEvents(const hvpmu::InitV2& init, const hvpmu::CpuEventTable& table);
  Result<void> ChooseDomains();
  Result<void> CheckImages();
  store::SessionMetadata SessionMetadataFor(const hvpmu::InitV2& init, const std::string& hvprof_version);
  Result<void> SetUp();
  // Passes how far the setup got to whoever started this agent.
  void Advance(std::string_view what, uint64_t done, uint64_t total) const;

  Result<agent::Json> Start() override;
  Result<agent::Json> Stop() override;
  Result<agent::Json> Shutdown() override;
  Result<agent::AgentStatus> Status() override;
  Result<agent::Json> ReloadSettings() override;
  // The bytes the build-id cache keeps, as the setup asks.
  uint64_t BuildIdCacheBytes() const;
  Result<agent::Json> HandleOther(const std::string& action, const agent::Json& request) override;
  uint32_t PollIntervalMs() const override;
  void OnTick() override;
  void OnDump() override;
  // Takes the profiles active guests published into the session (published/domain-N.json).
  void CollectPublished();
  // The processes of dom0 and of every passive domain whose processes the platform shows
  // (host processes on linux), as they are now: processes come and go while profiling.

  Result<agent::Json> RunSim(uint64_t duration_ns);
  // --continuous: profiling starts with the agent, and the first window opens.
  Result<void> StartContinuous();
  // The clock continuous mode's windows close by: the simulated time on the sim, else the wall
  // clock. nullopt when the sim does not answer.
  std::optional<uint64_t> WindowClockNs();
  std::string DomainLabel(uint16_t id) const;

  setup::SetupOptions setup_;
  hvpmu::InitV2 pmu_{};
  std::vector<setup::ResolvedEvent> events_;
  double peak_rate_ = 0;  // agent::PeakSampleRate of events_, summed: how fast a CPU's ring may fill
  std::vector<setup::DomainInfo> domains_;
  std::vector<uint16_t> active_;
  std::vector<uint16_t> passive_;
  // Xen's buffers per domain: one per vCPU, where xenstore does not list a domain's vCPUs
  // (Xen 4.17 writes no /local/domain/0/cpu).
  std::map<uint16_t, uint32_t> xen_buffers_;
  std::vector<store::ImageRecord> images_;
  agent::SetupProgress progress_;
  uint32_t capacity_ = 0;
  uint32_t watermark_ = 0;
  uint64_t published_seen_ = 0;  // the last publication taken
  std::chrono::steady_clock::time_point last_collect_{};
};

}  // namespace hvprof::dom0
