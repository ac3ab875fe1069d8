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
#include "host.h"
#include "xen_trace.h"

#include <nlohmann/json.hpp>

HVPROF_PROBE_SEMAPHORE(agent__connect);
HVPROF_PROBE_SEMAPHORE(agent__refused);
HVPROF_PROBE_SEMAPHORE(agent__disconnect);
HVPROF_PROBE_SEMAPHORE(op__refused);

namespace hvprof::hv {

using hvpmu::DomainId;
using hvpmu::EngineState;
using hvpmu::ErrorCode;
using hvpmu::ErrorName;
namespace legacy = hvpmu::legacy;

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

Daemon::Daemon(const DaemonOptions& options) : options_(options), lock_(std::make_unique<MachineLock>()) {}

Daemon::~Daemon() {
  lock_->stopping = true;
  lock_->WakeMachine();
  if (host_) host_->Wake();
  if (machine_thread_.joinable()) machine_thread_.join();
}

Result<std::unique_ptr<Daemon>> Daemon::Create(const DaemonOptions& options) {
  std::unique_ptr<Daemon> daemon(new Daemon(options));
  if (daemon->options_.run_dir.empty()) daemon->options_.run_dir = DefaultRunDir();
  HVPROF_TRYV(daemon->Start());
  return daemon;
}

Result<void> Daemon::Start() {
  HVPROF_TRY(host, Host::Create(options_, *lock_));
  host_ = std::move(host);
  wake_fd_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return hvprof::ErrnoError(errno, "eventfd");
  HVPROF_TRYV(OpenSockets());
  machine_thread_ = std::thread([this] {
    host_->RunMachine([this] {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
    });
  });
  return hvprof::Ok();
}

std::string Daemon::ContextEventsFor(DomainId caller, uint64_t from, uint32_t max, uint32_t flags,
                                     hv::ContextEventsReply* reply) {
  context::ContextEventBatch batch = host_->ContextEvents(caller, from, max, flags);
  reply->first = batch.first;
  reply->next = batch.next;
  reply->flags = batch.more ? hv::kContextEventsMore : 0;
  std::string encoded;
  for (const context::ContextEvent& event : batch.events) {
    // A guest is told only of its own domain's processes.
    if (caller != 0 && event.domain != caller) continue;
    context::EncodeContextEvent(event, encoded);
    ++reply->events;
  }
  return encoded;
}

Result<void> Daemon::OpenSockets() {
  const std::string& dir = options_.run_dir;
  // Ours alone (0700), or refused: a run directory another user made first, or can write, could
  // get their socket swapped in for ours.
  HVPROF_TRYV(hvprof::MakePrivateDirectory(dir, "the run directory", "or give another --run-dir"));
  // A domain served to another user (socket_uid) needs its way to the socket: search, not read
  // or write.
  std::vector<ServedDomain> served = host_->ServedDomains();
  const bool foreign_sockets = std::any_of(served.begin(), served.end(), [](const ServedDomain& domain) {
    return domain.owner && *domain.owner != ::geteuid();
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

  // Each socket appears only once it listens (ListenUnix), and dom0's appears last: a client
  // that sees domain-0.sock finds every domain's socket ready.
  std::stable_partition(served.begin(), served.end(), [](const ServedDomain& domain) { return domain.id != 0; });
  for (const ServedDomain& domain : served) {
    const std::string path = DomainSocketPath(dir, domain.id);
    // Only the domain's own user may connect; the peer credentials are checked again on accept.
    hvprof::UnixListenOptions listen_options{.mode = 0600, .owner = std::nullopt, .backlog = 16, .nonblocking = true};
    if (domain.owner && ::geteuid() == 0) listen_options.owner = *domain.owner;
    auto listener = hvprof::ListenUnix(path, listen_options);
    if (!listener) return listener.error().WithContext(fmt::format("domain {}'s socket (--run-dir)", domain.id));
    listeners_.emplace(domain.id, std::move(listener).value());
    owners_[domain.id] = domain.owner.value_or(::geteuid());
  }
  Log(LogLevel::kInfo, "serving {} domain sockets in {}", listeners_.size(), dir);
  return hvprof::Ok();
}

void Daemon::Stop() {
  lock_->stopping = true;
  const uint64_t one = 1;
  if (wake_fd_.valid()) [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
  lock_->wake.notify_all();
  if (host_) host_->Wake();
}

void Daemon::HandleSignals(Daemon* daemon) {
  g_signal_daemon = daemon;
  hvprof::InstallStopHandler(OnSignal);
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
  while (!lock_->stopping) {
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
  const auto owner = owners_.find(domain);
  const uid_t allowed = owner != owners_.end() ? owner->second : ::geteuid();
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
  reply.platform = static_cast<uint32_t>(host_->kind());
  reply.num_cpus = host_->num_cpus();
  CopyName(reply.platform_name, sizeof reply.platform_name, host_->platform_name());
  CopyName(reply.machine_name, sizeof reply.machine_name, host_->machine_name());
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
    auto lock = lock_->Take();
    error = host_->DoOp(connection.domain, request.op, request.arg_size ? buffer : nullptr, request.arg_size);
  }
  lock_->wake.notify_all();
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
  auto lock = lock_->Take();
  auto fd = host_->platform().RegionFd(request.handle, connection.domain, &bytes);
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
  auto lock = lock_->Take();
  auto fds = host_->platform().NotificationFds(request.handle, connection.domain, request.first_ring, request.count);
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
  context::DomainImages images;
  {
    auto lock = lock_->Take();
    images = host_->Images(domain, connection.domain);
  }
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
  SimulatedClock* clock = host_->clock();
  if (connection.domain != 0 || clock == nullptr) {
    reply.error = static_cast<int32_t>(clock != nullptr ? ProtocolError::kDenied : ProtocolError::kUnsupported);
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
  auto lock = lock_->Take();
  const uint64_t now = clock->now_ns();
  // A run of 0 ns, or on a halted machine, is answered at once, as a query.
  if (run && request.argument != 0 && !clock->halted()) {
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
    clock->RunTo(target);
    pending_runs_.push_back({fd, sequence, target});
    lock.unlock();
    lock_->wake.notify_all();
    return;  // answered by FinishRuns when the clock gets there
  }
  reply.sim_time_ns = now;
  reply.halted = clock->halted();
  reply.pmis = clock->pmis_delivered();
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
  SimulatedClock* clock = host_->clock();
  if (clock == nullptr) {
    return ReplyStatus(connection, sequence, MessageType::kGroundTruth, ProtocolError::kUnsupported,
                       "a real machine has no ground truth; only the simulated one does");
  }
  context::GroundTruth truth;
  {
    auto lock = lock_->Take();
    truth = clock->GroundTruth();
    if (request.reset != 0) clock->ResetGroundTruth();
  }
  return ReplyStatus(connection, sequence, MessageType::kGroundTruth, ProtocolError::kOk,
                     DumpJson(context::ToJson(truth)));
}

// dom0 on the sim: the machine's Xen trace buffers.
void Daemon::HandleXenTrace(Connection& connection, uint32_t sequence, std::span<const std::byte> payload) {
  hv::XenTraceRequest request;
  if (!hv::Unpack(payload, &request)) return Malformed(connection, sequence, "Xen trace request of the wrong size");
  hv::XenTraceReply reply{};
  SimulatedClock* clock = host_->clock();
  if (connection.domain != 0 || clock == nullptr) {
    reply.error = static_cast<int32_t>(clock != nullptr ? ProtocolError::kDenied : ProtocolError::kUnsupported);
    return Reply(connection, sequence, MessageType::kXenTrace, hv::Pack(reply));
  }
  std::array<int, 2> fds{-1, -1};
  {
    auto lock = lock_->Take();
    SimXenTrace& trace = clock->XenTrace();
    reply = trace.Command(request);
    fds = {trace.memory_fd(), trace.notify_fd()};
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
    auto lock = lock_->Take();
    info = host_->Info();
  }
  return ReplyStatus(connection, sequence, MessageType::kPlatformInfo, ProtocolError::kOk, DumpJson(context::ToJson(info)));
}

// The domains the caller may know of: every one for dom0, itself for a guest.
void Daemon::HandleDomains(Connection& connection, uint32_t sequence) {
  std::vector<context::DomainInfo> list;
  {
    auto lock = lock_->Take();
    list = host_->Domains();
  }
  std::erase_if(list, [&](const context::DomainInfo& domain) {
    return connection.domain != 0 && domain.id != connection.domain;
  });
  return ReplyStatus(connection, sequence, MessageType::kDomains, ProtocolError::kOk, DumpJson(context::ToJson(list)));
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
    case MessageType::kDomains: return HandleDomains(connection, sequence);
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
  SimulatedClock* clock = host_->clock();
  if (clock == nullptr) return;  // only a simulated clock has runs to finish
  auto lock = lock_->Take();
  const uint64_t now = clock->now_ns();
  const bool halted = clock->halted();
  const uint64_t pmis = clock->pmis_delivered();
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
    auto lock = lock_->Take();
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
  auto lock = lock_->Take();
  host_->engine().OnConsumerGone(domain);
}

void Daemon::Shutdown() {
  Log(LogLevel::kInfo, "shutting down");
  lock_->WakeMachine();
  host_->Wake();
  if (machine_thread_.joinable()) machine_thread_.join();
  {
    auto lock = lock_->Take();
    hvpmu::Engine& engine = host_->engine();
    if (engine.state() == EngineState::kProfiling) {
      engine.DoOp(engine.primary(), legacy::kOpStop, nullptr, 0);
      Log(LogLevel::kInfo, "profiling was still on; stopped it");
    }
    host_->Shutdown();
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
