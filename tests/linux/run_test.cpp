// `hvprof run --platform=linux` as a user runs it: the real programs (hvprof, its own
// hvprof-hv, hvprofd, hvprof-report) sampling this host. Skipped, with perf's reason, where
// perf_event_open is not usable.
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "live_support.h"
#include "hvprof/store/session.h"
#include "hvprof/store/windows.h"
#include "run_support.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::testing::Child;
using hvprof::testing::CommandResult;
using hvprof::testing::LinuxRun;
using hvprof::testing::PerfUsable;
using Json = nlohmann::json;

namespace {

const std::string kFixture = HVPROF_LINUX_HOTSPOTS;
const std::map<std::string, double> kDesigned = {{"hot_fifty", 0.5}, {"hot_thirty", 0.3}, {"hot_twenty", 0.2}};

// Samples of the fixture's hot functions in `report`'s rows (of `domain` when given).
std::map<std::string, double> HotSamples(const Json& report, const std::string& domain = "") {
  std::map<std::string, double> samples;
  for (const Json& row : report["rows"]) {
    if (row["image"] != "linux_hotspots" || !kDesigned.contains(row["symbol"].get<std::string>())) continue;
    if (!domain.empty() && row["domain"] != domain) continue;
    CHECK(row["resolved"] == true);
    samples[row["symbol"].get<std::string>()] += row["samples"][0].get<double>();
  }
  return samples;
}

// Each hot function's share of the three, against its design. With n samples a share's
// standard error is below 0.5/sqrt(n), 0.003 at 30k; the tolerance adds the loop's own
// overhead outside the three functions' bodies.
void CheckShares(const std::map<std::string, double>& samples, double tolerance) {
  double total = 0;
  for (const auto& [name, count] : samples) total += count;
  REQUIRE(total > 2000);
  for (const auto& [name, designed] : kDesigned) {
    const double share = samples.contains(name) ? samples.at(name) / total : 0;
    INFO(fmt::format("{}: {:.4f} of {:.0f} samples, designed {:.2f}", name, share, total, designed));
    CHECK(std::abs(share - designed) < tolerance);
  }
}

}  // namespace

TEST_CASE("hvprof run --platform=linux: the fixture's hot functions show their designed shares",
          "[linux][live][run]") {
  if (!PerfUsable()) return;
  LinuxRun run;
  const CommandResult result = run.Run({"--", kFixture, "--seconds", "1.5"});
  CHECK(result.out.find("hot_fifty") != std::string::npos);
  CHECK(result.out.find("Sampling: perf") != std::string::npos);
  const Json report = run.Report({"--symbol=hot_*"});
  CheckShares(HotSamples(report), 0.03);
  // dom0 holds the host's processes, and the host kernel is its kernel (no KVM guest runs).
  REQUIRE(!report["domains"].empty());
  CHECK(report["domains"][0]["id"] == 0);
  CHECK(report["domains"][0]["samples"]["user"].get<uint64_t>() > 0);
  CHECK(report["domains"][0]["samples"]["kernel"].get<uint64_t>() > 0);  // the fixture's syscalls and faults
  CHECK(report["domains"][0]["samples"]["hypervisor"] == 0);
  bool host_kernel_note = false;
  for (const Json& note : report["notes"]) {
    host_kernel_note |= note.get<std::string>().find("its kernel is the host kernel") != std::string::npos;
  }
  CHECK(host_kernel_note);
  // Losses are accounted, none expected at this rate.
  REQUIRE(report["losses"].is_array());
  for (const Json& loss : report["losses"]) {
    INFO(loss.dump());
    CHECK(loss["count"].get<uint64_t>() < 100);
  }
}

