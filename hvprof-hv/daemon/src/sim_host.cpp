#include "sim_host.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "xen_trace.h"

namespace hvprof::hv {

using hvpmu::DomainId;
using hvpmu::DomainType;
using hvpmu::ErrorCode;
using hvprof::ErrorKind;
using hvprof::Log;
using hvprof::LogLevel;
using hvprof::MakeError;
using hvprof::Result;
namespace legacy = hvpmu::legacy;

namespace {

constexpr uint64_t kMachineStepNs = 1'000'000;
// Max speed: how full a guest-consumed ring may get before the clock waits, and for how long.
constexpr uint32_t kCatchUpPercent = 50;
constexpr int kMaxCatchUpMs = 500;

}  // namespace

SimHost::SimHost(MachineLock& lock, std::string ground_truth_path)
    : lock_(lock), ground_truth_path_(std::move(ground_truth_path)) {}

SimHost::~SimHost() = default;

Result<std::unique_ptr<SimHost>> SimHost::Create(const DaemonOptions& options, MachineLock& lock) {
  if (options.scenario_path.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "--platform=sim needs --scenario=FILE (try examples/default.json)");
  }
  std::unique_ptr<SimHost> host(new SimHost(lock, options.ground_truth_path));
  HVPROF_TRYV(host->Start(options));
  return host;
}

Result<void> SimHost::Start(const DaemonOptions& options) {
  HVPROF_TRY(scenario, sim::LoadScenario(options.scenario_path));
  scenario_ = std::move(scenario);
  if (options.seed) scenario_.run_seed = *options.seed;
  if (options.speed) scenario_.run.speed = *options.speed;
  if (options.factor) scenario_.run.factor = *options.factor;
  if (options.duration_ns) scenario_.run.duration_ns = *options.duration_ns;

  HVPROF_TRY(machine, sim::SimMachine::Create(scenario_, symbolizer_));
  machine_ = std::move(machine);
  for (const std::string& note : machine_->notes()) Log(LogLevel::kInfo, "{}", note);
  drivers_ = std::make_unique<hvpmu::PmuDrivers>(machine_->platform());
  hvpmu::PmuDriver* driver = options.sample_source == "timer" ? nullptr : drivers_->Detect();
  if (driver == nullptr && options.sample_source == "pmu") {
    return MakeError(ErrorKind::kUnsupported,
                     "the simulated CPU ({}) has no PMU the engine's drivers know, and --sample-source=pmu asks "
                     "for one; use --sample-source=auto or timer to sample with the engine's timer",
                     sim::PmuModelName(scenario_.machine.pmu));
  }
  if (driver == nullptr) {
    // As Xen with hvprof's engine does on a CPU whose counters do not count.
    timer_ = std::make_unique<hvpmu::TimerSource>(machine_->platform());
    driver = timer_.get();
  }
  engine_ = std::make_unique<hvpmu::Engine>(machine_->platform(), driver);
  machine_->AttachEngine(engine_.get());
  Log(LogLevel::kInfo, "machine '{}': {} CPUs, {} ({}), {} domains, seed {}", scenario_.name,
      scenario_.machine.cpus, sim::PmuModelName(scenario_.machine.pmu), driver->cpu_type(),
      scenario_.domains.size(), scenario_.run_seed.value_or(scenario_.seed));
  if (scenario_.run.speed == sim::Speed::kMax && scenario_.run.duration_ns == 0) {
    Log(LogLevel::kInfo, "speed max: the clock advances only when dom0 asks for a run");
  }
  return hvprof::Ok();
}

hosted::HostedPlatform& SimHost::platform() { return machine_->platform(); }

std::vector<ServedDomain> SimHost::ServedDomains() const {
  std::vector<ServedDomain> served;
  for (const sim::DomainSpec& domain : scenario_.domains) served.push_back({domain.id, domain.socket_uid});
  return served;
}

