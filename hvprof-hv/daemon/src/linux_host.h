// hvprof-hv's Linux host: this machine through perf_event_open (linux/linux_machine.h), with the
// engine on it. Only dom0 has an agent: the other domains are process trees of this host or KVM
// guests (--domain-map), profiled from dom0.
#pragma once

#include <memory>

#include "host.h"
#include "hvprof/linux/linux_machine.h"

namespace hvprof::hv {

class LinuxHost final : public Host {
 public:
  static hvprof::Result<std::unique_ptr<LinuxHost>> Create(const DaemonOptions& options, MachineLock& lock);
  ~LinuxHost() override;

  PlatformKind kind() const override { return PlatformKind::kLinux; }
  std::string_view platform_name() const override { return "linux"; }
  const std::string& machine_name() const override { return machine_->machine_name(); }
  uint32_t num_cpus() const override;
  std::vector<ServedDomain> ServedDomains() const override { return {ServedDomain{}}; }
  hosted::HostedPlatform& platform() override;
  hvpmu::Engine& engine() override { return *engine_; }
  void RunMachine(const std::function<void()>& runs_due) override;
  void Wake() override { machine_->Wake(); }
  hvpmu::ErrorCode DoOp(hvpmu::DomainId domain, uint32_t op, void* argument, uint32_t size) override;
  context::DomainImages Images(hvpmu::DomainId domain, hvpmu::DomainId asker) override;
  std::vector<context::DomainInfo> Domains() override { return machine_->Domains(); }
  context::ContextEventBatch ContextEvents(hvpmu::DomainId caller, uint64_t from, uint32_t max, uint32_t flags) override;
  context::PlatformInfo Info() override;

 private:
  explicit LinuxHost(MachineLock& lock) : lock_(lock) {}

  MachineLock& lock_;
  std::unique_ptr<linux_host::LinuxMachine> machine_;
  std::unique_ptr<hvpmu::Engine> engine_;
};

}  // namespace hvprof::hv
