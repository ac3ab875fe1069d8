#include "hvprof/dom0/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "hvprof/base/signals.h"
#include "hvprof/base/files.h"
#include "hvprof/base/log.h"

namespace hvprof::dom0 {

using control::Json;
using hvpmu::ErrorCode;
namespace legacy = hvpmu::legacy;
namespace ring = hvpmu::ring;

namespace {

constexpr uint32_t kDefaultCapacity = 16384;
constexpr uint64_t kAssumedHz = 3'000'000'000;  // to size the poll timer from counts

Dom0Agent* g_signal_agent = nullptr;

void OnSignal(int) {
  if (g_signal_agent != nullptr) g_signal_agent->RequestShutdown();
}

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

const char* StateName(uint32_t state) {
  switch (static_cast<hvpmu::EngineState>(state)) {
    case hvpmu::EngineState::kIdle: return "idle";
    case hvpmu::EngineState::kInitialized: return "initialized";
    case hvpmu::EngineState::kCountersReserved: return "counters-reserved";
    case hvpmu::EngineState::kReady: return "ready";
    case hvpmu::EngineState::kProfiling: return "profiling";
  }
  return "unknown";
}

const char* RoleName(uint32_t role) {
  switch (static_cast<hvpmu::DomainRole>(role)) {
    case hvpmu::DomainRole::kIgnored: return "ignored";
    case hvpmu::DomainRole::kActive: return "active";
    case hvpmu::DomainRole::kPassive: return "passive";
  }
  return "unknown";
}

hvpmu::BufferV2 BufferRequest(uint16_t domain, uint32_t capacity) {
  hvpmu::BufferV2 buffer{};
  buffer.struct_size = sizeof buffer;
  buffer.abi_version = hvpmu::kAbiVersion;
  buffer.domain = domain;
  buffer.capacity = capacity;
  return buffer;
}

}  // namespace

Dom0Agent::Dom0Agent(control::SetupOptions setup, std::unique_ptr<agent::HypervisorLink> link)
    : setup_(std::move(setup)), link_(std::move(link)) {
  paths_.root = setup_.session_root;
  wake_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

Dom0Agent::~Dom0Agent() {
  if (g_signal_agent == this) g_signal_agent = nullptr;
}

void Dom0Agent::RequestShutdown() {
  shutdown_requested_ = true;
  const uint64_t one = 1;
  if (wake_.valid()) [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void Dom0Agent::HandleSignals(Dom0Agent* agent) {
  g_signal_agent = agent;
  InstallStopHandler(OnSignal);
}

Result<void> Dom0Agent::Op(uint32_t op, std::span<std::byte> argument, bool tolerate_refusal) {
  HVPROF_TRY(code, link_->Op(op, argument));
  if (code != ErrorCode::kOk && !tolerate_refusal) return agent::RefusalError(op, code);
  return Ok();
}

Result<hvpmu::Status> Dom0Agent::EngineStatus() {
  auto status = std::make_unique<hvpmu::Status>();
  std::memset(status.get(), 0, sizeof *status);
  status->struct_size = sizeof(hvpmu::Status);
  status->abi_version = hvpmu::kAbiVersion;
  HVPROF_TRYV(Op(hvpmu::kOpStatus, status.get()));
  return *status;
}

std::string Dom0Agent::DomainLabel(uint16_t id) const {
  for (const auto& domain : domains_) {
    if (domain.id == id) return fmt::format("{} ({})", id, domain.name);
  }
  return id == hvpmu::kDomainIdle ? "idle" : std::to_string(id);
}

Result<std::unique_ptr<Dom0Agent>> Dom0Agent::Create(const control::SetupOptions& setup,
                                                     const std::string& hvprof_version) {
  if (setup.platform != "sim") {
    return MakeError(ErrorKind::kUnsupported,
                     "--platform={} is not supported by this hvprofd yet; use --platform=sim with hvprof-hv",
                     setup.platform);
  }
  const std::string run_dir = setup.hv_run_dir.empty()
                                  ? (::geteuid() == 0 ? std::string("/run/hvprof")
                                     : std::getenv("XDG_RUNTIME_DIR") != nullptr
                                         ? std::string(std::getenv("XDG_RUNTIME_DIR")) + "/hvprof"
                                         : "/tmp/hvprof-" + std::to_string(::geteuid()))
                                  : setup.hv_run_dir;
  HVPROF_TRY(link, agent::ConnectHosted(run_dir + "/domain-0.sock"));
  if (link->domain() != 0) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "the hypervisor says this is domain {}, not dom0; the primary profiler runs in dom0",
                     link->domain());
  }
  std::unique_ptr<Dom0Agent> agent(new Dom0Agent(setup, std::move(link)));
  HVPROF_TRYV(agent->Recover());
  if (auto configured = agent->Configure(hvprof_version); !configured) {
    // Leave the hypervisor as we found it.
    (void)agent->Recover();
    return configured.error();
  }
  return agent;
}

Result<void> Dom0Agent::Recover() {
  HVPROF_TRY(status, EngineStatus());
  const auto state = static_cast<hvpmu::EngineState>(status.state);
  if (state == hvpmu::EngineState::kIdle) return Ok();
  if (status.primary != 0 && status.primary != hvpmu::kDomainInvalid) {
    return MakeError(ErrorKind::kBusy, "domain {} is the primary profiler; only one may run",
                     status.primary);
  }
  // A previous hvprofd died without shutting down, or a configuration failed half way:
  // unwind the hypervisor's state in the order Xen's would be unwound.
  const char* found = StateName(status.state);
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
                     StateName(after.state));
  }
  const std::string note = fmt::format(
      "recovered the hypervisor's profiling state ('{}') that an earlier hvprofd left behind", found);
  Log(LogLevel::kWarning, "{}", note);
  notes_.push_back(note);
  rings_.Clear();
  return Ok();
}

