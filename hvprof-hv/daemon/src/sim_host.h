// hvprof-hv's simulated host: a scenario's machine (sim/machine.h) with the engine on it,
// sampling through the simulated CPU's PMU or the engine's timer, as Xen's `hvprof=` boot option
// chooses. Its clock runs in real time (scaled), or at full speed as far as dom0 asks.
#pragma once

#include <memory>

#include "host.h"
#include "hvpmu/pmu_drivers.h"
#include "hvpmu/timer_source.h"
#include "hvprof/sim/machine.h"
#include "hvprof/sim/scenario.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace hvprof::hv {

class SimHost final : public Host, public SimulatedClock {
 public:
  static hvprof::Result<std::unique_ptr<SimHost>> Create(const DaemonOptions& options, MachineLock& lock);
  ~SimHost() override;

  PlatformKind kind() const override { return PlatformKind::kSim; }
  std::string_view platform_name() const override { return "sim"; }
  const std::string& machine_name() const override { return scenario_.name; }
  uint32_t num_cpus() const override { return scenario_.machine.cpus; }
  std::vector<ServedDomain> ServedDomains() const override;
  hosted::HostedPlatform& platform() override;
  hvpmu::Engine& engine() override { return *engine_; }
  void RunMachine(const std::function<void()>& runs_due) override;
  hvpmu::ErrorCode DoOp(hvpmu::DomainId domain, uint32_t op, void* argument, uint32_t size) override;
  context::DomainImages Images(hvpmu::DomainId domain, hvpmu::DomainId asker) override;
  std::vector<context::DomainInfo> Domains() override;
  context::ContextEventBatch ContextEvents(hvpmu::DomainId caller, uint64_t from, uint32_t max, uint32_t flags) override;
  context::PlatformInfo Info() override;
  SimulatedClock* clock() override { return this; }
  void Shutdown() override;

  uint64_t now_ns() const override { return machine_->now_ns(); }
  bool halted() const override { return halted_; }
  uint64_t pmis_delivered() const override { return machine_->pmis_delivered(); }
  void RunTo(uint64_t target_ns) override;
  context::GroundTruth GroundTruth() override { return machine_->GroundTruth(); }
  void ResetGroundTruth() override { machine_->ResetGroundTruth(); }
  SimXenTrace& XenTrace() override;

 private:
  SimHost(MachineLock& lock, std::string ground_truth_path);
  hvprof::Result<void> Start(const DaemonOptions& options);

  MachineLock& lock_;
  std::string ground_truth_path_;  // written at shutdown, if set
  sim::Scenario scenario_;
  hvprof::symbolizer::Symbolizer symbolizer_;
  std::unique_ptr<sim::SimMachine> machine_;
  std::unique_ptr<hvpmu::PmuDrivers> drivers_;
  std::unique_ptr<hvpmu::TimerSource> timer_;  // when the timer samples
  std::unique_ptr<hvpmu::Engine> engine_;
  std::unique_ptr<SimXenTrace> xen_trace_;     // once dom0 (the fake Xen) asks for it
  uint64_t run_target_ns_ = 0;                 // max speed: run until this simulated time
  std::vector<uint64_t> due_ns_;               // dom0's runs waiting for the clock: their ends
  bool halted_ = false;
};

}  // namespace hvprof::hv
