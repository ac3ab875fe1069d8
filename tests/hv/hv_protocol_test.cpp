// hvprof-hv over its sockets: a whole profiling session by two domains, isolation between
// domains, malformed input, and clients that die.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/agent/ring_reader.h"
#include "hvprof/hv/framing.h"
#include "hvprof/hv/daemon.h"
#include "other_user.h"
#include "sim_harness.h"
#include "skip.h"
#include "temp_dir.h"

using namespace hvpmu;
namespace sim = hvprof::sim;
namespace hv = hvprof::hv;
using hvprof::agent::ConnectHosted;
using hvprof::agent::HypervisorLink;
using hvprof::agent::RunOp;
using hvprof::testing::TempDir;
using Json = nlohmann::json;

namespace {

// hvprof-hv serving a test scenario from a thread, at maximum speed.
class RunningDaemon {
 public:
  explicit RunningDaemon(Json scenario = hvprof::testing::TestScenario()) {
    ::chmod(dir_.path().c_str(), 0755);  // other users must reach the sockets' directory
    {
      std::ofstream(dir_.File("scenario.json")) << scenario.dump();
    }
    hv::DaemonOptions options;
    options.scenario_path = dir_.File("scenario.json");
    options.run_dir = dir_.File("run");
    options.speed = sim::Speed::kMax;
    auto daemon = hv::Daemon::Create(options);
    if (!daemon) FAIL(daemon.error().message());
    daemon_ = std::move(daemon).value();
    thread_ = std::thread([this] { result_ = daemon_->Run(); });
  }
  ~RunningDaemon() {
    daemon_->Stop();
    thread_.join();
  }
  std::string Socket(DomainId domain) const { return hv::DomainSocketPath(dir_.File("run"), domain); }
  std::unique_ptr<HypervisorLink> Connect(DomainId domain) const {
    auto link = ConnectHosted(Socket(domain));
    if (!link) FAIL(link.error().message());
    return std::move(link).value();
  }

 private:
  TempDir dir_;
  std::unique_ptr<hv::Daemon> daemon_;
  std::thread thread_;
  hvprof::Result<void> result_ = hvprof::Ok();
};

void Must(const hvprof::Result<ErrorCode>& result) {
  REQUIRE(result.has_value());
  REQUIRE(std::string(ErrorName(result.value())) == "Ok");
}

BufferV2 BufferArg(DomainId domain = 0, uint32_t capacity = 16384) {
  BufferV2 buffer{};
  buffer.struct_size = sizeof buffer;
  buffer.abi_version = kAbiVersion;
  buffer.domain = domain;
  buffer.capacity = capacity;
  return buffer;
}

Status StatusOf(HypervisorLink& link) {
  auto status = std::make_unique<Status>();
  std::memset(status.get(), 0, sizeof *status);
  status->struct_size = sizeof(Status);
  status->abi_version = kAbiVersion;
  Must(RunOp(link, kOpStatus, status.get()));
  return *status;
}

// A drained region: samples per domain.
struct Drained {
  std::map<DomainId, uint64_t> per_domain;
  uint64_t malformed = 0;
};

void DrainRegion(HypervisorLink& link, const BufferV2& buffer, Drained* out) {
  auto region = link.MapRegion(buffer.region_handle);
  REQUIRE(region.has_value());
  for (uint32_t i = 0; i < buffer.nbuf; ++i) {
    auto reader = hvprof::agent::RingReader::Attach(region.value().base() + i * buffer.ring_bytes,
                                                    buffer.ring_bytes, buffer.capacity);
    REQUIRE(reader.has_value());
    auto stats = reader.value().Drain([&](const ring::SampleRecord& record, std::span<const uint64_t>) {
      ++out->per_domain[record.domain];
    });
    out->malformed += stats.malformed;
  }
}

// A raw connection for sending whatever we like.
hvprof::ScopedFd RawConnect(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, path.c_str());
  hvprof::ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

}  // namespace