TEST_CASE("hvprof run --platform=linux beside a running hvprofd: both profile the workload, the run in its own "
          "hvprof-hv",
          "[linux][live][run]") {
  if (!PerfUsable()) return;
  LinuxRun run;
  hvprof::testing::TempDir service;
  const auto hvprof = [&](const std::string& action) {
    return hvprof::testing::RunProgram({hvprof::testing::Binary("hvprof"), action, "--run-dir=" + run.run_dir(),
                                        "--session-dir=" + service.File("s")});
  };
  // A service, as hvprofd.service is: its hvprofd drives the profiler of the run directory's
  // hvprof-hv, and profiles all along.
  const CommandResult started = hvprof::testing::RunProgram(
      {hvprof::testing::Binary("hvprof"), "--start-daemon", "--platform=linux", "--run-dir=" + run.run_dir(),
       "--session-dir=" + service.File("s")});
  INFO(started.out << started.err);
  REQUIRE(started.status == 0);
  REQUIRE(hvprof("--start").status == 0);
  // As the README says, with no more than a session directory of its own; the workload after
  // the options, as perf record takes it.
  const CommandResult result = run.Run({kFixture, "--seconds", "1.5"});
  CHECK(result.err.find("hvprof run: the hvprof-hv serving " + run.run_dir() + " profiles for another hvprofd") !=
        std::string::npos);
  CheckShares(HotSamples(run.Report({"--symbol=hot_*"})), 0.03);
  // The service saw the same workload, undisturbed.
  REQUIRE(hvprof("--stop").status == 0);
  const CommandResult report = hvprof::testing::RunProgram(
      {hvprof::testing::Binary("hvprof-report"), "--session-dir=" + service.File("s"), "-l", "--format=json",
       "--symbol=hot_*"});
  INFO(report.err);
  REQUIRE((report.status == 0 || report.status == 3));  // 3: some other image on the host lacks symbols
  const Json service_report = Json::parse(report.out, nullptr, false);
  REQUIRE(service_report.is_object());
  CheckShares(HotSamples(service_report), 0.03);
  CHECK(hvprof("--shutdown").status == 0);
}

TEST_CASE("hvprof --list-events on this host, with no hvprof-hv running, names the events and default its runs use",
          "[linux][live][run]") {
  if (!PerfUsable()) return;
  hvprof::testing::TempDir dir;
  const CommandResult listed = hvprof::testing::RunProgram(
      {hvprof::testing::Binary("hvprof"), "--list-events", "--run-dir=" + dir.File("nothing-serves-here")});
  INFO(listed.out << listed.err);
  REQUIRE(listed.status == 0);
  CHECK(listed.err.find("--platform=linux: this host") != std::string::npos);
  // A run's session says which CPU type and event it took.
  LinuxRun run;
  run.Run({"--duration=100ms"});
  const auto saved = hvprof::store::NewestSavedSession({run.session_root()});
  REQUIRE(saved.has_value());
  const auto session = hvprof::store::OpenSession(hvprof::store::SessionPaths{run.session_root()}.Saved(*saved));
  REQUIRE(session.has_value());
  const auto& metadata = session.value().metadata;
  REQUIRE(!metadata.events.empty());
  CHECK(listed.out.rfind(fmt::format("Events for {} (default: {} at 4000 samples a second per CPU", metadata.cpu_type,
                                     metadata.events[0].name),
                         0) == 0);
  // The hvprof-hv asked served a private run directory of its own, not the one given.
  CHECK_FALSE(std::filesystem::exists(dir.File("nothing-serves-here")));
}

TEST_CASE("hvprof run --platform=linux: processes that exit during the run are still symbolized",
          "[linux][live][run]") {
  if (!PerfUsable()) return;
  LinuxRun run;
  // The fixture and its forked child exit a second before the run ends and the agent dumps.
  run.Run({"--", "/bin/sh", "-c", kFixture + " --seconds 1 --fork >/dev/null; sleep 1"});
  const Json report = run.Report({});
  CheckShares(HotSamples(report), 0.03);
  // Nothing of the fixture (the parent and its forked child) fell into an unknown mapping. Other
  // processes of this host may run code in anonymous memory (a JIT, such as Chromium's in
  // another test): only the fixture's count.
  const std::string comm = std::filesystem::path(kFixture).filename().string().substr(0, 15);
  const std::vector<uint32_t> pids = run.Pids(comm);
  CHECK(pids.size() >= 2);
  double anonymous = 0, total = 0;
  for (const Json& row : report["rows"]) {
    total += row["samples"][0].get<double>();
    for (uint32_t pid : pids) {
      if (row["image"].get<std::string>() == fmt::format("anon (pid {})", pid)) anonymous += row["samples"][0].get<double>();
    }
  }
  INFO("the fixture's processes: " << pids.size());
  CHECK(anonymous < 0.01 * total);
}

