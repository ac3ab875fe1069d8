// hvprof-report as a user runs it, for issue 24's "first hour": which session a bare report
// takes and --list; the idle loop counted apart; one name per domain; headers that are never
// cut; each note once; colour only where wanted; a progress line only on a terminal.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/store/session.h"
#include "host_harness.h"
#include "skip.h"
#include "sim_harness.h"

using namespace hvprof;
using hvprof::testing::Binary;
using hvprof::testing::CommandResult;
using hvprof::testing::Host;
using hvprof::testing::RunProgram;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

namespace {

// One profiled stretch of the simulated host, stopped.
void Profile(Host& host, const std::string& events, const std::string& run = "--run-sim=100ms") {
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest1,guest2,guest3", events}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({run}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// hvprof-report under a pseudo-terminal (script(1)), stdout and stderr both on it.
CommandResult OnTerminal(const Host& host, const std::string& environment, const std::string& args) {
  const std::string command = environment + " " + Binary("hvprof-report") + " --session-dir=" + host.session_root() +
                              " " + args;
  return RunProgram({"/usr/bin/script", "-qec", command, "/dev/null"});
}

}  // namespace

TEST_CASE("a bare report takes the newest session with samples and says which under --verbose, and --list shows "
          "them all",
          "[report][sessions]") {
  Host host(TestScenario("intel-arch-v4", 41));
  Profile(host, "--event=CPU_CLK_UNHALTED:6000");
  REQUIRE(host.Hvprof({"--save=older"}).status == 0);
  Profile(host, "--event=CPU_CLK_UNHALTED:6000");
  REQUIRE(host.Hvprof({"--save=newer"}).status == 0);
  // The current session is fresh and empty now.
  const CommandResult bare = host.Report({"--format=json"});
  REQUIRE(bare.status == 0);
  CHECK(Json::parse(bare.out)["session"]["directory"].get<std::string>().ends_with("/samples/newer"));
  CHECK(bare.err.empty());  // the output names the session; why it was chosen is said under --verbose
  const CommandResult verbose = host.Report({"--format=json", "--verbose"});
  CHECK(Count(verbose.err, "'newer'") == 1);
  CHECK(verbose.err.find("--list") != std::string::npos);

  const Json list = Json::parse(host.Report({"--list", "--format=json"}).out);
  std::vector<std::string> names;
  std::string chosen;
  for (const Json& session : list["sessions"]) {
    names.push_back(session["name"]);
    if (session["chosen"] == true) chosen = session["name"];
    CHECK(session["platform"] == "sim");
    CHECK(session["state"] == "complete");
    CHECK(session["lost"] == 0);
    if (session["name"] != "current") CHECK(session["samples"].get<uint64_t>() > 0);
  }
  CHECK(names == std::vector<std::string>{"older", "newer", "current"});
  CHECK(chosen == "newer");
  const CommandResult text = host.Report({"--list"});
  REQUIRE(text.status == 0);
  CHECK(std::regex_search(text.out, std::regex(R"(\n\* newer +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +sim )")));
  CHECK(text.out.find("\x1b[") == std::string::npos);

  // Once the current session has samples, it is the one, without a note.
  Profile(host, "--event=CPU_CLK_UNHALTED:6000");
  const CommandResult current = host.Report({"--format=json"});
  REQUIRE(current.status == 0);
  CHECK(Json::parse(current.out)["session"]["directory"].get<std::string>().ends_with("/samples/current"));
  CHECK(current.err.find("newest saved") == std::string::npos);
}

TEST_CASE("the idle loop is counted apart: the header's idle share matches the ground truth",
          "[report][idle][accuracy]") {
  Host host(TestScenario("intel-arch-v4", 43));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest1,guest2,guest3", "--event=CPU_CLK_UNHALTED:6000"})
              .status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);
  REQUIRE(host.Hvprof({"--run-sim=200ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  const context::GroundTruth truth = host.GroundTruth(false);

  const CommandResult json = host.Report({"-l", "--format=json"});
  REQUIRE(json.status == 0);
  const Json report = Json::parse(json.out);
  REQUIRE(report["idle"]["included"] == false);
  const Json& idle = report["idle"]["events"][0];
  const size_t counter = idle["counter"].get<size_t>();
  // The truth: overflows (samples taken) of the idle domain, of all, and per CPU.
  uint64_t truth_all = 0, truth_idle = 0;
  std::map<uint16_t, uint64_t> truth_idle_cpu;
  for (const context::TruthRow& row : truth.rows) {
    const uint64_t overflows = row.overflows.at(counter);
    truth_all += overflows;
    if (row.domain == kIdleDomain) {
      truth_idle += overflows;
      truth_idle_cpu[row.vcpu] += overflows;
    }
  }
  REQUIRE(truth_idle > 1000);
  const double truth_percent = 100.0 * static_cast<double>(truth_idle) / static_cast<double>(truth_all);
  // Samples are the overflows that reached the session: within half a point of the truth.
  CHECK(idle["percent"].get<double>() == Approx(truth_percent).margin(0.5));
  // Per CPU: each CPU's idle samples within 2% (and 20 samples) of its idle overflows.
  REQUIRE(idle["cpus"].size() == truth.cpus);
  for (const Json& cpu : idle["cpus"]) {
    const double expected = static_cast<double>(truth_idle_cpu[cpu["cpu"].get<uint16_t>()]);
    INFO("cpu " << cpu["cpu"]);
    CHECK(cpu["idle"].get<double>() == Approx(expected).epsilon(0.02).margin(20));
  }
  // The rows and shares leave it out: nothing of the idle domain or an idle function, and the
  // shares are of the rest.
  const uint64_t shown = report["events"][0]["samples"].get<uint64_t>();
  CHECK(shown + idle["idle"].get<uint64_t>() == idle["samples"].get<uint64_t>());
  for (const Json& row : report["rows"]) CHECK(row["symbol"] != "mwait_idle");

  // The text header says it, and --include-idle gives the rows as they were: every sample in
  // the shares, the idle loop's functions among the rows.
  const CommandResult text = host.Report({"-l", "-t", "1"});
  CHECK(std::regex_search(text.out, std::regex(R"(CPU idle \d+\.\d% of CPU_CLK_UNHALTED samples \(\d+ of \d+\); per CPU: cpu0 )")));
  CHECK(text.out.find("--include-idle") != std::string::npos);
  const Json kept = Json::parse(host.Report({"-l", "--format=json", "--include-idle"}).out);
  CHECK(kept["idle"]["included"] == true);
  CHECK(kept["events"][0]["samples"] == idle["samples"]);
  CHECK(kept["events"][0]["idle"] == 0);
  uint64_t idle_rows = 0;
  for (const Json& row : kept["rows"]) {
    if (row["symbol"] == "mwait_idle" || row["symbol"] == "idle_loop") idle_rows += row["samples"][0].get<uint64_t>();
  }
  CHECK(idle_rows == idle["idle"].get<uint64_t>());
  // --domain=idle asks for the idle loop by name: it is kept.
  const Json only_idle = Json::parse(host.Report({"-l", "--format=json", "--domain=idle"}).out);
  CHECK(only_idle["events"][0]["samples"] == idle["idle"]);
  // The stack views leave it out too.
  const CommandResult folded = host.Report({"--format=folded"});
  CHECK(("\n" + folded.out).find("\nidle;") == std::string::npos);
  CHECK(("\n" + host.Report({"--format=folded", "--include-idle"}).out).find("\nidle;") != std::string::npos);
}

TEST_CASE("reports name each domain one way, as --status does", "[report][names]") {
  Host host(TestScenario("intel-arch-v4", 45));
  Profile(host, "--event=CPU_CLK_UNHALTED:6000");
  const CommandResult status = host.Hvprof({"--status"});
  REQUIRE(status.status == 0);
  const Json json = Json::parse(host.Report({"-l", "--by-domain", "--format=json"}).out);
  const CommandResult text = host.Report({"-l", "--by-domain"});
  std::set<std::string> names;
  for (const Json& domain : json["domains"]) names.insert(domain["name"]);
  REQUIRE(names == std::set<std::string>{"dom0", "dom1 (guest1)", "dom2 (guest2)", "dom3 (guest3)"});
  for (const Json& row : json["rows"]) CHECK(names.count(row["domain"]) == 1);
  for (const std::string& name : names) {
    INFO(name);
    CHECK(status.out.find("  " + name + " ") != std::string::npos);
    CHECK(text.out.find("  " + name + " ") != std::string::npos);
  }
  // --domain takes the name reports print.
  const Json one = Json::parse(host.Report({"-l", "--format=json", "--domain=dom2"}).out);
  REQUIRE(one["domains"].size() == 1);
  CHECK(one["domains"][0]["name"] == "dom2 (guest2)");
}

TEST_CASE("event headers are never cut, and each note is printed once", "[report][layout]") {
  Host host(TestScenario("intel-arch-v4", 47));
  Profile(host, "--event=UNHALTED_REFERENCE_CYCLES:60000");
  const CommandResult text = host.Report({"-l", "-t", "1"});
  REQUIRE(text.status == 0);
  const std::string label = "UNHALTED_REFERENCE_CYCLES:60000|";
  const size_t at = text.out.find("\n" + label);
  REQUIRE(at != std::string::npos);
  CHECK(text.out.find("...|") == std::string::npos);
  // The units line below has its bar under the heading's.
  const size_t units = text.out.find('\n', at + 1) + 1;
  CHECK(text.out.substr(units, label.size()).back() == '|');

  // A note said twice in the session (an older hvprofd's continued sessions did) is shown once.
  const std::string metadata_path = host.current() + "/session.json";
  Json metadata = Json::parse(ReadFileToString(metadata_path, 64 << 20, Links::kRefuse).value());
  metadata["notes"] = Json::array({"a note said twice", "a note said twice", "another note"});
  REQUIRE(WriteFileAtomically(metadata_path, metadata.dump()).has_value());
  const CommandResult again = host.Report({"-l", "-t", "1"});
  CHECK(Count(again.out, "Note: a note said twice\n") == 1);
  CHECK(Count(again.out, "Note: another note\n") == 1);
  const Json json = Json::parse(host.Report({"--format=json"}).out);
  CHECK(json["notes"] == Json::array({"a note said twice", "another note"}));
}

TEST_CASE("colour only when asked, never on a pipe", "[report][terminal]") {
  Host host(TestScenario("intel-arch-v4", 49));
  Profile(host, "--event=CPU_CLK_UNHALTED:6000");
  const std::string escape = "\x1b[";
  CHECK(host.Report({"-l"}).out.find(escape) == std::string::npos);  // a pipe
  CHECK(host.Report({"-l", "--color=always"}).out.find(escape) != std::string::npos);
  CHECK(host.Report({"-l", "--color=never"}).out.find(escape) == std::string::npos);
  CHECK(host.Report({"-l", "--color=sometimes"}).status == 2);
  // No progress line on a pipe, even with no delay.
  const CommandResult piped = RunProgram({Binary("hvprof-report"), "--session-dir=" + host.session_root(), "-l"},
                                         {"HVPROF_PROGRESS_DELAY_MS=0"});
  CHECK(piped.err.find("symbolizing") == std::string::npos);
  CHECK(piped.out.find("symbolizing") == std::string::npos);
}

TEST_CASE("colour and a progress line on a terminal", "[report][terminal]") {
  if (!std::filesystem::exists("/usr/bin/script") &&
      hvprof::testing::SkipTest("script(1) is not installed (util-linux): no pseudo-terminal to test on")) {
    return;
  }
  Host host(TestScenario("intel-arch-v4", 49));
  Profile(host, "--event=CPU_CLK_UNHALTED:6000");
  const std::string escape = "\x1b[";
  CHECK(OnTerminal(host, "", "-l").out.find(escape) != std::string::npos);
  CHECK(OnTerminal(host, "NO_COLOR=1", "-l").out.find(escape) == std::string::npos);
  CHECK(OnTerminal(host, "", "-l --color=never").out.find(escape) == std::string::npos);

  // With no delay, the symbolization's progress line shows on a terminal and is erased.
  const CommandResult terminal = OnTerminal(host, "HVPROF_PROGRESS_DELAY_MS=0", "-l --color=never");
  CHECK(terminal.out.find("\rhvprof-report: symbolizing images: ") != std::string::npos);
  // By default (two seconds' grace) a quick report shows none, even on a terminal.
  CHECK(OnTerminal(host, "", "-l --color=never").out.find("symbolizing") == std::string::npos);
}

TEST_CASE("narrowed by --pid and --comm, every view shows one process's samples, as the ground truth counts them",
          "[report][process]") {
  Host host(TestScenario("intel-arch-v4", 43));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest1,guest2,guest3", "--event=CPU_CLK_UNHALTED:6000"})
              .status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);
  REQUIRE(host.Hvprof({"--run-sim=100ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  const context::GroundTruth truth = host.GroundTruth(false);
  auto opened = store::OpenSession(host.current());
  REQUIRE(opened.has_value());
  const uint32_t counter = opened.value().metadata.events.at(0).counter;
  // dom0's user mode is its one process, pid 100 ("dom0-app"), running libc.
  uint64_t expected = 0;
  for (const context::TruthRow& row : truth.rows) {
    if (row.domain == 0 && row.mode == Mode::kUser) expected += row.overflows.at(counter);
  }
  REQUIRE(expected > 0);
  const auto table_sum = [&](const std::vector<std::string>& args) {
    std::vector<std::string> all{"-l", "--format=json", "--threshold=0"};
    all.insert(all.end(), args.begin(), args.end());
    const CommandResult report = host.Report(all);
    INFO(report.err);
    REQUIRE(report.status == 0);
    const Json parsed = Json::parse(report.out);
    uint64_t sum = 0;
    for (const Json& row : parsed["rows"]) sum += row["samples"][0].get<uint64_t>();
    return sum;
  };
  CHECK(table_sum({"--pid=100", "--mode=user"}) == expected);
  CHECK(table_sum({"--comm=dom0-app", "--mode=user"}) == expected);
  CHECK(table_sum({"--pid=100", "--mode=user", "--by-process"}) == expected);
  // The passive guests' processes are not pid 100's: with the pid, every user sample is dom0's.
  CHECK(table_sum({"--pid=100"}) == table_sum({"--pid=100", "--domain=dom0"}));
  CHECK(table_sum({"--pid=4242"}) == 0);
  // Stacks, folded: the same samples.
  const CommandResult folded = host.Report({"--format=folded", "--pid=100", "--mode=user"});
  REQUIRE(folded.status == 0);
  uint64_t stacked = 0;
  std::istringstream lines(folded.out);
  for (std::string line; std::getline(lines, line);) {
    CHECK(line.rfind("dom0;", 0) == 0);
    stacked += std::stoull(line.substr(line.rfind(' ') + 1));
  }
  CHECK(stacked == expected);
  // One thread: the simulated process runs one, whose tid is its pid.
  const CommandResult thread = host.Report({"--format=folded", "--tid=100", "--mode=user"});
  REQUIRE(thread.status == 0);
  uint64_t threaded = 0;
  std::istringstream thread_lines(thread.out);
  for (std::string line; std::getline(thread_lines, line);) threaded += std::stoull(line.substr(line.rfind(' ') + 1));
  CHECK(threaded == expected);
  // Process frames at the root: dom0's user stacks all sit under its one process.
  const CommandResult rooted = host.Report({"--format=folded", "--stack-root=process", "--domain=dom0", "--mode=user"});
  REQUIRE(rooted.status == 0);
  uint64_t under_process = 0;
  std::istringstream rooted_lines(rooted.out);
  for (std::string line; std::getline(rooted_lines, line);) {
    CHECK(line.rfind("dom0;dom0-app (100);[user];", 0) == 0);
    under_process += std::stoull(line.substr(line.rfind(' ') + 1));
  }
  CHECK(under_process == expected);
  // A name no process had is an error that says where to look.
  const CommandResult unknown = host.Report({"-l", "--comm=no-such-app"});
  CHECK(unknown.status == 2);
  CHECK(unknown.err.find("no process of the session") != std::string::npos);
}
