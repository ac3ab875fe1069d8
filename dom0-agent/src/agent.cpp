#include "hvprof/dom0/agent.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"

namespace hvprof::dom0 {

using agent::Json;
using hvpmu::ErrorCode;
namespace legacy = hvpmu::legacy;
namespace ring = hvpmu::ring;

Dom0Agent::Dom0Agent(setup::SetupOptions setup, std::unique_ptr<agent::HypervisorLink> link)
    : AgentDaemon("dom0", store::SessionPaths{setup.session_root}, std::move(link)), setup_(std::move(setup)) {}

void Dom0Agent::Advance(std::string_view what, uint64_t done, uint64_t total) const {
  if (progress_) progress_(what, done, total);
}

std::string Dom0Agent::DomainLabel(uint16_t id) const {
  for (const auto& domain : domains_) {
    if (domain.id == id) return store::DomainName(id, domain.name);
  }
  return store::DomainName(id, "");
}

Result<std::unique_ptr<Dom0Agent>> Dom0Agent::Create(const setup::SetupOptions& setup,
                                                     const std::string& hvprof_version,
                                                     std::unique_ptr<agent::HypervisorLink> link,
                                                     agent::SetupProgress progress) {
  if (link->platform_name() != setup.platform) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "the hvprof-hv at {} runs the {} platform, not --platform={}; start `hvprof-hv "
                     "--platform={}` (or give the --run-dir of one)",
                     setup.hv_run_dir.empty() ? std::string("its default run directory") : setup.hv_run_dir,
                     link->platform_name(), setup.platform, setup.platform);
  }
  if (link->domain() != 0) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "the hypervisor says this is domain {}, not dom0; the primary profiler runs in dom0",
                     link->domain());
  }
  std::unique_ptr<Dom0Agent> agent(new Dom0Agent(setup, std::move(link)));
  agent->progress_ = std::move(progress);
  HVPROF_TRYV(agent->LockProfiler(setup.session_root));
  HVPROF_TRYV(agent->Recover());
  if (auto configured = agent->Configure(hvprof_version); !configured) {
    // Leave the hypervisor as we found it.
    agent->rings_.Clear();
    (void)agent->Recover(/*own_setup=*/true);
    return configured.error();
  }
  if (setup.continuous()) {
    if (auto started = agent->StartContinuous(); !started) {
      agent->rings_.Clear();
      (void)agent->Recover(/*own_setup=*/true);
      return started.error().WithContext("--continuous");
    }
  }
  return agent;
}

Result<void> Dom0Agent::StartContinuous() {
  HVPROF_TRYV(Start());
  const std::optional<uint64_t> now = WindowClockNs();
  if (!now) return MakeError(ErrorKind::kIo, "the simulated machine does not say its time");
  BeginContinuous(setup_.window_ns, {.bytes = setup_.keep_bytes, .age_ns = setup_.keep_age_ns},
                  link_->platform_name() == "sim", *now);
  return Ok();
}

std::optional<uint64_t> Dom0Agent::WindowClockNs() {
  if (link_->platform_name() != "sim") return agent::WallClockNs();
  auto clock = link_->SimQuery();
  if (!clock) return std::nullopt;
  return clock.value().sim_time_ns;
}

Result<void> Dom0Agent::Recover(bool own_setup) {
  if (link_->legacy_only()) return RecoverXenoprof(own_setup);
  HVPROF_TRY(status, EngineStatus());
  const auto state = static_cast<hvpmu::EngineState>(status.state);
  if (state == hvpmu::EngineState::kIdle) return Ok();
  if (status.primary != 0 && status.primary != hvpmu::kDomainInvalid) {
    return MakeError(ErrorKind::kBusy, "domain {} is the primary profiler; only one may run",
                     status.primary);
  }
  // A previous hvprofd died without shutting down, or a configuration failed half way:
  // unwind the hypervisor's state in the order Xen's would be unwound.
  const char* found = agent::EngineStateName(status.state);
  if (state == hvpmu::EngineState::kProfiling) {
    HVPROF_TRYV(Op(legacy::kOpStop, {}, true));
  }
  HVPROF_TRYV(Op(legacy::kOpDisableVirq, {}, true));
  HVPROF_TRYV(Op(legacy::kOpReleaseCounters, {}, true));
  HVPROF_TRYV(Op(legacy::kOpResetPassiveList, {}, true));
  HVPROF_TRYV(Op(legacy::kOpResetActiveList, {}, true));
  HVPROF_TRYV(Op(legacy::kOpShutdown, {}, true));
  HVPROF_TRY(after, EngineStatus());
  if (after.state != static_cast<uint32_t>(hvpmu::EngineState::kIdle)) {
    return MakeError(ErrorKind::kBadState,
                     "the hypervisor's profiler is stuck in state '{}' after recovery; restart hvprof-hv",
                     agent::EngineStateName(after.state));
  }
  if (own_setup) {
    Log(LogLevel::kInfo, "undid the profiling setup ('{}') this hvprofd had made before it failed", found);
  } else {
    const std::string note = fmt::format(
        "recovered the hypervisor's profiling state ('{}') that an earlier hvprofd left behind", found);
    Log(LogLevel::kWarning, "{}", note);
    notes_.push_back(note);
  }
  rings_.Clear();
  return Ok();
}

