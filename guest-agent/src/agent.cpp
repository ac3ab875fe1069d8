#include "hvprof/guest/agent.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvpmu/events.h"

namespace hvprof::guest {

using agent::Json;
using hvpmu::ErrorCode;
namespace legacy = hvpmu::legacy;

namespace {

const hvpmu::DomainStatus* FindDomain(const hvpmu::Status& status, hvpmu::DomainId id) {
  for (uint32_t i = 0; i < status.num_domains && i < hvpmu::kStatusMaxDomains; ++i) {
    if (status.domains[i].domain == id) return &status.domains[i];
  }
  return nullptr;
}

}  // namespace

GuestAgent::GuestAgent(setup::SetupOptions setup, std::string version, std::unique_ptr<agent::HypervisorLink> link)
    : AgentDaemon("guest", store::SessionPaths{setup.session_root}, std::move(link)),
      setup_(std::move(setup)),
      version_(std::move(version)) {}

Result<std::unique_ptr<GuestAgent>> GuestAgent::Create(const setup::SetupOptions& setup,
                                                       const std::string& hvprof_version,
                                                       std::unique_ptr<agent::HypervisorLink> link) {
  if (setup.platform == "linux") {
    return MakeError(ErrorKind::kUnsupported,
                     "--platform=linux has no guest agents: KVM guests are profiled from the host as passive "
                     "domains (hvprof run --platform=linux --domain-map=kvm:...)");
  }
  if (setup.domain == 0) {
    return MakeError(ErrorKind::kInvalidArgument, "the guest agent runs in a guest; dom0 runs `hvprofd --role=dom0`");
  }
  if (link->domain() != setup.domain) {
    return MakeError(ErrorKind::kPermissionDenied, "the hypervisor says this is domain {}, not domain {}",
                     link->domain(), setup.domain);
  }
  std::unique_ptr<GuestAgent> agent(new GuestAgent(setup, hvprof_version, std::move(link)));
  if (auto domains = agent->link_->Domains(); domains) {
    for (const context::DomainInfo& domain : domains.value()) {
      if (domain.id == setup.domain) agent->name_ = domain.name;
    }
  }
  HVPROF_TRYV(agent->ListenForControl());
  agent->configured_ = true;
  Log(LogLevel::kInfo, "{}", agent->Describe());
  return agent;
}

std::string GuestAgent::Label() const {
  return store::DomainName(setup_.domain, name_);
}

std::string GuestAgent::Describe() const {
  if (!activated_) {
    return fmt::format("guest agent ready in {} on {} ({}); session {}", Label(), link_->machine_name(),
                       link_->platform_name(), paths_.current());
  }
  return fmt::format("{} joined profiling: {} rings of {} samples; session {}", Label(), rings_.size(),
                     capacity_, paths_.current());
}

uint32_t GuestAgent::PollIntervalMs() const {
  if (setup_.poll_interval_ms != 0) return setup_.poll_interval_ms;
  // A guest on Xen that was not told dom0's events cannot size the period: drain often.
  if (link_->legacy_only() && peak_rate_ == 0) return 20;
  return agent::PollIntervalFor(peak_rate_, capacity_);
}

Result<void> GuestAgent::CheckJoinable(const hvpmu::Status& status) const {
  const auto state = static_cast<hvpmu::EngineState>(status.state);
  if (state == hvpmu::EngineState::kIdle || status.primary == hvpmu::kDomainInvalid) {
    return MakeError(ErrorKind::kBadState,
                     "the hypervisor's profiler is not set up yet: dom0 has not run `hvprof --start-daemon`. "
                     "In dom0 run `hvprof --start-daemon --active-domains={}` (with its other options), then "
                     "`hvprof --start` here again",
                     setup_.domain);
  }
  const hvpmu::DomainStatus* self = FindDomain(status, setup_.domain);
  if (self == nullptr || self->role != static_cast<uint32_t>(hvpmu::DomainRole::kActive)) {
    return MakeError(ErrorKind::kBadState,
                     "dom0 did not list {} as an active domain, so it cannot profile itself. In dom0 run "
                     "`hvprof --shutdown`, then `hvprof --start-daemon --active-domains={}` (or profile it from "
                     "dom0 with --passive-domains={})",
                     Label(), setup_.domain, setup_.domain);
  }
  if (state == hvpmu::EngineState::kInitialized || state == hvpmu::EngineState::kCountersReserved) {
    return MakeError(ErrorKind::kBusy, "dom0 is still setting profiling up; run `hvprof --start` again in a moment");
  }
  return Ok();
}

std::vector<store::EventRecord> GuestAgent::EventsOf(const hvpmu::InitV2& init, const hvpmu::Status& status) const {
  std::vector<store::EventRecord> events;
  const hvpmu::CpuEventTable* table = hvpmu::FindEventTable(init.cpu_type);
  for (uint32_t i = 0; i < hvpmu::kMaxCounters; ++i) {
    const hvpmu::CounterStatus& counter = status.counters[i];
    if (counter.enabled == 0) continue;
    store::EventRecord event;
    event.counter = i;
    event.code = counter.event;
    event.unit_mask = counter.unit_mask;
    event.count = counter.count;
    event.kernel = counter.kernel != 0;
    event.user = counter.user != 0;
    const hvpmu::EventDef* def = table != nullptr ? hvpmu::FindEventByCode(*table, counter.event, counter.unit_mask) : nullptr;
    event.name = def != nullptr ? def->name : fmt::format("EVENT_{:#x}", counter.event);
    if (table != nullptr && table->sampled_by != nullptr) event.sampled_by = table->sampled_by;
    for (uint8_t u = 0; def != nullptr && u < def->num_unit_masks; ++u) {
      if (def->unit_masks[u].value == counter.unit_mask) event.unit_mask_name = def->unit_masks[u].name;
    }
    events.push_back(std::move(event));
  }
  return events;
}

Result<std::vector<store::EventRecord>> GuestAgent::EventsFromSetup(const hvpmu::InitV2& init) const {
  std::vector<store::EventRecord> events;
  const hvpmu::CpuEventTable* table = hvpmu::FindEventTable(init.cpu_type);
  if (setup_.events.empty() || table == nullptr) return events;
  HVPROF_TRY(resolved, setup::ResolveEventOptions(setup_.events, *table, init));
  for (const setup::ResolvedEvent& event : resolved) events.push_back(setup::ToEventRecord(event));
  return events;
}

Result<store::SessionMetadata> GuestAgent::SessionDescription(const hvpmu::InitV2& init,
                                                              std::vector<store::EventRecord> events,
                                                              uint32_t backtrace_depth) {
  store::SessionMetadata m = NewMetadata(init, version_);
  peak_rate_ = 0;
  for (const store::EventRecord& event : events) peak_rate_ += agent::PeakSampleRate(event.name, event.count);
  m.events = std::move(events);

  // What this domain runs: its kernel and its processes.
  HVPROF_TRY(known, link_->Images());
  store::DomainRecord self;
  self.id = setup_.domain;
  self.name = name_;
  self.role = "active";
  self.vcpus = static_cast<uint16_t>(rings_.size());
  m.domains.push_back(std::move(self));
  if (!setup_.no_vmlinux) {
    std::string kernel = setup_.vmlinux;
    if (kernel.empty()) kernel = !known.kernel.empty() ? known.kernel : "/proc/kallsyms";
    HVPROF_TRY(image, setup::CheckImage(kernel, "kernel", setup_.domain));
    m.images.push_back(image);
  }
  m.notes.push_back("hypervisor samples are this domain's time in the hypervisor; a guest has no xen-syms, "
                    "so they are shown unresolved (dom0 resolves them in `hvprof-report --all-domains`)");
  m.ring_format = link_->legacy_only() ? "xenoprof" : "v2";
  m.ring_capacity = capacity_;
  m.ring_watermark = watermark_;
  m.backtrace_depth = backtrace_depth;
  m.poll_interval_ms = PollIntervalMs();
  return m;
}

Result<Json> GuestAgent::Start() {
  if (activated_) return Json{{"message", fmt::format("{} has already joined profiling", Label())}};
  if (link_->legacy_only()) return StartXenoprof();
  HVPROF_TRY(status, EngineStatus());
  HVPROF_TRYV(CheckJoinable(status));

  // Xen's sequence for an active domain: init, get_buffer, enable_virq.
  hvpmu::InitV2 init = agent::InitRequest();
  HVPROF_TRYV(Op(hvpmu::kOpInitV2, &init));
  hvpmu::BufferV2 buffer =
      agent::BufferRequest(setup_.domain, setup_.buffer_size != 0 ? setup_.buffer_size : agent::kDefaultRingCapacity);
  HVPROF_TRYV(Op(hvpmu::kOpGetBufferV2, &buffer));
  capacity_ = buffer.capacity;
  watermark_ = buffer.watermark;
  rings_.Clear();
  HVPROF_TRYV(rings_.AddV2(*link_, setup_.domain, buffer, true));
  if (auto enabled = Op(legacy::kOpEnableVirq, {}); !enabled) {
    rings_.Clear();
    (void)Op(legacy::kOpDisableVirq, {}, true);
    return enabled.error();
  }
  activated_ = true;

  std::vector<store::EventRecord> events = EventsOf(init, status);
  if (events.empty()) return MakeError(ErrorKind::kBadState, "dom0 has set up no counters yet");
  HVPROF_TRY(metadata, SessionDescription(init, std::move(events), status.backtrace_depth));
  return BeginSession(std::move(metadata));
}

Result<Json> GuestAgent::BeginSession(store::SessionMetadata metadata) {
  // The guest's own processes: the samples of its user space carry its own pids.
  if (setup_.JitWanted()) SetJitScope(JitScope::kOwnDomain);
  HVPROF_TRYV(OpenBuildIdCache(setup_.build_id_cache, setup_.build_id_cache_bytes));
  HVPROF_TRYV(OpenSession(std::move(metadata)));
  MarkProfiling(true);
  HVPROF_TRYV(session_->WriteMetadata());
  Log(LogLevel::kInfo, "{}", Describe());
  return Json{{"message", fmt::format("{} joined profiling; run `hvprof --start` in dom0 once every active "
                                      "domain has joined",
                                      Label())}};
}

Result<Json> GuestAgent::Stop() {
  if (!session_) return Json{{"message", fmt::format("{} has not joined profiling; nothing to stop", Label())}};
  HVPROF_TRY(dumped, Dump());
  if (link_->legacy_only()) {  // Xen cannot tell a guest whether dom0 still profiles
    dumped["message"] = "samples written; this domain keeps collecting for as long as dom0 profiles";
    return dumped;
  }
  HVPROF_TRY(status, EngineStatus());
  const bool running = status.state == static_cast<uint32_t>(hvpmu::EngineState::kProfiling);
  dumped["message"] = running ? "samples written; dom0 is still profiling, so this domain keeps collecting until "
                                "dom0 runs `hvprof --stop`"
                              : "samples written";
  return dumped;
}

Result<Json> GuestAgent::Shutdown() {
  Json result{{"samples", uint64_t{0}}, {"session", paths_.current()}};
  std::string message = fmt::format("the agent of {} shut down", Label());
  if (activated_ && link_->legacy_only()) {
    HVPROF_TRY(left, LeaveXenoprof());
    result = left;
    message = result.value("message", message);
    activated_ = false;
  } else if (xen_buffer_) {
    // Never joined: disable_virq would take this domain off dom0's list, so the buffer stays
    // shared with Xen (docs/xen.md).
    rings_.Clear();
    xen_buffer_ = false;
    message = fmt::format("the agent of {} shut down before it joined; Xen 4.17 keeps this domain's profiling "
                          "buffer shared until it reboots (docs/xen.md)",
                          Label());
  } else if (activated_) {
    DrainAll();
    HVPROF_TRY(status, EngineStatus());
    const bool running = status.state == static_cast<uint32_t>(hvpmu::EngineState::kProfiling);
    MarkProfiling(false);
    // Leaving always finishes; a session that could not be written is said, not a reason to stay.
    if (auto dumped = Dump(); dumped) {
      result = std::move(dumped).value();
      if (result.contains("warning")) result["warnings"] = Json::array({result["warning"]});
    } else {
      result["warnings"] = Json::array({dumped.error().message()});
    }
    rings_.Clear();
    if (running) {
      // The engine refuses disable_virq while profiling; the hypervisor deactivates this domain
      // when the agent's connection closes, as it does for an agent that dies.
      message = fmt::format("{} left profiling while dom0 is still profiling: its samples from now on are not "
                            "recorded (dom0's session counts them as lost in unprofiled domains)",
                            Label());
    } else {
      HVPROF_TRYV(Op(legacy::kOpDisableVirq, {}, true));
      message = fmt::format("profiling shut down in {}", Label());
    }
    activated_ = false;
  }
  configured_ = false;
  StopListening();
  result["message"] = message;
  Log(LogLevel::kInfo, "{}", message);
  return result;
}

Result<agent::AgentStatus> GuestAgent::Status() {
  agent::AgentStatus status = SessionStatus(agent::AgentRole::kGuest);
  if (session_) {
    for (const store::EventRecord& event : session_->metadata().events) {
      status.events.push_back({.counter = event.counter, .name = event.name, .count = event.count,
                               .unit_mask = event.unit_mask, .kernel = event.kernel, .user = event.user});
    }
  }
  status.domain = setup_.domain;
  status.label = Label();
  status.joined = activated_;
  status.ring_capacity = capacity_;
  status.watermark = watermark_;
  status.poll_interval_ms = PollIntervalMs();
  if (link_->legacy_only()) {
    // Xen has no status op: this domain's rings, as their headers say.
    agent::DomainRingsStatus self = agent::LegacyRingsStatus(rings_, setup_.domain);
    self.label = Label();
    self.role = "active";
    self.activated = activated_;
    status.state = "unknown (Xen does not tell a guest)";
    status.profiling = false;
    status.cpus = link_->num_cpus();
    status.domains.push_back(std::move(self));
    return status;
  }
  HVPROF_TRY(engine, EngineStatus());
  if (const hvpmu::DomainStatus* self = FindDomain(engine, setup_.domain)) {
    status.domains.push_back(agent::DomainStatusOf(*self, Label()));
  }
  status.state = agent::EngineStateName(engine.state);
  status.profiling = engine.state == static_cast<uint32_t>(hvpmu::EngineState::kProfiling);
  status.primary = engine.primary;
  status.cpu_type = std::string(engine.cpu_type, strnlen(engine.cpu_type, sizeof engine.cpu_type));
  status.cpus = engine.num_pcpus;
  return status;
}

Result<Json> GuestAgent::HandleOther(const std::string& action, const Json& request) {
  if (action == "publish") return Publish(request);
  if (action == "run-sim") {
    return MakeError(ErrorKind::kPermissionDenied, "only dom0 drives the simulated machine; run `hvprof --run-sim` there");
  }
  return AgentDaemon::HandleOther(action, request);
}

Result<Json> GuestAgent::Publish(const Json& request) {
  if (!session_) {
    return MakeError(ErrorKind::kBadState, "{} has no samples to publish: run `hvprof --start` here first", Label());
  }
  // `hvprof --publish` made the profile from this domain's session, symbolized as this domain
  // alone can; it is carried as it is. To dom0 it is untrusted input, checked there.
  const auto profile = request.find("profile");
  if (profile == request.end() || !profile->is_object()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "publish takes the profile to hand to dom0 ('profile', as `hvprof --publish` makes it)");
  }
  const std::string text = profile->dump(-1, ' ', false, Json::error_handler_t::replace);
  if (link_->legacy_only()) {
    // Xen carries nothing between domains: the profile is left for the admin to copy.
    const std::string path = fmt::format("{}/published-domain-{}.json", session_->directory(), setup_.domain);
    HVPROF_TRYV(WriteFileAtomically(path, text));
    return Json{{"path", path}, {"domain", setup_.domain}};
  }
  HVPROF_TRYV(link_->Publish(std::as_bytes(std::span(text.data(), text.size()))));
  return Json{{"domain", setup_.domain}};
}

