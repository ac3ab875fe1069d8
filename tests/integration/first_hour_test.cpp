// The first hour of a new user, run as they would run it: every platform starts the hvprof-hv
// it needs and ends it again, the platform is chosen and said, repeated runs are tabled by
// their mean.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/base/files.h"
#include "hvprof/base/process.h"
#include "hvprof/control/commands.h"
#include "hvprof/control/hypervisor.h"
#include "hvprof/report/load.h"
#include "hvprof/store/session.h"
#include "host_harness.h"
#include "sim_harness.h"
#include "skip.h"

using namespace hvprof;
using hvprof::testing::Binary;
using hvprof::testing::Host;
using hvprof::testing::RunProgram;
using hvprof::testing::TempDir;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

namespace {

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in, nullptr, false);
}

// The run directory an hvprof-hv said it served, from its log.
std::string ServedRunDir(const std::string& log_path) {
  auto log = ReadFileToString(log_path);
  if (!log) return "";
  std::smatch match;
  const std::regex served("serving [0-9]+ domain sockets in (\\S+)");
  return std::regex_search(log.value(), match, served) ? match[1].str() : "";
}

bool Alive(int pid) { return ProcessRunning(pid); }

std::set<uint16_t> ScenarioDomains(const Json& scenario) {
  std::set<uint16_t> ids;
  for (const Json& domain : scenario["domains"]) ids.insert(domain["id"].get<uint16_t>());
  return ids;
}

// The domains (the idle one left out) with samples in the first run of `hvprof run --json`'s summary.
std::set<uint16_t> SampledDomains(const Json& summary) {
  std::set<uint16_t> sampled;
  for (const Json& domain : summary["runs"][0]["domains"]) {
    const uint64_t samples = domain["user"].get<uint64_t>() + domain["kernel"].get<uint64_t>() +
                             domain["hypervisor"].get<uint64_t>();
    if (samples > 0 && domain["id"].get<uint16_t>() != hvprof::kIdleDomain) sampled.insert(domain["id"].get<uint16_t>());
  }
  return sampled;
}

}  // namespace

TEST_CASE("hvprof run --platform=sim starts its own simulated machine and ends it", "[run][first-hour]") {
  TempDir dir;
  const Json scenario = TestScenario("intel-arch-v4", 11);
  dir.Write("host.json", scenario.dump());
  const std::string root = dir.File("sessions");
  auto run = RunProgram({Binary("hvprof"), "run", "--platform=sim", "--scenario=" + dir.File("host.json"),
                         "--session-dir=" + root, "--duration=100ms", "--json=" + dir.File("summary.json")});
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  const Json summary = ReadJson(dir.File("summary.json"));
  REQUIRE(!summary.is_discarded());
  // With no roles given, every guest of its own machine is profiled (passively, from dom0).
  CHECK(SampledDomains(summary) == ScenarioDomains(scenario));
  // Its machine ran in a directory of its own, gone with it.
  const std::string served = ServedRunDir(root + "/hvprof-hv.log");
  REQUIRE_FALSE(served.empty());
  CHECK_FALSE(std::filesystem::exists(served));

  // Three runs, tabled by the mean share, largest first.
  auto repeated = RunProgram({Binary("hvprof"), "run", "--platform=sim", "--scenario=" + dir.File("host.json"),
                              "--session-dir=" + root, "--duration=50ms", "--repeat=3", "--top=8"});
  REQUIRE(repeated.status == 0);
  const size_t table = repeated.out.find("Across 3 runs");
  REQUIRE(table != std::string::npos);
  std::vector<double> means;
  const std::regex row("\\n +([0-9.]+)% +[0-9.]+ +[0-9.]+% +[0-9.]+% ");
  for (std::sregex_iterator it(repeated.out.begin() + static_cast<std::ptrdiff_t>(table), repeated.out.end(), row), end;
       it != end; ++it) {
    means.push_back(std::stod((*it)[1].str()));
  }
  CHECK(means.size() == 8);
  CHECK(std::is_sorted(means.rbegin(), means.rend()));
}