void SimHost::RunMachine(const std::function<void()>& runs_due) {
  using Clock = std::chrono::steady_clock;
  const sim::RunSpec& run = scenario_.run;
  const auto wall_start = Clock::now();
  std::unique_lock lock(lock_.mutex);
  const uint64_t sim_start = machine_->now_ns();
  bool gave_up_catching_up = false;
  while (!lock_.stopping) {
    const uint64_t now = machine_->now_ns();
    if (run.duration_ns != 0 && now >= run.duration_ns && !halted_) {
      halted_ = true;
      Log(LogLevel::kInfo, "simulated duration of {} ms reached; the machine halts", run.duration_ns / 1'000'000);
    }
    uint64_t step = kMachineStepNs;
    if (halted_) {
      lock_.wake.wait(lock);
      continue;
    }
    if (run.speed == sim::Speed::kMax) {
      if (now >= run_target_ns_) {
        lock_.wake.wait(lock);
        continue;
      }
      step = std::min(step, run_target_ns_ - now);
    } else {
      const auto deadline = wall_start + std::chrono::nanoseconds(static_cast<int64_t>(
                                             static_cast<double>(now + step - sim_start) / run.factor));
      if (lock_.wake.wait_until(lock, deadline, [this] { return lock_.stopping.load(); })) break;
    }
    if (run.duration_ns != 0) step = std::min(step, run.duration_ns - machine_->now_ns());
    machine_->RunFor(step);
    // Let a waiting request in before the next step: a run of up to kMaxSimRunNs at full speed
    // takes wall-clock minutes, and every domain's requests would wait for it.
    lock_.wake.wait(lock, [this] { return lock_.waiters.load() == 0 || lock_.stopping.load(); });
    if (run.speed == sim::Speed::kMax) {
      // At full speed the clock outruns agents that drain on their own schedule (active
      // guests): let them catch up rather than lose samples no real machine would lose. An
      // agent that does not drain within the grace time loses samples, as on real hardware, and
      // is not waited for again until the rings drain: a dead agent must not stall the machine.
      int waited = 0;
      for (; !gave_up_catching_up && waited < kMaxCatchUpMs && !lock_.stopping &&
             engine_->FullestRingPercent(engine_->primary()) >= kCatchUpPercent;
           ++waited) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        lock.lock();
      }
      if (waited == kMaxCatchUpMs) gave_up_catching_up = true;
      if (gave_up_catching_up && engine_->FullestRingPercent(engine_->primary()) < kCatchUpPercent) {
        gave_up_catching_up = false;
      }
    }
    const uint64_t after = machine_->now_ns();
    const size_t waiting = due_ns_.size();
    std::erase_if(due_ns_, [after](uint64_t due) { return after >= due; });
    if (due_ns_.size() != waiting || (run.duration_ns != 0 && after >= run.duration_ns)) runs_due();
  }
}

void SimHost::RunTo(uint64_t target_ns) {
  run_target_ns_ = std::max(run_target_ns_, target_ns);
  due_ns_.push_back(target_ns);
}

ErrorCode SimHost::DoOp(DomainId domain, uint32_t op, void* argument, uint32_t size) {
  const ErrorCode error = engine_->DoOp(domain, op, argument, size);
  // A run of a set duration at full speed starts its clock with the profiler.
  if (error == ErrorCode::kOk && op == legacy::kOpStart && scenario_.run.speed == sim::Speed::kMax &&
      scenario_.run.duration_ns != 0) {
    run_target_ns_ = std::max(run_target_ns_, scenario_.run.duration_ns);
  }
  return error;
}

context::DomainImages SimHost::Images(DomainId domain, DomainId asker) {
  // As on Xen, a guest's images are its own: dom0 learns nothing of them.
  if (domain != asker) return {};
  return machine_->Images(domain);
}

std::vector<context::DomainInfo> SimHost::Domains() {
  std::vector<context::DomainInfo> list;
  for (const sim::DomainSpec& domain : scenario_.domains) {
    const char* kind = domain.type == DomainType::kHvm    ? "hvm"
                       : domain.type == DomainType::kPv32 ? "pv32"
                                                          : "pv";
    list.push_back({.id = domain.id,
                    .name = domain.name,
                    .type = kind,
                    .vcpus = domain.vcpus,
                    .kernel = machine_->kernel_source(domain.id)});
  }
  return list;
}

context::ContextEventBatch SimHost::ContextEvents(DomainId caller, uint64_t from, uint32_t max, uint32_t) {
  // The sim's processes are the scenario's, and the runs of its churned programs: each domain's
  // own, as with kContext.
  auto lock = lock_.Take();
  return machine_->ContextEvents(caller, from, max);
}

context::PlatformInfo SimHost::Info() {
  context::PlatformInfo info;
  info.notes = machine_->notes();
  // The simulated CPUs' clock: what a rate (-F) turns into cycle counts with.
  info.nominal_mhz = scenario_.machine.mhz;
  return info;
}

SimXenTrace& SimHost::XenTrace() {
  if (!xen_trace_) xen_trace_ = std::make_unique<SimXenTrace>(*machine_);
  return *xen_trace_;
}

void SimHost::Shutdown() {
  if (ground_truth_path_.empty()) return;
  if (auto written = hvprof::WriteFileAtomically(
          ground_truth_path_,
          context::ToJson(machine_->GroundTruth()).dump(1, ' ', false, nlohmann::json::error_handler_t::replace)); !written) {
    Log(LogLevel::kError, "{}", written.error().message());
  } else {
    Log(LogLevel::kInfo, "ground truth written to {}", ground_truth_path_);
  }
}

}  // namespace hvprof::hv
