// Active guests with their own agents, as separate processes on a simulated host: the seed's
// multi-domain sequence, each report against the ground truth, the whole-host report, the
// wrong orders of use, and guests that misbehave.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/agent/agent_daemon.h"
#include "hvprof/agent/control_channel.h"
#include "hvprof/report/load.h"
#include "hvprof/report/views/table.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "host_harness.h"
#include "profile_counts.h"
#include "sim_harness.h"

using namespace hvprof;
using hvprof::testing::Host;
using hvprof::testing::DomainMode;
using hvprof::testing::Load;
using hvprof::testing::ProfileByMode;
using hvprof::testing::TruthByMode;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

namespace {

// dom0 sets up with guests 1 and 2 active and 3 passive, and both guests join.
void SetUpThreeGuests(Host& host) {
  auto setup = host.Hvprof({"--start-daemon", "--active-domains=1,guest2", "--passive-domains=3",
                            "--event=CPU_CLK_UNHALTED:6000"});
  INFO(setup.out << setup.err);
  REQUIRE(setup.status == 0);
  for (uint16_t guest : {1, 2}) {
    auto daemon = host.GuestHvprof(guest, {"--start-daemon"});
    INFO(daemon.out << daemon.err);
    REQUIRE(daemon.status == 0);
    auto joined = host.GuestHvprof(guest, {"--start"});
    INFO(joined.out << joined.err);
    REQUIRE(joined.status == 0);
  }
}

}  // namespace

