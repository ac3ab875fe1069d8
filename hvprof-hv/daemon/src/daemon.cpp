#include "hvprof/hv/daemon.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "hvprof/base/signals.h"
#include "hvprof/context/context_event.h"
#include "hvprof/context/domains.h"
#include "hvprof/context/platform_stats.h"
#include "hvprof/base/files.h"
#include "hvprof/base/socket.h"
#include "hvprof/base/log.h"
#include "hvprof/base/probes.h"
#include "hvprof/hv/framing.h"
#include "xen_trace.h"

#include <nlohmann/json.hpp>

HVPROF_PROBE_SEMAPHORE(agent__connect);
HVPROF_PROBE_SEMAPHORE(agent__refused);
HVPROF_PROBE_SEMAPHORE(agent__disconnect);
HVPROF_PROBE_SEMAPHORE(op__refused);

namespace hvprof::hv {

using hvpmu::DomainId;
using hvpmu::DomainType;
using hvpmu::Engine;
using hvpmu::EngineState;
using hvpmu::ErrorCode;
using hvpmu::ErrorName;
using hvpmu::PmuDriver;
using hvpmu::PmuDrivers;
namespace legacy = hvpmu::legacy;
namespace ring = hvpmu::ring;

using hvprof::ErrorKind;
using hvprof::Log;
using hvprof::LogLevel;
using hvprof::MakeError;
using hvprof::Result;
using hvprof::ScopedFd;
using hv::MessageType;
using hv::ProtocolError;

namespace {

constexpr uint32_t kMaxOpArgument = 16 * 1024;
constexpr uint64_t kMachineStepNs = 1'000'000;
// Max speed: how full a guest-consumed ring may get before the clock waits, and for how long.
constexpr uint32_t kCatchUpPercent = 50;
constexpr int kMaxCatchUpMs = 500;

Daemon* g_signal_daemon = nullptr;

// A reply's JSON. Names from outside (a VM's, a process's) need not be UTF-8: replaced, not
// thrown on.
std::string DumpJson(const nlohmann::json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void OnSignal(int) {
  if (g_signal_daemon != nullptr) g_signal_daemon->Stop();
}

uint16_t ReplyType(MessageType type) {
  return static_cast<uint16_t>(static_cast<uint16_t>(type) | hv::kReplyBit);
}

void CopyName(char* out, size_t size, std::string_view name) {
  const size_t n = std::min(size - 1, name.size());
  std::memcpy(out, name.data(), n);
  out[n] = '\0';
}

}  // namespace

struct Daemon::Connection {
  ScopedFd fd;
  DomainId domain = 0;
  pid_t peer_pid = 0;
  std::vector<std::byte> input;
};

Daemon::Daemon(const DaemonOptions& options) : options_(options) {}

Daemon::~Daemon() {
  stopping_ = true;
  machine_wake_.notify_all();
  if (linux_) linux_->Wake();
  if (machine_thread_.joinable()) machine_thread_.join();
}

Result<std::unique_ptr<Daemon>> Daemon::Create(const DaemonOptions& options) {
  if (options.platform != "sim" && options.platform != "linux") {
    return MakeError(ErrorKind::kUnsupported,
                     "platform '{}' is not one hvprof-hv hosts: use --platform=sim (a simulated machine) or "
                     "--platform=linux (this host, through perf_event_open)",
                     options.platform);
  }
  if (options.platform == "sim" && options.scenario_path.empty()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "--platform=sim needs --scenario=FILE (try examples/default.json)");
  }
  std::unique_ptr<Daemon> daemon(new Daemon(options));
  if (daemon->options_.run_dir.empty()) daemon->options_.run_dir = DefaultRunDir();
  HVPROF_TRYV(daemon->Start());
  return daemon;
}

hosted::HostedPlatform& Daemon::platform() {
  if (linux_) return linux_->platform();
  return machine_->platform();
}

Result<void> Daemon::Start() {
  HVPROF_TRYV(options_.platform == "linux" ? StartLinux() : StartSim());
  wake_fd_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return hvprof::ErrnoError(errno, "eventfd");
  HVPROF_TRYV(OpenSockets());
  if (linux_) {
    machine_thread_ = std::thread([this] { LinuxLoop(); });
    return hvprof::Ok();
  }
  if (scenario_.run.speed == sim::Speed::kMax && scenario_.run.duration_ns == 0) {
    Log(LogLevel::kInfo, "speed max: the clock advances only when dom0 asks for a run");
  }
  machine_thread_ = std::thread([this] { MachineLoop(); });
  return hvprof::Ok();
}

Result<void> Daemon::StartLinux() {
  linux_host::LinuxOptions options;
  HVPROF_TRY(map, linux_host::ParseDomainMap(options_.domain_map));
  options.domain_map = std::move(map);
  options.force_software = options_.force_software;
  HVPROF_TRY(machine, linux_host::LinuxMachine::Create(options));
  linux_ = std::move(machine);
  for (const std::string& note : linux_->notes()) Log(LogLevel::kInfo, "{}", note);
  engine_ = std::make_unique<Engine>(linux_->platform(), linux_->driver());
  linux_->AttachEngine(engine_.get());
  scenario_.name = linux_->machine_name();
  Log(LogLevel::kInfo, "host '{}': {} CPUs, sampled through perf_event_open ({})", linux_->machine_name(),
      linux_->platform().NumCpus(), linux_->driver() != nullptr ? linux_->driver()->cpu_type() : "no driver");
  return hvprof::Ok();
}

void Daemon::LinuxLoop() {
  // Drain always, not only while profiling: the side band (fork, exec, mmap) flows from
  // setup_events to release_counters, and samples go to the engine as they come.
  while (!stopping_) {
    if (auto waited = linux_->WaitForSamples(std::chrono::milliseconds(100)); !waited) {
      Log(LogLevel::kError, "{}", waited.error().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    std::lock_guard lock(machine_mutex_);
    linux_->DrainSamples();
  }
}

Result<void> Daemon::StartSim() {
  HVPROF_TRY(scenario, sim::LoadScenario(options_.scenario_path));
  scenario_ = std::move(scenario);
  if (options_.seed) scenario_.run_seed = *options_.seed;
  if (options_.speed) scenario_.run.speed = *options_.speed;
  if (options_.factor) scenario_.run.factor = *options_.factor;
  if (options_.duration_ns) scenario_.run.duration_ns = *options_.duration_ns;

  HVPROF_TRY(machine, sim::SimMachine::Create(scenario_, symbolizer_));
  machine_ = std::move(machine);
  for (const std::string& note : machine_->notes()) Log(LogLevel::kInfo, "{}", note);
  drivers_ = std::make_unique<PmuDrivers>(machine_->platform());
  PmuDriver* driver = options_.sample_source == "timer" ? nullptr : drivers_->Detect();
  if (driver == nullptr && options_.sample_source == "pmu") {
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
  engine_ = std::make_unique<Engine>(machine_->platform(), driver);
  machine_->AttachEngine(engine_.get());
  Log(LogLevel::kInfo, "machine '{}': {} CPUs, {} ({}), {} domains, seed {}", scenario_.name,
      scenario_.machine.cpus, sim::PmuModelName(scenario_.machine.pmu), driver->cpu_type(),
      scenario_.domains.size(), scenario_.run_seed.value_or(scenario_.seed));
  return hvprof::Ok();
}

std::string Daemon::ContextEventsFor(DomainId caller, uint64_t from, uint32_t max, uint32_t flags,
                                     hv::ContextEventsReply* reply) {
  if (linux_ && (flags & hv::kContextEventsSettle) != 0) {
    {
      auto lock = LockMachine();
      linux_->DrainSamples();  // the latest mappings, whose files are then read
    }
    // Without holding up the drains, at most 2 s: a file still unread then keeps its guess.
    linux_->WaitForImages(std::chrono::seconds(2));
  }
  auto lock = LockMachine();
  std::vector<context::ContextEvent> events;
  if (linux_) {
    linux_->DrainSamples();  // the latest forks, execs and mappings
    // What came before `from` dom0 has: it need not be kept (the only agent of the host's
    // processes is dom0's).
    if (caller == 0) linux_->AcknowledgeContextEvents(from);
    auto taken = linux_->TakeContextEvents(from, max);
    events = std::move(taken.events);
    reply->first = taken.first;
    reply->next = taken.next;
  } else {
    // The sim's processes are the scenario's, and the runs of its churned programs: each
    // domain's own, as with kContext.
    auto batch = machine_->ContextEvents(caller, from, max);
    events = std::move(batch.events);
    reply->first = batch.first;
    reply->next = batch.next;
  }
  std::string encoded;
  for (const context::ContextEvent& event : events) {
    // A guest is told only of its own domain's processes.
    if (caller != 0 && event.domain != caller) continue;
    context::EncodeContextEvent(event, encoded);
    ++reply->events;
  }
  return encoded;
}

context::DomainImages Daemon::ImagesOf(DomainId domain) {
  auto lock = LockMachine();
  return linux_ ? linux_->Images(domain) : machine_->Images(domain);
}

std::vector<context::DomainInfo> Daemon::DomainsFor(DomainId caller) {
  // dom0 may know every domain; a guest only itself.
  std::vector<context::DomainInfo> list;
  if (linux_) {
    auto lock = LockMachine();
    for (context::DomainInfo& domain : linux_->Domains()) {
      if (caller == 0 || domain.id == caller) list.push_back(std::move(domain));
    }
    return list;
  }
  for (const sim::DomainSpec& domain : scenario_.domains) {
    if (caller != 0 && domain.id != caller) continue;
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

Result<void> Daemon::OpenSockets() {
  const std::string& dir = options_.run_dir;
  // Ours alone (0700), or refused: a run directory another user made first, or can write, could
  // get their socket swapped in for ours.
  HVPROF_TRYV(hvprof::MakePrivateDirectory(dir, "the run directory", "or give another --run-dir"));
  // A domain served to another user (socket_uid) needs its way to the socket: search, not read
  // or write.
  const bool foreign_sockets = !linux_ && std::any_of(scenario_.domains.begin(), scenario_.domains.end(),
                                                      [](const sim::DomainSpec& domain) {
                                                        return domain.socket_uid && *domain.socket_uid != ::geteuid();
                                                      });
  struct stat run_dir {};
  if (foreign_sockets && ::stat(dir.c_str(), &run_dir) == 0 && run_dir.st_uid == ::geteuid() &&
      (run_dir.st_mode & 0011) != 0011) {
    ::chmod(dir.c_str(), (run_dir.st_mode & 07777) | 0011);
  }
  const std::string pid_path = dir + "/hvprof-hv.pid";
  HVPROF_TRY(pid_file, hvprof::LockPidFile(pid_path));
  if (!pid_file) {
    auto other = hvprof::ReadFileToString(pid_path);
    return MakeError(ErrorKind::kBusy, "another hvprof-hv (pid {}) serves {}; stop it or use --run-dir",
                     other ? other.value().substr(0, other.value().find('\n')) : "?", dir);
  }
  pid_file_ = std::move(*pid_file);

  // On linux only dom0 has an agent: the other domains are processes of this host or KVM
  // guests, profiled from dom0.
  std::vector<sim::DomainSpec> served = scenario_.domains;
  if (linux_) served = {sim::DomainSpec{}};
  // Each socket appears only once it listens (ListenUnix), and dom0's appears last: a client
  // that sees domain-0.sock finds every domain's socket ready.
  std::stable_partition(served.begin(), served.end(), [](const sim::DomainSpec& domain) { return domain.id != 0; });
  for (const sim::DomainSpec& domain : served) {
    const std::string path = DomainSocketPath(dir, domain.id);
    // Only the domain's own user may connect; the peer credentials are checked again on accept.
    hvprof::UnixListenOptions listen_options{.mode = 0600, .owner = std::nullopt, .backlog = 16, .nonblocking = true};
    if (domain.socket_uid && ::geteuid() == 0) listen_options.owner = *domain.socket_uid;
    auto listener = hvprof::ListenUnix(path, listen_options);
    if (!listener) return listener.error().WithContext(fmt::format("domain {}'s socket (--run-dir)", domain.id));
    listeners_.emplace(domain.id, std::move(listener).value());
  }
  Log(LogLevel::kInfo, "serving {} domain sockets in {}", listeners_.size(), dir);
  return hvprof::Ok();
}

void Daemon::Stop() {
  stopping_ = true;
  const uint64_t one = 1;
  if (wake_fd_.valid()) [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
  machine_wake_.notify_all();
  if (linux_) linux_->Wake();
}

void Daemon::HandleSignals(Daemon* daemon) {
  g_signal_daemon = daemon;
  hvprof::InstallStopHandler(OnSignal);
}

std::unique_lock<std::mutex> Daemon::LockMachine() {
  ++lock_waiters_;
  std::unique_lock lock(machine_mutex_);
  --lock_waiters_;
  machine_wake_.notify_all();  // a machine thread that paused for us goes on once we unlock
  return lock;
}

void Daemon::MachineLoop() {
  using Clock = std::chrono::steady_clock;
  const sim::RunSpec& run = scenario_.run;
  const auto wall_start = Clock::now();
  std::unique_lock lock(machine_mutex_);
  const uint64_t sim_start = machine_->now_ns();
  bool gave_up_catching_up = false;
  while (!stopping_) {
    const uint64_t now = machine_->now_ns();
    if (run.duration_ns != 0 && now >= run.duration_ns && !halted_) {
      halted_ = true;
      Log(LogLevel::kInfo, "simulated duration of {} ms reached; the machine halts",
          run.duration_ns / 1'000'000);
    }
    uint64_t step = kMachineStepNs;
    if (halted_) {
      machine_wake_.wait(lock);
      continue;
    }
    if (run.speed == sim::Speed::kMax) {
      if (now >= run_target_ns_) {
        machine_wake_.wait(lock);
        continue;
      }
      step = std::min(step, run_target_ns_ - now);
    } else {
      const auto deadline =
          wall_start + std::chrono::nanoseconds(static_cast<int64_t>(
                           static_cast<double>(now + step - sim_start) / run.factor));
      if (machine_wake_.wait_until(lock, deadline, [this] { return stopping_.load(); })) break;
    }
    if (run.duration_ns != 0) step = std::min(step, run.duration_ns - machine_->now_ns());
    machine_->RunFor(step);
    // Let a waiting request in before the next step: a run of up to kMaxSimRunNs at full speed
    // takes wall-clock minutes, and every domain's requests would wait for it.
    machine_wake_.wait(lock, [this] { return lock_waiters_.load() == 0 || stopping_.load(); });
    if (run.speed == sim::Speed::kMax) {
      // At full speed the clock outruns agents that drain on their own schedule (active
      // guests): let them catch up rather than lose samples no real machine would lose. An
      // agent that does not drain within the grace time loses samples, as on real hardware, and
      // is not waited for again until the rings drain: a dead agent must not stall the machine.
      int waited = 0;
      for (; !gave_up_catching_up && waited < kMaxCatchUpMs && !stopping_ &&
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
    bool finished = false;
    for (const PendingRun& pending : pending_runs_) finished |= machine_->now_ns() >= pending.target_ns;
    if (finished || (run.duration_ns != 0 && machine_->now_ns() >= run.duration_ns)) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
    }
  }
}

namespace {

// What an epoll event is about: the kind in the high half of its data, an fd or a domain below.
enum class Source : uint64_t { kWake = 0, kListener = 1, kConnection = 2 };
uint64_t EventData(Source source, uint64_t value) { return static_cast<uint64_t>(source) << 32 | value; }

}  // namespace

Result<void> Daemon::Run() {
  // epoll, not poll: a host with thousands of domains has a listening socket for each, and a
  // session start sends thousands of requests; each must not cost a scan of every socket.
  epoll_ = ScopedFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return hvprof::ErrnoError(errno, "epoll_create1");
  auto watch = [this](int fd, uint64_t data) -> Result<void> {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = data;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) return hvprof::ErrnoError(errno, "epoll_ctl");
    return hvprof::Ok();
  };
  HVPROF_TRYV(watch(wake_fd_.get(), EventData(Source::kWake, 0)));
  for (const auto& [domain, listener] : listeners_) {
    HVPROF_TRYV(watch(listener.get(), EventData(Source::kListener, domain)));
  }
  for (const auto& [fd, connection] : connections_) HVPROF_TRYV(watch(fd, EventData(Source::kConnection, fd)));
  std::array<epoll_event, 64> events;
  while (!stopping_) {
    const int ready = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return hvprof::ErrnoError(errno, "epoll_wait");
    }
    for (int i = 0; i < ready; ++i) {
      const uint64_t data = events[i].data.u64;
      const auto value = static_cast<uint32_t>(data);
      switch (static_cast<Source>(data >> 32)) {
        case Source::kWake: {
          uint64_t count;
          [[maybe_unused]] ssize_t n = ::read(wake_fd_.get(), &count, sizeof count);
          FinishRuns();
          break;
        }
        case Source::kListener: {
          auto listener = listeners_.find(static_cast<DomainId>(value));
          if (listener != listeners_.end()) Accept(listener->first, listener->second.get());
          break;
        }
        case Source::kConnection: {
          // A connection closed earlier in this batch is gone (or its fd reused: then the read
          // finds nothing to read and returns).
          auto it = connections_.find(static_cast<int>(value));
          if (it != connections_.end()) ReadFrom(*it->second);
          break;
        }
      }
    }
  }
  Shutdown();
  return hvprof::Ok();
}

void Daemon::Accept(DomainId domain, int listener) {
  ScopedFd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) return;
  ucred peer{};
  socklen_t length = sizeof peer;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) return;
  const sim::DomainSpec* spec = scenario_.FindDomain(domain);
  const uid_t allowed = spec != nullptr ? spec->socket_uid.value_or(::geteuid()) : ::geteuid();
  if (peer.uid != allowed) {
    HVPROF_PROBE(agent__refused, domain, peer.uid, peer.pid);
    Log(LogLevel::kWarning,
        "refused a connection to domain {}'s socket from uid {} (pid {}): only uid {} speaks for "
        "domain {}", domain, peer.uid, peer.pid, allowed, domain);
    return;
  }
  timeval timeout{2, 0};  // a client that stops reading its replies is dropped
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  auto connection = std::make_unique<Connection>();
  connection->domain = domain;
  connection->peer_pid = peer.pid;
  const int key = fd.get();
  connection->fd = std::move(fd);
  Log(LogLevel::kInfo, "domain {}: agent connected (pid {})", domain, peer.pid);
  HVPROF_PROBE(agent__connect, domain, peer.pid);
  if (epoll_.valid()) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = EventData(Source::kConnection, static_cast<uint64_t>(key));
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, key, &event) != 0) {
      Log(LogLevel::kError, "domain {}: cannot watch the agent's connection: {}", domain, std::strerror(errno));
      return;
    }
  }
  connections_.emplace(key, std::move(connection));
}

void Daemon::ReadFrom(Connection& connection) {
  std::byte buffer[65536];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
  iovec iov{buffer, sizeof buffer};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(connection.fd.get(), &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  // Clients have no business sending descriptors: close any that came.
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&message); n > 0 && cmsg != nullptr;
       cmsg = CMSG_NXTHDR(&message, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof fd);
      ::close(fd);
    }
  }
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    Close(connection, n == 0 ? "disconnected" : std::strerror(errno));
    return;
  }
  if (n < 0) return;
  connection.input.insert(connection.input.end(), buffer, buffer + n);
  const int fd = connection.fd.get();
  while (connection.input.size() >= sizeof(hv::MessageHeader)) {
    hv::MessageHeader header;
    std::memcpy(&header, connection.input.data(), sizeof header);
    const uint32_t limit = header.type == static_cast<uint16_t>(MessageType::kPublish) ? hv::kMaxPublishPayload
                                                                                       : hv::kMaxRequestPayload;
    if (auto valid = hv::ValidateHeader(header, limit); !valid) {
      ReplyStatus(connection, header.sequence, MessageType::kError, ProtocolError::kMalformed,
                  valid.error().message());
      Close(connection, valid.error().message());
      return;
    }
    const size_t total = sizeof header + header.length;
    if (connection.input.size() < total) return;
    Handle(connection, header, std::span(connection.input).subspan(sizeof header, header.length));
    if (connections_.count(fd) == 0) return;  // closed while handling
    connection.input.erase(connection.input.begin(), connection.input.begin() + static_cast<long>(total));
  }
}

