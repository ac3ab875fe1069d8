#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/base/json_fields.h"
#include "hvprof/base/socket.h"
#include "hvprof/hv/framing.h"
#include "hvprof/hv/protocol.h"

namespace hvprof::agent {

using hv::MessageType;

Result<SimClock> HypervisorLink::SimQuery() {
  return MakeError(ErrorKind::kUnsupported, "{} is not a simulated machine", platform_name());
}
Result<SimClock> HypervisorLink::SimRunFor(uint64_t) { return SimQuery(); }
Result<context::GroundTruth> HypervisorLink::GroundTruth(bool) {
  return MakeError(ErrorKind::kUnsupported, "{} has no ground truth", platform_name());
}

Result<context::PlatformInfo> HypervisorLink::PlatformInfo() { return context::PlatformInfo{}; }

Result<HypervisorLink::ContextEvents> HypervisorLink::FetchContextEvents(uint64_t from, bool /*settle*/) {
  ContextEvents none;
  none.first = none.next = from;
  return none;
}

Result<std::unique_ptr<SchedSource>> HypervisorLink::OpenSchedSource() {
  return MakeError(ErrorKind::kUnsupported, "{} records no scheduling of its own", platform_name());
}
Result<SimTraceBuffers> HypervisorLink::SimXenTrace(uint32_t, uint64_t) {
  return MakeError(ErrorKind::kUnsupported, "{} has no simulated Xen trace buffers", platform_name());
}

Error HypervisorLink::DescribeRefusal(uint32_t op, hvpmu::ErrorCode code) const { return RefusalError(op, code); }

Result<void> HypervisorLink::Publish(std::span<const std::byte>) {
  return MakeError(ErrorKind::kUnsupported, "{} cannot carry profiles between domains", platform_name());
}
Result<std::vector<PublishedProfile>> HypervisorLink::FetchPublished(uint64_t) {
  return MakeError(ErrorKind::kUnsupported, "{} cannot carry profiles between domains", platform_name());
}

hvpmu::InitV2 InitRequest() {
  hvpmu::InitV2 init{};
  init.struct_size = sizeof init;
  init.abi_version = hvpmu::kAbiVersion;
  return init;
}

hvpmu::BufferV2 BufferRequest(hvpmu::DomainId domain, uint32_t capacity) {
  hvpmu::BufferV2 buffer{};
  buffer.struct_size = sizeof buffer;
  buffer.abi_version = hvpmu::kAbiVersion;
  buffer.domain = domain;
  buffer.capacity = capacity;
  return buffer;
}

void StatusRequest(hvpmu::Status* status, uint32_t from_domain) {
  std::memset(status, 0, sizeof *status);
  status->struct_size = sizeof *status;
  status->abi_version = hvpmu::kAbiVersion;
  status->from_domain = from_domain;
}

std::unique_ptr<hvpmu::Status> StatusRequest(uint32_t from_domain) {
  auto status = std::make_unique<hvpmu::Status>();
  StatusRequest(status.get(), from_domain);
  return status;
}

const char* OpName(uint32_t op) {
  switch (op) {
    case hvpmu::legacy::kOpInit: return "init";
    case hvpmu::legacy::kOpResetActiveList: return "reset_active_list";
    case hvpmu::legacy::kOpResetPassiveList: return "reset_passive_list";
    case hvpmu::legacy::kOpSetActive: return "set_active";
    case hvpmu::legacy::kOpSetPassive: return "set_passive";
    case hvpmu::legacy::kOpReserveCounters: return "reserve_counters";
    case hvpmu::legacy::kOpCounter: return "counter";
    case hvpmu::legacy::kOpSetupEvents: return "setup_events";
    case hvpmu::legacy::kOpEnableVirq: return "enable_virq";
    case hvpmu::legacy::kOpStart: return "start";
    case hvpmu::legacy::kOpStop: return "stop";
    case hvpmu::legacy::kOpDisableVirq: return "disable_virq";
    case hvpmu::legacy::kOpReleaseCounters: return "release_counters";
    case hvpmu::legacy::kOpShutdown: return "shutdown";
    case hvpmu::legacy::kOpGetBuffer: return "get_buffer";
    case hvpmu::legacy::kOpSetBacktrace: return "set_backtrace";
    case hvpmu::legacy::kOpGetIbsCaps: return "get_ibs_caps";
    case hvpmu::legacy::kOpIbsCounter: return "ibs_counter";
    case hvpmu::kOpInitV2: return "init_v2";
    case hvpmu::kOpStatus: return "status";
    case hvpmu::kOpGetBufferV2: return "get_buffer_v2";
    case hvpmu::kOpSetPassiveV2: return "set_passive_v2";
    default: return "unknown op";
  }
}

Error RefusalError(uint32_t op, hvpmu::ErrorCode code) {
  ErrorKind kind = ErrorKind::kBadState;
  switch (code) {
    case hvpmu::ErrorCode::kNotPrimary: kind = ErrorKind::kPermissionDenied; break;
    case hvpmu::ErrorCode::kNoSuchDomain: kind = ErrorKind::kNotFound; break;
    case hvpmu::ErrorCode::kBusy:
    case hvpmu::ErrorCode::kProfiling: kind = ErrorKind::kBusy; break;
    case hvpmu::ErrorCode::kNoPmu:
    case hvpmu::ErrorCode::kNotSupported: kind = ErrorKind::kUnsupported; break;
    case hvpmu::ErrorCode::kNoMemory: kind = ErrorKind::kNoSpace; break;
    case hvpmu::ErrorCode::kBadOp:
    case hvpmu::ErrorCode::kBadArgSize:
    case hvpmu::ErrorCode::kReservedNotZero:
    case hvpmu::ErrorCode::kBadAbiVersion: kind = ErrorKind::kProtocol; break;
    case hvpmu::ErrorCode::kBadCounter:
    case hvpmu::ErrorCode::kUnknownEvent:
    case hvpmu::ErrorCode::kEventNotOnCounter:
    case hvpmu::ErrorCode::kBadUnitMask:
    case hvpmu::ErrorCode::kCountTooSmall:
    case hvpmu::ErrorCode::kCountTooLarge:
    case hvpmu::ErrorCode::kBadBufferSize:
    case hvpmu::ErrorCode::kBadBacktraceDepth:
    case hvpmu::ErrorCode::kTooManyDomains:
    case hvpmu::ErrorCode::kAlreadyListed:
    case hvpmu::ErrorCode::kActiveAndPassive: kind = ErrorKind::kInvalidArgument; break;
    default: break;
  }
  return Error(kind, fmt::format("{} refused: {} ({})", OpName(op), hvpmu::ErrorMessage(code),
                                 hvpmu::ErrorName(code)));
}

namespace {

class HostedLink final : public HypervisorLink {
 public:
  HostedLink(ScopedFd socket, std::string socket_path)
      : socket_(std::move(socket)), socket_path_(std::move(socket_path)) {}

