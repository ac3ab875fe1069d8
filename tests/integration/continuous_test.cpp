// Continuous mode on a simulated host, run by the real programs: windows that follow each other
// on the simulated clock with every sample in exactly one of them (against the sim's ground
// truth), a restart that continues the series, a window reduced to its aggregate that reports
// as before, the budget, a diff of two time ranges, --list, and new settings by --reload and
// SIGHUP.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <tuple>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/base/process.h"
#include "hvprof/report/load.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "hvprof/store/windows.h"
#include "host_harness.h"
#include "sim_harness.h"

using namespace hvprof;
using hvprof::testing::Host;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

namespace {

using Key = std::tuple<uint16_t, uint8_t, std::string>;  // domain, mode, image path

// What the sim sampled (`truth`: its ground truth) of `counter`, by domain, mode and image, for
// dom0, the idle loop and the passive domain 2 (a session's view of them).
std::map<Key, uint64_t> Truth(const context::GroundTruth& truth, uint32_t counter) {
  std::map<Key, uint64_t> expected;
  for (const context::TruthRow& row : truth.rows) {
    const uint64_t overflows = row.overflows.at(counter);
    const uint16_t domain = row.domain;
    if (overflows == 0 || (domain != 0 && domain != 2 && domain != kIdleDomain)) continue;
    // A passive domain's user and kernel code is counted by mode alone (its images are not
    // known inside it).
    expected[{domain, sample_mode::Byte(row.mode), domain == 2 ? std::string() : row.image}] += overflows;
  }
  return expected;
}

void Count(const report::Profile& profile, std::map<Key, uint64_t>& seen) {
  for (const report::Entry& entry : profile.entries()) {
    const std::string image = entry.domain == 2 ? std::string() : profile.images()[entry.image].path;
    seen[{entry.domain, entry.mode, image}] += entry.count;
  }
}

std::vector<store::WindowEntry> Windows(const Host& host) {
  const store::WindowList list = store::ListWindows(store::SessionPaths{host.session_root()});
  CHECK(list.problems.empty());
  return list.windows;
}

}  // namespace