TEST_CASE("hvprof run ends with its workload's exit status, and says when the workload cannot be run",
          "[run][first-hour]") {
  TempDir dir;
  dir.Write("host.json", TestScenario("intel-arch-v4", 12).dump());
  const auto run = [&](std::vector<std::string> workload) {
    std::vector<std::string> args{Binary("hvprof"), "run", "--platform=sim", "--scenario=" + dir.File("host.json"),
                                  "--session-dir=" + dir.File("sessions"), "--duration=50ms", "--top=3", "--"};
    args.insert(args.end(), workload.begin(), workload.end());
    return RunProgram(args);
  };
  const auto exited = run({"sh", "-c", "exit 3"});
  INFO(exited.out << exited.err);
  CHECK(exited.status == 3);
  CHECK(exited.out.find("session saved in") != std::string::npos);
  const std::string missing = dir.File("no-such-program");
  const auto missed = run({missing});
  INFO(missed.out << missed.err);
  CHECK(missed.status == 127);  // as a shell says it
  CHECK(missed.err.find("cannot run " + missing + ": No such file or directory") != std::string::npos);
  // The profile of the time it was tried is kept all the same.
  CHECK(missed.out.find("session saved in") != std::string::npos);
}

TEST_CASE("hvprof run finds the named default scenario", "[run][first-hour]") {
  TempDir dir;
  std::ifstream in(std::string(HVPROF_SOURCE_DIR) + "/examples/default.json");
  const Json scenario = Json::parse(in, nullptr, false);
  REQUIRE(!scenario.is_discarded());
  auto run = RunProgram({Binary("hvprof"), "run", "--platform=sim", "--session-dir=" + dir.File("s"),
                         "--duration=50ms", "--json=" + dir.File("summary.json")});
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  const Json summary = ReadJson(dir.File("summary.json"));
  std::set<uint16_t> seen;
  for (const Json& domain : summary["runs"][0]["domains"]) {
    if (domain["id"].get<uint16_t>() != hvprof::kIdleDomain) seen.insert(domain["id"].get<uint16_t>());
  }
  CHECK(seen == ScenarioDomains(scenario));

  // A name that is none: the message lists the ones there are.
  auto unknown = RunProgram({Binary("hvprof"), "run", "--platform=sim", "--scenario=no-such-host",
                             "--session-dir=" + dir.File("s"), "--duration=50ms"});
  CHECK(unknown.status == 1);
  CHECK(unknown.err.find("no scenario named 'no-such-host'") != std::string::npos);
  CHECK(unknown.err.find("there are: default") != std::string::npos);
  // --scenario is the sim's.
  auto misplaced = RunProgram({Binary("hvprof"), "run", "--platform=linux", "--scenario=default",
                               "--session-dir=" + dir.File("s")});
  CHECK(misplaced.status == 2);
  CHECK(misplaced.err.find("--scenario is for --platform=sim") != std::string::npos);
}

TEST_CASE("hvprof --start-daemon --platform=sim starts a machine that --shutdown ends", "[lifecycle][first-hour]") {
  TempDir dir;
  dir.Write("host.json", TestScenario("intel-arch-v4", 12).dump());
  const std::vector<std::string> where{"--session-dir=" + dir.File("sessions"), "--run-dir=" + dir.File("run")};
  auto hvprof = [&](std::vector<std::string> args) {
    args.insert(args.begin(), Binary("hvprof"));
    args.insert(args.end(), where.begin(), where.end());
    return RunProgram(args);
  };
  auto started = hvprof({"--start-daemon", "--platform=sim", "--scenario=" + dir.File("host.json"),
                         "--passive-domains=all"});
  INFO(started.out << started.err);
  REQUIRE(started.status == 0);
  CHECK(started.out.find("started hvprof-hv --platform=sim") != std::string::npos);
  CHECK(started.out.find("passive dom1 (guest1), dom2 (guest2), dom3 (guest3)") != std::string::npos);
  const Json record = ReadJson(dir.File("sessions") + "/" + control::kOwnHypervisorFile);
  REQUIRE(!record.is_discarded());
  const int pid = record["pid"].get<int>();
  CHECK(Alive(pid));
  CHECK(control::ServingPlatform(dir.File("run")) == "sim");

  // The same again: nothing to do, and no second machine.
  auto again = hvprof({"--start-daemon", "--platform=sim", "--scenario=" + dir.File("host.json"),
                       "--passive-domains=all"});
  CHECK(again.status == 0);
  CHECK(again.out.find("nothing to do") != std::string::npos);
  CHECK(ReadJson(dir.File("sessions") + "/" + control::kOwnHypervisorFile)["pid"].get<int>() == pid);

  REQUIRE(hvprof({"--start"}).status == 0);
  REQUIRE(hvprof({"--run-sim=50ms"}).status == 0);
  auto down = hvprof({"--shutdown"});
  INFO(down.out << down.err);
  CHECK(down.status == 0);
  CHECK(down.out.find("which --start-daemon started, has ended") != std::string::npos);
  CHECK_FALSE(Alive(pid));
  CHECK_FALSE(std::filesystem::exists(dir.File("sessions") + "/" + control::kOwnHypervisorFile));
  CHECK(control::ServingPlatform(dir.File("run")).empty());
  // --shutdown again: nothing left to end.
  auto twice = hvprof({"--shutdown"});
  CHECK(twice.status == 0);
  CHECK(twice.out.find("nothing to shut down") != std::string::npos);
}