Result<void> Dom0Agent::Configure(const std::string& hvprof_version) {
  // What the machine is.
  hvpmu::InitV2 init{};
  init.struct_size = sizeof init;
  init.abi_version = hvpmu::kAbiVersion;
  HVPROF_TRYV(Op(hvpmu::kOpInitV2, &init));
  if (init.is_primary == 0) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "the hypervisor did not make this domain the primary profiler");
  }
  pmu_ = init;
  const hvpmu::CpuEventTable* table = hvpmu::FindEventTable(init.cpu_type);
  if (table == nullptr) {
    return MakeError(ErrorKind::kUnsupported, "no event table for CPU type {}", init.cpu_type);
  }
  std::vector<control::EventSpec> specs;
  for (const std::string& text : setup_.events) {
    HVPROF_TRY(spec, control::ParseEventSpec(text));
    specs.push_back(spec);
  }
  HVPROF_TRY(events, control::ResolveEvents(specs, *table, init));
  events_ = std::move(events);

  // Which domains, by id or name.
  HVPROF_TRY(domain_text, link_->Domains());
  HVPROF_TRY(domains, control::ParseDomainList(domain_text));
  domains_ = std::move(domains);
  HVPROF_TRY(active, control::ResolveDomains(setup_.active_domains, domains_, "active-domains"));
  HVPROF_TRY(passive, control::ResolveDomains(setup_.passive_domains, domains_, "passive-domains"));
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

  // Images: checked now, recorded with their build-ids.
  HVPROF_TRY(context_text, link_->Context());
  Json context = Json::parse(context_text, nullptr, false);
  if (context.is_discarded()) context = Json::object();
  const std::string xen = !setup_.xen_image.empty() ? setup_.xen_image : context.value("hypervisor", "");
  if (!xen.empty()) {
    HVPROF_TRY(image, control::CheckImage(xen, "hypervisor", std::nullopt));
    images_.push_back(image);
  } else {
    notes_.push_back("no hypervisor image (--xen): hypervisor samples stay unresolved");
  }
  if (!setup_.no_vmlinux) {
    std::string kernel = setup_.vmlinux;
    if (kernel.empty()) kernel = context.value("kernel", "/proc/kallsyms");
    HVPROF_TRY(image, control::CheckImage(kernel, "kernel", uint16_t{0}));
    images_.push_back(image);
  }
  for (size_t i = 0; i < passive_.size(); ++i) {
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
    HVPROF_TRY(image, control::CheckImage(kernel, "passive-kernel", passive_[i]));
    images_.push_back(image);
  }

  // The Xenoprof sequence.
  capacity_ = setup_.buffer_size != 0 ? setup_.buffer_size : kDefaultCapacity;
  hvpmu::BufferV2 own = BufferRequest(0, capacity_);
  HVPROF_TRYV(Op(hvpmu::kOpGetBufferV2, &own));
  capacity_ = own.capacity;
  watermark_ = own.watermark;
  HVPROF_TRYV(rings_.AddV2(*link_, 0, own, true));
  HVPROF_TRYV(Op(legacy::kOpResetActiveList, {}));
  for (uint16_t id : active_) {
    legacy::DomainIdArg domain = id;
    HVPROF_TRYV(Op(legacy::kOpSetActive, &domain));
  }
  HVPROF_TRYV(Op(legacy::kOpResetPassiveList, {}));
  for (uint16_t id : passive_) {
    hvpmu::BufferV2 buffer = BufferRequest(id, capacity_);
    HVPROF_TRYV(Op(hvpmu::kOpSetPassiveV2, &buffer));
    HVPROF_TRYV(rings_.AddV2(*link_, id, buffer, true));
  }
  if (setup_.callgraph != 0) {
    legacy::BacktraceDepthArg depth = setup_.callgraph;
    HVPROF_TRYV(Op(legacy::kOpSetBacktrace, &depth));
  }
  HVPROF_TRYV(Op(legacy::kOpReserveCounters, {}));
  for (const control::ResolvedEvent& event : events_) {
    legacy::Counter counter{};
    counter.ind = event.counter;
    counter.count = event.count;
    counter.enabled = 1;
    counter.event = event.event->code;
    counter.unit_mask = event.unit_mask;
    counter.kernel = event.kernel;
    counter.user = event.user;
    HVPROF_TRYV(Op(legacy::kOpCounter, &counter));
  }
  HVPROF_TRYV(Op(legacy::kOpSetupEvents, {}));
  HVPROF_TRYV(Op(legacy::kOpEnableVirq, {}));

  // The session.
  store::SessionMetadata& m = base_metadata_;
  m.hvprof_version = hvprof_version;
  m.platform = link_->platform_name();
  m.machine = link_->machine_name();
  m.cpu_type = init.cpu_type;
  m.num_cpus = init.num_pcpus;
  m.num_counters = init.num_counters;
  m.role = "dom0";
  m.agent_domain = 0;
  for (const auto& event : events_) {
    m.events.push_back({event.counter, event.event->name, event.event->code, event.unit_mask,
                        event.unit_mask_name, event.count, event.kernel, event.user});
  }
  for (uint16_t id : active_) {
    store::DomainRecord record;
    record.id = id;
    record.role = "active";
    for (const auto& domain : domains_) {
      if (domain.id == id) {
        record.name = domain.name;
        record.vcpus = domain.vcpus;
      }
    }
    if (id == 0 && context.contains("processes")) {
      for (const Json& process : context["processes"]) {
        store::ProcessRecord p;
        p.pid = process.value("pid", 0u);
        p.comm = process.value("comm", "");
        for (const Json& mapping : process.value("mappings", Json::array())) {
          auto hex = [&](const char* key) {
            return std::stoull(mapping.value(key, std::string("0")), nullptr, 16);
          };
          p.mappings.push_back({mapping.value("path", ""), hex("start"), hex("end"), hex("bias"),
                                mapping.value("build_id", "")});
        }
        record.processes.push_back(std::move(p));
      }
    }
    m.domains.push_back(std::move(record));
  }
  for (uint16_t id : passive_) {
    store::DomainRecord record;
    record.id = id;
    record.role = "passive";
    for (const auto& domain : domains_) {
      if (domain.id == id) {
        record.name = domain.name;
        record.vcpus = domain.vcpus;
      }
    }
    m.domains.push_back(std::move(record));
  }
  m.images = images_;
  m.ring_format = "v2";
  m.ring_capacity = capacity_;
  m.ring_watermark = watermark_;
  m.backtrace_depth = setup_.callgraph;
  m.poll_interval_ms = PollIntervalMs();
  m.notes = notes_;
  HVPROF_TRY(session, agent::SessionWriter::Open(paths_.current(), m));
  session_ = std::make_unique<agent::SessionWriter>(std::move(session));
  HVPROF_TRY(listener, control::Listen(paths_.control_socket()));
  control_ = std::move(listener);
  configured_ = true;
  Log(LogLevel::kInfo, "{}", Describe());
  return Ok();
}