  Result<void> Hello() {
    hv::HelloRequest request{hv::kProtocolVersion, 0};
    HVPROF_TRY(reply, Call(MessageType::kHello, hv::Pack(request)));
    hv::HelloReply hello;
    if (!hv::Unpack(std::span<const std::byte>(reply.payload), &hello)) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed hello");
    }
    if (hello.error != 0) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv refused the hello: {}",
                       hv::ProtocolErrorName(static_cast<hv::ProtocolError>(hello.error)));
    }
    domain_ = hello.domain;
    num_cpus_ = hello.num_cpus;
    platform_ = std::string(hello.platform_name, strnlen(hello.platform_name, sizeof hello.platform_name));
    machine_ = std::string(hello.machine_name, strnlen(hello.machine_name, sizeof hello.machine_name));
    return Ok();
  }

  hvpmu::DomainId domain() const override { return domain_; }
  // hvprof-hv serves any client of a domain's socket; two agents of one domain would each take
  // the other's state for a crashed agent's. The lock beside the socket is per host and domain.
  std::string ExclusiveLockPath() const override { return hv::AgentLockPath(socket_path_); }
  // Requests and replies alternate on the socket, so between requests it is readable only when
  // hvprof-hv has closed it.
  int HangupFd() const override { return socket_.get(); }
  std::string platform_name() const override { return platform_; }
  std::string machine_name() const override { return machine_; }
  uint32_t num_cpus() const override { return num_cpus_; }

  Result<hvpmu::ErrorCode> Op(uint32_t op, std::span<std::byte> argument) override {
    hv::OpRequest request{op, static_cast<uint32_t>(argument.size())};
    HVPROF_TRY(reply, Call(MessageType::kOp, hv::Pack(request, argument)));
    hv::OpReply answer;
    std::span<const std::byte> result;
    if (!hv::Unpack(std::span<const std::byte>(reply.payload), &answer, &result) ||
        result.size() != argument.size()) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv answered {} with a malformed reply",
                       OpName(op));
    }
    if (!argument.empty()) std::memcpy(argument.data(), result.data(), result.size());
    return static_cast<hvpmu::ErrorCode>(answer.error);
  }

  Result<MappedRegion> MapRegion(uint64_t handle, uint64_t bytes) override {
    HVPROF_TRY(reply, Call(MessageType::kMapRegion, hv::Pack(hv::MapRequest{handle})));
    hv::MapReply answer;
    if (!hv::Unpack(std::span<const std::byte>(reply.payload), &answer)) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed map reply");
    }
    if (answer.error != 0 || reply.fds.size() != 1) {
      return MakeError(ErrorKind::kPermissionDenied, "cannot map region {:#x}: {}", handle,
                       hv::ProtocolErrorName(static_cast<hv::ProtocolError>(answer.error)));
    }
    if (bytes > answer.bytes) {
      return MakeError(ErrorKind::kCorrupt, "region {:#x} is {} bytes, smaller than the {} its rings need", handle,
                       answer.bytes, bytes);
    }
    HVPROF_TRY(mapping, ScopedMmap::MapShared(reply.fds[0].get(), answer.bytes,
                                              PROT_READ | PROT_WRITE));
    auto owner = std::make_shared<ScopedMmap>(std::move(mapping));
    MappedRegion region;
    region.data = static_cast<uint8_t*>(owner->data());
    region.owner = std::move(owner);
    region.bytes = answer.bytes;
    return region;
  }

  Result<std::vector<ScopedFd>> NotificationFds(uint64_t handle, uint32_t first,
                                                uint32_t count) override {
    std::vector<ScopedFd> fds;
    while (count > 0) {
      const uint32_t chunk = std::min(count, hv::kMaxFdsPerMessage);
      hv::NotifyRequest request{handle, first, chunk};
      HVPROF_TRY(reply, Call(MessageType::kNotifyFds, hv::Pack(request)));
      hv::NotifyReply answer;
      if (!hv::Unpack(std::span<const std::byte>(reply.payload), &answer) ||
          (answer.error == 0 && reply.fds.size() != chunk)) {
        return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed notification reply");
      }
      if (answer.error != 0) {
        return MakeError(ErrorKind::kPermissionDenied, "no notifications for region {:#x}: {}",
                         handle,
                         hv::ProtocolErrorName(static_cast<hv::ProtocolError>(answer.error)));
      }
      for (ScopedFd& fd : reply.fds) fds.push_back(std::move(fd));
      first += chunk;
      count -= chunk;
    }
    return fds;
  }

  Result<context::DomainImages> Images() override {
    HVPROF_TRY(text, TextCall(MessageType::kContext, {}));
    HVPROF_TRY(root, json::Node::Parse(text, "hvprof-hv's images of this domain", ErrorKind::kProtocol));
    return context::ParseDomainImages(root);
  }
  Result<std::vector<context::DomainInfo>> Domains() override {
    HVPROF_TRY(text, TextCall(MessageType::kDomains, {}));
    HVPROF_TRY(root, json::Node::Parse(text, "hvprof-hv's domain list", ErrorKind::kProtocol));
    return context::ParseDomainList(root);
  }

  Result<ContextEvents> FetchContextEvents(uint64_t from, bool settle) override {
    // Batches of a few megabytes at most: a host that forks all day sends many, each briefly held.
    constexpr uint32_t kEventsPerBatch = 8192;
    HVPROF_TRY(reply, Call(MessageType::kContextEvents, hv::Pack(hv::ContextEventsRequest{from, kEventsPerBatch, settle ? hv::kContextEventsSettle : 0u})));
    hv::ContextEventsReply answer;
    std::span<const std::byte> bytes;
    if (!hv::Unpack(std::span<const std::byte>(reply.payload), &answer, &bytes)) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed context events reply");
    }
    if (answer.error != 0) {
      return MakeError(ErrorKind::kPermissionDenied, "hvprof-hv refused the processes' events: {}",
                       hv::ProtocolErrorName(static_cast<hv::ProtocolError>(answer.error)));
    }
    ContextEvents out;
    out.first = answer.first;
    out.next = answer.next;
    out.more = (answer.flags & hv::kContextEventsMore) != 0;
    out.events.reserve(answer.events);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    if (!context::DecodeContextEvents(std::span<const uint8_t>(data, bytes.size()),
                                      [&](context::ContextEvent&& event) { out.events.push_back(std::move(event)); }) ||
        out.events.size() != answer.events) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv sent {} malformed context events", answer.events);
    }
    return out;
  }

  Result<context::PlatformInfo> PlatformInfo() override {
    HVPROF_TRY(text, TextCall(MessageType::kPlatformInfo, {}));
    HVPROF_TRY(root, json::Node::Parse(text, "hvprof-hv's platform info", ErrorKind::kProtocol));
    return context::ParsePlatformInfo(root);
  }

  Result<void> Publish(std::span<const std::byte> profile) override {
    if (profile.size() > hv::kMaxPublishPayload) {
      return MakeError(ErrorKind::kInvalidArgument, "the profile is {} bytes; at most {} can be published",
                       profile.size(), hv::kMaxPublishPayload);
    }
    HVPROF_TRY(answer, TextCall(MessageType::kPublish, profile));
    (void)answer;
    return Ok();
  }

  Result<std::vector<PublishedProfile>> FetchPublished(uint64_t after_sequence) override {
    HVPROF_TRY(reply, Call(MessageType::kFetchPublished,
                           hv::Pack(hv::FetchPublishedRequest{after_sequence})));
    hv::StatusReply status;
    std::span<const std::byte> rest;
    if (!hv::Unpack(std::span<const std::byte>(reply.payload), &status, &rest)) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed reply");
    }
    if (status.error != 0) {
      return MakeError(ErrorKind::kPermissionDenied, "reading published profiles refused: {}",
                       hv::ProtocolErrorName(static_cast<hv::ProtocolError>(status.error)));
    }
    std::vector<PublishedProfile> profiles;
    while (!rest.empty()) {
      hv::PublishedEntry entry;
      std::span<const std::byte> tail;
      if (!hv::Unpack(rest, &entry, &tail) || tail.size() < entry.bytes) {
        return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed list of published profiles");
      }
      profiles.push_back({entry.domain, entry.sequence,
                          std::string(reinterpret_cast<const char*>(tail.data()), entry.bytes)});
      rest = tail.subspan(entry.bytes);
    }
    return profiles;
  }

  Result<SimClock> SimQuery() override { return SimControl(hvprof::hv::SimCommand::kQuery, 0); }
  Result<SimClock> SimRunFor(uint64_t ns) override {
    return SimControl(hvprof::hv::SimCommand::kRunFor, ns);
  }
  Result<context::GroundTruth> GroundTruth(bool reset) override {
    hv::GroundTruthRequest request{reset ? 1u : 0u, 0};
    HVPROF_TRY(text, TextCall(MessageType::kGroundTruth, hv::Pack(request)));
    HVPROF_TRY(root, json::Node::Parse(text, "hvprof-hv's ground truth", ErrorKind::kProtocol));
    return context::ParseGroundTruth(root);
  }
  Result<SimTraceBuffers> SimXenTrace(uint32_t command, uint64_t argument) override {
    hv::XenTraceRequest request{command, 0, argument};
    HVPROF_TRY(reply, Call(MessageType::kXenTrace, hv::Pack(request)));
    hv::XenTraceReply answer;
    if (!hv::Unpack(std::span<const std::byte>(reply.payload), &answer) ||
        (answer.error == 0 && answer.bytes != 0 && reply.fds.size() != 2)) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed reply about Xen's trace buffers");
    }
    if (answer.error != 0) {
      return MakeError(ErrorKind::kPermissionDenied, "Xen's trace buffers refused: {}",
                       hv::ProtocolErrorName(static_cast<hv::ProtocolError>(answer.error)));
    }
    SimTraceBuffers out;
    out.xen_errno = answer.xen_errno;
    out.evt_mask = answer.evt_mask;
    out.tbuf_pages = answer.tbuf_pages;
    out.t_info_mfn = answer.t_info_mfn;
    out.t_info_pages = answer.t_info_pages;
    out.num_cpus = answer.num_cpus;
    out.first_mfn = answer.first_mfn;
    out.bytes = answer.bytes;
    out.cpu_khz = answer.cpu_khz;
    out.enabled = answer.enabled != 0;
    if (answer.bytes != 0) {
      out.memory = std::move(reply.fds[0]);
      out.notify = std::move(reply.fds[1]);
    }
    return out;
  }

 private:
  Result<hv::Message> Call(MessageType type, std::span<const std::byte> payload) {
    const uint32_t sequence = ++sequence_;
    HVPROF_TRYV(hv::SendMessage(socket_.get(), static_cast<uint16_t>(type), sequence, payload));
    HVPROF_TRY(reply, hv::ReceiveMessage(socket_.get(), hv::kMaxReplyPayload));
    const auto kind = static_cast<MessageType>(reply.header.type & ~hv::kReplyBit);
    if (reply.header.sequence != sequence || (reply.header.type & hv::kReplyBit) == 0) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv answered out of order");
    }
    if (kind == MessageType::kError) {
      hv::StatusReply status;
      std::span<const std::byte> text;
      hv::Unpack(std::span<const std::byte>(reply.payload), &status, &text);
      return MakeError(ErrorKind::kProtocol, "hvprof-hv rejected the request: {}",
                       std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
    }
    if (kind != type) return MakeError(ErrorKind::kProtocol, "hvprof-hv answered another request");
    return reply;
  }

  Result<std::string> TextCall(MessageType type, std::span<const std::byte> payload) {
    HVPROF_TRY(reply, Call(type, payload));
    hv::StatusReply status;
    std::span<const std::byte> text;
    if (!hv::Unpack(std::span<const std::byte>(reply.payload), &status, &text)) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed reply");
    }
    std::string body(reinterpret_cast<const char*>(text.data()), text.size());
    if (status.error != 0) {
      return MakeError(ErrorKind::kPermissionDenied, "{}", body.empty()
                           ? hv::ProtocolErrorName(static_cast<hv::ProtocolError>(status.error))
                           : body);
    }
    return body;
  }

  Result<SimClock> SimControl(hvprof::hv::SimCommand command, uint64_t argument) {
    hv::SimControlRequest request{static_cast<uint32_t>(command), 0, argument};
    HVPROF_TRY(reply, Call(MessageType::kSimControl, hv::Pack(request)));
    hv::SimControlReply answer;
    if (!hv::Unpack(std::span<const std::byte>(reply.payload), &answer)) {
      return MakeError(ErrorKind::kProtocol, "hvprof-hv sent a malformed clock reply");
    }
    if (answer.error != 0) {
      return MakeError(ErrorKind::kPermissionDenied, "machine control refused: {}",
                       hv::ProtocolErrorName(static_cast<hv::ProtocolError>(answer.error)));
    }
    return SimClock{answer.sim_time_ns, answer.pmis, answer.halted != 0};
  }

  ScopedFd socket_;
  uint32_t sequence_ = 0;
  std::string socket_path_;
  hvpmu::DomainId domain_ = 0;
  uint32_t num_cpus_ = 0;
  std::string platform_;
  std::string machine_;
};

}  // namespace