TEST_CASE("hvprof-hv's daemon knows its hosts by name, and a sim host needs its scenario", "[hv][cli]") {
  TempDir dir;
  hv::DaemonOptions options;
  options.run_dir = dir.File("run");
  options.platform = "xen";
  auto unknown = hv::Daemon::Create(options);
  REQUIRE_FALSE(unknown.has_value());
  CHECK_THAT(unknown.error().message(), Catch::Contains("platform 'xen' is not one hvprof-hv hosts") &&
                                            Catch::Contains("--platform=sim") && Catch::Contains("--platform=linux"));
  options.platform = "sim";
  auto bare = hv::Daemon::Create(options);
  REQUIRE_FALSE(bare.has_value());
  CHECK_THAT(bare.error().message(), Catch::Contains("--platform=sim needs --scenario=FILE"));
  // Refused before it took the run directory: no pid file, no socket.
  CHECK_FALSE(std::filesystem::exists(dir.File("run")));
}

TEST_CASE("the sim host tells dom0 of every domain, a guest only of itself, and each its own images",
          "[hv][security]") {
  RunningDaemon daemon;
  auto dom0 = daemon.Connect(0);
  auto guest = daemon.Connect(2);
  auto all = dom0->Domains();
  REQUIRE(all.has_value());
  std::vector<std::string> seen;
  for (const auto& domain : all.value()) {
    seen.push_back(fmt::format("{} {} {} {}", domain.id, domain.name, domain.type, domain.vcpus));
  }
  CHECK(seen == std::vector<std::string>{"0 dom0 pv 2", "1 guest1 pv 2", "2 guest2 hvm 2", "3 guest3 pv32 1"});
  auto own = guest->Domains();
  REQUIRE(own.has_value());
  REQUIRE(own.value().size() == 1);
  CHECK(own.value()[0].id == 2);
  CHECK(own.value()[0].name == "guest2");
  // dom0's images include the hypervisor's; a guest's never do.
  auto dom0_images = dom0->Images();
  REQUIRE(dom0_images.has_value());
  CHECK_FALSE(dom0_images.value().hypervisor.empty());
  auto guest_images = guest->Images();
  REQUIRE(guest_images.has_value());
  CHECK(guest_images.value().hypervisor.empty());
}