TEST_CASE("hvprof run --platform=linux: a domain map with two process trees gives each its own domain",
          "[linux][live][run]") {
  if (!PerfUsable()) return;
  // Tree 1 is one process; tree 2 a process and its forked child, so twice the CPU. Both run
  // until stopped, so a slow start of the run on a loaded machine cannot outlast them.
  Child one({kFixture, "--seconds", "120"}, false);
  Child two({kFixture, "--seconds", "120", "--fork"}, false);
  LinuxRun run;
  // 3 s: on a loaded 2-CPU machine the three processes may get a third of a CPU each, and
  // each tree still needs its 2000 samples.
  run.Run({fmt::format("--domain-map=pid:{}=1,pid:{}=2", one.pid(), two.pid()), "--passive-domains=1,2",
           "--duration=3s"});
  CHECK(!one.Exited());
  CHECK(!two.Exited());
  one.Stop();
  two.Stop();
  const Json report = run.Report({"--by-domain", "--symbol=hot_*"});
  std::map<int, std::string> labels;
  for (const Json& domain : report["domains"]) labels[domain["id"].get<int>()] = domain["name"];
  INFO(report["domains"].dump());
  REQUIRE(labels.contains(1));
  REQUIRE(labels.contains(2));
  CHECK(labels[1].find(std::to_string(one.pid())) != std::string::npos);
  CHECK(labels[2].find(std::to_string(two.pid())) != std::string::npos);
  const auto in_one = HotSamples(report, labels[1]);
  const auto in_two = HotSamples(report, labels[2]);
  CheckShares(in_one, 0.04);
  CheckShares(in_two, 0.04);
  CHECK(HotSamples(report, labels[0]).empty());  // the fixture never ran in dom0
  double sum_one = 0, sum_two = 0;
  for (const auto& [name, count] : in_one) sum_one += count;
  for (const auto& [name, count] : in_two) sum_two += count;
  INFO(fmt::format("tree 1: {:.0f} samples, tree 2: {:.0f}", sum_one, sum_two));
  CHECK(sum_two > 1.3 * sum_one);
  CHECK(sum_two < 2.7 * sum_one);
}

TEST_CASE("hvprof run --platform=linux: a diff of two runs of the fixture finds its shares unchanged",
          "[linux][live][run][diff]") {
  if (!PerfUsable()) return;
  LinuxRun run;
  auto saved = [](const CommandResult& result) {
    const size_t at = result.out.rfind("session saved in ");
    REQUIRE(at != std::string::npos);
    const std::string path = result.out.substr(at + 17, result.out.find('\n', at) - at - 17);
    return path.substr(path.rfind('/') + 1);
  };
  // At the rate the diff's test was designed and measured at (the linux default is now 4 kHz).
  const std::string first = saved(run.Run({"-F", "25000", "--", kFixture, "--seconds", "1"}));
  const std::string second = saved(run.Run({"-F", "25000", "--", kFixture, "--seconds", "1"}));
  // Within the fixture's own samples: the other processes of this host differ between any two
  // runs (they are real differences), the fixture's design does not.
  const CommandResult diff = run.ReportOn({"--diff", first, second, "-l", "--image=linux_hotspots", "--format=json"});
  INFO(diff.err);
  REQUIRE((diff.status == 0 || diff.status == 3));
  const Json parsed = Json::parse(diff.out);
  CHECK(parsed["test"].get<std::string>().find("dispersion") != std::string::npos);
  std::map<std::string, double> shares;
  for (const Json& row : parsed["rows"]) {
    INFO(row.dump());
    if (!kDesigned.contains(row["symbol"].get<std::string>())) continue;
    CHECK_FALSE(row["significant"].get<bool>());
    shares[row["symbol"].get<std::string>()] = row["new_percent"].get<double>() / 100;
  }
  REQUIRE(shares.size() == 3);
  // Shares of the image's samples, of which the three take nearly all.
  for (const auto& [name, designed] : kDesigned) CHECK(std::abs(shares[name] - designed) < 0.05);
}