Result<void> Dom0Agent::RecoverXenoprof(bool own_setup) {
  HVPROF_TRY(unwound, UnwindXenoprof());
  if (own_setup) {
    Log(LogLevel::kInfo, "undid the xenoprof setup this hvprofd had made before it failed");
  } else if (unwound.was_primary) {
    const std::string note = fmt::format("recovered the xenoprof state an earlier hvprofd left behind{}",
                                         unwound.was_profiling ? " (it was still profiling)" : "");
    Log(LogLevel::kWarning, "{}", note);
    notes_.push_back(note);
  }
  return Ok();
}

Result<Dom0Agent::Unwound> Dom0Agent::UnwindXenoprof() {
  // Xen cannot say what state it is in, and its primary is dom0, not a process: the state is
  // unwound blind, each step allowed to fail (docs/xen.md). stop and release_counters come
  // before init, which Xen lets jump to INITIALIZED from any state with the counters still
  // reserved. init makes this the primary whatever the earlier agent did, so that set_active(0)
  // (Xen allows it only in INITIALIZED) lets disable_virq unshare dom0's buffer even if the
  // active list no longer had dom0.
  rings_.Clear();
  auto step = [&](uint32_t op, std::span<std::byte> argument) -> Result<bool> {
    HVPROF_TRY(code, link_->Op(op, argument));
    return code == ErrorCode::kOk;
  };
  legacy::Init init{};
  legacy::DomainIdArg self = 0;
  Unwound unwound;
  HVPROF_TRY(stopped, step(legacy::kOpStop, {}));
  HVPROF_TRYV(step(legacy::kOpReleaseCounters, {}));
  // Only a primary that never shut down can shut down here: an earlier agent left its state.
  HVPROF_TRY(was_primary, step(legacy::kOpShutdown, {}));
  HVPROF_TRYV(step(legacy::kOpInit, std::as_writable_bytes(std::span(&init, 1))));
  HVPROF_TRYV(step(legacy::kOpSetActive, std::as_writable_bytes(std::span(&self, 1))));
  HVPROF_TRYV(step(legacy::kOpDisableVirq, {}));
  HVPROF_TRYV(step(legacy::kOpResetPassiveList, {}));
  HVPROF_TRYV(step(legacy::kOpResetActiveList, {}));
  HVPROF_TRYV(step(legacy::kOpShutdown, {}));
  unwound.was_profiling = stopped;
  unwound.was_primary = was_primary;
  return unwound;
}

Result<hvpmu::InitV2> Dom0Agent::Identify() {
  hvpmu::InitV2 init = agent::InitRequest();
  if (!link_->legacy_only()) {
    HVPROF_TRYV(Op(hvpmu::kOpInitV2, &init));
    return init;
  }
  legacy::Init xen{};
  HVPROF_TRYV(Op(legacy::kOpInit, &xen));
  return agent::FromLegacyInit(xen, link_->num_cpus());
}

// The events and their counts: -e as given, a rate (-F, else on linux perf's default rate: the
// platform's own default counts are for hypervisors, and cost a busy linux host too much) for
// those given without a count.
Result<void> Dom0Agent::ChooseEvents(const hvpmu::InitV2& init, const hvpmu::CpuEventTable& table) {
  std::optional<setup::SampleRate> rate;
  const bool continuous_default = setup_.continuous() && setup_.rate == 0 && setup_.events.empty();
  if (setup_.rate != 0 || setup_.platform == "linux" || continuous_default) {
    rate = setup::SampleRate{setup_.rate != 0       ? setup_.rate
                             : continuous_default ? setup::kContinuousDefaultRate
                                                  : setup::kLinuxDefaultRate,
                             0,
                             setup_.rate != 0       ? "--rate"
                             : continuous_default ? "the continuous default rate"
                                                  : "the linux default rate"};
    if (auto info = link_->PlatformInfo()) rate->nominal_hz = info.value().nominal_mhz * 1e6;
  }
  HVPROF_TRY(events, setup::ResolveEventOptions(setup_.events, table, init, rate));
  events_ = std::move(events);
  peak_rate_ = 0;
  for (const auto& event : events_) peak_rate_ += agent::PeakSampleRate(event.event->name, event.count);
  if (continuous_default && !events_.empty()) {
    notes_.push_back(fmt::format("continuous: sampling at {} samples a second per CPU, the continuous default "
                                 "(-F/--rate sets another rate; -e EVENT:COUNT a count)",
                                 setup::kContinuousDefaultRate));
  } else if (rate && setup_.rate == 0 && setup_.events.empty() && !events_.empty()) {
    notes_.push_back(fmt::format("sampling at the linux default of {} samples a second per CPU, as perf record does "
                                 "(-F/--rate sets another rate; -e EVENT:COUNT a count)",
                                 setup::kLinuxDefaultRate));
  }

  return Ok();
}

