// hvprof-report and hvprof run on real sessions: accuracy against ground truth, bad input, and
// scripted runs that always clean up.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/base/version.h"
#include "hvprof/control/commands.h"
#include "hvprof/report/load.h"
#include "hvprof/report/views/table.h"
#include "host_harness.h"
#include "sim_harness.h"

using namespace hvprof;
using hvprof::testing::EditContext;
using hvprof::testing::Host;
using hvprof::testing::TempDir;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

TEST_CASE("symbol shares per domain match the ground truth within 1 point", "[report][accuracy]") {
  Host host(TestScenario("intel-arch-v4", 31));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest1,guest2,guest3",
                       "--event=CPU_CLK_UNHALTED:6000"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  (void)host.GroundTruth(true);
  REQUIRE(host.Hvprof({"--run-sim=200ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  const context::GroundTruth truth = host.GroundTruth(false);

  auto profile = report::LoadProfile(host.current(), {});
  REQUIRE(profile.has_value());
  REQUIRE(profile.value().total_samples() >= 200000);
  report::ReportOptions options;
  options.view = report::View::kSymbol;
  options.by_domain = true;
  auto table = report::BuildTable(profile.value(), options);
  REQUIRE(table.has_value());

  const uint32_t counter = profile.value().metadata().events[0].counter;
  // Per domain: each function's share of the domain's events (truth) and samples (report),
  // keyed by the function's address.
  std::map<uint16_t, std::map<uint64_t, double>> truth_share;
  std::map<uint16_t, double> truth_total;
  std::map<uint64_t, std::string> names;
  for (const context::TruthRow& row : truth.rows) {
    const uint16_t domain = row.domain;
    const double events = static_cast<double>(row.events.at(counter));
    const uint64_t start = row.image_address;
    truth_total[domain] += events;
    // A passive domain's user space is one unresolvable bucket (domainN-apps), as in
    // Xenoprof: its functions count in the domain's total but cannot be compared one by one.
    if (domain >= 1 && domain <= 3 && row.mode == Mode::kUser) continue;
    truth_share[domain][start] += events;
    names[start] = row.function;
  }
  std::map<uint16_t, std::map<uint64_t, double>> sampled;
  std::map<uint16_t, double> sampled_total;
  for (const report::Row& row : table.value().rows) {
    sampled[row.domain_id][row.address] += static_cast<double>(row.samples[0]);
    sampled_total[row.domain_id] += static_cast<double>(row.samples[0]);
  }
  for (auto& [domain, shares] : truth_share) {
    // The idle loop is not a domain and gets too few samples for a 1-point bound.
    if (truth_total[domain] == 0 || domain == 0x7FFF) continue;
    INFO("domain " << domain);
    REQUIRE(sampled_total[domain] > 10000);
    std::vector<std::pair<double, uint64_t>> top;
    for (auto& [start, events] : shares) top.emplace_back(events / truth_total[domain], start);
    std::sort(top.rbegin(), top.rend());
    top.resize(std::min<size_t>(top.size(), 20));
    for (const auto& [share, start] : top) {
      const double got = sampled[domain][start] / sampled_total[domain];
      INFO(names[start] << ": truth " << 100 * share << "% report " << 100 * got << "%");
      CHECK(std::fabs(got - share) <= 0.01);
    }
  }
}

TEST_CASE("Reports by process (--by-process): each process's rows together, most samples first, named by its comm", "[report][process]") {
  Host host(TestScenario("intel-arch-v4", 33));
  REQUIRE(host.Hvprof({"--start-daemon", "--event=CPU_CLK_UNHALTED:6000"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=50ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);

  const auto result = host.Report({"--by-process", "-l", "--format=json"});
  REQUIRE(result.status == 0);
  const Json report = Json::parse(result.out);
  REQUIRE(report["by_process"] == true);
  const uint64_t total = report["events"][0]["samples"];
  REQUIRE(total > 10000);
  // Rows in runs of one process each; runs ordered by the process's samples.
  std::vector<std::pair<std::string, uint64_t>> runs;
  std::map<std::string, uint64_t> user_by_process;
  uint64_t sum = 0;
  for (const Json& row : report["rows"]) {
    const std::string process = row["process"];
    const uint64_t samples = row["samples"][0];
    sum += samples;
    if (runs.empty() || runs.back().first != process) {
      for (const auto& run : runs) CHECK(run.first != process);  // never split
      runs.emplace_back(process, 0);
    }
    runs.back().second += samples;
    if (row["pid"].is_null()) {
      CHECK(process == "(no process)");
    } else {
      CHECK(process.ends_with(fmt::format(" ({})", row["pid"].get<uint32_t>())));
    }
    if (row["image"] == "libc.so.6" || row["image"] == "libz.so.1") user_by_process[process] += samples;
  }
  CHECK(sum == total);
  for (size_t i = 1; i < runs.size(); ++i) CHECK(runs[i - 1].second >= runs[i].second);
  // dom0 is active: its application's user samples are all in its process, named as the
  // scenario names it.
  CHECK(user_by_process["dom0-app (100)"] > 0);

  // The same split per domain and mode as the plain report: dom0's user samples.
  const Json plain = Json::parse(host.Report({"--domain=dom0", "--mode=user", "--format=json"}).out);
  const Json split = Json::parse(host.Report({"--domain=dom0", "--mode=user", "--by-process", "--format=json"}).out);
  uint64_t in_app = 0;
  for (const Json& row : split["rows"]) {
    if (row["process"] == "dom0-app (100)") in_app += row["samples"][0].get<uint64_t>();
  }
  CHECK(in_app == plain["events"][0]["samples"].get<uint64_t>());

  // CSV names the columns; the stack views and --diff refuse it.
  const auto csv = host.Report({"--by-process", "--format=csv"});
  REQUIRE(csv.status == 0);
  CHECK(csv.out.starts_with("pid,process,image,"));
  CHECK(host.Report({"--by-process", "--format=folded"}).status == 2);
}

namespace {

// A session whose dom0 process maps a copy of libz that the test can remove or replace.
struct MovableImageSession {
  explicit MovableImageSession(const TempDir& dir) {
    copy = dir.File("libz-copy.so.1");
    std::filesystem::copy_file(testing::kLibz, copy);
    Json scenario = TestScenario("intel-arch-v4", 32);
    scenario["domains"][0]["processes"][0]["mappings"][0]["path"] = copy;
    scenario["domains"][0]["workload"]["user"]["auto"]["image"] = copy;
    host = std::make_unique<Host>(scenario);
    REQUIRE(host->Hvprof({"--start-daemon", "--passive-domains=2"}).status == 0);
    REQUIRE(host->Hvprof({"--start"}).status == 0);
    // Several chunks, so that damage to one leaves others to read.
    for (int i = 0; i < 3; ++i) {
      REQUIRE(host->Hvprof({"--run-sim=40ms"}).status == 0);
      REQUIRE(host->Hvprof({"--dump"}).status == 0);
    }
    REQUIRE(host->Hvprof({"--shutdown"}).status == 0);
  }
  std::string copy;
  std::unique_ptr<Host> host;
};

bool ValidJson(const std::string& text) {
  return !Json::parse(text, nullptr, false).is_discarded();
}

}  // namespace

TEST_CASE("hvprof-report on bad input: clear errors, honest exit codes, whole JSON", "[report][bad-input]") {
  TempDir dir;
  MovableImageSession session(dir);
  Host& host = *session.host;

  SECTION("a complete session reports cleanly") {
    auto result = host.Report({"-l"});
    INFO(result.err);
    CHECK(result.status == 0);
    CHECK(result.out.find("libz-copy.so.1") != std::string::npos);
    auto json = host.Report({"-l", "--format=json"});
    CHECK(json.status == 0);
    CHECK(ValidJson(json.out));
  }
  SECTION("no session") {
    auto result = testing::RunProgram({testing::Binary("hvprof-report"), "--session-dir=" + dir.File("nowhere")});
    CHECK(result.status == 1);
    CHECK(result.err.find("no session at") != std::string::npos);
    CHECK(result.out.empty());
  }
  SECTION("a session with 0 samples of the event is not 'no session'") {
    const std::string empty = dir.File("empty");
    std::filesystem::create_directories(empty);
    std::filesystem::copy_file(host.current() + "/session.json", empty + "/session.json");
    auto result = testing::RunProgram({testing::Binary("hvprof-report"), empty});
    CHECK(result.out.find("No samples of CPU_CLK_UNHALTED") != std::string::npos);
    CHECK(result.err.find("no session") == std::string::npos);
  }
  SECTION("a damaged chunk: what is readable is reported, the damage is named") {
    const std::string samples = host.current() + "/samples.hvs";
    std::filesystem::remove(host.current() + "/aggregate.hva");
    {
      std::fstream file(samples, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(64 + 48 + 100);  // inside the first chunk's payload
      file.put('\x5a');
      file.put('\xa5');
    }
    auto text = host.Report({});
    CHECK(text.status == 3);
    CHECK(text.out.find("fails its checksum") != std::string::npos);
    auto json = host.Report({"-l", "--format=json"});
    CHECK(json.status == 3);
    REQUIRE(ValidJson(json.out));
    const Json parsed = Json::parse(json.out);
    CHECK(!parsed["problems"].empty());
    CHECK(!parsed["rows"].empty());
  }
  SECTION("an image that is gone") {
    std::filesystem::remove(session.copy);
    auto result = host.Report({"-l"});
    CHECK(result.status == 3);
    CHECK(result.out.find("libz-copy.so.1 could not be symbolized") != std::string::npos);
    CHECK(result.out.find("(no symbols)") != std::string::npos);  // its samples are still counted
  }
  SECTION("mappings that are not files (memfd, deleted) are named, not opened") {
    size_t replaced = 0;
    EditContext(host.current(), [&](context::ContextEvent& event) {
      if (event.kind == context::ContextKind::kMapping && event.path == session.copy) {
        event.path = "/memfd:jit (deleted)";
        ++replaced;
      }
    });
    REQUIRE(replaced > 0);
    // The aggregate counted the code by the image it was: the raw samples are read with the edit.
    std::filesystem::remove(host.current() + "/aggregate.hva");
    auto result = host.Report({"-l"});
    INFO(result.out);
    CHECK(result.status == 0);  // nothing to open is not an incomplete report
    CHECK(result.out.find("memfd:jit (deleted)") != std::string::npos);
    CHECK(result.out.find("could not be symbolized") == std::string::npos);
  }
  SECTION("a forged aggregate cannot make counts wrap or exceed what was stored") {
    const std::string path = host.current() + "/aggregate.hva";
    auto honest = host.Report({"-l", "--format=json"});
    REQUIRE(honest.status == 0);
    const uint64_t honest_total = Json::parse(honest.out)["events"][0]["samples"].get<uint64_t>();
    auto aggregate = store::ReadAggregate(path);
    REQUIRE(aggregate.has_value());
    REQUIRE(aggregate.value().entries.size() >= 2);
    // Two counts whose sum wraps to a small number, and the CRC and size kept right.
    aggregate.value().entries[0].count = UINT64_MAX - 1;
    aggregate.value().entries[1].count = 5;
    aggregate.value().time_slices = 0;  // which would no longer add up to the counts
    aggregate.value().slice_counts.clear();
    REQUIRE(store::WriteAggregate(path, aggregate.value()).has_value());
    auto forged = host.Report({"-l", "--format=json"});
    INFO(forged.out);
    CHECK(forged.status == 3);  // printed, but says it is incomplete
    const Json parsed = Json::parse(forged.out);
    CHECK(parsed["events"][0]["samples"].get<uint64_t>() == honest_total);  // the raw samples were used
    CHECK(forged.out.find("more than 2^64") != std::string::npos);
  }
  SECTION("an aggregate that counts fewer samples than session.json says were stored is damaged") {
    // Issue 38: only one that counted more was refused, so a cache could hide samples (shift
    // the shares) and be believed.
    const std::string path = host.current() + "/aggregate.hva";
    auto honest = host.Report({"-l", "--format=json"});
    REQUIRE(honest.status == 0);
    const Json honest_json = Json::parse(honest.out);
    const uint64_t honest_total = honest_json["events"][0]["samples"].get<uint64_t>();
    auto aggregate = store::ReadAggregate(path);
    REQUIRE(aggregate.has_value());
    REQUIRE(aggregate.value().entries.size() >= 2);
    REQUIRE(aggregate.value().entries[0].count >= 1);
    // The first row's samples gone, the rest kept; the file stays well formed.
    aggregate.value().samples -= aggregate.value().entries[0].count;
    aggregate.value().entries.erase(aggregate.value().entries.begin());
    aggregate.value().has_stacks = false;
    aggregate.value().stacks.clear();
    aggregate.value().time_slices = 0;
    aggregate.value().slice_counts.clear();
    REQUIRE(store::WriteAggregate(path, aggregate.value()).has_value());
    auto forged = host.Report({"-l", "--format=json"});
    INFO(forged.out);
    CHECK(forged.status == 3);
    const Json parsed = Json::parse(forged.out);
    CHECK(parsed["events"][0]["samples"].get<uint64_t>() == honest_total);  // the raw samples were used
    CHECK(parsed["rows"].size() == honest_json["rows"].size());
    CHECK(forged.out.find("aggregate.hva is damaged") != std::string::npos);
  }
  SECTION("names chosen by the profiled code cannot act on the terminal or forge rows") {
    const std::string metadata = host.current() + "/session.json";
    auto text = ReadFileToString(metadata);
    REQUIRE(text.has_value());
    Json edited = Json::parse(text.value());
    const std::string hostile = "/tmp/\x1b[2J\x1b]0;owned\x07\nFORGED 99999 row\r\xc2\x9b";
    bool renamed = false;
    for (Json& domain : edited["domains"]) {
      if (domain["id"] == 0) domain["name"] = "dom0\x1b[31m\nFORGED domain";
    }
    EditContext(host.current(), [&](context::ContextEvent& event) {
      if (event.kind == context::ContextKind::kMapping && event.path == session.copy) event.path = hostile, renamed = true;
    });
    REQUIRE(renamed);
    std::filesystem::remove(host.current() + "/aggregate.hva");
    std::ofstream(metadata, std::ios::trunc) << edited.dump(1);
    for (const std::vector<std::string>& args : {std::vector<std::string>{"-l"}, {"-l", "--by-domain"}}) {
      auto result = host.Report(args);
      INFO(result.out);
      CHECK(result.out.find('\x1b') == std::string::npos);
      CHECK(result.out.find('\x07') == std::string::npos);
      CHECK(result.out.find('\r') == std::string::npos);
      CHECK(result.out.find("\xc2\x9b") == std::string::npos);
      CHECK(result.out.find("\nFORGED") == std::string::npos);
      CHECK(result.out.find("\\x1b[2J\\x1b]0;owned\\x07\\x0aFORGED 99999 row\\x0d\\xc2\\x9b") != std::string::npos);
    }
    auto csv = host.Report({"-l", "--format=csv"});
    CHECK(csv.out.find('\x1b') == std::string::npos);
    CHECK(csv.out.find("\nFORGED") == std::string::npos);
    auto json = host.Report({"-l", "--format=json"});
    REQUIRE(ValidJson(json.out));
    // JSON keeps the name exactly, escaped as JSON escapes it.
    CHECK(json.out.find("\\u001b[2J") != std::string::npos);
  }
  SECTION("-o never replaces a device node or a link") {
    if (::access("/dev/full", W_OK) == 0) {
      auto full = host.Report({"-l", "-o", "/dev/full"});
      CHECK(full.status == 1);
      CHECK(full.err.find("/dev/full") != std::string::npos);
      struct stat st {};
      REQUIRE(::lstat("/dev/full", &st) == 0);
      CHECK(S_ISCHR(st.st_mode));
    }
    dir.Write("victim", "precious\n");
    REQUIRE(::symlink(dir.File("victim").c_str(), dir.File("link").c_str()) == 0);
    auto link = host.Report({"-l", "-o", dir.File("link")});
    CHECK(link.status == 1);
    CHECK(link.err.find("is a symbolic link") != std::string::npos);
    std::ifstream victim(dir.File("victim"));
    std::string line;
    std::getline(victim, line);
    CHECK(line == "precious");
    auto to_file = host.Report({"-l", "-o", dir.File("report.txt")});
    CHECK(to_file.status == 0);
    CHECK(std::filesystem::file_size(dir.File("report.txt")) > 0);
  }
  SECTION("an image that changed since the session") {
    std::filesystem::remove(session.copy);
    std::filesystem::copy_file(testing::kLibc, session.copy);
    auto result = host.Report({"-l"});
    CHECK(result.status == 3);
    CHECK(result.out.find("is not the image that was profiled") != std::string::npos);
  }
  SECTION("unknown option values") {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--format=xml"}, {"--sort=nonsense"}, {"--mode=guest"}, {"--merge=cpu"},
          {"--demangle=loud"}, {"--threshold=200"}, {"--domain=nosuch"}, {"--event=NOPE"}, {"--bogus"}}) {
      auto result = host.Report(args);
      INFO(args[0] << " -> " << result.err);
      CHECK(result.status == 2);
      CHECK(result.out.empty());
      CHECK(!result.err.empty());
    }
  }
}

TEST_CASE("hvprof run returns the command's status and leaves no daemon behind", "[run]") {
  Host host(TestScenario("intel-arch-v4", 33));
  const store::SessionPaths paths{host.session_root()};
  TempDir dir;
  SECTION("success and failure of the workload") {
    auto ok = host.Hvprof({"run", "--passive-domains=2", "--duration=100ms", "--json=" + dir.File("run.json"),
                           "--", "/bin/true"});
    INFO(ok.err);
    CHECK(ok.status == 0);
    CHECK(ok.out.find("session saved in") != std::string::npos);
    CHECK_FALSE(control::FindAgent(paths).running);
    std::ifstream json_file(dir.File("run.json"));
    const Json summary = Json::parse(json_file, nullptr, false);
    REQUIRE(!summary.is_discarded());
    CHECK(summary["runs"][0]["exit_status"] == 0);
    CHECK(summary["runs"][0]["samples"].get<uint64_t>() > 0);
    CHECK(!summary["runs"][0]["top_symbols"].empty());

    // The current session is empty after a run: a bare report takes the run's session, and its
    // header says which (why, under --verbose only).
    auto current = host.Report({});
    CHECK(current.err.find("the current session has no samples") == std::string::npos);
    CHECK(current.out.find("Session: " + host.session_root() + "/samples/run-") != std::string::npos);
    CHECK(host.Report({"--verbose"}).err.find("the current session has no samples: reporting 'run-") !=
          std::string::npos);

    auto failed = host.Hvprof({"run", "--duration=50ms", "--", "/bin/sh", "-c", "exit 42"});
    CHECK(failed.status == 42);
    CHECK_FALSE(control::FindAgent(paths).running);
    auto missing = host.Hvprof({"run", "--duration=50ms", "--", "/nonexistent/program"});
    CHECK(missing.status == 127);
    CHECK_FALSE(control::FindAgent(paths).running);
  }
  SECTION("repeats report the spread") {
    auto repeated = host.Hvprof({"run", "--passive-domains=1", "--duration=50ms", "--repeat=3", "--top=3"});
    CHECK(repeated.status == 0);
    CHECK(repeated.out.find("Across 3 runs") != std::string::npos);
    CHECK_FALSE(control::FindAgent(paths).running);
  }
  SECTION("Ctrl-C during the workload") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      const std::string run_dir = "--run-dir=" + host.run_dir();
      const std::string session = "--session-dir=" + host.session_root();
      const std::string hvprof = testing::Binary("hvprof");
      const char* argv[] = {hvprof.c_str(), "run", run_dir.c_str(), session.c_str(), "--duration=10ms",
                            "--", "/bin/sleep", "30", nullptr};
      ::execv(hvprof.c_str(), const_cast<char**>(argv));
      ::_exit(127);
    }
    // Wait until the workload runs (profiling is on), then interrupt.
    REQUIRE(testing::WaitForProfiling(host.session_root()));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(child, SIGINT);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + SIGINT);
    CHECK_FALSE(control::FindAgent(paths).running);
  }
}

// help2man makes the man pages from --help and --version (cmake/HvprofInstall.cmake): the
// version line must be GNU's "NAME (PACKAGE) VERSION" for it.
TEST_CASE("Every program's --version names it and hvprof's version, as help2man reads it", "[cli]") {
  for (const char* program : {"hvprof", "hvprof-report", "hvprof-hv", "hvprofd", "hvprof-symbolize"}) {
    auto result = testing::RunProgram({testing::Binary(program), "--version"});
    INFO(program << ": " << result.err);
    CHECK(result.status == 0);
    CHECK(result.out == std::string(program) + " (hvprof) " + kVersion + "\n");
    CHECK(result.err.empty());
  }
}

// Not named "-h ...": CTest would pass the name to Catch as its -h, and the test would not run.
TEST_CASE("Every program takes -h as help, never as an action", "[cli][safety]") {
  for (const char* program : {"hvprof", "hvprof-report", "hvprof-hv", "hvprofd", "hvprof-symbolize"}) {
    for (const char* flag : {"-h", "--help"}) {
      auto result = testing::RunProgram({testing::Binary(program), flag});
      INFO(program << " " << flag << ": " << result.err);
      CHECK(result.status == 0);
      CHECK(result.out.find("Usage") != std::string::npos);
    }
  }
  // opcontrol's -h (shutdown) is gone: with a session directory and no daemon, `hvprof -h`
  // only prints help; an action would have complained that no daemon runs.
  TempDir dir;
  auto help = testing::RunProgram({testing::Binary("hvprof"), "-h", "--session-dir=" + dir.path()});
  CHECK(help.status == 0);
  CHECK(help.out.find("Usage") != std::string::npos);
  CHECK(help.err.empty());
}