TEST_CASE("an idle machine's report is not dominated by a halt function", "[linux][live][idle]") {
  if (!PerfUsable()) return;
  LinuxRun run;
  // Mostly idle: one second of sleep is all the command does.
  run.Run({"--", "/bin/sleep", "1"});
  const Json left_out = run.Report({});
  const Json kept = run.Report({"--include-idle"});
  REQUIRE(left_out["idle"]["included"] == false);
  REQUIRE(kept["idle"]["included"] == true);
  const Json& event = left_out["idle"]["events"][0];
  // The idle loop is counted apart, not as rows: no row of the default report is in the idle
  // domain or names a halt or idle function, and what was left out comes back with --include-idle.
  for (const Json& row : left_out["rows"]) {
    const std::string symbol = row["symbol"].get<std::string>();
    INFO(symbol);
    CHECK(symbol.find("safe_halt") == std::string::npos);
    CHECK(symbol != "default_idle");
    CHECK(symbol.rfind("intel_idle", 0) == std::string::npos);
    CHECK(symbol != "cpu_idle_poll");
  }
  const uint64_t shown = left_out["events"][0]["samples"].get<uint64_t>();
  CHECK(left_out["events"][0]["idle"].get<uint64_t>() == event["idle"].get<uint64_t>());
  CHECK(kept["events"][0]["samples"].get<uint64_t>() == shown + event["idle"].get<uint64_t>());
  CHECK(event["samples"].get<uint64_t>() == shown + event["idle"].get<uint64_t>());
  // The per-CPU idle shares add up to the event's.
  uint64_t cpu_samples = 0, cpu_idle = 0;
  for (const Json& cpu : event["cpus"]) {
    cpu_samples += cpu["samples"].get<uint64_t>();
    cpu_idle += cpu["idle"].get<uint64_t>();
  }
  if (!event["cpus"].empty()) {
    CHECK(cpu_samples == event["samples"].get<uint64_t>());
    CHECK(cpu_idle == event["idle"].get<uint64_t>());
  }
}

TEST_CASE("hvprof run --platform=linux samples at perf's default 4 kHz, and -F sets another rate",
          "[linux][live][run][rate]") {
  if (!PerfUsable()) return;
  // "asked N samples/s per CPU, achieved cpu0 A, cpu1 B" from the run's header.
  auto rates = [](const std::string& out) {
    std::vector<double> found;
    const size_t asked = out.find("asked ", out.find("\nSampling: "));
    REQUIRE(asked != std::string::npos);
    found.push_back(std::atof(out.c_str() + asked + 6));
    for (size_t at = out.find(" cpu", asked); at != std::string::npos && at < out.find('\n', asked);
         at = out.find(" cpu", at + 1)) {
      const size_t space = out.find(' ', at + 1);
      found.push_back(std::atof(out.c_str() + space + 1));
    }
    return found;
  };
  for (const auto& [args, wanted] : {std::pair{std::vector<std::string>{}, 4000.0},
                                     std::pair{std::vector<std::string>{"-F", "1000"}, 1000.0}}) {
    LinuxRun run;
    std::vector<std::string> argv = args;
    argv.insert(argv.end(), {"--", kFixture, "--seconds", "0.5"});
    const CommandResult result = run.Run(argv);
    const auto measured = rates(result.out);
    INFO(result.out);
    REQUIRE(measured.size() >= 2);
    CHECK(measured[0] == wanted);
    // The CPU that ran the fixture holds the rate (an idle one may sleep through its timer).
    const double busiest = *std::max_element(measured.begin() + 1, measured.end());
    CHECK(std::abs(busiest - wanted) < wanted * 0.15);
    if (args.empty()) CHECK(result.out.find("linux default of 4000 samples a second") != std::string::npos);
    // Without a hardware PMU perf's cpu-clock timer samples, and the header says so rather than
    // claiming counted cycles.
    const bool timer = result.out.find("CPU: linux/software") != std::string::npos;
    CHECK(result.out.find(timer ? "Sampled by Linux's cpu-clock timer, not a hardware counter: CPU_CLK_UNHALTED:"
                                : "Counted CPU_CLK_UNHALTED events") != std::string::npos);
    // And what a timer cannot see.
    CHECK((result.out.find("code that runs with interrupts masked is never sampled") != std::string::npos) == timer);
  }
}