std::string Dom0Agent::Describe() const {
  std::string events;
  for (const auto& event : events_) {
    events += fmt::format("{}{}:{} (counter {})", events.empty() ? "" : ", ", event.event->name,
                          event.count, event.counter);
  }
  std::string active;
  for (uint16_t id : active_) active += (active.empty() ? "" : ", ") + DomainLabel(id);
  std::string passive;
  for (uint16_t id : passive_) passive += (passive.empty() ? "" : ", ") + DomainLabel(id);
  return fmt::format("profiling set up on {} ({}, {}): events {}; active {}; passive {}; "
                     "{} rings of {} samples; session {}",
                     link_->machine_name(), link_->platform_name(), pmu_.cpu_type, events, active,
                     passive.empty() ? "none" : passive, rings_.rings().size(), capacity_,
                     paths_.current());
}

uint32_t Dom0Agent::PollIntervalMs() const {
  if (setup_.poll_interval_ms != 0) return setup_.poll_interval_ms;
  // The busiest ring fills at about one sample per `count` cycles of a fully busy CPU; poll
  // four times per fill so a ring is drained well before it could overflow.
  uint64_t smallest = UINT64_MAX;
  for (const auto& event : events_) smallest = std::min(smallest, event.count);
  const double per_second = static_cast<double>(kAssumedHz) / static_cast<double>(smallest);
  const double fill_ms = 1000.0 * capacity_ / per_second;
  return static_cast<uint32_t>(std::clamp(fill_ms / 4.0, 1.0, 250.0));
}