void Daemon::Reply(Connection& connection, uint32_t sequence, MessageType type,
                   std::span<const std::byte> payload, std::span<const int> fds) {
  if (auto sent = hv::SendMessage(connection.fd.get(), ReplyType(type), sequence, payload, fds);
      !sent) {
    Close(connection, sent.error().message());
  }
}

void Daemon::ReplyStatus(Connection& connection, uint32_t sequence, MessageType type,
                         ProtocolError error, std::string_view text) {
  hv::StatusReply status{static_cast<int32_t>(error), 0};
  Reply(connection, sequence, type, hv::Pack(status, hv::AsBytes(text)));
}

void Daemon::Malformed(Connection& connection, uint32_t sequence, std::string_view what) {
  ReplyStatus(connection, sequence, MessageType::kError, ProtocolError::kMalformed, what);
}

// The first message of a connection: versions agreed, the platform described.
void Daemon::HandleHello(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::HelloRequest request;
  if (!hv::Unpack(payload, &request)) return Malformed(connection, sequence, "hello of the wrong size");
  hv::HelloReply reply{};
  reply.error = static_cast<int32_t>(request.client_version == hv::kProtocolVersion
                                         ? ProtocolError::kOk
                                         : ProtocolError::kBadVersion);
  reply.domain = connection.domain;
  reply.primary_socket = connection.domain == 0;
  reply.platform = static_cast<uint32_t>(linux_ ? hv::PlatformKind::kLinux : hv::PlatformKind::kSim);
  reply.num_cpus = linux_ ? linux_->platform().NumCpus() : scenario_.machine.cpus;
  CopyName(reply.platform_name, sizeof reply.platform_name, linux_ ? "linux" : "sim");
  CopyName(reply.machine_name, sizeof reply.machine_name, scenario_.name);
  return Reply(connection, sequence, MessageType::kHello, hv::Pack(reply));
}

