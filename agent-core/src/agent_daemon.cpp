#include "hvprof/agent/agent_daemon.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/base/units.h"
#include "hvprof/base/probes.h"
#include "hvprof/base/signals.h"

HVPROF_PROBE_SEMAPHORE(session__start);
HVPROF_PROBE_SEMAPHORE(session__stop);
HVPROF_PROBE_SEMAPHORE(control__request);
HVPROF_PROBE_SEMAPHORE(control__failed);
HVPROF_PROBE_SEMAPHORE(hypervisor__lost);

namespace hvprof::agent {

namespace ring = hvpmu::ring;

namespace {

AgentDaemon* g_signal_agent = nullptr;

void OnSignal(int) {
  if (g_signal_agent != nullptr) g_signal_agent->RequestShutdown();
}

void OnReloadSignal(int) {
  if (g_signal_agent != nullptr) g_signal_agent->RequestReload();
}

}  // namespace

double PeakSampleRate(std::string_view event_name, uint64_t count) {
  constexpr double kAssumedHz = 3e9;  // events per second of a busy CPU counting cycles
  if (count == 0) return 0;
  return (event_name == "CPU_CLOCK" ? 1e9 : kAssumedHz) / static_cast<double>(count);
}

uint32_t PollIntervalFor(double samples_per_second, uint32_t capacity) {
  if (!(samples_per_second > 0) || capacity == 0) return 250;
  return static_cast<uint32_t>(std::clamp(1000.0 * capacity / samples_per_second / 4.0, 1.0, 250.0));
}

const char* EngineStateName(uint32_t state) {
  switch (static_cast<hvpmu::EngineState>(state)) {
    case hvpmu::EngineState::kIdle: return "idle";
    case hvpmu::EngineState::kInitialized: return "initialized";
    case hvpmu::EngineState::kCountersReserved: return "counters-reserved";
    case hvpmu::EngineState::kReady: return "ready";
    case hvpmu::EngineState::kProfiling: return "profiling";
  }
  return "unknown";
}

const char* DomainRoleName(uint32_t role) {
  switch (static_cast<hvpmu::DomainRole>(role)) {
    case hvpmu::DomainRole::kIgnored: return "ignored";
    case hvpmu::DomainRole::kActive: return "active";
    case hvpmu::DomainRole::kPassive: return "passive";
  }
  return "unknown";
}

DomainRingsStatus DomainStatusOf(const hvpmu::DomainStatus& d, const std::string& label) {
  DomainRingsStatus out;
  out.id = d.domain;
  out.label = label;
  out.role = DomainRoleName(d.role);
  out.activated = d.activated != 0;
  out.rings = d.num_rings;
  out.capacity = d.capacity;
  out.max_fill = d.max_fill;
  for (uint8_t mode = 0; mode < sample_mode::kCount; ++mode) out.samples[mode] = d.samples[mode];
  out.lost.ring_full = d.lost[0];
  out.lost.corrupt_index = d.lost[1];
  out.lost.no_ring = d.lost[2];
  return out;
}

int32_t LegacyMaxSamples(uint32_t capacity) {
  return static_cast<int32_t>(std::min<uint64_t>(uint64_t{capacity} + 1, INT32_MAX));
}

hvpmu::InitV2 FromLegacyInit(const hvpmu::legacy::Init& legacy_init, uint32_t cpus) {
  hvpmu::InitV2 init = InitRequest();
  init.is_primary = legacy_init.is_primary == 1 ? 1 : 0;
  init.num_counters = init.num_gp_counters = static_cast<uint32_t>(std::clamp(legacy_init.num_events, 0, 8));
  init.gp_counter_width = 32;
  init.max_count = (uint64_t{1} << 31) - 1;
  init.num_pcpus = cpus;
  std::memcpy(init.cpu_type, legacy_init.cpu_type, sizeof init.cpu_type);
  init.cpu_type[sizeof init.cpu_type - 1] = '\0';
  return init;
}

uint64_t WallClockNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

AgentDaemon::AgentDaemon(std::string role, store::SessionPaths paths, std::unique_ptr<HypervisorLink> link)
    : role_(std::move(role)), paths_(std::move(paths)), link_(std::move(link)) {
  wake_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

AgentDaemon::~AgentDaemon() {
  if (g_signal_agent == this) g_signal_agent = nullptr;
}

void AgentDaemon::RequestShutdown() {
  shutdown_requested_ = true;
  const uint64_t one = 1;
  if (wake_.valid()) [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void AgentDaemon::RequestReload() {
  reload_requested_ = true;
  const uint64_t one = 1;
  if (wake_.valid()) [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void AgentDaemon::HandleSignals(AgentDaemon* agent) {
  g_signal_agent = agent;
  InstallStopHandler(OnSignal);
  InstallReloadHandler(OnReloadSignal);
}

Result<Json> AgentDaemon::ReloadSettings() {
  return MakeError(ErrorKind::kUnsupported, "a guest's agent has no settings to reload: its setup is dom0's");
}

Result<void> AgentDaemon::Op(uint32_t op, std::span<std::byte> argument, bool tolerate_refusal) {
  HVPROF_TRY(code, link_->Op(op, argument));
  if (code != hvpmu::ErrorCode::kOk && !tolerate_refusal) return link_->DescribeRefusal(op, code);
  return Ok();
}

Result<hvpmu::Status> AgentDaemon::EngineStatus() {
  std::unique_ptr<hvpmu::Status> status = StatusRequest();
  HVPROF_TRYV(Op(hvpmu::kOpStatus, status.get()));
  return *status;
}

Result<std::vector<hvpmu::DomainStatus>> AgentDaemon::ListedDomains() {
  std::vector<hvpmu::DomainStatus> domains;
  std::unique_ptr<hvpmu::Status> status = StatusRequest();
  uint32_t from = 0;
  while (from <= hvpmu::kMaxDomainId) {
    StatusRequest(status.get(), from);
    HVPROF_TRYV(Op(hvpmu::kOpStatus, status.get()));
    const uint32_t count = std::min(status->num_domains, hvpmu::kStatusMaxDomains);
    domains.insert(domains.end(), status->domains, status->domains + count);
    // An engine that ignores from_domain (or a page that ends the list) stops the walk.
    if (count == 0 || status->total_domains <= count || status->domains[count - 1].domain < from) break;
    from = status->domains[count - 1].domain + 1u;
  }
  return domains;
}

Result<void> AgentDaemon::LockProfiler(const std::string& session_root) {
  const std::string path = link_->ExclusiveLockPath();
  if (path.empty() || profiler_lock_.valid()) return Ok();
  HVPROF_TRYV(MakeDirectories(std::filesystem::path(path).parent_path().string()));
  HVPROF_TRY(lock, LockPidFile(path, session_root));
  if (!lock) {
    // The second would take the first one's state for a crashed agent's and tear it down.
    const auto holder = ReadPidFile(path);
    const std::string pid = holder && !holder->pid.empty() ? holder->pid : "?";
    const std::string directory = holder && !holder->note.empty() ? holder->note : "DIR";
    return MakeError(ErrorKind::kBusy,
                     "another hvprofd (pid {}, session directory {}) already drives domain {}'s profiler on this "
                     "host ({} is locked); `hvprof --status --session-dir={}` shows it, `hvprof --shutdown "
                     "--session-dir={}` ends it",
                     EscapeForTerminal(pid), EscapeForTerminal(directory), link_->domain(), path,
                     EscapeForTerminal(directory), EscapeForTerminal(directory));
  }
  profiler_lock_ = std::move(*lock);
  return Ok();
}

store::SessionMetadata AgentDaemon::NewMetadata(const hvpmu::InitV2& init, const std::string& hvprof_version) const {
  store::SessionMetadata m;
  m.hvprof_version = hvprof_version;
  m.platform = link_->platform_name();
  m.machine = link_->machine_name();
  m.cpu_type = init.cpu_type;
  m.num_cpus = init.num_pcpus;
  m.num_counters = init.num_counters;
  m.role = role_;
  m.agent_domain = link_->domain();
  return m;
}

Result<void> AgentDaemon::OpenSession(store::SessionMetadata base) {
  base_metadata_ = std::move(base);
  if (build_id_cache_) base_metadata_.build_id_cache = build_id_cache_->directory();
  not_kept_images_.clear();
  HVPROF_TRY(session, SessionWriter::Open(paths_.current(), base_metadata_));
  session_ = std::make_unique<SessionWriter>(std::move(session));
  counts_at_open_ = counts_now_;
  context_next_ = 0;  // a new session starts from what is alive
  context_lost_ = 0;
  jit_.reset();
  if (jit_scope_ != JitScope::kNone) {
    // hvprof's own programs run no JIT code: their processes are not followed.
    JitSnapshots::Options options;
    const std::string programs = ExecutableDirectory();
    for (const char* program : {"hvprofd", "hvprof", "hvprof-hv"}) {
      options.skip_programs.push_back(programs + "/" + program);
    }
    jit_ = std::make_unique<JitSnapshots>(session_->directory(), std::move(options), session_->metadata().jit);
  }
  return Ok();
}

Result<void> AgentDaemon::ListenForControl() {
  HVPROF_TRY(listener, Listen(paths_.control_socket()));
  control_ = std::move(listener);
  return Ok();
}

void AgentDaemon::StopListening() {
  control_.Reset();
  ::unlink(paths_.control_socket().c_str());
}

void AgentDaemon::DrainAll(bool final) {
  if (!session_) return;
  const uint16_t own_domain = link_->domain();
  link_->BeginTaskLookups();
  rings_.DrainAll([&](const ring::SampleRecord& drained, std::span<const uint64_t> frames) {
    ring::SampleRecord record = drained;
    // The guest code of this domain whose task the hypervisor could not name: the link may.
    if (record.pid == ring::kNoPid && record.domain == own_domain &&
        record.mode != static_cast<uint8_t>(ring::Mode::kHypervisor)) {
      link_->LookUpTask(record);
    }
    session_->Add(record, frames);
    // Processes that run user code may run JIT code: their perf maps and jitdumps are copied.
    if (jit_ && record.mode == static_cast<uint8_t>(ring::Mode::kUser) && record.pid != ring::kNoPid &&
        (jit_scope_ == JitScope::kAllDomains || record.domain == own_domain)) {
      jit_->Watch(record.domain, record.pid);
    }
  }, [&](const ring::SchedRecord& record) { session_->AddSched(record); }, final);
  if (sched_source_) sched_source_->Drain([&](const ring::SchedRecord& record) { session_->AddSched(record); });
  // The samples drained came after the platform told their processes: take what it has told
  // since, then count them.
  FetchContext(final);
  session_->CountPending();
  if (jit_) jit_->Poll();
}

Result<void> FetchContextUntilCaughtUp(uint64_t from, bool settle, const ContextFetch& fetch,
                                       const std::function<void(const context::ContextEventBatch&)>& on_batch,
                                       int max_requests) {
  for (int request = 0; request < max_requests; ++request) {
    HVPROF_TRY(batch, fetch(from, settle && request == 0));
    on_batch(batch);
    if (!batch.more || batch.next == from) break;
    from = batch.next;
  }
  return Ok();
}

void AgentDaemon::FetchContext(bool final) {
  if (!session_ || hypervisor_lost_) return;
  // The last drain of a session asks once for the mappings' answers still to come.
  auto fetched = FetchContextUntilCaughtUp(
      context_next_, final,
      [this](uint64_t from, bool settle) { return link_->FetchContextEvents(from, settle); },
      [this](const context::ContextEventBatch& batch) {
        if (context_next_ != 0 && batch.first > context_next_) {
          context_lost_ += batch.first - context_next_;
          const std::string note = fmt::format(
              "hvprof-hv dropped {} events of the processes before hvprofd took them (its queue was full): samples "
              "of the processes they told of may be shown by process and address instead of by function",
              context_lost_);
          auto& notes = session_->metadata().notes;
          notes.erase(std::remove_if(notes.begin(), notes.end(),
                                     [](const std::string& n) { return n.rfind("hvprof-hv dropped ", 0) == 0; }),
                      notes.end());
          notes.push_back(note);
        }
        for (const context::ContextEvent& event : batch.events) session_->AddContext(event);
        context_next_ = batch.next;
      });
  if (!fetched && !context_warned_) {
    Log(LogLevel::kWarning, "cannot read the processes' events: {}; user samples are counted by process",
        fetched.error().message());
    context_warned_ = true;
  }
}

Result<void> AgentDaemon::Run() {
  auto last_flush = std::chrono::steady_clock::now();
  while (!shutdown_requested_) {
    std::vector<pollfd> fds;
    fds.push_back({control_.get(), POLLIN, 0});
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({hypervisor_lost_ ? -1 : link_->HangupFd(), POLLRDHUP, 0});
    for (const ScopedFd& fd : rings_.notification_fds()) fds.push_back({fd.get(), POLLIN, 0});
    if (sched_source_ && sched_source_->NotificationFd() >= 0) fds.push_back({sched_source_->NotificationFd(), POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(PollIntervalMs()));
    if (ready < 0 && errno != EINTR) return ErrnoError(errno, "poll");
    if (ready > 0 && (fds[1].revents & POLLIN) != 0) {
      // A wake-up (a signal's request) is read, or poll would return at once from now on.
      uint64_t wakes = 0;
      [[maybe_unused]] const ssize_t n = ::read(wake_.get(), &wakes, sizeof wakes);
    }
    if (ready > 0 && (fds[2].revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0) {
      OnHypervisorLost();
      break;
    }
    rings_.ClearNotifications();
    DrainAll();
    OnTick();
    if (reload_requested_.exchange(false)) {
      // SIGHUP: what it took is in the log (hvprof --reload asks, and is told).
      if (auto reloaded = ReloadSettings(); reloaded) {
        Log(LogLevel::kInfo, "reload: {}", reloaded.value().value("message", ""));
      } else {
        Log(LogLevel::kError, "reload: {}", reloaded.error().message());
      }
    }
    if (session_ && std::chrono::steady_clock::now() - last_flush > std::chrono::seconds(1)) {
      if (auto flushed = session_->Flush(); !flushed) Log(LogLevel::kError, "{}", flushed.error().message());
      last_flush = std::chrono::steady_clock::now();
    }
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      ScopedFd client(::accept4(control_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (client.valid()) {
        auto request = ReadMessage(client.get(), std::chrono::seconds(5));
        const Json response = request ? Handle(request.value()) : ErrorResponse(request.error());
        if (auto written = WriteMessage(client.get(), response); !written) {
          Log(LogLevel::kWarning, "cannot answer hvprof: {}", written.error().message());
        }
      }
    }
  }
  if (configured_ && !hypervisor_lost_) {
    if (auto done = Shutdown(); !done) Log(LogLevel::kError, "{}", done.error().message());
  }
  return Ok();
}

void AgentDaemon::OnHypervisorLost() {
  hypervisor_lost_ = true;
  const bool was_profiling = profiling_;
  HVPROF_PROBE(hypervisor__lost, static_cast<int>(was_profiling));
  Log(LogLevel::kError, "hvprof-hv went away{}; this hvprofd writes the session and exits",
      was_profiling ? " while profiling" : "");
  if (session_) {
    // The rings are this process's mappings: what the engine put in them before it went is
    // still there.
    DrainAll(true);
    if (was_profiling) {
      MarkProfiling(false);
      session_->AddIncomplete(fmt::format(
          "hvprof-hv (the hypervisor side) went away while profiling, at about {}: the session ends there, and "
          "samples the engine took but had not yet put in a ring were lost uncounted",
          FormatLocalTime(WallClockNs())));
    }
    UpdateMetadata(nullptr);
    if (auto dumped = session_->Dump(); !dumped) Log(LogLevel::kError, "{}", dumped.error().message());
    KeepSampledImages();
    Log(LogLevel::kInfo, "session kept in {} ({} samples)", session_->directory(), session_->stats().samples);
  }
  rings_.Clear();
  configured_ = false;
  StopListening();
  shutdown_requested_ = true;
}

Result<Json> AgentDaemon::HandleOther(const std::string& action, const Json&) {
  return MakeError(ErrorKind::kUnsupported, "the {} agent has no action '{}'", role_, action);
}

Json AgentDaemon::Handle(const Json& request) {
  const std::string action = request.value("action", "");
  HVPROF_PROBE(control__request, action.c_str());
  Result<Json> result = Json::object();
  if (action == "ping") result = Json{{"role", role_}, {"pid", ::getpid()}, {"domain", link_->domain()}};
  else if (action == "status") {
    auto status = Status();
    result = status ? Result<Json>(ToJson(status.value())) : Result<Json>(status.error());
  }
  else if ((action == "reset" || action == "save" || action == "stop") && continuous_) {
    result = MakeError(ErrorKind::kBadState,
                       "hvprofd profiles continuously: its windows are saved by themselves as samples/window-*, "
                       "and the budget (--keep-size, --keep-age) removes the old ones. Report one with "
                       "`hvprof-report --session=NAME` (--list names them); `hvprof --shutdown` ends profiling. To {} "
                       "a session, run hvprofd without --continuous",
                       action);
  }
  else if (action == "reload") result = ReloadSettings();
  else if (action == "start") result = Start();
  else if (action == "stop") result = Stop();
  else if (action == "dump") result = Dump();
  else if (action == "reset") result = Reset();
  else if (action == "save") result = Save(request.value("name", ""), request.value("allow_empty", false));
  else if (action == "shutdown") {
    result = Shutdown();
    if (result) shutdown_requested_ = true;
  } else {
    result = HandleOther(action, request);
  }
  if (!result) {
    HVPROF_PROBE(control__failed, action.c_str(), result.error().message().c_str());
    Log(LogLevel::kWarning, "{}: {}", action, result.error().message());
    return ErrorResponse(result.error());
  }
  return OkResponse(std::move(result).value());
}

void AgentDaemon::MarkProfiling(bool on) {
  profiling_ = on;
  if (!session_) return;
  const store::SessionMetadata& m = session_->metadata();
  const char* id = m.session_id.c_str();
  if (on) HVPROF_PROBE(session__start, id, session_->directory().c_str(), m.platform.c_str(), m.agent_domain);
  else HVPROF_PROBE(session__stop, id, session_->directory().c_str(), session_->stats().samples);
  auto& intervals = session_->metadata().profiling;
  if (on) {
    intervals.push_back({WallClockNs(), 0});
  } else if (!intervals.empty() && intervals.back().stop_ns == 0) {
    intervals.back().stop_ns = WallClockNs();
  }
}

void AgentDaemon::UpdateMetadata(const hvpmu::Status* status) {
  store::SessionMetadata& m = session_->metadata();
  if (jit_) {
    jit_->CopyAll();
    m.jit = jit_->records();
    if (const uint64_t unwatched = jit_->unwatched(); unwatched != 0) {
      constexpr std::string_view kPrefix = "perf maps and jitdumps were copied for the first ";
      std::erase_if(m.notes, [&](const std::string& note) { return note.starts_with(kPrefix); });
      m.notes.push_back(fmt::format("{}{} processes only; {} more ran user code, and their JIT code may show as "
                                    "anonymous memory", kPrefix, jit_->max_processes(), unwatched));
    }
  }
  m.rings.clear();
  store::LossRecord own;  // from this agent's rings, for a caller that is not the primary
  uint64_t malformed = 0;
  using ring::LossReason;
  // The scheduling rings' counts are the scheduling records', kept apart from the samples'.
  for (const RingState& state : rings_.rings()) {
    const ring::RingHeader& header = state.reader.header();
    store::RingRecord record;
    record.owner = state.owner;
    record.index = state.index;
    record.capacity = header.capacity;
    record.drained = state.drained;
    record.malformed = state.malformed;
    record.max_fill = state.max_pending;
    const bool sched_ring = state.kind == ring::RingKind::kSched;
    record.kind = sched_ring ? "sched" : state.kind == ring::RingKind::kPcpu ? "pcpu" : "vcpu";
    const uint64_t* lost = sched_ring ? header.sched_lost : header.lost;
    for (size_t r = 0; r < ring::kLossSlots; ++r) record.lost[r] = ring::LoadRelaxed(&lost[r]);
    if (sched_ring) {
      record.written = ring::LoadRelaxed(&header.sched_written);
    } else {
      for (const uint64_t& count : header.samples) record.written += ring::LoadRelaxed(&count);
      malformed += state.malformed;
      own.ring_full += record.lost[static_cast<int>(LossReason::kRingFull)];
      own.corrupt_index += record.lost[static_cast<int>(LossReason::kCorruptIndex)];
      own.no_ring += record.lost[static_cast<int>(LossReason::kNoRing)];
    }
    m.rings.push_back(record);
  }
  for (const LegacyRingState& state : rings_.legacy_rings()) {
    const LegacyRingCounts counts = CountsOf(state);
    store::RingRecord record;
    record.owner = state.owner;
    record.index = state.index;
    record.kind = "vcpu";
    record.capacity = state.reader.size() - 1;
    record.written = counts.user + counts.kernel + counts.xen;
    // Xen counts every record it could not write: samples, escapes and backtrace frames.
    record.lost[static_cast<int>(LossReason::kRingFull)] = counts.lost;
    record.drained = state.drained;
    record.malformed = state.malformed;
    record.max_fill = state.max_pending;
    malformed += state.malformed;
    own.ring_full += record.lost[static_cast<int>(LossReason::kRingFull)];
    m.rings.push_back(record);
  }
  if (status != nullptr && status->primary == link_->domain()) {
    m.losses.ring_full = status->lost[static_cast<int>(LossReason::kRingFull)];
    m.losses.corrupt_index = status->lost[static_cast<int>(LossReason::kCorruptIndex)];
    m.losses.no_ring = status->lost[static_cast<int>(LossReason::kNoRing)];
    m.losses.unprofiled_domain = status->lost[static_cast<int>(LossReason::kUnprofiledDomain)];
    counts_now_.idle = status->idle_samples;
    m.idle_samples = status->idle_samples - std::min(status->idle_samples, counts_at_open_.idle);
  } else if (hypervisor_lost_) {
    // The engine's counts, last read while it lived, cover every domain's rings: never less.
    const store::LossRecord& engine = counts_now_.losses;
    m.losses.ring_full = std::max(engine.ring_full, own.ring_full);
    m.losses.corrupt_index = std::max(engine.corrupt_index, own.corrupt_index);
    m.losses.no_ring = std::max(engine.no_ring, own.no_ring);
    m.losses.unprofiled_domain = engine.unprofiled_domain;
  } else {
    m.losses.ring_full = own.ring_full;
    m.losses.corrupt_index = own.corrupt_index;
    m.losses.no_ring = own.no_ring;
    m.losses.unprofiled_domain = counts_now_.losses.unprofiled_domain;  // only the engine says
  }
  m.losses.malformed_records = malformed;
  // What they grew by in this session.
  for (uint64_t store::LossRecord::*field : {&store::LossRecord::ring_full, &store::LossRecord::corrupt_index,
                                             &store::LossRecord::no_ring, &store::LossRecord::unprofiled_domain,
                                             &store::LossRecord::malformed_records}) {
    m.losses.*field = SinceSessionOpened(field, m.losses.*field);
  }
  for (store::RingRecord& record : m.rings) {
    const auto key = std::tuple(record.owner, record.index, record.kind);
    counts_now_.rings[key] = record;
    const auto before = counts_at_open_.rings.find(key);
    if (before == counts_at_open_.rings.end()) continue;
    const store::RingRecord& at_open = before->second;
    const auto grown = [](uint64_t now, uint64_t then) { return now - std::min(now, then); };
    record.drained = grown(record.drained, at_open.drained);
    record.malformed = grown(record.malformed, at_open.malformed);
    record.written = grown(record.written, at_open.written);
    for (size_t r = 0; r < ring::kLossSlots; ++r) record.lost[r] = grown(record.lost[r], at_open.lost[r]);
  }
  if (sched_source_) {
    for (const std::string& note : sched_source_->notes()) {
      if (std::find(m.notes.begin(), m.notes.end(), note) == m.notes.end()) m.notes.push_back(note);
    }
  }
  if (auto sched = RecordedSched()) m.sched = std::move(sched);
}

uint64_t AgentDaemon::SinceSessionOpened(uint64_t store::LossRecord::*field, uint64_t absolute) {
  counts_now_.losses.*field = absolute;
  return absolute - std::min(absolute, counts_at_open_.losses.*field);
}

std::optional<store::SchedSummary> AgentDaemon::RecordedSched() const {
  using ring::LossReason;
  std::optional<store::SchedSummary> sched;
  for (const RingState& state : rings_.rings()) {
    if (state.kind != ring::RingKind::kSched) continue;
    if (!sched) {
      sched.emplace();
      // On linux the engine's records are perf's scheduler tracepoints, translated.
      sched->source = link_->platform_name() == "linux" ? "perf" : "engine";
    }
    const uint64_t* lost = state.reader.header().sched_lost;
    sched->lost.ring_full += ring::LoadRelaxed(&lost[static_cast<int>(LossReason::kRingFull)]);
    sched->lost.corrupt_index += ring::LoadRelaxed(&lost[static_cast<int>(LossReason::kCorruptIndex)]);
    sched->lost.malformed += state.malformed;
    sched->lost.unknown_type += state.sched_unknown;
  }
  if (sched_source_) {  // the hypervisor's own recording (Xen's trace buffers)
    const SchedSourceStats stats = sched_source_->stats();
    if (!sched) sched.emplace();
    sched->source = sched_source_->name();
    // Xen's per-CPU buffer was full (TRC_LOST_RECORDS): as a full scheduling ring.
    sched->lost.ring_full += stats.platform_lost;
    sched->lost.malformed += stats.malformed;
  }
  return sched;
}

AgentStatus AgentDaemon::SessionStatus(AgentRole role) const {
  AgentStatus status;
  status.role = role;
  status.platform = link_->platform_name();
  status.machine = link_->machine_name();
  if (session_) {
    status.session = session_->directory();
    status.samples_stored = session_->samples_in_file();
    const store::WriterStats& stats = session_->stats();
    status.store.failed = stats.failed;
    status.store.failed_chunks = stats.failed_chunks;
    if (session_->store_failure()) status.store.error = session_->store_failure()->message();
  }
  status.continuous = ContinuousState();
  if (role == AgentRole::kGuest) return status;  // scheduling is dom0's to tell
  if (std::optional<store::SchedSummary> sched = RecordedSched()) {
    if (session_) sched = session_->WithSchedFile(std::move(*sched));
    SchedStatus& out = status.sched.emplace();
    out.source = sched->source;
    out.records = sched->records;
    out.lost = sched->lost;
    if (sched_source_) out.notes = sched_source_->notes();
  }
  return status;
}

Result<Json> AgentDaemon::Dump() {
  if (!session_) return MakeError(ErrorKind::kBadState, "there is no session yet: run `hvprof --start` first");
  DrainAll();
  if (!hypervisor_lost_) OnDump();
  if (link_->legacy_only() || hypervisor_lost_) {
    UpdateMetadata(nullptr);  // Xen has no status op (nor a lost hvprof-hv): what the rings say
  } else {
    HVPROF_TRY(status, EngineStatus());
    UpdateMetadata(&status);
  }
  HVPROF_TRYV(session_->Dump());
  KeepSampledImages();
  Json result{{"message", "samples written"}, {"session", session_->directory()}, {"samples", session_->stats().samples}};
  if (const uint64_t failed = session_->stats().failed; failed != 0) {
    result["warning"] = fmt::format("{} samples could not be written to {} ({}); they are counted as lost",
                                    failed, session_->directory(),
                                    session_->last_store_failure() ? session_->last_store_failure()->message()
                                                                   : std::string("a write error"));
  }
  return result;
}

Result<void> AgentDaemon::OpenBuildIdCache(const std::string& directory, uint64_t max_bytes) {
  const std::string chosen = directory.empty() ? buildid_cache::DefaultDirectory() : directory;
  if (chosen == buildid_cache::kNone) return Ok();
  auto cache = buildid_cache::Cache::Open(chosen, max_bytes != 0 ? max_bytes : buildid_cache::kDefaultMaxBytes);
  if (!cache) {
    if (!directory.empty()) return cache.error().WithContext("--build-id-cache");
    Log(LogLevel::kWarning, "no build-id cache: {} (give --build-id-cache=DIR to keep one elsewhere)",
        cache.error().message());
    return Ok();
  }
  build_id_cache_.emplace(std::move(cache).value());
  return Ok();
}

Result<void> AgentDaemon::ResizeBuildIdCache(uint64_t max_bytes) {
  if (!build_id_cache_ || build_id_cache_->max_bytes() == max_bytes) return Ok();
  // The new one opened first: a failure keeps the cache as it was.
  HVPROF_TRY(resized, buildid_cache::Cache::Open(build_id_cache_->directory(), max_bytes));
  build_id_cache_.emplace(std::move(resized));
  build_id_cache_bytes_.reset();
  return Ok();
}

void AgentDaemon::KeepSampledImages() {
  // Copying may take long, and this runs where the rings are drained: only while the counters
  // are off (a stop, a save, the end of a run), never at a dump while sampling goes on. A save
  // counts as off: continuous mode saves a window while the counters run, at a rate whose rings
  // hold minutes of samples.
  if (!build_id_cache_ || !session_ || profiling_) return;
  std::vector<buildid_cache::Wanted> wanted;
  for (const store::SampledImage& image : session_->sampled_images()) {
    // Kernel maps (kallsyms, System.map) have no build-id: the session copies what it needs.
    if (image.format != "elf" || image.build_id.empty() || not_kept_images_.count(image.build_id) != 0) continue;
    wanted.push_back({image.path, image.build_id});
  }
  if (wanted.empty()) return;
  auto kept = build_id_cache_->Add(wanted);
  if (!kept) {
    Log(LogLevel::kWarning, "the build-id cache {} kept no images of this session now: {}",
        build_id_cache_->directory(), kept.error().message());
    return;
  }
  const buildid_cache::AddSummary& summary = kept.value();
  // Every dump offers every image again (so that each is marked used), but for those that
  // cannot be kept: a file rebuilt since it was sampled stays so.
  not_kept_images_.insert(summary.not_kept.begin(), summary.not_kept.end());
  build_id_cache_bytes_ = summary.bytes;
  Log(summary.added != 0 || summary.evicted != 0 ? LogLevel::kInfo : LogLevel::kDebug,
      "build-id cache {}: {} images kept ({} bytes, {} debug files), {} already there, {} evicted; {} bytes in all",
      build_id_cache_->directory(), summary.added, summary.bytes_added, summary.debug_added, summary.present,
      summary.evicted, summary.bytes);
  for (const std::string& skipped : summary.skipped) Log(LogLevel::kInfo, "build-id cache: {}", skipped);
}

Result<Json> AgentDaemon::Reset() {
  if (!session_) return Json{{"message", "there is no session to empty"}};
  DrainAll();
  // The counts the emptied session had taken are not the new one's.
  if (link_->legacy_only() || hypervisor_lost_) {
    UpdateMetadata(nullptr);
  } else if (auto status = EngineStatus()) {
    UpdateMetadata(&status.value());
  }
  const std::string directory = session_->directory();
  session_.reset();
  std::error_code ec;
  std::filesystem::remove_all(directory, ec);
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot remove {}", directory));
  HVPROF_TRYV(OpenSession(base_metadata_));
  if (profiling_) MarkProfiling(true);
  return Json{{"message", "the current session was emptied"}};
}

Result<Json> AgentDaemon::Save(const std::string& name, bool allow_empty) {
  if (!session_) return MakeError(ErrorKind::kBadState, "there is no session to save yet");
  const std::string directory = session_->directory();
  // A bad or taken name is refused before anything is paused or written.
  HVPROF_TRYV(store::CheckSave(paths_, directory, name, /*allow_empty=*/true));
  const bool was_profiling = profiling_;
  if (was_profiling) MarkProfiling(false);
  // Then what the session holds, as a report would read it (Dump writes it).
  auto dumped = Dump();
  auto target = dumped ? store::CheckSave(paths_, directory, name, allow_empty) : Result<std::string>(dumped.error());
  if (!target) {
    if (was_profiling) MarkProfiling(true);
    return target.error();
  }
  session_.reset();
  auto moved = store::MoveSession(directory, target.value());
  // A new current session, or, when the move failed, the same one continued: either way the
  // daemon goes on writing one.
  HVPROF_TRYV(OpenSession(base_metadata_));
  if (was_profiling) MarkProfiling(true);
  HVPROF_TRYV(moved);
  return Json{{"message", fmt::format("saved as {}", target.value())}, {"saved", target.value()}};
}

}  // namespace hvprof::agent