Result<std::unique_ptr<HypervisorLink>> ConnectHosted(const std::string& socket_path,
                                                      std::optional<std::chrono::milliseconds> hello_timeout) {
  if (socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return MakeError(ErrorKind::kInvalidArgument, "socket path {} is too long", socket_path);
  }
  // Only an hvprof-hv of root's or ours is spoken to (its peer credentials): a run directory
  // another user made first could hold their server.
  auto connected = ConnectUnix(
      socket_path, fmt::format("remove {} if it is not yours, or give another --run-dir",
                               socket_path.substr(0, socket_path.rfind('/'))));
  if (!connected) {
    if (connected.error().kind() == ErrorKind::kNotFound) {
      return MakeError(ErrorKind::kNotFound,
                       "no hypervisor at {}: hvprof-hv is not running there (start it with "
                       "`hvprof-hv --platform=sim --scenario=FILE`, or give the right --run-dir)",
                       socket_path);
    }
    return connected.error();
  }
  ScopedFd socket = std::move(connected).value();
  const int fd = socket.get();
  auto set_timeout = [fd](std::chrono::milliseconds limit) {
    const timeval value{static_cast<time_t>(limit.count() / 1000), static_cast<suseconds_t>(limit.count() % 1000 * 1000)};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, sizeof value);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, sizeof value);
  };
  if (hello_timeout) set_timeout(*hello_timeout);
  auto link = std::make_unique<HostedLink>(std::move(socket), socket_path);
  auto hello = link->Hello();
  const int hello_errno = errno;
  if (hello_timeout) {
    set_timeout(std::chrono::milliseconds(0));  // 0: no limit again
    if (!hello && (hello_errno == EAGAIN || hello_errno == EWOULDBLOCK)) {
      return MakeError(ErrorKind::kBusy, "{} did not answer within {} ms: is the hvprof-hv there stopped or "
                       "hung? (`cat {}/hvprof-hv.pid` names it)",
                       socket_path, hello_timeout->count(), socket_path.substr(0, socket_path.rfind('/')));
    }
  }
  if (!hello) {
    // A connection the daemon refused (wrong uid) shows up as a closed socket here.
    return hello.error().WithContext(fmt::format("hvprof-hv at {}", socket_path));
  }
  return std::unique_ptr<HypervisorLink>(std::move(link));
}

Result<std::unique_ptr<HypervisorLink>> ConnectHostedDomain(const std::string& run_dir, hvpmu::DomainId domain,
                                                            std::optional<std::chrono::milliseconds> hello_timeout) {
  return ConnectHosted(hvprof::hv::DomainSocketPath(run_dir, domain), hello_timeout);
}

}  // namespace hvprof::agent