// An engine operation, run for the connection's domain; its argument goes back with the answer.
void Daemon::HandleOp(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::OpRequest request;
  std::span<const std::byte> argument;
  if (!hv::Unpack(payload, &request, &argument) || argument.size() != request.arg_size ||
      request.arg_size > kMaxOpArgument) {
    return Malformed(connection, sequence, "operation argument does not match its declared size");
  }
  alignas(16) std::byte buffer[kMaxOpArgument];
  std::memcpy(buffer, argument.data(), argument.size());
  ErrorCode error;
  {
    auto lock = LockMachine();
    if (linux_ && request.op == legacy::kOpSetBacktrace && request.arg_size == sizeof(legacy::BacktraceDepthArg)) {
      legacy::BacktraceDepthArg depth;
      std::memcpy(&depth, buffer, sizeof depth);
      linux_->set_callchain_depth(static_cast<uint32_t>(std::min<uint64_t>(depth, ring::kMaxBacktraceDepth)));
    }
    error = engine_->DoOp(connection.domain, request.op, request.arg_size ? buffer : nullptr,
                          request.arg_size);
    if (linux_ && error != ErrorCode::kOk && !linux_->last_error().empty() &&
        (request.op == legacy::kOpReserveCounters || request.op == legacy::kOpSetupEvents ||
         request.op == legacy::kOpStart)) {
      Log(LogLevel::kError, "{}", linux_->last_error());
    }
    if (error == ErrorCode::kOk && request.op == legacy::kOpStart && machine_ &&
        scenario_.run.speed == sim::Speed::kMax && scenario_.run.duration_ns != 0) {
      run_target_ns_ = std::max(run_target_ns_, scenario_.run.duration_ns);
    }
  }
  machine_wake_.notify_all();
  if (error != ErrorCode::kOk) {
    HVPROF_PROBE(op__refused, connection.domain, request.op, static_cast<int>(error), ErrorName(error));
    Log(LogLevel::kDebug, "domain {}: op {:#x} refused: {}", connection.domain, request.op,
        ErrorName(error));
  }
  hv::OpReply reply{static_cast<int32_t>(error), request.arg_size};
  return Reply(connection, sequence, MessageType::kOp,
               hv::Pack(reply, std::span<const std::byte>(buffer, request.arg_size)));
}

