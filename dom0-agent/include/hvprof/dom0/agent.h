// hvprofd --role=dom0: the primary profiler. It recovers whatever a crashed predecessor left in
// the hypervisor, configures profiling (the Xenoprof sequence: init, buffers, active and
// passive lists, counters, enable_virq), then drains its own, its pCPU and the passive
// domains' rings into the session store, and answers `hvprof` over its control socket.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/agent/ring_set.h"
#include "hvprof/agent/session_writer.h"
#include "hvprof/base/error.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/control/channel.h"
#include "hvprof/control/setup.h"

namespace hvprof::dom0 {

class Dom0Agent {
 public:
  // Everything up to dom0's enable_virq. A failure leaves the hypervisor as it was found
  // (recovered to idle) and says what to fix.
  static Result<std::unique_ptr<Dom0Agent>> Create(const control::SetupOptions& setup,
                                                   const std::string& hvprof_version);
  ~Dom0Agent();

  // Serves control requests and drains until shutdown (a request, SIGTERM or SIGINT).
  Result<void> Run();
  // Async-signal-safe.
  void RequestShutdown();
  static void HandleSignals(Dom0Agent* agent);

  // A one-line summary of what was configured, for `hvprof --start-daemon` to print.
  std::string Describe() const;

 private:
  Dom0Agent(control::SetupOptions setup, std::unique_ptr<agent::HypervisorLink> link);

  Result<void> Recover();
  Result<void> Configure(const std::string& hvprof_version);
  Result<void> Op(uint32_t op, std::span<std::byte> argument, bool tolerate_refusal = false);
  template <typename T>
  Result<void> Op(uint32_t op, T* argument) {
    return Op(op, std::as_writable_bytes(std::span(argument, 1)));
  }
  Result<hvpmu::Status> EngineStatus();

  void DrainAll();
  uint32_t PollIntervalMs() const;
  control::Json Handle(const control::Json& request);
  Result<control::Json> Start();
  Result<control::Json> Stop();
  Result<control::Json> Dump();
  Result<control::Json> Reset();
  Result<control::Json> Save(const std::string& name);
  Result<control::Json> Shutdown();
  Result<control::Json> RunSim(uint64_t duration_ns);
  Result<control::Json> Status();
  void UpdateMetadata(const hvpmu::Status& status);
  std::string DomainLabel(uint16_t id) const;

  control::SetupOptions setup_;
  store::SessionPaths paths_;
  std::unique_ptr<agent::HypervisorLink> link_;
  hvpmu::InitV2 pmu_{};
  std::vector<control::ResolvedEvent> events_;
  std::vector<control::DomainInfo> domains_;
  std::vector<uint16_t> active_;
  std::vector<uint16_t> passive_;
  std::vector<store::ImageRecord> images_;
  agent::RingSet rings_;
  std::unique_ptr<agent::SessionWriter> session_;
  store::SessionMetadata base_metadata_;
  ScopedFd control_;
  uint32_t capacity_ = 0;
  uint32_t watermark_ = 0;
  bool profiling_ = false;
  bool configured_ = false;
  std::atomic<bool> shutdown_requested_{false};
  ScopedFd wake_;  // eventfd written by RequestShutdown
  std::vector<std::string> notes_;
};

}  // namespace hvprof::dom0