void Dom0Agent::DrainAll() {
  rings_.DrainAll([this](const agent::RingState&, const ring::SampleRecord& record,
                         std::span<const uint64_t> frames) { session_->Add(record, frames); });
}

Result<void> Dom0Agent::Run() {
  auto last_flush = std::chrono::steady_clock::now();
  while (!shutdown_requested_) {
    std::vector<pollfd> fds;
    fds.push_back({control_.get(), POLLIN, 0});
    fds.push_back({wake_.get(), POLLIN, 0});
    for (const ScopedFd& fd : rings_.notification_fds()) fds.push_back({fd.get(), POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(PollIntervalMs()));
    if (ready < 0 && errno != EINTR) return ErrnoError(errno, "poll");
    rings_.ClearNotifications();
    DrainAll();
    if (std::chrono::steady_clock::now() - last_flush > std::chrono::seconds(1)) {
      if (auto flushed = session_->Flush(); !flushed) {
        Log(LogLevel::kError, "{}", flushed.error().message());
      }
      last_flush = std::chrono::steady_clock::now();
    }
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      ScopedFd client(::accept4(control_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (client.valid()) {
        auto request = control::ReadMessage(client.get(), std::chrono::seconds(5));
        const Json response =
            request ? Handle(request.value()) : control::ErrorResponse(request.error());
        if (auto written = control::WriteMessage(client.get(), response); !written) {
          Log(LogLevel::kWarning, "cannot answer hvprof: {}", written.error().message());
        }
      }
    }
  }
  if (configured_) {
    if (auto done = Shutdown(); !done) Log(LogLevel::kError, "{}", done.error().message());
  }
  return Ok();
}

Json Dom0Agent::Handle(const Json& request) {
  const std::string action = request.value("action", "");
  Result<Json> result = MakeError(ErrorKind::kInvalidArgument, "unknown action '{}'", action);
  if (action == "ping") result = control::OkResponse({{"role", "dom0"}, {"pid", ::getpid()}});
  else if (action == "status") result = Status();
  else if (action == "start") result = Start();
  else if (action == "stop") result = Stop();
  else if (action == "dump") result = Dump();
  else if (action == "reset") result = Reset();
  else if (action == "save") result = Save(request.value("name", ""));
  else if (action == "run-sim") result = RunSim(request.value("duration_ns", uint64_t{0}));
  else if (action == "shutdown") {
    result = Shutdown();
    shutdown_requested_ = true;
  }
  if (!result) {
    Log(LogLevel::kWarning, "{}: {}", action, result.error().message());
    return control::ErrorResponse(result.error());
  }
  return control::OkResponse(std::move(result).value());
}

Result<Json> Dom0Agent::Start() {
  if (profiling_) return Json{{"message", "profiling is already on"}};
  auto code = link_->Op(legacy::kOpStart, {});
  if (!code) return code.error();
  if (code.value() == ErrorCode::kNotActivated) {
    HVPROF_TRY(status, EngineStatus());
    std::vector<std::string> missing;
    for (uint32_t i = 0; i < status.num_domains; ++i) {
      const hvpmu::DomainStatus& d = status.domains[i];
      if (d.role == static_cast<uint32_t>(hvpmu::DomainRole::kActive) && d.activated == 0) {
        missing.push_back(DomainLabel(d.domain));
      }
    }
    return MakeError(ErrorKind::kBadState,
                     "cannot start: active domain{} {} {} not started profiling yet. In {} run "
                     "`hvprof --start-daemon && hvprof --start`, then run `hvprof --start` here again",
                     missing.size() == 1 ? "" : "s", fmt::join(missing, ", "),
                     missing.size() == 1 ? "has" : "have", missing.size() == 1 ? "it" : "each of them");
  }
  if (code.value() != ErrorCode::kOk) return agent::RefusalError(legacy::kOpStart, code.value());
  profiling_ = true;
  session_->metadata().profiling.push_back({NowNs(), 0});
  HVPROF_TRYV(session_->WriteMetadata());
  return Json{{"message", "profiling started"}};
}

Result<Json> Dom0Agent::Stop() {
  if (!profiling_) return Json{{"message", "profiling is not on"}};
  HVPROF_TRYV(Op(legacy::kOpStop, {}));
  profiling_ = false;
  DrainAll();  // the final flush
  if (!session_->metadata().profiling.empty()) session_->metadata().profiling.back().stop_ns = NowNs();
  HVPROF_TRY(dumped, Dump());
  dumped["message"] = "profiling stopped";
  return dumped;
}

void Dom0Agent::UpdateMetadata(const hvpmu::Status& status) {
  store::SessionMetadata& m = session_->metadata();
  m.rings.clear();
  uint64_t malformed = 0;
  for (const agent::RingState& state : rings_.rings()) {
    const ring::RingHeader& header = state.reader.header();
    store::RingRecord record;
    record.owner = state.owner;
    record.index = state.index;
    record.kind = state.kind == ring::RingKind::kPcpu ? "pcpu" : "vcpu";
    record.capacity = header.capacity;
    for (uint64_t count : header.samples) record.written += ring::LoadRelaxed(&count);
    for (size_t r = 0; r < ring::kLossSlots; ++r) record.lost[r] = ring::LoadRelaxed(&header.lost[r]);
    record.drained = state.drained;
    record.malformed = state.malformed;
    record.max_fill = state.max_pending;
    malformed += state.malformed;
    m.rings.push_back(record);
  }
  using ring::LossReason;
  m.losses.ring_full = status.lost[static_cast<int>(LossReason::kRingFull)];
  m.losses.corrupt_index = status.lost[static_cast<int>(LossReason::kCorruptIndex)];
  m.losses.no_ring = status.lost[static_cast<int>(LossReason::kNoRing)];
  m.losses.unprofiled_domain = status.lost[static_cast<int>(LossReason::kUnprofiledDomain)];
  m.losses.malformed_records = malformed;
  m.idle_samples = status.idle_samples;
}

Result<Json> Dom0Agent::Dump() {
  DrainAll();
  HVPROF_TRY(status, EngineStatus());
  UpdateMetadata(status);
  HVPROF_TRYV(session_->Dump());
  return Json{{"message", "samples written"},
              {"session", session_->directory()},
              {"samples", session_->stats().samples}};
}

Result<Json> Dom0Agent::Reset() {
  DrainAll();
  const std::string directory = session_->directory();
  session_.reset();
  std::error_code ec;
  std::filesystem::remove_all(directory, ec);
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot remove {}", directory));
  store::SessionMetadata fresh = base_metadata_;
  if (profiling_) fresh.profiling.push_back({NowNs(), 0});
  HVPROF_TRY(session, agent::SessionWriter::Open(directory, fresh));
  session_ = std::make_unique<agent::SessionWriter>(std::move(session));
  return Json{{"message", "the current session was emptied"}};
}

Result<Json> Dom0Agent::Save(const std::string& name) {
  HVPROF_TRYV(store::ValidateSessionName(name));
  const std::string target = paths_.Saved(name);
  std::error_code ec;
  if (std::filesystem::exists(target, ec)) {
    return MakeError(ErrorKind::kBadState, "a session named '{}' exists already ({}); pick another name",
                     name, target);
  }
  if (profiling_ && !session_->metadata().profiling.empty()) {
    session_->metadata().profiling.back().stop_ns = NowNs();
  }
  HVPROF_TRYV(Dump());
  const std::string directory = session_->directory();
  session_.reset();
  std::filesystem::rename(directory, target, ec);
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot rename {} to {}", directory, target));
  store::SessionMetadata fresh = base_metadata_;
  if (profiling_) fresh.profiling.push_back({NowNs(), 0});
  HVPROF_TRY(session, agent::SessionWriter::Open(directory, fresh));
  session_ = std::make_unique<agent::SessionWriter>(std::move(session));
  return Json{{"message", fmt::format("saved as {}", target)}, {"saved", target}};
}

Result<Json> Dom0Agent::Shutdown() {
  if (!configured_) return Json{{"message", "already shut down"}};
  Json result = Json::object();
  if (profiling_) {
    HVPROF_TRY(stopped, Stop());
    result = stopped;
  } else {
    HVPROF_TRY(dumped, Dump());
    result = dumped;
  }
  // Release everything, in Xen's order: our rings, the counters, the lists, the primary role.
  rings_.Clear();
  HVPROF_TRYV(Op(legacy::kOpDisableVirq, {}, true));
  HVPROF_TRYV(Op(legacy::kOpReleaseCounters, {}, true));
  HVPROF_TRYV(Op(legacy::kOpResetActiveList, {}, true));
  HVPROF_TRYV(Op(legacy::kOpShutdown, {}, true));
  configured_ = false;
  control_.Reset();
  ::unlink(paths_.control_socket().c_str());
  result["message"] = "profiling shut down";
  Log(LogLevel::kInfo, "shut down; session kept in {}", session_->directory());
  return result;
}

Result<Json> Dom0Agent::RunSim(uint64_t duration_ns) {
  if (duration_ns == 0) return MakeError(ErrorKind::kInvalidArgument, "run-sim needs a duration");
  // Advance the simulated clock in steps small enough that no ring can fill between drains.
  uint64_t smallest = UINT64_MAX;
  for (const auto& event : events_) smallest = std::min(smallest, event.count);
  const uint64_t step = std::max<uint64_t>(
      100'000, std::min<uint64_t>(20'000'000, capacity_ / 4 * smallest / (kAssumedHz / 1'000'000'000)));
  uint64_t done = 0;
  agent::SimClock clock{};
  while (done < duration_ns) {
    const uint64_t chunk = std::min(step, duration_ns - done);
    HVPROF_TRY(after, link_->SimRunFor(chunk));
    clock = after;
    done += chunk;
    DrainAll();
    if (clock.halted) break;
  }
  return Json{{"sim_time_ns", clock.sim_time_ns}, {"halted", clock.halted}, {"ran_ns", done}};
}