// Which domains are active and which passive, by id or name; dom0 is always active.
Result<void> Dom0Agent::ChooseDomains() {
  HVPROF_TRY(domains, link_->Domains());
  domains_ = std::move(domains);
  HVPROF_TRY(active, setup::ResolveDomains(setup_.active_domains, domains_, "active-domains"));
  HVPROF_TRY(passive, setup::ResolveDomains(setup_.passive_domains, domains_, "passive-domains", active));
  for (uint16_t id : passive) {
    if (id == 0) {
      return MakeError(ErrorKind::kInvalidArgument, "--passive-domains: dom0 is always active");
    }
    if (std::find(active.begin(), active.end(), id) != active.end()) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "domain {} is in both --active-domains and --passive-domains; a domain is "
                       "profiled one way or the other",
                       DomainLabel(id));
    }
  }
  if (std::find(active.begin(), active.end(), 0) == active.end()) active.insert(active.begin(), 0);
  active_ = active;
  passive_ = passive;
  if (!setup_.passive_images.empty() && setup_.passive_images.size() != passive_.size()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "--passive-images has {} images for {} passive domains; give one per domain, in order",
                     setup_.passive_images.size(), passive_.size());
  }

  return Ok();
}

// The images to symbolize with (the hypervisor, dom0's kernel, the passive domains' kernels):
// checked now, recorded with their build-ids.
Result<void> Dom0Agent::CheckImages() {
  HVPROF_TRY(platform_images, link_->Images());
  const std::string xen = !setup_.xen_image.empty() ? setup_.xen_image : platform_images.hypervisor;
  if (link_->platform_name() == "linux") {
    notes_.push_back("on linux domain 0 is the host's processes and its kernel is the host kernel; the host kernel is "
                     "the hypervisor where it works for a KVM guest (in the guest's vCPU threads: the guest's "
                     "hypervisor mode) and in the idle loop; KVM guests are passive domains");
  }
  if (!xen.empty()) {
    HVPROF_TRY(image, setup::CheckImage(xen, "hypervisor", std::nullopt));
    images_.push_back(image);
  } else {
    notes_.push_back("no hypervisor image (--xen): hypervisor samples stay unresolved");
  }
  if (!setup_.no_vmlinux) {
    std::string kernel = setup_.vmlinux;
    if (kernel.empty()) kernel = !platform_images.kernel.empty() ? platform_images.kernel : "/proc/kallsyms";
    HVPROF_TRY(image, setup::CheckImage(kernel, "kernel", uint16_t{0}));
    images_.push_back(image);
  }
  // Guests often share a kernel image: each file is checked once.
  std::map<std::string, store::ImageRecord> checked;
  for (size_t i = 0; i < passive_.size(); ++i) {
    Advance("checking the passive domains' kernel images", i, passive_.size());
    std::string kernel;
    if (!setup_.passive_images.empty()) {
      kernel = setup_.passive_images[i];
    } else {
      for (const auto& domain : domains_) {
        if (domain.id == passive_[i]) kernel = domain.kernel;
      }
    }
    if (kernel.empty()) {
      notes_.push_back(fmt::format("no image for passive domain {}: its kernel samples stay unresolved",
                                   DomainLabel(passive_[i])));
      continue;
    }
    auto known = checked.find(kernel);
    if (known == checked.end()) {
      HVPROF_TRY(image, setup::CheckImage(kernel, "passive-kernel", passive_[i]));
      known = checked.emplace(kernel, std::move(image)).first;
    }
    images_.push_back(known->second);
    images_.back().domain = passive_[i];
  }

  return Ok();
}

// The session's metadata: the machine, the events, the domains and their roles, the images,
// the rings.
store::SessionMetadata Dom0Agent::SessionMetadataFor(const hvpmu::InitV2& init, const std::string& hvprof_version) {
  store::SessionMetadata m = NewMetadata(init, hvprof_version);
  for (const auto& event : events_) m.events.push_back(setup::ToEventRecord(event));
  for (const auto& [ids, role] : {std::pair{&active_, "active"}, std::pair{&passive_, "passive"}}) {
    for (uint16_t id : *ids) {
      store::DomainRecord record;
      record.id = id;
      record.role = role;
      for (const auto& domain : domains_) {
        if (domain.id == id) {
          record.name = domain.name;
          record.vcpus = domain.vcpus;
        }
      }
      if (record.vcpus == 0 && xen_buffers_.count(id) != 0) record.vcpus = xen_buffers_.at(id);
      m.domains.push_back(std::move(record));
    }
  }
  m.images = images_;
  m.ring_format = link_->legacy_only() ? "xenoprof" : "v2";
  m.ring_capacity = capacity_;
  m.ring_watermark = watermark_;
  m.backtrace_depth = setup_.callgraph;
  m.poll_interval_ms = PollIntervalMs();
  m.notes = notes_;
  return m;
}