TEST_CASE("without --platform, the serving hvprof-hv's platform, else this host's, and it is said",
          "[platform][first-hour]") {
  Host host(TestScenario("intel-arch-v4", 13));
  auto started = host.Hvprof({"--start-daemon"});
  INFO(started.out << started.err);
  REQUIRE(started.status == 0);
  CHECK(started.err.find("hvprof: --platform=sim: the hvprof-hv serving " + host.run_dir() + " runs it") !=
        std::string::npos);
  CHECK(host.Hvprof({"--shutdown"}).status == 0);

  // Nothing serves this run directory: this host's own platform (it may not be profilable
  // here; the choice is said first either way). A Xen host (HVPROF_XEN_ROOT stands in for /):
  // xen.
  TempDir dir;
  TempDir xen_root;
  std::filesystem::create_directories(xen_root.File("sys/hypervisor"));
  xen_root.Write("sys/hypervisor/type", "xen\n");
  auto on_xen = RunProgram({Binary("hvprof"), "--start-daemon", "--run-dir=" + dir.File("run"),
                            "--session-dir=" + dir.File("x")},
                           {"HVPROF_XEN_ROOT=" + xen_root.path()});
  CHECK(on_xen.err.rfind("hvprof: --platform=xen: this is a Xen host\n", 0) == 0);
  CHECK(on_xen.status != 0);  // a Xen guest without --domain, or no Xen libraries answering

  auto run = RunProgram({Binary("hvprof"), "run", "--run-dir=" + dir.File("run"), "--session-dir=" + dir.File("s"),
                         "--duration=20ms"},
                        {"HVPROF_XEN_ROOT=" + dir.File("no-such-root")});
  CHECK(run.err.rfind("hvprof run: --platform=linux: this host, through perf_event_open (no hvprof-hv serves " +
                          dir.File("run") + ", and this is not a Xen host",
                      0) == 0);
}

TEST_CASE("session start and archive draw a progress line on a terminal only", "[terminal][first-hour]") {
  if (!std::filesystem::exists("/usr/bin/script")) {
    hvprof::testing::SkipTest("script(1) is not installed (util-linux): no pseudo-terminal to test on");
    return;
  }
  Host host(TestScenario("intel-arch-v4", 14));
  const std::string where = " --run-dir=" + host.run_dir() + " --session-dir=" + host.session_root();
  // With no delay the line shows at once (by default only after 2 s), and is erased.
  auto terminal = RunProgram({"/usr/bin/script", "-qec",
                              "HVPROF_PROGRESS_DELAY_MS=0 " + Binary("hvprof") + " --start-daemon" + where, "/dev/null"});
  INFO(terminal.out);
  CHECK(terminal.out.find("\rhvprof: hvprofd is setting up profiling, seconds: 0") != std::string::npos);
  CHECK(terminal.out.find("now run `hvprof --start`") != std::string::npos);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=20ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  TempDir out;
  auto archived = RunProgram({"/usr/bin/script", "-qec",
                              "HVPROF_PROGRESS_DELAY_MS=0 " + Binary("hvprof") + " archive --session-dir=" +
                                  host.session_root() + " -o " + out.File("a.tar"),
                              "/dev/null"});
  INFO(archived.out);
  CHECK(archived.out.find("\rhvprof archive: files written: ") != std::string::npos);
  // On a pipe: never.
  auto piped = RunProgram({Binary("hvprof"), "archive", "--session-dir=" + host.session_root(), "-o", out.File("b.tar")},
                          {"HVPROF_PROGRESS_DELAY_MS=0"});
  CHECK(piped.status == 0);
  CHECK(piped.err.find("files written") == std::string::npos);
}