// A shared region (rings, buffers) as an fd, to the domains it is shared with.
void Daemon::HandleMapRegion(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::MapRequest request;
  if (!hv::Unpack(payload, &request)) return Malformed(connection, sequence, "map request of the wrong size");
  uint64_t bytes = 0;
  auto lock = LockMachine();
  auto fd = platform().RegionFd(request.handle, connection.domain, &bytes);
  lock.unlock();
  hv::MapReply reply{};
  if (!fd) {
    Log(LogLevel::kWarning, "domain {} asked to map region {:#x}, which is not shared with it",
        connection.domain, request.handle);
    reply.error = static_cast<int32_t>(ProtocolError::kNoSuchRegion);
    return Reply(connection, sequence, MessageType::kMapRegion, hv::Pack(reply));
  }
  reply.bytes = bytes;
  const int descriptor = fd.value();
  return Reply(connection, sequence, MessageType::kMapRegion, hv::Pack(reply), std::span(&descriptor, 1));
}

// The eventfds that say a ring filled, for rings of a region shared with the domain.
void Daemon::HandleNotifyFds(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::NotifyRequest request;
  if (!hv::Unpack(payload, &request) || request.count == 0 ||
      request.count > hv::kMaxFdsPerMessage) {
    return Malformed(connection, sequence, "notification request must ask for 1 to 250 rings");
  }
  auto lock = LockMachine();
  auto fds = platform().NotificationFds(request.handle, connection.domain, request.first_ring, request.count);
  lock.unlock();
  hv::NotifyReply reply{};
  if (!fds) {
    reply.error = static_cast<int32_t>(ProtocolError::kNoSuchRegion);
    return Reply(connection, sequence, MessageType::kNotifyFds, hv::Pack(reply));
  }
  reply.count = static_cast<uint32_t>(fds.value().size());
  return Reply(connection, sequence, MessageType::kNotifyFds, hv::Pack(reply), fds.value());
}

