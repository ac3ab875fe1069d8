#include "linux_host.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "hvprof/base/log.h"

namespace hvprof::hv {

using hvpmu::DomainId;
using hvpmu::ErrorCode;
using hvprof::Log;
using hvprof::LogLevel;
using hvprof::Result;
namespace legacy = hvpmu::legacy;
namespace ring = hvpmu::ring;

LinuxHost::~LinuxHost() = default;

Result<std::unique_ptr<LinuxHost>> LinuxHost::Create(const DaemonOptions& options, MachineLock& lock) {
  linux_host::LinuxOptions linux_options;
  HVPROF_TRY(map, linux_host::ParseDomainMap(options.domain_map));
  linux_options.domain_map = std::move(map);
  linux_options.force_software = options.force_software;
  HVPROF_TRY(machine, linux_host::LinuxMachine::Create(linux_options));
  std::unique_ptr<LinuxHost> host(new LinuxHost(lock));
  host->machine_ = std::move(machine);
  linux_host::LinuxMachine& linux = *host->machine_;
  for (const std::string& note : linux.notes()) Log(LogLevel::kInfo, "{}", note);
  host->engine_ = std::make_unique<hvpmu::Engine>(linux.platform(), linux.driver());
  linux.AttachEngine(host->engine_.get());
  Log(LogLevel::kInfo, "host '{}': {} CPUs, sampled through perf_event_open ({})", linux.machine_name(),
      linux.platform().NumCpus(), linux.driver() != nullptr ? linux.driver()->cpu_type() : "no driver");
  return host;
}

uint32_t LinuxHost::num_cpus() const { return machine_->platform().NumCpus(); }

hosted::HostedPlatform& LinuxHost::platform() { return machine_->platform(); }

void LinuxHost::RunMachine(const std::function<void()>&) {
  // Drain always, not only while profiling: the side band (fork, exec, mmap) flows from
  // setup_events to release_counters, and samples go to the engine as they come.
  while (!lock_.stopping) {
    if (auto waited = machine_->WaitForSamples(std::chrono::milliseconds(100)); !waited) {
      Log(LogLevel::kError, "{}", waited.error().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    std::lock_guard lock(lock_.mutex);
    machine_->DrainSamples();
  }
}

ErrorCode LinuxHost::DoOp(DomainId domain, uint32_t op, void* argument, uint32_t size) {
  // perf records the call chains the agent asks for, up to the ring's limit.
  if (op == legacy::kOpSetBacktrace && size == sizeof(legacy::BacktraceDepthArg)) {
    legacy::BacktraceDepthArg depth;
    std::memcpy(&depth, argument, sizeof depth);
    machine_->set_callchain_depth(static_cast<uint32_t>(std::min<uint64_t>(depth, ring::kMaxBacktraceDepth)));
  }
  const ErrorCode error = engine_->DoOp(domain, op, argument, size);
  // What perf_event_open said, in the log: the engine's code alone (a busy counter) does not.
  if (error != ErrorCode::kOk && !machine_->last_error().empty() &&
      (op == legacy::kOpReserveCounters || op == legacy::kOpSetupEvents || op == legacy::kOpStart)) {
    Log(LogLevel::kError, "{}", machine_->last_error());
  }
  return error;
}

context::DomainImages LinuxHost::Images(DomainId domain, DomainId) { return machine_->Images(domain); }

context::ContextEventBatch LinuxHost::ContextEvents(DomainId caller, uint64_t from, uint32_t max, uint32_t flags) {
  if ((flags & kContextEventsSettle) != 0) {
    {
      auto lock = lock_.Take();
      machine_->DrainSamples();  // the latest mappings, whose files are then read
    }
    // Without holding up the drains, at most 2 s: a file still unread then keeps its guess.
    machine_->WaitForImages(std::chrono::seconds(2));
  }
  auto lock = lock_.Take();
  machine_->DrainSamples();  // the latest forks, execs and mappings
  // What came before `from` dom0 has: it need not be kept (the only agent of the host's
  // processes is dom0's).
  if (caller == 0) machine_->AcknowledgeContextEvents(from);
  return machine_->TakeContextEvents(from, max);
}

context::PlatformInfo LinuxHost::Info() {
  context::PlatformInfo info;
  info.stats = machine_->Stats();
  info.notes = machine_->notes();
  info.last_error = machine_->last_error();
  info.nominal_mhz = info.stats->nominal_mhz;
  return info;
}

}  // namespace hvprof::hv