TEST_CASE("context events come in bounded replies that say when more are waiting, and only then", "[hv][long]") {
  // A program run 20,000 times a second: one second of it is far more events than one reply holds.
  Json scenario = hvprof::testing::TestScenario();
  scenario["domains"][0]["processes"][0]["churn"] = {{"per_second", 20000}, {"lifetime_ms", 0.2}, {"pids", 50}};
  const size_t mappings = scenario["domains"][0]["processes"][0]["mappings"].size();
  RunningDaemon daemon(scenario);
  auto dom0 = daemon.Connect(0);
  auto alive = dom0->FetchContextEvents(0, false);
  REQUIRE(alive.has_value());
  CHECK_FALSE(alive.value().more);
  REQUIRE(dom0->SimRunFor(1'000'000'000).has_value());

  uint64_t next = alive.value().next;
  size_t replies = 0, events = 0, runs = 0;
  for (bool more = true; more; ++replies) {
    REQUIRE(replies < 1000);
    auto batch = dom0->FetchContextEvents(next, false);
    REQUIRE(batch.has_value());
    INFO("reply " << replies << ": " << batch.value().events.size() << " events, more " << batch.value().more);
    // A reply that says more is one the bound cut short: the hosted link asks for 8192 events a
    // reply, and the sim fits a run (its birth, mappings and exit) whole or not at all.
    if (batch.value().more) CHECK(batch.value().events.size() + mappings + 2 > 8192);
    events += batch.value().events.size();
    for (const hvprof::context::ContextEvent& event : batch.value().events) {
      if (event.kind == hvprof::context::ContextKind::kProcess) ++runs;
    }
    more = batch.value().more;
    next = batch.value().next;
  }
  // Every run born in that second, each with its mappings and its exit, in ceil(events / 8192)
  // replies or one more.
  INFO(replies << " replies, " << events << " events, " << runs << " runs");
  CHECK(runs >= 19'990);
  CHECK(runs <= 20'001);
  CHECK(events == runs * (mappings + 2));
  CHECK(replies >= events / 8192);
  CHECK(replies <= events / 8192 + 2);
  // Caught up: nothing more until the clock moves.
  auto after = dom0->FetchContextEvents(next, false);
  REQUIRE(after.has_value());
  CHECK(after.value().events.empty());
  CHECK_FALSE(after.value().more);
}

TEST_CASE("a whole session over the sockets matches the ground truth", "[hv]") {
  RunningDaemon daemon;
  auto dom0 = daemon.Connect(0);
  auto dom1 = daemon.Connect(1);
  CHECK(dom0->domain() == 0);
  CHECK(dom1->domain() == 1);
  CHECK(dom0->platform_name() == "sim");
  CHECK(dom0->num_cpus() == 4);

  legacy::Init init{};
  Must(RunOp(*dom0, legacy::kOpInit, &init));
  CHECK(init.is_primary == 1);
  CHECK(std::string(init.cpu_type) == "i386/arch_perfmon");
  BufferV2 own = BufferArg();
  Must(RunOp(*dom0, kOpGetBufferV2, &own));
  for (legacy::DomainIdArg id : {0, 1}) Must(RunOp(*dom0, legacy::kOpSetActive, &id));
  BufferV2 passive = BufferArg(2);
  Must(RunOp(*dom0, kOpSetPassiveV2, &passive));
  Must(RunOp(*dom0, legacy::kOpReserveCounters));
  legacy::Counter counter{};
  counter.count = 20000;
  counter.enabled = counter.kernel = counter.user = 1;
  counter.event = 0x3C;
  Must(RunOp(*dom0, legacy::kOpCounter, &counter));
  Must(RunOp(*dom0, legacy::kOpSetupEvents));
  Must(RunOp(*dom0, legacy::kOpEnableVirq));
  Must(RunOp(*dom1, legacy::kOpInit, &init));
  CHECK(init.is_primary == 0);
  BufferV2 guest = BufferArg();
  Must(RunOp(*dom1, kOpGetBufferV2, &guest));
  auto notify = dom1->NotificationFds(guest.region_handle, 0, guest.nbuf);
  REQUIRE(notify.has_value());
  CHECK(notify.value().size() == guest.nbuf);
  Must(RunOp(*dom1, legacy::kOpEnableVirq));
  Must(RunOp(*dom0, legacy::kOpStart));
  REQUIRE(dom0->GroundTruth(true).has_value());  // count from here on

  auto clock = dom0->SimRunFor(50'000'000);
  REQUIRE(clock.has_value());
  CHECK(clock.value().sim_time_ns >= 50'000'000);
  Must(RunOp(*dom0, legacy::kOpStop));

  Drained seen;
  DrainRegion(*dom0, own, &seen);
  DrainRegion(*dom0, passive, &seen);
  DrainRegion(*dom1, guest, &seen);
  CHECK(seen.malformed == 0);
  // The guest was woken by its ring's eventfd at least once (watermark or the stop flush).
  uint64_t wakes = 0;
  for (auto& fd : notify.value()) {
    uint64_t value = 0;
    if (::read(fd.get(), &value, sizeof value) == sizeof value) wakes += value;
  }
  CHECK(wakes > 0);

  auto truth = dom0->GroundTruth(false);
  REQUIRE(truth.has_value());
  std::map<DomainId, uint64_t> overflows;
  for (const hvprof::context::TruthRow& row : truth.value().rows) overflows[row.domain] += row.overflows.at(0);
  // Profiled domains: every overflow became exactly one sample. Domain 3 is not profiled.
  for (DomainId domain : {DomainId{0}, DomainId{1}, DomainId{2}, kDomainIdle}) {
    INFO("domain " << domain);
    CHECK(overflows[domain] > 0);
    CHECK(seen.per_domain[domain] == overflows[domain]);
  }
  CHECK(seen.per_domain.count(3) == 0);
  CHECK(overflows[3] > 0);
  const Status status = StatusOf(*dom0);
  CHECK(status.lost[static_cast<int>(ring::LossReason::kUnprofiledDomain)] == overflows[3]);
}

TEST_CASE("a guest socket cannot issue privileged operations", "[hv][security]") {
  RunningDaemon daemon;
  auto dom0 = daemon.Connect(0);
  auto guest = daemon.Connect(1);
  legacy::Init init{};
  Must(RunOp(*dom0, legacy::kOpInit, &init));
  for (uint32_t op : {legacy::kOpResetActiveList, legacy::kOpReserveCounters, legacy::kOpStart,
                      legacy::kOpStop, legacy::kOpReleaseCounters, legacy::kOpShutdown}) {
    auto result = RunOp(*guest, op);
    REQUIRE(result.has_value());
    CHECK(result.value() == ErrorCode::kNotPrimary);
  }
  legacy::DomainIdArg self = 1;
  CHECK(RunOp(*guest, legacy::kOpSetActive, &self).value() == ErrorCode::kNotPrimary);
  CHECK_FALSE(guest->SimRunFor(1000).has_value());
  CHECK_FALSE(guest->GroundTruth(false).has_value());
  // The guest init never makes it primary, whatever it asks.
  Must(RunOp(*guest, legacy::kOpInit, &init));
  CHECK(init.is_primary == 0);
  CHECK(StatusOf(*dom0).primary == 0);
}

TEST_CASE("no socket can obtain another domain's rings", "[hv][security]") {
  RunningDaemon daemon;
  auto dom0 = daemon.Connect(0);
  auto dom1 = daemon.Connect(1);
  auto dom2 = daemon.Connect(2);
  legacy::Init init{};
  Must(RunOp(*dom0, legacy::kOpInit, &init));
  BufferV2 own0 = BufferArg();
  Must(RunOp(*dom0, kOpGetBufferV2, &own0));
  BufferV2 passive3 = BufferArg(3);
  Must(RunOp(*dom0, kOpSetPassiveV2, &passive3));
  BufferV2 own1 = BufferArg();
  Must(RunOp(*dom1, kOpGetBufferV2, &own1));

  CHECK(dom0->MapRegion(own0.region_handle).has_value());
  CHECK(dom0->MapRegion(passive3.region_handle).has_value());
  CHECK(dom1->MapRegion(own1.region_handle).has_value());
  for (uint64_t handle : {own0.region_handle, passive3.region_handle}) {
    CHECK_FALSE(dom1->MapRegion(handle).has_value());
    CHECK_FALSE(dom1->NotificationFds(handle, 0, 1).has_value());
  }
  for (uint64_t handle : {own0.region_handle, own1.region_handle, passive3.region_handle,
                          uint64_t{0}, uint64_t{0xFFFFFFFFFFFFF000}}) {
    CHECK_FALSE(dom2->MapRegion(handle).has_value());
  }
  // Even dom0 cannot map an active guest's own rings: they are shared with the guest only.
  CHECK_FALSE(dom0->MapRegion(own1.region_handle).has_value());
  // A guest that asks for a passive domain's rings through set_passive is refused by the engine.
  CHECK(RunOp(*dom1, kOpSetPassiveV2, &passive3).value() == ErrorCode::kNotPrimary);
}

TEST_CASE("malformed and truncated messages get errors, never a crash", "[hv][bad-input]") {
  RunningDaemon daemon;
  using hv::MessageHeader;
  auto send = [](int fd, const void* data, size_t size) {
    REQUIRE(::send(fd, data, size, MSG_NOSIGNAL) == static_cast<ssize_t>(size));
  };
  auto expect_error_then_close = [](int fd) {
    auto reply = hv::ReceiveMessage(fd, hv::kMaxReplyPayload);
    REQUIRE(reply.has_value());
    CHECK((reply.value().header.type & ~hv::kReplyBit) == static_cast<uint16_t>(hv::MessageType::kError));
    char byte;
    CHECK(::recv(fd, &byte, 1, 0) == 0);  // the server hung up
  };
  SECTION("bad magic") {
    auto fd = RawConnect(daemon.Socket(1));
    MessageHeader header{0xDEADBEEF, hv::kProtocolVersion, 1, 0, 1};
    send(fd.get(), &header, sizeof header);
    expect_error_then_close(fd.get());
  }
  SECTION("wrong version") {
    auto fd = RawConnect(daemon.Socket(1));
    MessageHeader header{hv::kProtocolMagic, 99, 1, 0, 1};
    send(fd.get(), &header, sizeof header);
    expect_error_then_close(fd.get());
  }
  SECTION("oversized payload") {
    auto fd = RawConnect(daemon.Socket(1));
    MessageHeader header{hv::kProtocolMagic, hv::kProtocolVersion, 2, 100u << 20, 1};
    send(fd.get(), &header, sizeof header);
    expect_error_then_close(fd.get());
  }
  SECTION("operation whose argument disagrees with its size, and an unknown type") {
    auto fd = RawConnect(daemon.Socket(1));
    struct {
      MessageHeader header;
      hv::OpRequest op;
      uint8_t argument[4];
    } message{{hv::kProtocolMagic, hv::kProtocolVersion, 2, 12, 7}, {0, 72}, {}};
    send(fd.get(), &message, sizeof message);
    auto reply = hv::ReceiveMessage(fd.get(), hv::kMaxReplyPayload);
    REQUIRE(reply.has_value());
    CHECK(reply.value().header.sequence == 7);
    CHECK((reply.value().header.type & ~hv::kReplyBit) == 0x7FFF);
    MessageHeader unknown{hv::kProtocolMagic, hv::kProtocolVersion, 77, 0, 8};
    send(fd.get(), &unknown, sizeof unknown);
    reply = hv::ReceiveMessage(fd.get(), hv::kMaxReplyPayload);
    REQUIRE(reply.has_value());
    CHECK(reply.value().header.sequence == 8);  // the connection survived both
  }
  SECTION("every prefix of a valid message, then a hang-up") {
    hv::HelloRequest hello{hv::kProtocolVersion, 0};
    auto bytes = hv::Pack(hello);
    MessageHeader header{hv::kProtocolMagic, hv::kProtocolVersion, 1,
                         static_cast<uint32_t>(bytes.size()), 1};
    const auto* header_bytes = reinterpret_cast<const uint8_t*>(&header);
    std::vector<uint8_t> whole(header_bytes, header_bytes + sizeof header);
    for (std::byte b : bytes) whole.push_back(static_cast<uint8_t>(b));
    for (size_t cut = 1; cut < whole.size(); ++cut) {
      auto fd = RawConnect(daemon.Socket(1));
      send(fd.get(), whole.data(), cut);
    }
  }
  SECTION("descriptors sent by a client are refused quietly") {
    auto fd = RawConnect(daemon.Socket(1));
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    hv::HelloRequest hello{hv::kProtocolVersion, 0};
    REQUIRE(hv::SendMessage(fd.get(), 1, 3, hv::Pack(hello), std::span(pipe_fds, 2)).has_value());
    auto reply = hv::ReceiveMessage(fd.get(), hv::kMaxReplyPayload);
    REQUIRE(reply.has_value());
    CHECK(reply.value().header.sequence == 3);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
  }
  // After all that, the daemon still serves.
  auto dom0 = daemon.Connect(0);
  legacy::Init init{};
  Must(RunOp(*dom0, legacy::kOpInit, &init));
}

TEST_CASE("a client killed mid-session is cleaned up, the daemon stays healthy", "[hv][robustness]") {
  RunningDaemon daemon;
  auto dom0 = daemon.Connect(0);
  legacy::Init init{};
  Must(RunOp(*dom0, legacy::kOpInit, &init));
  legacy::DomainIdArg one = 1;
  Must(RunOp(*dom0, legacy::kOpSetActive, &one));

  const std::string socket = daemon.Socket(1);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The guest agent: gets its rings, activates, then starts a request and dies mid-way.
    auto link = ConnectHosted(socket);
    if (!link) ::_exit(2);
    legacy::Init guest_init{};
    BufferV2 buffer = BufferArg();
    if (!RunOp(*link.value(), legacy::kOpInit, &guest_init) ||
        RunOp(*link.value(), kOpGetBufferV2, &buffer).value() != ErrorCode::kOk ||
        !link.value()->MapRegion(buffer.region_handle) ||
        RunOp(*link.value(), legacy::kOpEnableVirq).value() != ErrorCode::kOk) {
      ::_exit(3);
    }
    auto raw = RawConnect(socket);
    hv::MessageHeader header{hv::kProtocolMagic, hv::kProtocolVersion, 2, 1000, 9};
    ::send(raw.get(), &header, sizeof header, MSG_NOSIGNAL);  // and never the payload
    ::raise(SIGKILL);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));

  // The daemon noticed: dom1 is no longer activated and its rings are gone.
  bool cleaned = false;
  for (int attempt = 0; attempt < 100 && !cleaned; ++attempt) {
    const Status now = StatusOf(*dom0);
    for (uint32_t i = 0; i < now.num_domains; ++i) {
      const DomainStatus& entry = now.domains[i];
      if (entry.domain == 1) cleaned = entry.activated == 0 && entry.ring_format == 0;
    }
    if (!cleaned) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(cleaned);
  // The domain can come back.
  auto again = daemon.Connect(1);
  BufferV2 buffer = BufferArg();
  Must(RunOp(*again, kOpGetBufferV2, &buffer));
  Must(RunOp(*again, legacy::kOpEnableVirq));
}

TEST_CASE("only the domain's own user may speak on its socket", "[hv][security]") {
  if (::geteuid() != 0) {
    if (hvprof::testing::SkipTest("needs root to run a client under another uid")) return;
  }
  Json scenario = hvprof::testing::TestScenario();
  scenario["domains"][1]["socket_uid"] = 65534;  // nobody
  RunningDaemon daemon(scenario);
  // root is not nobody: refused.
  CHECK_FALSE(ConnectHosted(daemon.Socket(1)).has_value());
  // nobody is accepted.
  CHECK(hvprof::testing::RunAsUser(hvprof::testing::kNobody, [&] {
          auto link = ConnectHosted(daemon.Socket(1));
          return link.has_value() && link.value()->domain() == 1;
        }) == 0);
  // And nobody cannot use dom0's socket (mode 0600, owned by root).
  CHECK(hvprof::testing::RunAsUser(hvprof::testing::kNobody,
                                   [&] { return !ConnectHosted(daemon.Socket(0)).has_value(); }) == 0);
}

namespace {

// One SimControl request on a raw connection, for requests the client library would not send.
void SendSimControl(int fd, uint32_t sequence, hv::SimCommand command, uint64_t argument) {
  const hv::SimControlRequest request{static_cast<uint32_t>(command), 0, argument};
  REQUIRE(hv::SendMessage(fd, static_cast<uint16_t>(hv::MessageType::kSimControl), sequence, hv::Pack(request))
              .has_value());
}

hv::Message ReceiveReply(int fd) {
  auto reply = hv::ReceiveMessage(fd, hv::kMaxReplyPayload);
  REQUIRE(reply.has_value());
  return std::move(reply).value();
}

// The text of an Error reply.
std::string ErrorText(const hv::Message& reply) {
  REQUIRE((reply.header.type & ~hv::kReplyBit) == static_cast<uint16_t>(hv::MessageType::kError));
  hv::StatusReply status;
  std::span<const std::byte> text;
  REQUIRE(hv::Unpack(std::span<const std::byte>(reply.payload), &status, &text));
  return std::string(reinterpret_cast<const char*>(text.data()), text.size());
}

// The clock, as a query on `fd` (with `sequence`) reports it; the query is answered at once, after
// every earlier request of the connection has been taken in.
hv::SimControlReply QueryClock(int fd, uint32_t sequence) {
  SendSimControl(fd, sequence, hv::SimCommand::kQuery, 0);
  const hv::Message reply = ReceiveReply(fd);
  REQUIRE(reply.header.sequence == sequence);
  REQUIRE((reply.header.type & ~hv::kReplyBit) == static_cast<uint16_t>(hv::MessageType::kSimControl));
  hv::SimControlReply clock;
  REQUIRE(hv::Unpack(std::span<const std::byte>(reply.payload), &clock));
  REQUIRE(clock.error == 0);
  return clock;
}

}  // namespace

TEST_CASE("a run-for that would wrap the clock or run for ages is refused and the clock stays", "[hv][security]") {
  RunningDaemon daemon;
  auto dom0 = daemon.Connect(0);
  auto before = dom0->SimQuery();
  REQUIRE(before.has_value());
  // now + UINT64_MAX wraps below now (a run that never ends); the others would keep the machine
  // busy, and every other request waiting, for years or just over an hour of simulated time.
  for (uint64_t ns : {UINT64_MAX, uint64_t{1} << 63, hv::kMaxSimRunNs + 1}) {
    INFO("run-for " << ns);
    auto refused = dom0->SimRunFor(ns);
    REQUIRE_FALSE(refused.has_value());
    const std::string message = refused.error().message();
    INFO(message);
    CHECK(message.find(fmt::format("run-for of {} ns", ns)) != std::string::npos);
    CHECK(message.find("one hour of simulated time") != std::string::npos);
    CHECK(message.find("ask in steps") != std::string::npos);
  }
  // A run of nothing is answered at once, not left waiting for a clock that does not move.
  auto nothing = dom0->SimRunFor(0);
  REQUIRE(nothing.has_value());
  auto after = dom0->SimQuery();
  REQUIRE(after.has_value());
  CHECK(nothing.value().sim_time_ns == before.value().sim_time_ns);
  CHECK(after.value().sim_time_ns == before.value().sim_time_ns);
  // The connection still serves, and a run within the limit runs.
  auto run = dom0->SimRunFor(1'000'000);
  REQUIRE(run.has_value());
  CHECK(run.value().sim_time_ns >= before.value().sim_time_ns + 1'000'000);
}

TEST_CASE("an unknown sim control command is refused by name and the connection stays", "[hv][bad-input]") {
  RunningDaemon daemon;
  auto fd = RawConnect(daemon.Socket(0));
  const uint64_t before = QueryClock(fd.get(), 1).sim_time_ns;
  for (uint32_t command : {2u, 7u, 0xFFFFFFFFu}) {
    INFO("command " << command);
    SendSimControl(fd.get(), 2, static_cast<hv::SimCommand>(command), 1'000'000);
    const hv::Message reply = ReceiveReply(fd.get());
    CHECK(reply.header.sequence == 2);
    const std::string text = ErrorText(reply);
    CHECK(text.find(fmt::format("unknown sim control command {}", command)) != std::string::npos);
    CHECK(text.find("use 0 (query the clock) or 1 (run for") != std::string::npos);
  }
  CHECK(QueryClock(fd.get(), 3).sim_time_ns == before);
  // A guest is still denied before its command is even looked at.
  auto guest = RawConnect(daemon.Socket(1));
  SendSimControl(guest.get(), 4, static_cast<hv::SimCommand>(7), 0);
  const hv::Message denied = ReceiveReply(guest.get());
  hv::SimControlReply answer;
  REQUIRE(hv::Unpack(std::span<const std::byte>(denied.payload), &answer));
  CHECK(answer.error == static_cast<int32_t>(hv::ProtocolError::kDenied));
}

TEST_CASE("a flood of run-for requests is bounded and the server answers during a long run", "[hv][security]") {
  RunningDaemon daemon;
  // An hour of simulated time takes the machine wall-clock minutes: these runs stay waiting
  // for as long as the test lasts.
  constexpr uint64_t kHour = hv::kMaxSimRunNs;
  std::vector<hvprof::ScopedFd> waiting;
  for (uint32_t i = 0; i < hv::kMaxPendingSimRuns; ++i) {
    waiting.push_back(RawConnect(daemon.Socket(0)));
    SendSimControl(waiting.back().get(), 1, hv::SimCommand::kRunFor, kHour);
    // Answered while the run goes on: the machine lets the server in between its steps.
    const hv::SimControlReply clock = QueryClock(waiting.back().get(), 2);
    CHECK(clock.sim_time_ns < kHour);
  }

  SECTION("a second run on one connection waits for the first") {
    SendSimControl(waiting[0].get(), 3, hv::SimCommand::kRunFor, 1'000'000);
    const hv::Message reply = ReceiveReply(waiting[0].get());
    CHECK(reply.header.sequence == 3);
    const std::string text = ErrorText(reply);
    CHECK(text.find("a run-for is already waiting on this connection") != std::string::npos);
    CHECK(text.find("wait for its reply") != std::string::npos);
  }
  SECTION("one connection more than the limit is refused") {
    auto extra = RawConnect(daemon.Socket(0));
    SendSimControl(extra.get(), 3, hv::SimCommand::kRunFor, 1'000'000);
    const hv::Message reply = ReceiveReply(extra.get());
    CHECK(reply.header.sequence == 3);
    const std::string text = ErrorText(reply);
    CHECK(text.find(fmt::format("{} run-for requests are already waiting", hv::kMaxPendingSimRuns)) !=
          std::string::npos);
    CHECK(text.find("retry once one is answered") != std::string::npos);
    // A client that goes away gives its place back.
    waiting.pop_back();
    bool accepted = false;
    for (int attempt = 0; attempt < 100 && !accepted; ++attempt) {
      SendSimControl(extra.get(), 4, hv::SimCommand::kRunFor, kHour);
      SendSimControl(extra.get(), 5, hv::SimCommand::kQuery, 0);
      // Refused: the Error reply comes first. Taken in: only the query's reply comes.
      accepted = ReceiveReply(extra.get()).header.sequence == 5;
      if (!accepted) {
        REQUIRE(ReceiveReply(extra.get()).header.sequence == 5);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    CHECK(accepted);
  }
}