// The images a domain runs (its kernel; dom0's: the hypervisor's too), as JSON.
void Daemon::HandleContext(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  DomainId domain = connection.domain;
  if (!payload.empty()) {
    hv::ContextRequest request;
    if (!hv::Unpack(payload, &request)) return Malformed(connection, sequence, "context request of the wrong size");
    if (request.domain != connection.domain && connection.domain != 0) {
      return ReplyStatus(connection, sequence, MessageType::kContext, ProtocolError::kDenied,
                         "only dom0 may ask about another domain's images");
    }
    domain = request.domain;
  }
  // On the sim, as on Xen, a guest's images are its own: dom0 learns nothing of them.
  const context::DomainImages images =
      domain != connection.domain && machine_ ? context::DomainImages{} : ImagesOf(domain);
  hv::StatusReply reply{0, 0};
  return Reply(connection, sequence, MessageType::kContext,
               hv::Pack(reply, hv::AsBytes(DumpJson(context::ToJson(images)))));
}

// The context events of the caller's domain from a point on, encoded.
void Daemon::HandleContextEvents(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::ContextEventsRequest request;
  if (!hv::Unpack(payload, &request))
    return Malformed(connection, sequence, "context events request of the wrong size");
  constexpr uint32_t kMaxEventsPerReply = 65536;
  const uint32_t max = request.max_events == 0 ? kMaxEventsPerReply : std::min(request.max_events, kMaxEventsPerReply);
  hv::ContextEventsReply reply{};
  const std::string encoded = ContextEventsFor(connection.domain, request.from, max, request.flags, &reply);
  return Reply(connection, sequence, MessageType::kContextEvents, hv::Pack(reply, hv::AsBytes(encoded)));
}