Result<void> Dom0Agent::Configure(const std::string& hvprof_version) {
  // What the machine is.
  HVPROF_TRY(init, Identify());
  if (init.is_primary == 0) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "the hypervisor did not make this domain the primary profiler");
  }
  pmu_ = init;
  const hvpmu::CpuEventTable* table = hvpmu::FindEventTable(init.cpu_type);
  if (table == nullptr) {
    return MakeError(ErrorKind::kUnsupported, "no event table for CPU type {}", init.cpu_type);
  }
  HVPROF_TRYV(ChooseEvents(init, *table));

  HVPROF_TRYV(ChooseDomains());
  HVPROF_TRYV(CheckImages());

  capacity_ = setup_.buffer_size != 0 ? setup_.buffer_size : agent::kDefaultRingCapacity;
  HVPROF_TRYV(SetUp());

  store::SessionMetadata m = SessionMetadataFor(init, hvprof_version);
  // On linux every domain's processes are this host's; on Xen (and the sim, when asked) only
  // dom0's own are.
  if (setup_.JitWanted()) SetJitScope(setup_.platform == "linux" ? JitScope::kAllDomains : JitScope::kOwnDomain);
  HVPROF_TRYV(OpenBuildIdCache(setup_.build_id_cache, BuildIdCacheBytes()));
  HVPROF_TRYV(OpenSession(m));
  HVPROF_TRYV(ListenForControl());
  configured_ = true;
  Log(LogLevel::kInfo, "{}", Describe());
  return Ok();
}

// The Xenoprof sequence. hvprof's engine gets v2 buffers; Xen 4.17 (docs/xen.md) legacy ones,
// which it caps at 32 pages a domain.
Result<void> Dom0Agent::SetUp() {
  const bool xen = link_->legacy_only();
  const int32_t legacy_request = agent::LegacyMaxSamples(capacity_);
  if (xen) {
    legacy::GetBuffer own{};
    own.max_samples = legacy_request;
    HVPROF_TRYV(Op(legacy::kOpGetBuffer, &own));
    HVPROF_TRYV(rings_.AddLegacy(*link_, 0, {own.buf_gmaddr, own.nbuf, own.bufsize}, true));
    xen_buffers_[0] = static_cast<uint32_t>(std::max(own.nbuf, 0));
    capacity_ = rings_.capacity();
    watermark_ = 0;  // Xen notifies per sample, and user space only on dom0's vCPU 0
    if (setup_.sched) {  // Xen's own trace buffers, as xentrace reads them
      HVPROF_TRY(source, link_->OpenSchedSource());
      sched_source_ = std::move(source);
    }
  } else {
    hvpmu::BufferV2 own = agent::BufferRequest(0, capacity_);
    if (setup_.sched) {
      // Where the hypervisor keeps its own scheduling records (Xen's trace buffers, also under
      // hvprof's engine), they are read as xentrace reads them; else the engine's rings carry them.
      auto source = link_->OpenSchedSource();
      if (source) {
        sched_source_ = std::move(source).value();
      } else if (source.error().kind() != ErrorKind::kUnsupported) {
        return source.error();
      } else {
        own.flags = hvpmu::kBufferSchedRings;
      }
    }
    HVPROF_TRYV(Op(hvpmu::kOpGetBufferV2, &own));
    if (setup_.sched && !sched_source_ && (own.flags & hvpmu::kBufferSchedRings) == 0) {
      return MakeError(ErrorKind::kUnsupported,
                       "--sched: this hypervisor's engine records no scheduling (it predates ring ABI 3); "
                       "update hvprof-hv, or leave out --sched");
    }
    capacity_ = own.capacity;
    watermark_ = own.watermark;
    HVPROF_TRYV(rings_.AddV2(*link_, 0, own, true));
  }
  HVPROF_TRYV(Op(legacy::kOpResetActiveList, {}));
  for (uint16_t id : active_) {
    legacy::DomainIdArg domain = id;
    HVPROF_TRYV(Op(legacy::kOpSetActive, &domain));
  }
  HVPROF_TRYV(Op(legacy::kOpResetPassiveList, {}));
  for (size_t i = 0; i < passive_.size(); ++i) {
    Advance("setting up the passive domains' rings", i, passive_.size());
    const uint16_t id = passive_[i];
    if (xen) {
      legacy::Passive passive{};
      passive.domain_id = id;
      passive.max_samples = legacy_request;
      HVPROF_TRYV(Op(legacy::kOpSetPassive, &passive));
      HVPROF_TRYV(rings_.AddLegacy(*link_, id, {passive.buf_gmaddr, passive.nbuf, passive.bufsize}, false));
      xen_buffers_[id] = static_cast<uint32_t>(std::max(passive.nbuf, 0));
    } else {
      hvpmu::BufferV2 buffer = agent::BufferRequest(id, capacity_);
      HVPROF_TRYV(Op(hvpmu::kOpSetPassiveV2, &buffer));
      HVPROF_TRYV(rings_.AddV2(*link_, id, buffer, true));
    }
  }
  if (setup_.callgraph != 0) {
    legacy::BacktraceDepthArg depth = setup_.callgraph;
    HVPROF_TRYV(Op(legacy::kOpSetBacktrace, &depth));
  }
  HVPROF_TRYV(Op(legacy::kOpReserveCounters, {}));
  std::array<uint64_t, 8> periods{};
  for (const setup::ResolvedEvent& event : events_) {
    legacy::Counter counter{};
    counter.ind = event.counter;
    counter.count = event.count;
    counter.enabled = 1;
    counter.event = event.event->code;
    counter.unit_mask = event.unit_mask;
    counter.kernel = event.kernel;
    counter.user = event.user;
    HVPROF_TRYV(Op(legacy::kOpCounter, &counter));
    if (event.counter < periods.size()) periods[event.counter] = event.count;
  }
  HVPROF_TRYV(Op(legacy::kOpSetupEvents, {}));
  HVPROF_TRYV(Op(legacy::kOpEnableVirq, {}));
  if (xen) {
    rings_.SetLegacyPeriods(periods);
    rings_.ResyncLegacy();  // enable_virq zeroed every ring's indices
    notes_.push_back("Xen's rings carry no process, CPU or time: user samples are not tied to processes, and a "
                     "sample's time is when hvprofd read it");
    notes_.push_back("Xen does not report the samples it drops in its idle loop, in unprofiled domains or for "
                     "corrupt ring indices; only full rings are counted as lost");
  }
  return Ok();
}