TEST_CASE("a host with more domains than a status page holds: all are set up, listed and reported on, with progress",
          "[terminal][first-hour][scale]") {
  if (!std::filesystem::exists("/usr/bin/script")) {
    hvprof::testing::SkipTest("script(1) is not installed (util-linux): no pseudo-terminal to test on");
    return;
  }
  // 90 guests: more than the 64 domains one status call returns.
  Json scenario = TestScenario("intel-arch-v4", 16);
  const Json guest = scenario["domains"][1];
  scenario["domains"] = Json::array({scenario["domains"][0]});
  constexpr int kGuests = 90;
  for (int id = 1; id <= kGuests; ++id) {
    Json copy = guest;
    copy["id"] = id;
    copy["name"] = "vm" + std::to_string(id);
    scenario["domains"].push_back(copy);
  }
  Host host(scenario);
  const std::string where = " --run-dir=" + host.run_dir() + " --session-dir=" + host.session_root();
  auto started = RunProgram({"/usr/bin/script", "-qec",
                             "HVPROF_PROGRESS_DELAY_MS=0 " + Binary("hvprof") + " --start-daemon --passive-domains=all" +
                                 where,
                             "/dev/null"});
  INFO(started.out);
  // hvprofd's own account of what it does, not only the seconds waited.
  CHECK(started.out.find(fmt::format("\rhvprof: hvprofd is checking the passive domains' kernel images: 0/{}", kGuests)) !=
        std::string::npos);
  // The summary names the first and the last rather than all 90.
  CHECK(started.out.find(fmt::format("passive {} domains (dom1 (vm1), dom2 (vm2) ... dom{} (vm{}))", kGuests, kGuests,
                                     kGuests)) != std::string::npos);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=50ms"}).status == 0);
  auto status = host.Hvprof({"--status"});
  REQUIRE(status.status == 0);
  INFO(status.out);
  // Every domain, past the first page, in the status.
  for (int id : {1, 63, 64, 65, kGuests}) {
    CHECK(status.out.find(fmt::format("dom{} (vm{})", id, id)) != std::string::npos);
  }
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  const Json metadata = Json::parse(std::ifstream(host.session_root() + "/samples/current/session.json"));
  CHECK(metadata["domains"].size() == kGuests + 1);
  std::set<uint64_t> sampled;
  for (const Json& ring : metadata["rings"]) {
    if (ring.value("drained", uint64_t{0}) != 0) sampled.insert(ring["owner"].get<uint64_t>());
  }
  CHECK(sampled.size() == kGuests + 1);  // every domain's rings were drained
}

TEST_CASE("Ctrl-C on the terminal ends the workload, not the machine hvprof run started", "[run][first-hour]") {
  TempDir dir;
  dir.Write("host.json", TestScenario("intel-arch-v4", 15).dump());
  const std::string root = dir.File("sessions");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setpgid(0, 0);  // a job of its own, as a shell starts it: Ctrl-C goes to the whole group
    const std::string hvprof = Binary("hvprof");
    const std::string scenario = "--scenario=" + dir.File("host.json");
    const std::string session = "--session-dir=" + root;
    const char* argv[] = {hvprof.c_str(), "run", "--platform=sim", scenario.c_str(), session.c_str(),
                          "--duration=10ms", "--", "/bin/sleep", "30", nullptr};
    ::execv(hvprof.c_str(), const_cast<char**>(argv));
    ::_exit(127);
  }
  ::setpgid(child, child);
  const store::SessionPaths paths{root};
  REQUIRE(hvprof::testing::WaitForProfiling(root));
  ::kill(-child, SIGINT);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGINT);  // the workload's status
  // The run stopped and saved its session with the machine still there, then ended it.
  std::vector<std::string> saved;
  for (const auto& entry : std::filesystem::directory_iterator(paths.samples_dir())) {
    if (entry.path().filename().string().rfind("run-", 0) == 0) saved.push_back(entry.path().string());
  }
  REQUIRE(saved.size() == 1);
  auto session = store::OpenSession(saved[0]);
  REQUIRE(session.has_value());
  CHECK(session.value().metadata.incomplete.empty());
  CHECK(session.value().metadata.samples_stored > 0);
  const std::string served = ServedRunDir(root + "/hvprof-hv.log");
  REQUIRE_FALSE(served.empty());
  CHECK_FALSE(std::filesystem::exists(served));
}