// dom0 on the sim: the simulated clock read, or run for a time (answered when it gets there).
void Daemon::HandleSimControl(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::SimControlRequest request;
  if (!hv::Unpack(payload, &request)) return Malformed(connection, sequence, "sim control of the wrong size");
  hv::SimControlReply reply{};
  if (connection.domain != 0 || !machine_) {
    reply.error = static_cast<int32_t>(machine_ ? ProtocolError::kDenied : ProtocolError::kUnsupported);
    return Reply(connection, sequence, MessageType::kSimControl, hv::Pack(reply));
  }
  if (request.command != static_cast<uint32_t>(hv::SimCommand::kQuery) &&
      request.command != static_cast<uint32_t>(hv::SimCommand::kRunFor)) {
    return Malformed(connection, sequence,
                     fmt::format("unknown sim control command {}: use 0 (query the clock) or 1 (run for "
                                 "ARGUMENT ns)",
                                 request.command));
  }
  const bool run = request.command == static_cast<uint32_t>(hv::SimCommand::kRunFor);
  if (run && request.argument > hv::kMaxSimRunNs) {
    return Malformed(connection, sequence,
                     fmt::format("run-for of {} ns is longer than the {} ns (one hour of simulated time) "
                                 "one request may ask for: ask in steps",
                                 request.argument, hv::kMaxSimRunNs));
  }
  auto lock = LockMachine();
  const uint64_t now = machine_->now_ns();
  // A run of 0 ns, or on a halted machine, is answered at once, as a query.
  if (run && request.argument != 0 && !halted_) {
    if (request.argument > UINT64_MAX - now) {
      lock.unlock();
      return Malformed(
          connection, sequence,
          fmt::format("run-for of {} ns would take the simulated clock past its end at {} ns", request.argument, now));
    }
    const int fd = connection.fd.get();
    const auto mine = std::find_if(pending_runs_.begin(), pending_runs_.end(),
                                   [fd](const PendingRun& pending) { return pending.fd == fd; });
    std::string busy;
    if (mine != pending_runs_.end()) {
      busy = fmt::format("a run-for is already waiting on this connection (until {} ns); wait for its "
                         "reply before asking for another",
                         mine->target_ns);
    } else if (pending_runs_.size() >= hv::kMaxPendingSimRuns) {
      busy = fmt::format("{} run-for requests are already waiting, the most hvprof-hv keeps; retry once "
                         "one is answered",
                         pending_runs_.size());
    }
    if (!busy.empty()) {
      lock.unlock();  // a reply that fails closes the connection, which takes the lock
      return ReplyStatus(connection, sequence, MessageType::kError, ProtocolError::kBusy, busy);
    }
    const uint64_t target = now + request.argument;
    run_target_ns_ = std::max(run_target_ns_, target);
    pending_runs_.push_back({fd, sequence, target});
    lock.unlock();
    machine_wake_.notify_all();
    return;  // answered by FinishRuns when the clock gets there
  }
  reply.sim_time_ns = now;
  reply.halted = halted_;
  reply.pmis = machine_->pmis_delivered();
  lock.unlock();
  return Reply(connection, sequence, MessageType::kSimControl, hv::Pack(reply));
}