std::string Dom0Agent::Describe() const {
  std::string events;
  for (const auto& event : events_) {
    events += fmt::format("{}{}:{} (counter {})", events.empty() ? "" : ", ", event.event->name,
                          event.count, event.counter);
  }
  // Each domain by name, up to a dozen; a host with hundreds gets a count and its ends.
  auto list = [this](const std::vector<uint16_t>& ids) {
    constexpr size_t kNamed = 12;
    std::string text;
    if (ids.size() > kNamed) {
      return fmt::format("{} domains ({}, {} ... {})", ids.size(), DomainLabel(ids[0]), DomainLabel(ids[1]),
                         DomainLabel(ids.back()));
    }
    for (uint16_t id : ids) text += (text.empty() ? "" : ", ") + DomainLabel(id);
    return text;
  };
  const std::string active = list(active_);
  const std::string passive = list(passive_);
  return fmt::format("profiling set up on {} ({}, {}): events {}; active {}; passive {}; "
                     "{} rings of {} samples; session {}",
                     link_->machine_name(), link_->platform_name(), pmu_.cpu_type, events, active,
                     passive.empty() ? "none" : passive, rings_.size(), capacity_,
                     paths_.current());
}

uint32_t Dom0Agent::PollIntervalMs() const {
  if (setup_.poll_interval_ms != 0) return setup_.poll_interval_ms;
  // Xen's rings differ by domain, and a sample with a call chain takes up to 2 + depth records.
  const uint32_t samples_per_ring =
      link_->legacy_only() ? rings_.capacity() / (setup_.callgraph != 0 ? 2 + setup_.callgraph : 1) : capacity_;
  return agent::PollIntervalFor(peak_rate_, std::max<uint32_t>(samples_per_ring, 1));
}

void Dom0Agent::OnTick() {
  if (continuous()) {
    if (const std::optional<uint64_t> clock = WindowClockNs()) CloseWindowIfDue(*clock);
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - last_collect_ < std::chrono::seconds(1)) return;
  last_collect_ = now;
  CollectPublished();
}

void Dom0Agent::OnDump() {
  CollectPublished();
  if (!session_) return;
  // What the platform says of its own sampling: rates, throttling, losses below the engine.
  auto info = link_->PlatformInfo();
  if (!info) {
    Log(LogLevel::kWarning, "cannot read the platform's state: {}", info.error().message());
    return;
  }
  if (!info.value().stats) return;  // the sim's notes are for its log, not the session
  store::SessionMetadata& m = session_->metadata();
  const context::PlatformStats& stats = *info.value().stats;
  m.losses.platform_lost = SinceSessionOpened(&store::LossRecord::platform_lost, stats.Lost());
  m.losses.throttled = SinceSessionOpened(&store::LossRecord::throttled, stats.totals.throttled);
  for (const std::string& note : info.value().notes) {
    if (std::find(m.notes.begin(), m.notes.end(), note) == m.notes.end()) m.notes.push_back(note);
  }
  m.platform_stats = std::move(info.value().stats);
}