TEST_CASE("a rate (-F) on the sim: cycle counts from the scenario's clock", "[run][rate]") {
  TempDir dir;
  Json scenario = TestScenario("intel-arch-v4", 3);
  scenario["machine"]["mhz"] = 2000;
  dir.Write("host.json", scenario.dump());
  auto run = RunProgram({Binary("hvprof"), "run", "--platform=sim", "--scenario=" + dir.File("host.json"),
                         "--session-dir=" + dir.File("s"), "-F", "1000", "--duration=200ms"});
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  CHECK(run.out.find("with a sample every 2000000 events") != std::string::npos);  // 2000 MHz / 1000
  auto bad = RunProgram({Binary("hvprof"), "run", "--platform=sim", "--scenario=" + dir.File("host.json"),
                         "--session-dir=" + dir.File("s"), "-F", "1000", "-e", "LLC_MISSES", "--duration=10ms"});
  CHECK(bad.status != 0);
  CHECK(bad.err.find("LLC_MISSES counts events, not time") != std::string::npos);
}

TEST_CASE("hvprof --status says what scheduling lost, by cause, on any platform", "[first-hour][sched]") {
  hvprof::agent::AgentStatus status;
  status.profiling = true;
  status.platform = "linux";
  status.machine = "host";
  status.cpus = 2;
  status.cpu_type = "linux/software";
  status.state = "profiling";
  status.session = "/s/current";
  status.samples_stored = 10;
  status.lost = hvprof::agent::Losses{};
  hvprof::agent::SchedStatus& sched = status.sched.emplace();
  sched.source = "perf";
  sched.records = 1234;
  sched.lost.ring_full = 3;
  sched.lost.store_failed = 2;
  const std::string text = hvprof::control::FormatStatus(status);
  INFO(text);
  CHECK(text.find("sched:   1234 scheduling records from perf stored; 5 lost "
                  "(ring_full 3, store_failed 2)\n") != std::string::npos);
  // Nothing lost: no causes; and what the agent names is escaped for the terminal.
  sched.lost = {};
  sched.source = "perf\x1b[2J";
  sched.notes = {"a note\x1b]0;title\x07"};
  status.machine = "host\x1b[2J";
  hvprof::agent::DomainRingsStatus& domain = status.domains.emplace_back();
  domain.id = 1;
  domain.label = "dom1 (\x1b]0;evil\x07)";
  domain.role = "passive";
  const std::string quiet = hvprof::control::FormatStatus(status);
  INFO(quiet);
  CHECK(quiet.find(" stored; 0 lost\n") != std::string::npos);
  CHECK(quiet.find("dom1 (") != std::string::npos);
  CHECK(quiet.find('\x1b') == std::string::npos);
  CHECK(quiet.find('\x07') == std::string::npos);
  // Without --sched, no line at all.
  status.sched.reset();
  CHECK(hvprof::control::FormatStatus(status).find("sched:") == std::string::npos);
}