// dom0 on the sim: what really ran.
void Daemon::HandleGroundTruth(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::GroundTruthRequest request;
  if (!hv::Unpack(payload, &request)) return Malformed(connection, sequence, "ground truth request of the wrong size");
  if (connection.domain != 0) {
    return ReplyStatus(connection, sequence, MessageType::kGroundTruth, ProtocolError::kDenied,
                       "only dom0 may read the ground truth");
  }
  if (!machine_) {
    return ReplyStatus(connection, sequence, MessageType::kGroundTruth, ProtocolError::kUnsupported,
                       "a real machine has no ground truth; only the simulated one does");
  }
  std::string json;
  {
    auto lock = LockMachine();
    json = machine_->GroundTruthJson();
    if (request.reset != 0) machine_->ResetGroundTruth();
  }
  return ReplyStatus(connection, sequence, MessageType::kGroundTruth, ProtocolError::kOk, json);
}

// dom0 on the sim: the machine's Xen trace buffers.
void Daemon::HandleXenTrace(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::XenTraceRequest request;
  if (!hv::Unpack(payload, &request)) return Malformed(connection, sequence, "Xen trace request of the wrong size");
  hv::XenTraceReply reply{};
  if (connection.domain != 0 || !machine_) {
    reply.error = static_cast<int32_t>(machine_ ? ProtocolError::kDenied : ProtocolError::kUnsupported);
    return Reply(connection, sequence, MessageType::kXenTrace, hv::Pack(reply));
  }
  std::array<int, 2> fds{-1, -1};
  {
    auto lock = LockMachine();
    if (!xen_trace_) xen_trace_ = std::make_unique<SimXenTrace>(*machine_);
    reply = xen_trace_->Command(request);
    fds = {xen_trace_->memory_fd(), xen_trace_->notify_fd()};
  }
  if (reply.bytes == 0) return Reply(connection, sequence, MessageType::kXenTrace, hv::Pack(reply));
  return Reply(connection, sequence, MessageType::kXenTrace, hv::Pack(reply), fds);
}

// dom0: the platform's statistics and notes.
void Daemon::HandlePlatformInfo(Connection& connection, uint32_t sequence, std::span<const std::byte>) {
  if (connection.domain != 0) {
    return ReplyStatus(connection, sequence, MessageType::kPlatformInfo, ProtocolError::kDenied,
                       "only dom0 may read the platform's state");
  }
  context::PlatformInfo info;
  {
    auto lock = LockMachine();
    if (linux_) {
      info.stats = linux_->Stats();
      info.notes = linux_->notes();
      info.last_error = linux_->last_error();
      info.nominal_mhz = info.stats->nominal_mhz;
    } else {
      info.notes = machine_->notes();
      // The simulated CPUs' clock: what a rate (-F) turns into cycle counts with.
      info.nominal_mhz = scenario_.machine.mhz;
    }
  }
  return ReplyStatus(connection, sequence, MessageType::kPlatformInfo, ProtocolError::kOk, DumpJson(context::ToJson(info)));
}

// A guest hands its own profile to dom0; the bytes are the guest's, never interpreted here.
void Daemon::HandlePublish(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  if (connection.domain == 0) {
    return ReplyStatus(connection, sequence, MessageType::kPublish, ProtocolError::kDenied,
                       "dom0 does not publish to itself");
  }
  Published& entry = published_[connection.domain];
  entry.bytes.assign(payload.begin(), payload.end());
  entry.sequence = ++publish_sequence_;
  hvprof::Log(hvprof::LogLevel::kInfo, "domain {} published its profile ({} bytes)", connection.domain,
              payload.size());
  return ReplyStatus(connection, sequence, MessageType::kPublish, ProtocolError::kOk);
}

// dom0: the profiles guests published since a sequence number.
void Daemon::HandleFetchPublished(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::FetchPublishedRequest request;
  if (!hv::Unpack(payload, &request)) return Malformed(connection, sequence, "fetch-published of the wrong size");
  if (connection.domain != 0) {
    return ReplyStatus(connection, sequence, MessageType::kFetchPublished, ProtocolError::kDenied,
                       "only dom0 may read the profiles guests published");
  }
  std::vector<std::byte> out(sizeof(hv::StatusReply));
  for (const auto& [domain, entry] : published_) {
    if (entry.sequence <= request.after_sequence) continue;
    const hv::PublishedEntry head{domain, 0, static_cast<uint32_t>(entry.bytes.size()), entry.sequence};
    const auto* raw = reinterpret_cast<const std::byte*>(&head);
    out.insert(out.end(), raw, raw + sizeof head);
    out.insert(out.end(), entry.bytes.begin(), entry.bytes.end());
  }
  return Reply(connection, sequence, MessageType::kFetchPublished, out);
}