TEST_CASE("continuous windows follow each other on the clock, and every sample is in exactly one",
          "[continuous][e2e]") {
  Host host(TestScenario("intel-arch-v4", 31));
  auto setup = host.Hvprof({"--start-daemon", "--passive-domains=guest2", "--event=CPU_CLK_UNHALTED:20000",
                            "--continuous=50ms"});
  INFO(setup.out << setup.err);
  REQUIRE(setup.status == 0);
  CHECK(setup.out.find("profiling continuously") != std::string::npos);
  (void)host.GroundTruth(true);
  // 1,030 ms of simulated time: 20 windows close, the 21st is 30 ms old.
  REQUIRE(host.Hvprof({"--run-sim=400ms"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=630ms"}).status == 0);

  // The sim stands still between commands: what it sampled so far is what the windows hold once
  // hvprofd has shut down.
  const context::GroundTruth truth = host.GroundTruth(false);
  auto status = host.Hvprof({"--status"});
  INFO(status.out);
  CHECK(status.out.find("window 20 in progress") != std::string::npos);
  CHECK(status.out.find("20 windows kept") != std::string::npos);
  // Saving and resetting are the windows' own business.
  for (const char* refused : {"--save=mine", "--stop", "--reset"}) {
    auto tried = host.Hvprof({refused});
    INFO(refused << ": " << tried.err);
    CHECK(tried.status != 0);
    CHECK(tried.err.find("profiles continuously") != std::string::npos);
  }

  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);

  const std::vector<store::WindowEntry> windows = Windows(host);
  REQUIRE(windows.size() == 20);
  std::map<Key, uint64_t> seen;
  uint64_t previous_last_sample = 0;
  for (size_t i = 0; i < windows.size(); ++i) {
    const store::WindowEntry& w = windows[i];
    INFO(w.name);
    CHECK(w.window.index == i);
    CHECK(w.window.clock == "sim");
    CHECK(w.window.series == windows[0].window.series);
    CHECK(w.name == store::WindowName(w.window.index, w.window.start_ns));
    if (i > 0) CHECK(w.window.start_ns == windows[i - 1].window.end_ns);
    CHECK(w.window.end_ns - w.window.start_ns == 50'000'000);
    auto profile = report::LoadProfile(w.directory, {});
    REQUIRE(profile.has_value());
    CHECK(profile.value().problems().empty());
    Count(profile.value(), seen);
    const store::SessionMetadata& m = profile.value().metadata();
    CHECK(m.samples_stored > 0);
    // On the platform's clock, no window's samples overlap the next one's.
    CHECK(m.first_sample_ns > previous_last_sample);
    previous_last_sample = m.last_sample_ns;
  }
  auto current = report::LoadProfile(host.current(), {});
  REQUIRE(current.has_value());
  Count(current.value(), seen);
  REQUIRE(current.value().metadata().window.has_value());
  CHECK(current.value().metadata().window->index == windows.size());

  const uint32_t counter = current.value().metadata().events.at(0).counter;
  const std::map<Key, uint64_t> expected = Truth(truth, counter);
  REQUIRE(expected.size() > 3);
  for (const auto& [key, count] : expected) {
    INFO("domain " << std::get<0>(key) << " " << sample_mode::Name(std::get<1>(key)) << " " << std::get<2>(key));
    CHECK(seen[key] == count);
  }
  uint64_t total_seen = 0, total_expected = 0;
  for (const auto& [key, count] : seen) total_seen += count;
  for (const auto& [key, count] : expected) total_expected += count;
  CHECK(total_seen == total_expected);
}

TEST_CASE("a restarted hvprofd continues the window in progress, then the series", "[continuous][restart]") {
  Host host(TestScenario("intel-arch-v4", 33));
  const std::vector<std::string> setup{"--start-daemon", "--continuous=50ms", "--event=CPU_CLK_UNHALTED:20000"};
  REQUIRE(host.Hvprof(setup).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=120ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  auto open = store::OpenSession(host.current());
  REQUIRE(open.has_value());
  REQUIRE(open.value().metadata.window.has_value());
  const store::WindowRecord in_progress = *open.value().metadata.window;
  CHECK(in_progress.index == 2);
  CHECK(in_progress.end_ns == 0);
  const uint64_t samples_before = open.value().metadata.samples_stored;
  CHECK(samples_before > 0);

  auto again = host.Hvprof(setup);
  INFO(again.out << again.err);
  REQUIRE(again.status == 0);
  REQUIRE(host.Hvprof({"--run-sim=100ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  const std::vector<store::WindowEntry> windows = Windows(host);
  REQUIRE(windows.size() >= 3);
  for (size_t i = 0; i < windows.size(); ++i) {
    INFO(windows[i].name);
    CHECK(windows[i].window.index == i);
    CHECK(windows[i].window.series == in_progress.series);
    if (i > 0) CHECK(windows[i].window.start_ns == windows[i - 1].window.end_ns);
  }
  // The window in progress at the restart kept its start and the first hvprofd's samples (it
  // closes at the second one's first drain), and says that two hvprofds wrote it.
  const store::WindowEntry& spanning = windows[2];
  CHECK(spanning.window.start_ns == in_progress.start_ns);
  CHECK(spanning.samples >= samples_before);
  auto continued = store::OpenSession(spanning.directory);
  REQUIRE(continued.has_value());
  CHECK(continued.value().metadata.profiling.size() == 2);
}

TEST_CASE("a window reduced to its aggregate by the budget reports as before, and says so",
          "[continuous][budget]") {
  Host host(TestScenario("intel-arch-v4", 32));
  REQUIRE(host.Hvprof({"--start-daemon", "--event=CPU_CLK_UNHALTED:20000", "--continuous=100ms", "-g"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=250ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  const std::vector<store::WindowEntry> windows = Windows(host);
  REQUIRE(windows.size() == 2);
  const std::string& window = windows[0].directory;

  report::LoadOptions stacks;
  stacks.stacks = true;
  auto before = report::LoadProfile(window, {});
  auto before_stacks = report::LoadProfile(window, stacks);
  REQUIRE(before.has_value());
  REQUIRE(before_stacks.has_value());
  REQUIRE(store::DropRawSamples(window).has_value());
  CHECK(!std::filesystem::exists(window + "/" + store::kSamplesFile));
  CHECK(!std::filesystem::exists(window + "/" + store::kContextFile));
  CHECK(store::DiskBytes(window) < windows[0].bytes);

  auto after = report::LoadProfile(window, {});
  REQUIRE(after.has_value());
  CHECK(after.value().problems().empty());
  std::map<Key, uint64_t> a, b;
  Count(before.value(), b);
  Count(after.value(), a);
  CHECK(a == b);
  CHECK(after.value().total_samples() == before.value().total_samples());
  auto after_stacks = report::LoadProfile(window, stacks);
  REQUIRE(after_stacks.has_value());
  CHECK(after_stacks.value().stacks().size() == before_stacks.value().stacks().size());
  // The report says what it was read from; a view the aggregate cannot serve says why.
  auto report = host.Report({"--session=" + windows[0].name});
  INFO(report.out << report.err);
  CHECK(report.status == 0);
  CHECK(report.out.find("raw samples were dropped") != std::string::npos);
  auto by_process = host.Report({"--session=" + windows[0].name, "--by-process"});
  CHECK(by_process.status != 0);
  CHECK(by_process.err.find("raw samples were dropped") != std::string::npos);
}

TEST_CASE("a report over a time range merges its windows: what they hold added up, in every view",
          "[continuous][range]") {
  Host host(TestScenario("intel-arch-v4", 34));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest2", "--event=CPU_CLK_UNHALTED:20000", "-g",
                       "--continuous=50ms"})
              .status == 0);
  (void)host.GroundTruth(true);
  REQUIRE(host.Hvprof({"--run-sim=520ms"}).status == 0);
  const context::GroundTruth truth = host.GroundTruth(false);
  // The window in progress, as hvprofd has flushed it so far (it flushes every second).
  const auto flushed = [&] {
    auto read = store::ReadSamplesFile(host.current() + "/" + store::kSamplesFile, [](const store::StoredSample&) {});
    return read ? read.value().samples : 0;
  };
  const std::vector<store::WindowEntry> windows = Windows(host);
  REQUIRE(windows.size() == 10);

  // Windows 3 to 6 by their times: those that overlap the range, whole.
  const report::TimeRange middle{.since_ns = windows[3].window.start_ns, .until_ns = windows[6].window.end_ns};
  report::LoadOptions stacks;
  stacks.stacks = true;
  auto merged = report::LoadWindows(host.session_root(), middle, stacks);
  INFO((merged ? std::string() : merged.error().message()));
  REQUIRE(merged.has_value());
  CHECK(merged.value().problems().empty());
  std::map<Key, uint64_t> seen, added;
  Count(merged.value(), seen);
  uint64_t samples = 0, stacks_added = 0;
  for (size_t i = 3; i <= 6; ++i) {
    auto one = report::LoadProfile(windows[i].directory, stacks);
    REQUIRE(one.has_value());
    Count(one.value(), added);
    samples += one.value().metadata().samples_stored;
    for (const report::Stack& stack : one.value().stacks()) stacks_added += stack.count;
  }
  CHECK(seen == added);
  const store::SessionMetadata& m = merged.value().metadata();
  CHECK(m.samples_stored == samples);
  REQUIRE(m.window.has_value());
  CHECK(m.window->start_ns == windows[3].window.start_ns);
  CHECK(m.window->end_ns == windows[6].window.end_ns);
  uint64_t stacks_seen = 0;
  for (const report::Stack& stack : merged.value().stacks()) stacks_seen += stack.count;
  CHECK(stacks_seen == stacks_added);
  CHECK(stacks_seen == merged.value().total_samples());

  // Every window and the one in progress: the ground truth, once the window in progress is
  // flushed (no --dump: its aggregate is behind, and its samples are counted), and through the
  // command as a user runs it.
  auto first = store::OpenSession(windows[0].directory);
  REQUIRE(first.has_value());
  const std::map<Key, uint64_t> expected = Truth(truth, first.value().metadata.events.at(0).counter);
  uint64_t in_windows = 0, sampled = 0;
  for (const store::WindowEntry& w : windows) in_windows += w.samples;
  for (const auto& [key, count] : expected) sampled += count;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (in_windows + flushed() < sampled && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto all = report::LoadWindows(host.session_root(), {}, {});
  REQUIRE(all.has_value());
  CHECK(all.value().problems().empty());
  std::map<Key, uint64_t> everything;
  Count(all.value(), everything);
  for (const auto& [key, count] : expected) {
    INFO("domain " << std::get<0>(key) << " " << sample_mode::Name(std::get<1>(key)) << " " << std::get<2>(key));
    CHECK(everything[key] == count);
  }
  auto flat = host.Report({"--last=1d", "-l"});
  INFO(flat.out << flat.err);
  CHECK(flat.status == 0);
  CHECK(flat.out.find("11 windows of continuous profiling merged") != std::string::npos);
  auto folded = host.Report({"--last=1d", "--format=folded"});
  CHECK(folded.status == 0);
  CHECK(!folded.out.empty());
  const std::string pprof = host.session_root() + "/range.pb.gz";
  auto profile = host.Report({"--last=1d", "--format=pprof", "-o", pprof});
  INFO(profile.err);
  CHECK(profile.status == 0);
  CHECK(profile.err.find("no vcpu, pcpu or tid labels") != std::string::npos);
  CHECK(std::filesystem::file_size(pprof) > 100);
  auto by_process = host.Report({"--last=1d", "--by-process"});
  CHECK(by_process.status == 1);
  CHECK(by_process.err.find("report one window") != std::string::npos);
  auto none = host.Report({"--since=@1", "--until=@2"});
  CHECK(none.status == 1);
  CHECK(none.err.find("no window of continuous profiling") != std::string::npos);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
}

TEST_CASE("a diff of two time ranges compares their windows as the runs of each side", "[continuous][diff]") {
  Host host(TestScenario("intel-arch-v4", 36));
  REQUIRE(host.Hvprof({"--start-daemon", "--event=CPU_CLK_UNHALTED:20000", "--continuous=1s"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=6500ms"}).status == 0);
  const std::vector<store::WindowEntry> windows = Windows(host);
  REQUIRE(windows.size() == 6);
  // Whole seconds, as a user types them (@SECONDS); a window counts when it overlaps the range.
  const uint64_t s = windows[0].window.start_ns / 1'000'000'000;
  const auto in = [&](uint64_t since, uint64_t until) {
    std::vector<std::string> names;
    for (const store::WindowEntry& w : windows) {
      if (w.window.start_ns < until * 1'000'000'000 && w.window.end_ns > since * 1'000'000'000) names.push_back(w.name);
    }
    return names;
  };
  // --list: each window's span, then the windows together (the six closed and the one in
  // progress), with no gap between them.
  auto list = host.Report({"--list"});
  INFO(list.out);
  CHECK(list.out.find("Continuous profiling: 7 windows (0 to 6)") != std::string::npos);
  CHECK(list.out.find("no gap: each window starts where the one before ended") != std::string::npos);
  CHECK(list.out.find("window 6, ") != std::string::npos);
  CHECK(list.out.find("now (in progress)") != std::string::npos);
  const Json listed = Json::parse(host.Report({"--list", "--format=json"}).out, nullptr, false);
  REQUIRE(listed.is_object());
  size_t with_window = 0;
  for (const Json& session : listed["sessions"]) {
    if (!session.contains("window")) continue;
    ++with_window;
    const uint64_t index = session["window"]["index"].get<uint64_t>();
    if (index < windows.size()) CHECK(session["window"]["end_ns"].get<uint64_t>() == windows[index].window.end_ns);
  }
  CHECK(with_window == 7);

  const std::vector<std::string> base = in(s, s + 2), next = in(s + 3, s + 5);
  REQUIRE(base.size() >= 2);
  REQUIRE(next.size() >= 2);
  auto diff = host.Report({"--diff", fmt::format("range:@{}..@{}", s, s + 2), fmt::format("range:@{}..@{}", s + 3, s + 5),
                           "-l", "--format=json"});
  INFO(diff.err);
  CHECK((diff.status == 0 || diff.status == 3));
  const Json json = Json::parse(diff.out, nullptr, false);
  REQUIRE(json.is_object());
  CHECK(json["base"]["sessions"].get<std::vector<std::string>>() == base);
  CHECK(json["new"]["sessions"].get<std::vector<std::string>>() == next);
  CHECK(json["base"]["samples"].get<uint64_t>() > 0);
  // Several windows a side: the rank test across them.
  auto text = host.Report({"--diff", fmt::format("range:@{}..@{}", s, s + 2), fmt::format("range:@{}..@{}", s + 3, s + 5)});
  CHECK(text.out.find("Mann-Whitney U over the runs' shares") != std::string::npos);

  // A side with no window, a range written wrong, and a range beside sessions are refused.
  auto none = host.Report({"--diff", "range:@1..@2", fmt::format("range:@{}..@{}", s, s + 2)});
  CHECK(none.status == 1);
  CHECK(none.err.find("no window of continuous profiling") != std::string::npos);
  CHECK(none.err.find("the base side") != std::string::npos);
  auto wrong = host.Report({"--diff", "range:yesterday", "range:-1h..now"});
  CHECK(wrong.status == 2);
  CHECK(wrong.err.find("range:SINCE..UNTIL") != std::string::npos);
  auto mixed = host.Report({"--diff", fmt::format("range:@{}..@{},{}", s, s + 2, windows[0].name), windows[1].name});
  CHECK(mixed.status == 2);
  CHECK(mixed.err.find("not both") != std::string::npos);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
}

TEST_CASE("hvprof --reload and SIGHUP give a running hvprofd a new budget and window, and refuse other changes",
          "[continuous][reload]") {
  Host host(TestScenario("intel-arch-v4", 37));
  const std::vector<std::string> setup{"--event=CPU_CLK_UNHALTED:20000", "--continuous=50ms"};
  const auto with = [&](const char* action, std::vector<std::string> more) {
    std::vector<std::string> args{action};
    args.insert(args.end(), setup.begin(), setup.end());
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  REQUIRE(host.Hvprof(with("--start-daemon", {})).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=160ms"}).status == 0);  // windows 0-2 close; 3 opens at 150 ms
  auto same = host.Hvprof(with("--reload", {}));
  INFO(same.out << same.err);
  CHECK(same.status == 0);
  CHECK(same.out.find("already runs with these settings") != std::string::npos);

  // Another window length and age: in effect at once, the window in progress keeping its end.
  auto reloaded = host.Hvprof({"--reload", "--event=CPU_CLK_UNHALTED:20000", "--continuous=100ms", "--keep-age=100ms"});
  INFO(reloaded.out << reloaded.err);
  REQUIRE(reloaded.status == 0);
  CHECK(reloaded.out.find("now in effect: ") != std::string::npos);
  CHECK(reloaded.out.find("--continuous") != std::string::npos);
  CHECK(reloaded.out.find("--keep-age") != std::string::npos);
  REQUIRE(host.Hvprof({"--run-sim=260ms"}).status == 0);  // 3 closes at 200 ms, 4 at 300, 5 at 400
  auto status = host.Hvprof({"--status"});
  CHECK(status.out.find("windows: 0.1 s each") != std::string::npos);
  CHECK(status.out.find("none older than 100ms") != std::string::npos);
  const std::vector<store::WindowEntry> windows = Windows(host);
  REQUIRE(!windows.empty());
  CHECK(windows.back().window.index == 5);
  // The budget's new age: what ended more than 100 ms before the last close has gone.
  CHECK(windows.front().window.index == 4);
  CHECK(windows.front().window.end_ns - windows.front().window.start_ns == 100'000'000);

  // An event is the counters' setup: refused, nothing changed.
  const std::string before = hvprof::testing::ReadText(host.session_root() + "/daemonrc.json");
  auto refused = host.Hvprof({"--reload", "--event=CPU_CLK_UNHALTED:40000", "--continuous=100ms", "--keep-age=100ms"});
  CHECK(refused.status != 0);
  CHECK(refused.err.find("cannot change --event while it runs: nothing was changed") != std::string::npos);
  CHECK(hvprof::testing::ReadText(host.session_root() + "/daemonrc.json") == before);

  // SIGHUP reads daemonrc.json again (the budget's size here).
  Json edited = Json::parse(before);
  edited["keep_bytes"] = uint64_t{32} << 20;
  {
    std::ofstream out(host.session_root() + "/daemonrc.json");
    out << edited.dump(1) << "\n";
  }
  REQUIRE(::kill(host.AgentPid(), SIGHUP) == 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string shown;
  while (std::chrono::steady_clock::now() < deadline) {
    shown = host.Hvprof({"--status"}).out;
    if (shown.find("of 32 MiB on disk") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO(shown);
  CHECK(shown.find("of 32 MiB on disk") != std::string::npos);
  // Woken by the signal, hvprofd goes back to waiting: it does not spin.
  const long long ticks_before = hvprof::ProcessCpuTicks(host.AgentPid());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  CHECK(hvprof::ProcessCpuTicks(host.AgentPid()) - ticks_before < 30);

  // A file that also changes what needs a restart changes nothing, the budget included.
  edited["keep_bytes"] = uint64_t{64} << 20;
  edited["callgraph"] = 8;
  {
    std::ofstream out(host.session_root() + "/daemonrc.json");
    out << edited.dump(1) << "\n";
  }
  REQUIRE(::kill(host.AgentPid(), SIGHUP) == 0);
  const auto logged = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string log;
  while (std::chrono::steady_clock::now() < logged) {
    log = hvprof::testing::ReadText(host.session_root() + "/hvprofd.log");
    if (log.find("--callgraph, which needs a restart") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(log.find("--callgraph, which needs a restart") != std::string::npos);
  CHECK(host.Hvprof({"--status"}).out.find("of 32 MiB on disk") != std::string::npos);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
}