Result<Json> Dom0Agent::Status() {
  HVPROF_TRY(status, EngineStatus());
  Json domains = Json::array();
  for (uint32_t i = 0; i < status.num_domains; ++i) {
    const hvpmu::DomainStatus& d = status.domains[i];
    Json entry{{"id", d.domain},
               {"label", DomainLabel(d.domain)},
               {"role", RoleName(d.role)},
               {"activated", d.activated != 0},
               {"rings", d.num_rings},
               {"capacity", d.capacity},
               {"max_fill", d.max_fill},
               {"samples", {{"user", d.samples[0]}, {"kernel", d.samples[1]}, {"hypervisor", d.samples[2]}}},
               {"lost", {{"ring_full", d.lost[0]}, {"corrupt_index", d.lost[1]}, {"no_ring", d.lost[2]}}}};
    domains.push_back(entry);
  }
  Json events = Json::array();
  for (const auto& event : events_) {
    events.push_back({{"counter", event.counter}, {"name", event.event->name}, {"count", event.count},
                      {"unit_mask", event.unit_mask}, {"kernel", event.kernel}, {"user", event.user}});
  }
  Json result{{"state", StateName(status.state)},
              {"profiling", profiling_},
              {"platform", link_->platform_name()},
              {"machine", link_->machine_name()},
              {"cpu_type", std::string(status.cpu_type)},
              {"cpus", status.num_pcpus},
              {"session", session_ ? session_->directory() : ""},
              {"samples_stored", session_ ? session_->stats().samples : 0},
              {"events", events},
              {"domains", domains},
              {"buffers", {{"capacity", capacity_}, {"watermark", watermark_}, {"poll_interval_ms", PollIntervalMs()}}},
              {"lost", {{"ring_full", status.lost[0]}, {"corrupt_index", status.lost[1]},
                        {"no_ring", status.lost[2]}, {"unprofiled_domain", status.lost[3]}}},
              {"total_samples", status.total_samples},
              {"idle_samples", status.idle_samples},
              {"backtrace_depth", status.backtrace_depth}};
  if (auto clock = link_->SimQuery(); clock) {
    result["sim"] = {{"time_ns", clock.value().sim_time_ns}, {"pmis", clock.value().pmis},
                     {"halted", clock.value().halted}};
  }
  return result;
}

}  // namespace hvprof::dom0