void Dom0Agent::CollectPublished() {
  if (!session_ || active_.size() <= 1) return;  // no active guest, nothing to take
  auto fetched = link_->FetchPublished(published_seen_);
  if (!fetched) {
    Log(LogLevel::kWarning, "cannot read published profiles: {}", fetched.error().message());
    return;
  }
  for (const agent::PublishedProfile& profile : fetched.value()) {
    published_seen_ = std::max(published_seen_, profile.sequence);
    if (profile.domain == 0 || std::find(active_.begin(), active_.end(), profile.domain) == active_.end()) {
      Log(LogLevel::kWarning, "ignored the profile domain {} published: it is not an active domain of this session",
          profile.domain);
      continue;
    }
    const std::string directory = session_->directory() + "/published";
    const std::string path = fmt::format("{}/domain-{}.json", directory, profile.domain);
    auto written = MakeDirectories(directory);
    if (written) written = WriteFileAtomically(path, profile.bytes);
    if (!written) {
      Log(LogLevel::kError, "cannot keep the profile domain {} published: {}", profile.domain, written.error().message());
      continue;
    }
    Log(LogLevel::kInfo, "took the profile {} published ({} bytes) into {}", DomainLabel(profile.domain),
        profile.bytes.size(), path);
  }
}

Result<Json> Dom0Agent::HandleOther(const std::string& action, const Json& request) {
  if (action == "run-sim") return RunSim(request.value("duration_ns", uint64_t{0}));
  return AgentDaemon::HandleOther(action, request);
}

Result<Json> Dom0Agent::Start() {
  if (profiling_) return Json{{"message", "profiling is already on"}};
  auto code = link_->Op(legacy::kOpStart, {});
  if (!code) return code.error();
  if (link_->legacy_only() && code.value() == ErrorCode::kBadState && active_.size() > 1) {
    // Xen says only EPERM, and cannot say who is missing.
    std::vector<std::string> guests;
    for (uint16_t id : active_) {
      if (id != 0) guests.push_back(DomainLabel(id));
    }
    return MakeError(ErrorKind::kBadState,
                     "cannot start: Xen starts only once every active domain has joined ({}). In each of them run "
                     "`hvprof --platform=xen --domain=ID --start-daemon && hvprof --domain=ID --start`, then "
                     "`hvprof --start` here again",
                     fmt::join(guests, ", "));
  }
  if (code.value() == ErrorCode::kNotActivated) {
    HVPROF_TRY(listed, ListedDomains());
    std::vector<std::string> missing;
    for (const hvpmu::DomainStatus& d : listed) {
      if (d.role == static_cast<uint32_t>(hvpmu::DomainRole::kActive) && d.activated == 0) {
        missing.push_back(DomainLabel(d.domain));
      }
    }
    std::string how = "`hvprof --start-daemon && hvprof --start`";
    if (link_->platform_name() == "sim") {
      // On the sim, every domain's commands run on this host and name their domain.
      how.clear();
      for (const hvpmu::DomainStatus& d : listed) {
        if (d.role != static_cast<uint32_t>(hvpmu::DomainRole::kActive) || d.activated != 0) continue;
        how += fmt::format("{}`hvprof --domain={} --start-daemon && hvprof --domain={} --start`", how.empty() ? "" : "; ",
                           d.domain, d.domain);
      }
    }
    return MakeError(ErrorKind::kBadState,
                     "cannot start: active domain{} {} {} not joined profiling yet. In {} run {}, then run "
                     "`hvprof --start` here again",
                     missing.size() == 1 ? "" : "s", fmt::join(missing, ", "),
                     missing.size() == 1 ? "has" : "have", missing.size() == 1 ? "it" : "each of them", how);
  }
  if (code.value() != ErrorCode::kOk) return link_->DescribeRefusal(legacy::kOpStart, code.value());
  if (sched_source_) {
    if (auto started = sched_source_->Start(); !started) {
      (void)Op(legacy::kOpStop, {}, true);  // all or nothing
      return started.error();
    }
  }
  MarkProfiling(true);
  HVPROF_TRYV(session_->WriteMetadata());
  return Json{{"message", "profiling started"}};
}