TEST_CASE("two active guests and a passive one: every report matches the ground truth", "[guest][e2e]") {
  Host host(TestScenario("intel-arch-v4", 41));
  SetUpThreeGuests(host);
  auto started = host.Hvprof({"--start"});
  INFO(started.err);
  REQUIRE(started.status == 0);
  (void)host.GroundTruth(true);
  REQUIRE(host.Hvprof({"--run-sim=150ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  const context::GroundTruth truth = host.GroundTruth(false);
  {
    // dom0's stop notified every guest: with nobody asking them, the agents drain the rest and
    // their periodic flush puts it on disk.
    const uint32_t counter = Load(host.current()).metadata().events.at(0).counter;
    const auto expected = TruthByMode(truth, counter);
    for (uint16_t guest : {1, 2}) {
      uint64_t want = 0;
      for (const char* mode : {"user", "kernel", "hypervisor"}) want += expected.at({guest, mode});
      uint64_t on_disk = 0;
      for (int i = 0; i < 50 && on_disk != want; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        auto read = store::ReadSamplesFile(host.guest_current(guest) + "/samples.hvs", [](const store::StoredSample&) {});
        on_disk = read ? read.value().samples : 0;
      }
      INFO("guest " << guest);
      CHECK(on_disk == want);
    }
  }
  for (uint16_t guest : {1, 2}) REQUIRE(host.GuestHvprof(guest, {"--stop"}).status == 0);

  const report::Profile dom0 = Load(host.current());
  const uint32_t counter = dom0.metadata().events.at(0).counter;
  const auto expected = TruthByMode(truth, counter);

  SECTION("each guest's own session is exactly its domain's ground truth, symbolized by the guest") {
    for (uint16_t guest : {1, 2}) {
      INFO("guest " << guest);
      const report::Profile own = Load(host.guest_current(guest));
      CHECK(own.problems().empty());
      const auto seen = ProfileByMode(own);
      for (const char* mode : {"user", "kernel", "hypervisor"}) {
        INFO(mode);
        CHECK(expected.at({guest, mode}) > 0);
        CHECK(seen.count({guest, mode}) == 1);
        if (seen.count({guest, mode}) != 0) CHECK(seen.at({guest, mode}) == expected.at({guest, mode}));
      }
      for (const auto& [key, count] : seen) CHECK(key.first == guest);  // nothing of anybody else
      // Its own user and kernel code is resolved; its hypervisor time is not (no xen-syms).
      uint64_t resolved_user_kernel = 0, hypervisor_unresolved = 0;
      for (const report::Entry& entry : own.entries()) {
        const report::Symbol& symbol = own.symbols()[entry.symbol];
        if (entry.mode != 2 && symbol.resolved) resolved_user_kernel += entry.count;
        if (entry.mode == 2 && !symbol.resolved) hypervisor_unresolved += entry.count;
      }
      CHECK(resolved_user_kernel == expected.at({guest, "user"}) + expected.at({guest, "kernel"}));
      CHECK(hypervisor_unresolved == expected.at({guest, "hypervisor"}));
    }
  }

  SECTION("dom0's session holds dom0, the idle loop and the passive domain, never the active guests") {
    const auto seen = ProfileByMode(dom0);
    for (const auto& [key, count] : expected) {
      INFO("domain " << key.first << " " << key.second);
      if (key.first == 1 || key.first == 2) {
        CHECK(seen.count(key) == 0);
      } else {
        CHECK(seen.count(key) == 1);
        if (seen.count(key) != 0) CHECK(seen.at(key) == count);
      }
    }
    CHECK(dom0.metadata().losses.ring_full == 0);
  }

  SECTION("published profiles make one whole-host report that matches the ground truth") {
    auto incomplete = host.Report({"--all-domains", "-l"});
    CHECK(incomplete.status == 3);  // the guests have not published yet: it says so
    CHECK(incomplete.out.find("Warning: active domain dom1 (guest1) has not published") != std::string::npos);
    // Without the header (-n), where the warning was, the status still says why on stderr.
    auto bare = host.Report({"--all-domains", "-l", "-n"});
    CHECK(bare.status == 3);
    CHECK(bare.out.find("has not published") == std::string::npos);
    CHECK(bare.err.find("hvprof-report: the report is incomplete (exit status 3): active domain dom1 (guest1) has not "
                        "published") != std::string::npos);
    for (uint16_t guest : {1, 2}) {
      auto published = host.GuestHvprof(guest, {"--publish"});
      INFO(published.err);
      REQUIRE(published.status == 0);
      CHECK(published.out.find("published") != std::string::npos);
    }
    REQUIRE(host.Hvprof({"--dump"}).status == 0);  // takes what was published into the session
    const report::Profile whole = Load(host.current(), true);
    CHECK(whole.problems().empty());
    CHECK(whole.published().size() == 2);
    const auto seen = ProfileByMode(whole);
    for (const auto& [key, count] : expected) {
      INFO("domain " << key.first << " " << key.second);
      CHECK(seen.count(key) == 1);
      if (seen.count(key) != 0) CHECK(seen.at(key) == count);
    }

    // Shares of the guests' functions, each resolved by whoever could: user and kernel by the
    // guest, hypervisor by dom0 with xen-syms.
    report::ReportOptions options;
    options.view = report::View::kSymbol;
    options.by_domain = true;
    auto table = report::BuildTable(whole, options);
    REQUIRE(table.has_value());
    // By function start address: names can differ between aliases of one address.
    std::map<uint16_t, std::map<uint64_t, double>> sampled;
    std::map<uint16_t, double> sampled_total;
    for (const report::Row& row : table.value().rows) {
      sampled[row.domain_id][row.address] += static_cast<double>(row.samples[0]);
      sampled_total[row.domain_id] += static_cast<double>(row.samples[0]);
    }
    for (uint16_t guest : {1, 2}) {
      std::map<uint64_t, double> truth_share;
      std::map<uint64_t, std::string> names;
      double total = 0;
      for (const context::TruthRow& row : truth.rows) {
        if (row.domain != guest) continue;
        const double events = static_cast<double>(row.events.at(counter));
        const uint64_t start = row.image_address;
        truth_share[start] += events;
        names[start] = row.function;
        total += events;
      }
      REQUIRE(total > 0);
      REQUIRE(sampled_total[guest] > 5000);
      for (const auto& [start, events] : truth_share) {
        INFO("guest " << guest << " " << names[start]);
        CHECK(std::fabs(sampled[guest][start] / sampled_total[guest] - events / total) <= 0.01);
      }
    }

    auto text = host.Report({"--all-domains", "-l", "--by-domain", "-t", "1"});
    INFO(text.err);
    CHECK(text.status == 0);
    CHECK(text.out.find("Merged:") != std::string::npos);
    CHECK(text.out.find("domain1-xen") != std::string::npos);  // resolved in dom0
    CHECK(text.out.find("domain1:libz.so.1") != std::string::npos);  // resolved in the guest
  }
}

TEST_CASE("every wrong order of the multi-domain steps has its own message", "[guest][usage]") {
  Host host(TestScenario("intel-arch-v4", 42));

  REQUIRE(host.GuestHvprof(1, {"--start-daemon"}).status == 0);
  auto too_early = host.GuestHvprof(1, {"--start"});
  CHECK(too_early.status == 1);
  CHECK(too_early.err.find("not set up yet") != std::string::npos);
  CHECK(too_early.err.find("--active-domains=1") != std::string::npos);

  REQUIRE(host.Hvprof({"--start-daemon", "--active-domains=1", "--passive-domains=3"}).status == 0);
  auto not_joined = host.Hvprof({"--start"});
  CHECK(not_joined.status == 1);
  CHECK(not_joined.err.find("dom1 (guest1) has not joined") != std::string::npos);
  CHECK(not_joined.err.find("hvprof --domain=1 --start") != std::string::npos);

  auto not_active = host.GuestHvprof(2, {"--start-daemon"});
  REQUIRE(not_active.status == 0);
  auto refused = host.GuestHvprof(2, {"--start"});
  CHECK(refused.status == 1);
  CHECK(refused.err.find("did not list dom2 (guest2) as an active domain") != std::string::npos);

  auto dom0_options = host.GuestHvprof(2, {"--start-daemon", "--passive-domains=3"});
  CHECK(dom0_options.status != 0);

  auto publish_before = host.GuestHvprof(1, {"--publish"});
  CHECK(publish_before.status == 1);
  CHECK(publish_before.err.find("run `hvprof --start` here first") != std::string::npos);
  CHECK(host.Hvprof({"--publish"}).status == 1);  // dom0 has nothing to publish to itself

  REQUIRE(host.GuestHvprof(1, {"--start"}).status == 0);
  CHECK(host.GuestHvprof(1, {"--start"}).out.find("already joined") != std::string::npos);
  // The guest's agent hands dom0 the profile `hvprof --publish` makes; asked to publish nothing,
  // it refuses.
  const store::SessionPaths guest_paths{host.guest_root(1)};
  auto bare_publish = agent::Request(guest_paths.control_socket(), agent::Json{{"action", "publish"}},
                                     std::chrono::seconds(30));
  REQUIRE(bare_publish.has_value());
  auto refused_publish = agent::CheckResponse(std::move(bare_publish).value());
  REQUIRE_FALSE(refused_publish.has_value());
  CHECK(refused_publish.error().message().find("publish takes the profile") != std::string::npos);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=20ms"}).status == 0);

  auto status = host.Hvprof({"--status"});
  CHECK(status.out.find("dom1 (guest1)") != std::string::npos);
  CHECK(status.out.find("dom3 (guest3)") != std::string::npos);
  CHECK(status.out.find("passive") != std::string::npos);
  auto guest_status = host.GuestHvprof(1, {"--status"});
  CHECK(guest_status.out.find("joined profiling") != std::string::npos);
  CHECK(guest_status.out.find("counters running") != std::string::npos);
  CHECK(guest_status.out.find("dom3 (guest3)") == std::string::npos);  // a guest sees only itself

  CHECK(host.GuestHvprof(1, {"--run-sim=10ms"}).err.find("only dom0 drives") != std::string::npos);

  // --save and --reset work in a guest as in dom0.
  auto saved = host.GuestHvprof(1, {"--save=early"});
  INFO(saved.err);
  CHECK(saved.status == 0);
  auto early = store::OpenSession(host.guest_root(1) + "/samples/early");
  REQUIRE(early.has_value());
  CHECK(early.value().metadata.role == "guest");
  CHECK(early.value().metadata.agent_domain == 1);
  CHECK(early.value().metadata.samples_stored > 0);
  CHECK(host.GuestHvprof(1, {"--reset"}).status == 0);
  auto fresh = store::OpenSession(host.guest_current(1));
  REQUIRE(fresh.has_value());
  CHECK(fresh.value().metadata.samples_stored == 0);

  auto leaving = host.GuestHvprof(1, {"--shutdown"});
  CHECK(leaving.status == 0);
  CHECK(leaving.out.find("while dom0 is still profiling") != std::string::npos);
  CHECK(leaving.out.find("not recorded") != std::string::npos);
  // What it said happens: its samples are lost from now on, and counted.
  auto before = store::OpenSession(host.current());
  REQUIRE(host.Hvprof({"--run-sim=20ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  auto after = store::OpenSession(host.current());
  REQUIRE(after.has_value());
  CHECK(after.value().metadata.losses.unprofiled_domain > 0);
  auto twice = host.GuestHvprof(1, {"--shutdown"});
  CHECK(twice.status == 0);
  CHECK(twice.out.find("not running") != std::string::npos);
}

TEST_CASE("guests cannot reach other domains or privileged operations", "[guest][isolation]") {
  Host host(TestScenario("intel-arch-v4", 43));
  REQUIRE(host.Hvprof({"--start-daemon", "--active-domains=1,2", "--passive-domains=3"}).status == 0);
  // Two guests as raw clients of their own sockets, doing what a hostile agent could.
  auto guest1 = host.Connect(1);
  auto guest2 = host.Connect(2);

  // Privileged operations: refused with a named reason.
  for (uint32_t op : {hvpmu::legacy::kOpStart, hvpmu::legacy::kOpStop, hvpmu::legacy::kOpReserveCounters,
                      hvpmu::legacy::kOpResetActiveList, hvpmu::legacy::kOpShutdown}) {
    auto code = agent::RunOp(*guest1, op);
    REQUIRE(code.has_value());
    INFO(agent::OpName(op));
    CHECK(code.value() != hvpmu::ErrorCode::kOk);
    CHECK(agent::RefusalError(op, code.value()).message().find("refused") != std::string::npos);
  }
  hvpmu::BufferV2 passive = agent::BufferRequest(3, 1024);
  auto set_passive = agent::RunOp(*guest1, hvpmu::kOpSetPassiveV2, &passive);
  REQUIRE(set_passive.has_value());
  CHECK(set_passive.value() == hvpmu::ErrorCode::kNotPrimary);
  CHECK(agent::RefusalError(hvpmu::kOpSetPassiveV2, set_passive.value()).kind() == ErrorKind::kPermissionDenied);

  // Another domain's rings: get_buffer only ever answers with the caller's own region, and the
  // region of domain 2 cannot be mapped through domain 1's socket.
  hvpmu::BufferV2 mine = agent::BufferRequest(2, 16384);
  REQUIRE(agent::RunOp(*guest1, hvpmu::kOpGetBufferV2, &mine).value() == hvpmu::ErrorCode::kOk);
  CHECK(mine.domain == 1);
  hvpmu::BufferV2 theirs = agent::BufferRequest(2, 16384);
  REQUIRE(agent::RunOp(*guest2, hvpmu::kOpGetBufferV2, &theirs).value() == hvpmu::ErrorCode::kOk);
  CHECK(!guest1->MapRegion(theirs.region_handle).has_value());
  CHECK(!guest1->NotificationFds(theirs.region_handle, 0, 1).has_value());
  // dom0's passive domain and dom0's own region are not reachable either.
  for (uint64_t handle = 0; handle < 64; ++handle) {
    if (handle == mine.region_handle) continue;
    CHECK(!guest1->MapRegion(handle).has_value());
  }
  // Published profiles are dom0's to read.
  CHECK(!guest1->FetchPublished(0).has_value());
  // The ground truth and the machine's clock are dom0's.
  CHECK(!guest1->GroundTruth(false).has_value());
  CHECK(!guest1->SimRunFor(1000).has_value());
}

TEST_CASE("a guest that writes garbage into its ring or dies harms nobody else", "[guest][hostile]") {
  Host host(TestScenario("intel-arch-v4", 44));
  REQUIRE(host.Hvprof({"--start-daemon", "--active-domains=1,2", "--passive-domains=3",
                       "--event=CPU_CLK_UNHALTED:6000"}).status == 0);
  // Guest 1 is a hostile client that maps its rings and scribbles on their indices.
  auto hostile = host.Connect(1);
  hvpmu::legacy::Init init{};
  REQUIRE(agent::RunOp(*hostile, hvpmu::legacy::kOpInit, &init).value() == hvpmu::ErrorCode::kOk);
  hvpmu::BufferV2 buffer = agent::BufferRequest(1, 1024);
  REQUIRE(agent::RunOp(*hostile, hvpmu::kOpGetBufferV2, &buffer).value() == hvpmu::ErrorCode::kOk);
  auto region = hostile->MapRegion(buffer.region_handle);
  REQUIRE(region.has_value());
  REQUIRE(agent::RunOp(*hostile, hvpmu::legacy::kOpEnableVirq).value() == hvpmu::ErrorCode::kOk);
  for (uint32_t i = 0; i < buffer.nbuf; ++i) {
    auto* header = reinterpret_cast<hvpmu::ring::RingHeader*>(region.value().base() + i * buffer.ring_bytes);
    header->tail = 0xDEADBEEFDEADBEEFULL;  // beyond the head: impossible
    header->head = 12345;                   // the producer's index is not ours to write either
  }
  // Guest 2 runs a real agent, killed with SIGKILL halfway.
  REQUIRE(host.GuestHvprof(2, {"--start-daemon"}).status == 0);
  REQUIRE(host.GuestHvprof(2, {"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);
  REQUIRE(host.Hvprof({"--run-sim=60ms"}).status == 0);
  REQUIRE(host.GuestHvprof(2, {"--dump"}).status == 0);
  const pid_t guest2 = host.GuestAgentPid(2);
  REQUIRE(guest2 > 0);
  REQUIRE(::kill(guest2, SIGKILL) == 0);
  for (int i = 0; i < 200 && ::kill(guest2, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(host.Hvprof({"--run-sim=60ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  const context::GroundTruth truth = host.GroundTruth(false);

  const report::Profile dom0 = Load(host.current());
  const auto expected = TruthByMode(truth, dom0.metadata().events.at(0).counter);
  const auto seen = ProfileByMode(dom0);
  // dom0's session is complete: dom0, idle and the passive domain exactly, nothing else.
  for (const auto& [key, count] : expected) {
    INFO("domain " << key.first << " " << key.second);
    if (key.first == 1 || key.first == 2) continue;
    CHECK(seen.count(key) == 1);
    if (seen.count(key) != 0) CHECK(seen.at(key) == count);
  }
  for (const auto& [key, count] : seen) CHECK((key.first != 1 && key.first != 2));
  // The corrupt indices were seen and counted against guest 1 only.
  const auto& m = dom0.metadata();
  CHECK(m.losses.corrupt_index > 0);
  CHECK(m.losses.ring_full == 0);
  // Guest 2's session holds what it dumped before it died, reads cleanly, and says that it
  // ends early: its agent died while profiling.
  const report::Profile own = Load(host.guest_current(2));
  REQUIRE(own.problems().size() == 1);
  CHECK(own.problems()[0].find("no hvprofd is writing it (it died or was killed)") != std::string::npos);
  CHECK(own.total_samples() > 0);
  uint64_t first_half = 0;
  for (const auto& [key, count] : ProfileByMode(own)) first_half += count;
  uint64_t truth_guest2 = 0;
  for (const auto& [key, count] : expected) {
    if (key.first == 2) truth_guest2 += count;
  }
  CHECK(first_half < truth_guest2);  // it lost what came after its death, nothing of others
}

TEST_CASE("an active guest copies the perf maps of its own processes, and only its own", "[guest][jit]") {
  // A real process plays guest 1's application: the sim's guest runs on this host, so with
  // --jit=on its agent finds the process's /tmp/perf-PID.map as a guest's agent would inside
  // the guest.
  const pid_t runtime = ::fork();
  REQUIRE(runtime >= 0);
  if (runtime == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string map = fmt::format("/tmp/perf-{}.map", runtime);
  std::ofstream(map) << "7f1000000000 400 JS:*handler /srv/app.js:3\n";
  Json scenario = TestScenario("intel-arch-v4", 41);
  for (Json& domain : scenario["domains"]) {
    if (domain["id"] != 1) continue;
    domain["processes"][0]["pid"] = runtime;
    domain["workload"]["user"]["auto"]["process"] = runtime;
  }
  {
    Host host(scenario);
    REQUIRE(host.Hvprof({"--start-daemon", "--active-domains=1,2", "--event=CPU_CLK_UNHALTED:6000"}).status == 0);
    for (uint16_t guest : {1, 2}) {
      // Guest 2 leaves --jit at auto: off on the sim, whose processes are made up.
      std::vector<std::string> args = {"--start-daemon"};
      if (guest == 1) args.push_back("--jit=on");
      REQUIRE(host.GuestHvprof(guest, args).status == 0);
      REQUIRE(host.GuestHvprof(guest, {"--start"}).status == 0);
    }
    REQUIRE(host.Hvprof({"--start"}).status == 0);
    REQUIRE(host.Hvprof({"--run-sim=100ms"}).status == 0);
    REQUIRE(host.Hvprof({"--stop"}).status == 0);
    for (uint16_t guest : {1, 2}) REQUIRE(host.GuestHvprof(guest, {"--stop"}).status == 0);

    const Json first = Json::parse(std::ifstream(host.guest_current(1) + "/session.json"));
    REQUIRE(first.contains("jit"));
    REQUIRE(first["jit"].size() == 1);
    const Json& record = first["jit"][0];
    CHECK(record["domain"] == 1);
    CHECK(record["pid"] == runtime);
    CHECK(record["kind"] == "perf-map");
    std::ifstream copy(host.guest_current(1) + "/" + record["file"].get<std::string>());
    std::string line;
    std::getline(copy, line);
    CHECK(line == "7f1000000000 400 JS:*handler /srv/app.js:3");
    // Guest 2 (auto, on the sim) and dom0 copied nothing.
    CHECK_FALSE(Json::parse(std::ifstream(host.guest_current(2) + "/session.json")).contains("jit"));
    CHECK_FALSE(Json::parse(std::ifstream(host.session_root() + "/samples/current/session.json")).contains("jit"));
  }
  ::kill(runtime, SIGKILL);
  ::waitpid(runtime, nullptr, 0);
  std::filesystem::remove(map);
}