// Xen 4.17's sequence for an active PV domain: init (not primary), get_buffer, its rings
// mapped, VIRQ_XENOPROF bound, enable_virq. Xen has no status op, so dom0's setup shows only in
// enable_virq's answer. A refused enable_virq keeps the buffer: the next --start asks again
// (Xen frees a guest's buffer only through disable_virq, which also takes the guest off dom0's
// active list).
Result<Json> GuestAgent::StartXenoprof() {
  if (!xen_buffer_) {
    legacy::Init xen{};
    HVPROF_TRYV(Op(legacy::kOpInit, &xen));
    const hvpmu::InitV2 init = agent::FromLegacyInit(xen, link_->num_cpus());
    HVPROF_TRY(events, EventsFromSetup(init));
    std::array<uint64_t, 8> periods{};
    for (const store::EventRecord& event : events) {
      if (event.counter < periods.size()) periods[event.counter] = event.count;
    }
    // Everything that can fail without Xen is checked before Xen is asked for anything.
    const bool named = !events.empty();
    HVPROF_TRY(metadata, SessionDescription(init, std::move(events), setup_.callgraph));
    if (!named) {
      metadata.notes.push_back("Xen does not tell a guest which events dom0 counts: start this agent with dom0's "
                               "--event options to name them");
    }
    metadata.notes.push_back("Xen's rings carry no process or time: user samples are not tied to processes, and a "
                             "sample's time is when hvprofd read it");

    rings_.Clear();
    legacy::GetBuffer buffer{};
    buffer.max_samples =
        agent::LegacyMaxSamples(setup_.buffer_size != 0 ? setup_.buffer_size : agent::kDefaultRingCapacity);
    HVPROF_TRY(code, link_->Op(legacy::kOpGetBuffer, std::as_writable_bytes(std::span(&buffer, 1))));
    if (code == ErrorCode::kBusy) {
      return MakeError(ErrorKind::kBusy,
                       "Xen refused get_buffer (EBUSY): it still shares {}'s profiling buffer with an earlier agent "
                       "that did not leave, or the vPMU owns the PMU (boot Xen with vpmu=off). Xen 4.17 frees a "
                       "guest's buffer only at reboot or through that agent's disable_virq; see \"A guest agent "
                       "that did not leave\" in docs/xen.md",
                       Label());
    }
    if (code != ErrorCode::kOk) return link_->DescribeRefusal(legacy::kOpGetBuffer, code);
    if (auto added = rings_.AddLegacy(*link_, setup_.domain, {buffer.buf_gmaddr, buffer.nbuf, buffer.bufsize}, true);
        !added) {
      rings_.Clear();
      return added.error();
    }
    capacity_ = rings_.capacity();
    watermark_ = 0;
    rings_.SetLegacyPeriods(periods);
    metadata.domains.at(0).vcpus = static_cast<uint16_t>(rings_.size());
    metadata.ring_capacity = capacity_;
    xen_session_ = std::move(metadata);
    xen_buffer_ = true;
  }
  HVPROF_TRY(enabled, link_->Op(legacy::kOpEnableVirq, {}));
  if (enabled == ErrorCode::kBadState) {
    return MakeError(ErrorKind::kBadState,
                     "Xen refused enable_virq: dom0 has not set profiling up with {} as an active domain. In dom0 "
                     "run `hvprof --platform=xen --start-daemon --active-domains={}` (with its other options), then "
                     "`hvprof --domain={} --start` here again",
                     Label(), setup_.domain, setup_.domain);
  }
  if (enabled != ErrorCode::kOk) return link_->DescribeRefusal(legacy::kOpEnableVirq, enabled);
  rings_.ResyncLegacy();  // enable_virq zeroed the rings' indices
  activated_ = true;
  return BeginSession(*xen_session_);
}

// Leaves Xen's profiling: the last samples, then disable_virq, which Xen refuses while dom0
// profiles; only then is the buffer unmapped and given back.
Result<Json> GuestAgent::LeaveXenoprof() {
  DrainAll(true);
  HVPROF_TRY(code, link_->Op(legacy::kOpDisableVirq, {}));
  if (code != ErrorCode::kOk) {
    return MakeError(ErrorKind::kBusy,
                     "Xen refused disable_virq: dom0 is still profiling, or no longer lists {} as active. Run "
                     "`hvprof --stop` in dom0 (and leave with this command before dom0's `hvprof --shutdown`), "
                     "then `hvprof --domain={} --shutdown` here again; samples so far are kept",
                     Label(), setup_.domain);
  }
  MarkProfiling(false);
  HVPROF_TRY(dumped, Dump());
  rings_.Clear();
  xen_buffer_ = false;
  dumped["message"] = fmt::format("profiling shut down in {}", Label());
  return dumped;
}

}  // namespace hvprof::guest