void Daemon::Handle(Connection& connection, const hv::MessageHeader& header,
                    std::span<const std::byte> payload) {
  const uint32_t sequence = header.sequence;
  switch (static_cast<MessageType>(header.type)) {
    case MessageType::kHello: return HandleHello(connection, sequence, payload);
    case MessageType::kOp: return HandleOp(connection, sequence, payload);
    case MessageType::kMapRegion: return HandleMapRegion(connection, sequence, payload);
    case MessageType::kNotifyFds: return HandleNotifyFds(connection, sequence, payload);
    case MessageType::kContext: return HandleContext(connection, sequence, payload);
    case MessageType::kContextEvents: return HandleContextEvents(connection, sequence, payload);
    case MessageType::kSimControl: return HandleSimControl(connection, sequence, payload);
    case MessageType::kGroundTruth: return HandleGroundTruth(connection, sequence, payload);
    case MessageType::kXenTrace:
      return HandleXenTrace(connection, sequence, payload);
    case MessageType::kDomains:
      return ReplyStatus(connection, sequence, MessageType::kDomains, ProtocolError::kOk,
                         DumpJson(context::ToJson(DomainsFor(connection.domain))));
    case MessageType::kPlatformInfo:
      return HandlePlatformInfo(connection, sequence, payload);
    case MessageType::kPublish:
      return HandlePublish(connection, sequence, payload);
    case MessageType::kFetchPublished: return HandleFetchPublished(connection, sequence, payload);
    default:
      return ReplyStatus(connection, sequence, MessageType::kError, ProtocolError::kUnknownType,
                         fmt::format("unknown message type {}", header.type));
  }
}

void Daemon::FinishRuns() {
  if (!machine_) return;  // only the simulated clock has runs to finish
  auto lock = LockMachine();
  const uint64_t now = machine_->now_ns();
  const bool halted = halted_;
  const uint64_t pmis = machine_->pmis_delivered();
  std::vector<PendingRun> done;
  std::erase_if(pending_runs_, [&](const PendingRun& run) {
    if (now < run.target_ns && !halted) return false;
    done.push_back(run);
    return true;
  });
  lock.unlock();
  for (const PendingRun& run : done) {
    auto it = connections_.find(run.fd);
    if (it == connections_.end()) continue;
    hv::SimControlReply reply{};
    reply.sim_time_ns = now;
    reply.halted = halted;
    reply.pmis = pmis;
    Reply(*it->second, run.sequence, MessageType::kSimControl, hv::Pack(reply));
  }
}

void Daemon::Close(Connection& connection, std::string_view why) {
  const DomainId domain = connection.domain;
  const int fd = connection.fd.get();
  {
    auto lock = LockMachine();  // the machine thread reads pending_runs_
    std::erase_if(pending_runs_, [fd](const PendingRun& run) { return run.fd == fd; });
  }
  if (epoll_.valid()) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  connections_.erase(fd);  // destroys `connection`
  bool others = false;
  for (const auto& [other_fd, other] : connections_) others |= other->domain == domain;
  Log(LogLevel::kInfo, "domain {}: agent connection closed ({})", domain, why);
  if (HVPROF_PROBE_ENABLED(agent__disconnect)) {
    const std::string reason(why);  // a probe's string ends in a NUL
    HVPROF_PROBE(agent__disconnect, domain, reason.c_str());
  }
  if (others) return;
  if (domain == 0) {
    Log(LogLevel::kInfo, "dom0's profiler is gone; its profiling state stays for a restarted agent to recover");
    return;
  }
  // As a hypervisor cleans up after a domain that went away: its rings are unshared and freed,
  // and it stops being active.
  auto lock = LockMachine();
  engine_->OnConsumerGone(domain);
}

void Daemon::Shutdown() {
  Log(LogLevel::kInfo, "shutting down");
  machine_wake_.notify_all();
  if (machine_thread_.joinable()) machine_thread_.join();
  {
    auto lock = LockMachine();
    if (engine_->state() == EngineState::kProfiling) {
      engine_->DoOp(engine_->primary(), legacy::kOpStop, nullptr, 0);
      Log(LogLevel::kInfo, "profiling was still on; stopped it");
    }
    if (machine_ && !options_.ground_truth_path.empty()) {
      if (auto written = hvprof::WriteFileAtomically(options_.ground_truth_path,
                                                     machine_->GroundTruthJson());
          !written) {
        Log(LogLevel::kError, "{}", written.error().message());
      } else {
        Log(LogLevel::kInfo, "ground truth written to {}", options_.ground_truth_path);
      }
    }
  }
  connections_.clear();
  for (const auto& [domain, listener] : listeners_) {
    ::unlink(DomainSocketPath(options_.run_dir, domain).c_str());
  }
  listeners_.clear();
  ::unlink((options_.run_dir + "/hvprof-hv.pid").c_str());
  pid_file_.Reset();
}

}  // namespace hvprof::hv