TEST_CASE("hvprof run beside a running hvprofd starts an hvprof-hv of its own and says so, and never joins that "
          "hvprofd's session",
          "[run][first-hour]") {
  // The "service": an hvprofd driving the profiler of the hvprof-hv serving host.run_dir().
  Host host(TestScenario("intel-arch-v4", 14));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=all"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  const pid_t service = host.AgentPid();
  REQUIRE(service > 0);

  TempDir dir;
  const Json scenario = TestScenario("intel-arch-v4", 15);
  dir.Write("host.json", scenario.dump());
  // `hvprof record` with the workload after the options, as perf record takes it.
  auto run = RunProgram({Binary("hvprof"), "record", "--platform=sim", "--run-dir=" + host.run_dir(),
                         "--scenario=" + dir.File("host.json"), "--session-dir=" + dir.File("sessions"),
                         "--duration=50ms", "--json=" + dir.File("summary.json"), "sh", "-c", "exit 0"});
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  CHECK(run.err.find("hvprof record: the hvprof-hv serving " + host.run_dir() + " profiles for another hvprofd "
                     "(session directory " + host.session_root() + "); this run starts an hvprof-hv of its own") !=
        std::string::npos);
  // The run profiled a machine of its own: every domain of its scenario.
  const Json summary = ReadJson(dir.File("summary.json"));
  REQUIRE(!summary.is_discarded());
  CHECK(SampledDomains(summary) == ScenarioDomains(scenario));
  const std::string own = ServedRunDir(dir.File("sessions") + "/hvprof-hv.log");
  CHECK_FALSE(own.empty());
  CHECK(own != host.run_dir());

  // The service profiled on, undisturbed: the same hvprofd, its session whole.
  CHECK(host.AgentPid() == service);
  CHECK(Alive(service));
  REQUIRE(host.Hvprof({"--run-sim=50ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  auto profile = report::LoadProfile(host.current(), {});
  REQUIRE(profile.has_value());
  CHECK(profile.value().total_samples() > 0);

  // Into the service's own session directory: refused, saying both ways out.
  auto joined = host.Hvprof({"run", "--platform=sim", "--duration=20ms"});
  INFO(joined.out << joined.err);
  CHECK(joined.status == 1);
  CHECK(joined.err.find("hvprofd is already running for " + host.session_root()) != std::string::npos);
  CHECK(joined.err.find("give it another (e.g. --session-dir=/tmp/hvprof") != std::string::npos);
  CHECK(joined.err.find("hvprof --shutdown --session-dir=" + host.session_root()) != std::string::npos);
  CHECK(host.Hvprof({"--shutdown"}).status == 0);
}

TEST_CASE("quiet by default: a second run into one session directory is no continued session, and the report does "
          "not say which session it chose unless asked",
          "[run][first-hour][quiet]") {
  TempDir dir;
  dir.Write("host.json", TestScenario("intel-arch-v4", 16).dump());
  const std::vector<std::string> run{Binary("hvprof"), "run", "--platform=sim", "--scenario=" + dir.File("host.json"),
                                     "--session-dir=" + dir.File("s"), "--duration=20ms"};
  REQUIRE(RunProgram(run).status == 0);
  const auto second = RunProgram(run);
  INFO(second.out << second.err);
  REQUIRE(second.status == 0);
  CHECK(second.out.find("more than one hvprofd") == std::string::npos);
  CHECK(second.out.find("Note:") == std::string::npos);
  // The current session is empty after a run; the report takes the newest saved one and its
  // header names it. Why is said under -v only.
  const auto report = RunProgram({Binary("hvprof-report"), "--session-dir=" + dir.File("s"), "-l"});
  CHECK(report.status == 0);
  CHECK(report.err.empty());
  CHECK(report.out.find("Session: " + dir.File("s") + "/samples/run-") != std::string::npos);
  const auto verbose = RunProgram({Binary("hvprof-report"), "--session-dir=" + dir.File("s"), "-l", "--verbose"});
  CHECK(verbose.err.find("the current session has no samples: reporting 'run-") != std::string::npos);

  // A daemon set up again on a session with samples goes on with it, and that is said.
  Host host(TestScenario("intel-arch-v4", 17));
  for (int daemon = 0; daemon < 2; ++daemon) {
    REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=all"}).status == 0);
    REQUIRE(host.Hvprof({"--start"}).status == 0);
    REQUIRE(host.Hvprof({"--run-sim=20ms"}).status == 0);
    REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  }
  const auto continued = host.Report({"-l"});
  INFO(continued.err);
  CHECK(continued.out.find("Note: more than one hvprofd added to this session") != std::string::npos);
}