Result<Json> Dom0Agent::Stop() {
  if (!profiling_) return Json{{"message", "profiling is not on"}};
  HVPROF_TRYV(Op(legacy::kOpStop, {}));
  if (sched_source_) {
    if (auto stopped = sched_source_->Stop(); !stopped) Log(LogLevel::kWarning, "{}", stopped.error().message());
  }
  MarkProfiling(false);
  DrainAll(true);  // the final flush
  HVPROF_TRY(dumped, Dump());
  dumped["message"] = "profiling stopped";
  return dumped;
}

Result<Json> Dom0Agent::Shutdown() {
  if (!configured_) return Json{{"message", "already shut down"}};
  // Shutting down always finishes: what fails on the way is said, and what was written stays.
  std::vector<std::string> warnings;
  Json result = Json::object();
  auto finished = profiling_ ? Stop() : Dump();
  if (finished) {
    result = std::move(finished).value();
    if (result.contains("warning")) warnings.push_back(result["warning"].get<std::string>());
  } else {
    // Whatever failed (the hypervisor's stop, the session's write), what was drained is kept
    // and the session says it ends here.
    warnings.push_back(finished.error().message());
    if (session_) {
      DrainAll(true);
      MarkProfiling(false);
      session_->AddIncomplete("the last stop or dump before shutdown failed (" + finished.error().message() +
                              "): the session may lack its last samples and counts");
      UpdateMetadata(nullptr);
      if (auto dumped = session_->Dump(); !dumped) warnings.push_back(dumped.error().message());
    } else {
      MarkProfiling(false);
    }
  }
  // Release everything, in Xen's order: our rings, the counters, the lists, the primary role.
  rings_.Clear();
  sched_source_.reset();
  Result<void> released = Ok();
  if (link_->legacy_only()) {
    if (auto unwound = UnwindXenoprof(); !unwound) released = unwound.error();  // as recovery does
  } else {
    for (uint32_t op : {legacy::kOpDisableVirq, legacy::kOpReleaseCounters, legacy::kOpResetActiveList,
                        legacy::kOpShutdown}) {
      if (released) released = Op(op, {}, true);
    }
  }
  if (!released) {
    warnings.push_back(fmt::format("the hypervisor's profiler could not be released ({}); the next "
                                   "`hvprof --start-daemon` recovers it",
                                   released.error().message()));
  }
  configured_ = false;
  StopListening();
  result["message"] = "profiling shut down";
  if (!warnings.empty()) result["warnings"] = warnings;
  if (session_) {
    result["session"] = session_->directory();
    result["samples"] = session_->stats().samples;
  }
  Log(LogLevel::kInfo, "shut down; session kept in {}", session_ ? session_->directory() : paths_.current());
  return result;
}

Result<Json> Dom0Agent::RunSim(uint64_t duration_ns) {
  if (duration_ns == 0) return MakeError(ErrorKind::kInvalidArgument, "run-sim needs a duration");
  // Advance the simulated clock in steps small enough that no ring can fill between drains: a
  // quarter of the time a busy CPU takes to fill a ring, within 0.1-250 ms, the longest a real
  // host's drains are apart (PollIntervalFor), so that what piles up between them (processes'
  // events, scheduling records) is what a real host would hold. At a low rate (continuous mode's
  // 99 Hz) that is 250 ms of simulated time a drain, not the 20 ms it once was: a simulated week
  // takes minutes.
  uint64_t step =
      peak_rate_ > 0 ? static_cast<uint64_t>(std::clamp(1e9 * capacity_ / peak_rate_ / 4, 1e5, 2.5e8)) : 250'000'000;
  // Beyond 20 ms (the longest step before), whole milliseconds: a step that ends inside one of
  // the sim's scheduling slices has it draw its numbers in another order, and the same run would
  // give other (as true) samples than with the short steps (the README's demo, golden reports).
  if (step > 20'000'000) step -= step % 1'000'000;
  uint64_t done = 0;
  agent::SimClock clock{};
  if (continuous()) {
    HVPROF_TRY(now, link_->SimQuery());
    clock = now;
  }
  while (done < duration_ns) {
    // A window closes exactly at its end: the clock stops there, and what it sampled is drained.
    uint64_t chunk = std::min(step, duration_ns - done);
    if (continuous() && WindowDueNs() > clock.sim_time_ns) chunk = std::min(chunk, WindowDueNs() - clock.sim_time_ns);
    HVPROF_TRY(after, link_->SimRunFor(chunk));
    clock = after;
    done += chunk;
    DrainAll();
    CloseWindowIfDue(clock.sim_time_ns);
    if (clock.halted) break;
  }
  return Json{{"sim_time_ns", clock.sim_time_ns}, {"halted", clock.halted}, {"ran_ns", done}};
}

uint64_t Dom0Agent::BuildIdCacheBytes() const {
  const uint64_t asked = setup_.build_id_cache_bytes != 0 ? setup_.build_id_cache_bytes : buildid_cache::kDefaultMaxBytes;
  // Continuously, the build-id cache is part of the windows' budget: at most a quarter of it.
  return setup_.continuous() && setup_.keep_bytes != 0 ? std::min(asked, setup_.keep_bytes / 4) : asked;
}