TEST_CASE("hvprof run --platform=linux: a user who swaps a FIFO or a device link for what she mapped neither hangs "
          "the run nor costs it samples",
          "[linux][live][run][safety]") {
  // Issue 38: the process table read a mapping's ELF header by its path once the mapping was gone,
  // on the thread that drains perf's rings, following links and waiting on FIFOs: a FIFO froze the
  // run (91% of its samples lost), and a link to a device made root open the device.
  if (!PerfUsable()) return;
  if (::geteuid() != 0 && hvprof::testing::SkipTest("the attacker runs as another user (nobody): needs root")) return;
  const std::string mode = GENERATE(as<std::string>{}, "fifo", "link");
  INFO("the attacker puts a " << mode << " where her mapped file was");
  hvprof::testing::TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  const std::string attack = dir.File("attack");
  REQUIRE(::mkdir(attack.c_str(), 0755) == 0);
  REQUIRE(::chown(attack.c_str(), 65534, 65534) == 0);
  // A device of our own (/dev/zero's numbers), watched: root must not even open it.
  const std::string device = dir.File("zero");
  REQUIRE(::mknod(device.c_str(), S_IFCHR | 0644, ::makedev(1, 5)) == 0);
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(watch >= 0);
  REQUIRE(::inotify_add_watch(watch, device.c_str(), IN_OPEN | IN_ACCESS) >= 0);

  LinuxRun run;
  const std::string workload = std::string(HVPROF_LINUX_SWAP_MAPPED) + " " + attack + " " + mode + " 60 " + device +
                               " & " + kFixture + " --seconds 1.5 >/dev/null; wait";
  Child hvprof(run.Command({"--", "/bin/sh", "-c", workload}), false);
  // Generous: the run takes seconds; one stuck on a planted file never ends by itself.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!hvprof.Exited()) {
    (void)hvprof.Output();  // the report on stdout must not fill the pipe
    if (std::chrono::steady_clock::now() > deadline) {
      // Let a reader stuck on a FIFO go, so that the run can end.
      for (const auto& entry : std::filesystem::directory_iterator(attack)) {
        const int writer = ::open(entry.path().c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (writer >= 0) ::close(writer);
      }
      hvprof.Stop();
      FAIL("hvprof run did not end within 120 s: it is stuck on a file the user planted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO(hvprof.Output());
  REQUIRE(hvprof.Wait() == 0);
  // Every sample of the fixture is there, in its designed shares, and nothing was lost.
  const Json report = run.Report({});
  CheckShares(HotSamples(report), 0.03);
  REQUIRE(report["losses"].is_array());
  for (const Json& loss : report["losses"]) {
    INFO(loss.dump());
    CHECK(loss["count"].get<uint64_t>() < 100);
  }
  char events[4096];
  CHECK(::read(watch, events, sizeof events) < 0);  // the device was never opened
  ::close(watch);
}

TEST_CASE("hvprof run --platform=linux: an archive of the session reports as the session did, symbol for symbol",
          "[linux][live][run][archive][safety]") {
  // Issue 38: /proc/kallsyms went into archives empty, so a linux session's kernel samples had no
  // symbols anywhere else.
  if (!PerfUsable()) return;
  LinuxRun run;
  run.Run({"--", kFixture, "--seconds", "1"});
  const std::vector<std::string> where = run.Command({});
  const std::string session_dir = where[4];  // --session-dir=...
  const auto saved = hvprof::store::NewestSavedSession({session_dir.substr(session_dir.find('=') + 1)});
  REQUIRE(saved.has_value());
  const CommandResult before = run.ReportOn({*saved, "-l", "--format=json"});
  INFO(before.err);
  REQUIRE((before.status == 0 || before.status == 3));
  hvprof::testing::TempDir dir;
  const std::string tar = dir.File("linux.tar"), tmp = dir.File("tmp");
  std::filesystem::create_directories(tmp);
  // --partial: other processes of this host may have run images that are gone by now (other
  // tests' files); their samples have no symbols either way.
  const CommandResult archived = hvprof::testing::RunProgram(
      {hvprof::testing::Binary("hvprof"), "archive", session_dir, *saved, "-o", tar, "--partial"});
  INFO(archived.err);
  REQUIRE(archived.status == 0);
  const CommandResult after = hvprof::testing::RunProgram(
      {hvprof::testing::Binary("hvprof-report"), "archive:" + tar, "-l", "--format=json"}, {"TMPDIR=" + tmp});
  INFO(after.err);
  auto rows = [](const std::string& text) {
    std::vector<std::string> out;
    const Json report = Json::parse(text);
    for (const Json& row : report["rows"]) {
      out.push_back(row["image"].get<std::string>() + " " + row["symbol"].get<std::string>() + " " +
                    row["samples"].dump());
    }
    return out;
  };
  const auto session_rows = rows(before.out);
  REQUIRE(!session_rows.empty());
  bool kernel = false;
  for (const std::string& row : session_rows) kernel |= row.starts_with("[kernel.kallsyms] ") && row.find("(no symbols)") == std::string::npos;
  CHECK(kernel);  // kernel time of the fixture's syscalls and page faults, named from kallsyms
  CHECK(rows(after.out) == session_rows);
}

namespace {

// [start, end) of `function` in `image`, as `nm -S` (and objdump -d) give it: link-time addresses.
std::pair<uint64_t, uint64_t> FunctionRange(const std::string& image, const std::string& function) {
  const CommandResult nm = hvprof::testing::RunProgram({"/usr/bin/nm", "-S", image});
  REQUIRE(nm.status == 0);
  std::istringstream lines(nm.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string start, size, type, name;
    if (words >> start >> size >> type >> name && name == function) {
      const uint64_t at = std::stoull(start, nullptr, 16);
      return {at, at + std::stoull(size, nullptr, 16)};
    }
  }
  FAIL("nm lists no " << function << " in " << image);
  return {};
}

}  // namespace

TEST_CASE("hvprof record -g on linux: -d shows objdump's addresses, and the session outlives a rebuild of its program",
          "[linux][live][run][build-id-cache]") {
  if (!PerfUsable()) return;
  hvprof::testing::TempDir dir;
  // A program of the user's own, rebuilt after the run (another build at the same path).
  const std::string program = dir.File("linux_hotspots");
  std::filesystem::copy_file(kFixture, program);
  LinuxRun run;
  // perf's words: record, -g, the workload at the first word that is not an option.
  const CommandResult recorded = hvprof::testing::RunProgram(
      {hvprof::testing::Binary("hvprof"), "record", "-g", "--platform=linux", "--run-dir=" + run.run_dir(),
       "--session-dir=" + run.session_root(), "--build-id-cache=" + dir.File("cache"), program, "--seconds", "1.5"});
  INFO(recorded.out << recorded.err);
  REQUIRE(recorded.status == 0);
  const Json before = run.Report({"--symbol=hot_*"});
  CheckShares(HotSamples(before), 0.03);

  // -d: each sampled address of hot_fifty lies in it as nm and objdump -d of the file place it.
  const auto [start, end] = FunctionRange(program, "hot_fifty");
  const CommandResult details = run.ReportOn({"-d", "-n", "--symbol=hot_fifty", "--image=linux_hotspots"});
  INFO(details.out << details.err);
  std::istringstream lines(details.out);
  size_t addresses = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string samples, share, address;
    // Detail lines: "SAMPLES SHARE ADDRESS" (the row above them names the image and symbol).
    if (!(words >> samples >> share >> address) || address.size() != 16 || words >> samples) continue;
    const uint64_t at = std::stoull(address, nullptr, 16);
    INFO(line);
    CHECK(at >= start);
    CHECK(at < end);
    ++addresses;
  }
  CHECK(addresses > 0);

  // Rebuilt: another program at its path. The old session still names the functions it ran.
  std::filesystem::copy_file(HVPROF_LINUX_CALLPATHS, program, std::filesystem::copy_options::overwrite_existing);
  const Json after = run.Report({"--symbol=hot_*"});
  CheckShares(HotSamples(after), 0.03);
  CHECK(HotSamples(after) == HotSamples(before));
  bool from_cache = false;
  for (const Json& note : after["notes"]) {
    from_cache |= note.get<std::string>().find("copy in the build-id cache") != std::string::npos;
  }
  CHECK(from_cache);
}

TEST_CASE("continuous mode on this host: windows of the wall clock follow each other and hold the workload",
          "[linux][live][continuous]") {
  if (!PerfUsable()) return;
  hvprof::testing::TempDir dir;
  const std::vector<std::string> where = {"--run-dir=" + dir.File("run"), "--session-dir=" + dir.File("s")};
  const auto hvprof = [&](std::vector<std::string> args) {
    args.insert(args.begin(), hvprof::testing::Binary("hvprof"));
    args.insert(args.end(), where.begin(), where.end());
    return hvprof::testing::RunProgram(args);
  };
  const CommandResult started = hvprof({"--start-daemon", "--platform=linux", "--continuous=1s", "-F", "2000"});
  INFO(started.out << started.err);
  REQUIRE(started.status == 0);
  CHECK(started.out.find("profiling continuously") != std::string::npos);
  const CommandResult worked = hvprof::testing::RunProgram({kFixture, "--seconds", "3"});
  REQUIRE(worked.status == 0);
  // Waits (a loaded machine drains late) until three windows have closed.
  const hvprof::store::SessionPaths paths{dir.File("s")};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (hvprof::store::ListWindows(paths).windows.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(hvprof({"--shutdown"}).status == 0);
  const hvprof::store::WindowList list = hvprof::store::ListWindows(paths);
  CHECK(list.problems.empty());
  REQUIRE(list.windows.size() >= 3);
  const uint64_t origin = list.windows[0].window.start_ns;
  for (size_t i = 0; i < list.windows.size(); ++i) {
    const hvprof::store::WindowEntry& w = list.windows[i];
    INFO(w.name);
    CHECK(w.window.index == i);
    CHECK(w.window.clock == "realtime");
    // A window closes at the first drain after its point on the grid of seconds from the first
    // one's start (a late drain makes it longer and the next one shorter), and the next starts
    // where it ended.
    CHECK(w.window.end_ns >= origin + (i + 1) * 1'000'000'000);
    CHECK(w.window.end_ns > w.window.start_ns);
    if (i > 0) CHECK(w.window.start_ns == list.windows[i - 1].window.end_ns);
  }
  // The windows and the one in progress, merged: the fixture's functions in their shares.
  const CommandResult report = hvprof::testing::RunProgram(
      {hvprof::testing::Binary("hvprof-report"), "--session-dir=" + dir.File("s"), "--last=1h", "-l",
       "--format=json", "--symbol=hot_*"});
  INFO(report.err);
  REQUIRE((report.status == 0 || report.status == 3));  // 3: some other image on the host lacks symbols
  const Json merged = Json::parse(report.out, nullptr, false);
  REQUIRE(merged.is_object());
  CheckShares(HotSamples(merged), 0.03);
}