Result<agent::Json> Dom0Agent::ReloadSettings() {
  HVPROF_TRY(wanted, setup::SetupOptions::Read(paths_.setup()));
  const setup::SettingsChange change = setup::CompareSettings(setup_, wanted);
  // All or nothing, as `hvprof --reload` is: a change this hvprofd cannot make leaves every
  // setting as it was.
  if (!change.restart.empty()) {
    return MakeError(ErrorKind::kBadState,
                     "{} changes {}, which needs a restart (`hvprof --shutdown` and `hvprof --start-daemon`, or "
                     "`systemctl restart hvprofd`): nothing was changed",
                     paths_.setup(), fmt::join(change.restart, ", "));
  }
  if (change.live.empty()) return agent::Json{{"message", "no setting differs"}, {"live", agent::Json::array()}};
  HVPROF_TRYV(setup::CheckBudget(wanted));
  const bool cache_changed = wanted.build_id_cache_bytes != setup_.build_id_cache_bytes ||
                             wanted.keep_bytes != setup_.keep_bytes;
  setup_ = wanted;  // the rest is the same (CompareSettings)
  SetLogLevel(setup_.verbose ? LogLevel::kDebug : LogLevel::kInfo);
  if (continuous()) UpdateWindows(setup_.window_ns, {.bytes = setup_.keep_bytes, .age_ns = setup_.keep_age_ns});
  std::string message = fmt::format("now in effect: {}", fmt::join(change.live, ", "));
  if (cache_changed) {
    if (auto resized = ResizeBuildIdCache(BuildIdCacheBytes()); !resized) {
      message += fmt::format(" (but the build-id cache keeps its old size: {})", resized.error().message());
    }
  }
  Log(LogLevel::kInfo, "settings reloaded from {}: {}", paths_.setup(), message);
  return agent::Json{{"message", message}, {"live", change.live}};
}

Result<agent::AgentStatus> Dom0Agent::Status() {
  agent::AgentStatus status = SessionStatus(agent::AgentRole::kDom0);
  status.profiling = profiling_;
  for (const auto& event : events_) {
    status.events.push_back({.counter = event.counter, .name = event.event->name, .count = event.count,
                             .unit_mask = event.unit_mask, .kernel = event.kernel, .user = event.user});
  }
  status.ring_capacity = capacity_;
  status.watermark = watermark_;
  status.poll_interval_ms = PollIntervalMs();
  if (link_->legacy_only()) {
    // Xen has no status op: what this agent set up, and what its rings' headers say. An
    // active guest's rings are its own: dom0 sees none of them.
    agent::Losses lost;
    for (const auto& [ids, role] : {std::pair{&active_, "active"}, std::pair{&passive_, "passive"}}) {
      for (uint16_t id : *ids) {
        agent::DomainRingsStatus domain = agent::LegacyRingsStatus(rings_, id);
        domain.label = DomainLabel(id);
        domain.role = role;
        lost.ring_full += domain.lost.ring_full;
        status.domains.push_back(std::move(domain));
      }
    }
    status.state = !configured_ ? "idle" : profiling_ ? "profiling" : "ready";
    status.cpu_type = std::string(pmu_.cpu_type, strnlen(pmu_.cpu_type, sizeof pmu_.cpu_type));
    status.cpus = pmu_.num_pcpus;
    status.lost = lost;
    status.backtrace_depth = setup_.callgraph;
    status.note = "Xen reports no state or losses of its own; this is what hvprofd set up and its rings say";
    return status;
  }
  HVPROF_TRY(engine, EngineStatus());
  HVPROF_TRY(listed, ListedDomains());
  for (const hvpmu::DomainStatus& d : listed) status.domains.push_back(agent::DomainStatusOf(d, DomainLabel(d.domain)));
  status.state = agent::EngineStateName(engine.state);
  status.cpu_type = std::string(engine.cpu_type, strnlen(engine.cpu_type, sizeof engine.cpu_type));
  status.cpus = engine.num_pcpus;
  status.lost = agent::Losses{.ring_full = engine.lost[0], .corrupt_index = engine.lost[1],
                              .no_ring = engine.lost[2], .unprofiled_domain = engine.lost[3]};
  status.total_samples = engine.total_samples;
  status.idle_samples = engine.idle_samples;
  status.backtrace_depth = engine.backtrace_depth;
  if (auto clock = link_->SimQuery(); clock) {
    status.sim = agent::SimClockStatus{.time_ns = clock.value().sim_time_ns, .pmis = clock.value().pmis,
                                       .halted = clock.value().halted};
  }
  return status;
}

}  // namespace hvprof::dom0
