// hvprof-push end to end: continuous windows of a simulated host pushed to a loopback server that
// reads the requests as Pyroscope would. Every closed window arrives as labelled series, one per
// domain, mode and event, each holding the window's samples (read back with the real `go tool
// pprof` where it is installed) and, summed with the window in progress, the sim's ground truth.
// A server that is down, slow or refusing, and a budget that removes windows before they could
// be pushed, lose nothing silently: push.json and `hvprof --status` count every window.
#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <thread>
#include <tuple>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/facts/sample.h"
#include "hvprof/push/windows.h"
#include "hvprof/report/load.h"
#include "hvprof/report/views/stacks.h"
#include "hvprof/store/windows.h"
#include "host_harness.h"
#include "http_server.h"
#include "programs.h"
#include "sim_harness.h"
#include "temp_dir.h"

using namespace hvprof;
using hvprof::testing::Host;
using hvprof::testing::LoopbackServer;
using hvprof::testing::Reply;
using hvprof::testing::Request;
using hvprof::testing::TestScenario;

namespace {

using Part = std::pair<uint16_t, uint8_t>;  // domain, mode (sample_mode::), as hvprof-push orders them

// hvprof-push following a session root, in the background; its output goes to a file.
class Pusher {
 public:
  Pusher(const Host& host, const std::string& url, const std::vector<std::string>& extra) : log_(dir_.File("push.log")) {
    std::vector<std::string> argv = {hvprof::testing::Binary("hvprof-push"), "--url=" + url,
                                     "--session-dir=" + host.session_root(), "--poll=20ms"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      hvprof::testing::ExecProgram(argv, {});
    }
  }
  ~Pusher() { (void)Stop(); }

  // SIGTERM, and its exit status (-1 when it was stopped already).
  int Stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string log() const { return hvprof::testing::ReadText(log_); }

 private:
  hvprof::testing::TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
};

// Waits up to 60 s (a loaded machine) until push.json satisfies `done`; the state it last read.
push::PushState WaitForState(const Host& host, const std::function<bool(const push::PushState&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  push::PushState last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto read = push::ReadPushState(store::SessionPaths{host.session_root()});
    if (read) {
      last = read.value();
      if (done(last)) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL("push.json never got there; it says windows_pushed " << last.windows_pushed << ", next_index "
                                                              << last.next_index << ", failures " << last.failures
                                                              << ", last error: " << last.last_error);
  return last;
}

// What a window holds, as the series hvprof-push sends it: samples by domain and mode, of the
// stacks a report counts (the idle loop's left out), in the order they are sent.
std::map<Part, uint64_t> SeriesOf(const std::string& directory) {
  report::LoadOptions load;
  load.stacks = true;
  auto profile = report::LoadProfile(directory, load);
  REQUIRE(profile.has_value());
  report::StackFilter filter;
  filter.events = {profile.value().metadata().events.at(0).counter};
  std::map<Part, uint64_t> out;
  for (const report::Stack& stack : profile.value().stacks()) {
    if (filter.Selects(stack)) out[{stack.domain, stack.mode}] += stack.count;
  }
  return out;
}

struct Pushed {
  Part part;
  std::string domain_name;
  uint64_t from = 0;
  uint64_t until = 0;
  std::string body;
  std::string name;
  std::string host;
};

// A request read as Pyroscope reads it, after checking what every series must carry.
Pushed ReadSeries(const Request& request) {
  INFO(request.target);
  CHECK(request.problem.empty());
  CHECK(request.method == "POST");
  CHECK(request.path == "/ingest");
  CHECK(request.query.at("format") == "pprof");
  static const std::regex kName(
      R"(^hvprof\{domain=(\d+),domain_name=([^,{}=]+),mode=(user|kernel|hypervisor),event=CPU_CLK_UNHALTED,)"
      R"(platform=sim,host=([^,{}=]+)\}$)");
  Pushed out;
  out.name = request.query.at("name");
  std::smatch match;
  REQUIRE(std::regex_match(out.name, match, kName));
  out.part = {static_cast<uint16_t>(std::stoul(match[1])), sample_mode::Byte(*sample_mode::FromName(match[3].str()))};
  out.domain_name = match[2];
  out.host = match[4];
  out.from = std::stoull(request.query.at("from"));
  out.until = std::stoull(request.query.at("until"));
  REQUIRE(request.body.size() > 20);
  CHECK(static_cast<unsigned char>(request.body[0]) == 0x1f);  // gzipped profile.proto
  out.body = request.body;
  return out;
}

// What `go tool pprof` counts in a profile, or nullopt without Go.
std::optional<uint64_t> PprofTotal(const std::string& bytes) {
  const std::string go = hvprof::testing::FindOnPath("go");
  if (go.empty()) return std::nullopt;
  hvprof::testing::TempDir dir;
  dir.Write("profile.pb.gz", bytes);
  const auto top = hvprof::testing::RunProgram({go, "tool", "pprof", "-top", "-nodecount=1", dir.File("profile.pb.gz")});
  INFO(top.err);
  REQUIRE(top.status == 0);
  std::smatch match;
  REQUIRE(std::regex_search(top.out, match, std::regex(R"(of (\d+) total)")));
  return std::stoull(match[1]);
}

}  // namespace

TEST_CASE("hvprof-push sends every closed window as labelled series holding its samples",
          "[continuous][push][e2e]") {
  Host host(TestScenario("intel-arch-v4", 41));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest2", "--event=CPU_CLK_UNHALTED:20000",
                       "--continuous=50ms", "--callgraph=6"})
              .status == 0);
  (void)host.GroundTruth(true);
  LoopbackServer server;
  Pusher pusher(host, server.url(), {});
  // A first run starts with the window in progress: window 0.
  WaitForState(host, [](const push::PushState& s) { return s.started; });
  REQUIRE(host.Hvprof({"--run-sim=160ms"}).status == 0);  // windows 0, 1 and 2 close
  const push::PushState state = WaitForState(host, [](const push::PushState& s) { return s.windows_pushed == 3; });
  INFO(pusher.log());
  CHECK(state.next_index == 3);
  CHECK(state.NotPushed() == 0);
  CHECK(state.failures == 0);
  const context::GroundTruth truth = host.GroundTruth(false);
  auto status = host.Hvprof({"--status"});
  CHECK(status.out.find("push:    3 windows pushed to " + server.url()) != std::string::npos);
  CHECK(status.out.find("the last, window 2, at") != std::string::npos);
  CHECK(status.out.find("NOT PUSHED") == std::string::npos);
  CHECK(pusher.Stop() == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);

  // The requests, in order: window by window, each window's series in (domain, mode) order.
  const std::vector<Request> requests = server.Stop();
  const store::WindowList list = store::ListWindows(store::SessionPaths{host.session_root()});
  REQUIRE(list.windows.size() == 3);
  std::map<Part, uint64_t> pushed_total;
  size_t next = 0;
  for (const store::WindowEntry& window : list.windows) {
    INFO(window.name);
    auto opened = store::OpenSession(window.directory);
    REQUIRE(opened.has_value());
    const std::map<Part, uint64_t> expected = SeriesOf(window.directory);
    REQUIRE(expected.size() >= 4);
    for (const auto& [part, count] : expected) {
      REQUIRE(next < requests.size());
      const Pushed one = ReadSeries(requests[next++]);
      INFO("domain " << part.first << " " << sample_mode::Name(part.second));
      CHECK(one.part == part);
      if (part.first == 2) CHECK(one.domain_name == "guest2");
      CHECK(one.host == opened.value().metadata.machine);
      // The window's own start and end (on the sim, simulated time after continuous mode began).
      CHECK(one.from == window.window.start_ns / 1'000'000'000);
      CHECK(one.until == (window.window.end_ns + 999'999'999) / 1'000'000'000);
      CHECK(one.from > 1'600'000'000);
      if (auto total = PprofTotal(one.body)) CHECK(*total == count);
      pushed_total[part] += count;
    }
  }
  CHECK(next == requests.size());  // nothing else, nothing twice

  // The pushed windows and the window in progress hold what the sim sampled, domain by domain and
  // mode by mode (the idle loop's stacks are not pushed, as reports leave them out).
  for (const auto& [part, count] : SeriesOf(host.current())) pushed_total[part] += count;
  auto current = store::OpenSession(host.current());
  REQUIRE(current.has_value());
  const uint32_t counter = current.value().metadata.events.at(0).counter;
  std::map<Part, uint64_t> expected;
  for (const context::TruthRow& row : truth.rows) {
    const uint16_t domain = row.domain;
    const uint64_t overflows = row.overflows.at(counter);
    if ((domain == 0 || domain == 2) && overflows != 0) expected[{domain, sample_mode::Byte(row.mode)}] += overflows;
  }
  REQUIRE(expected.size() >= 4);
  for (const auto& [part, count] : expected) {
    INFO("domain " << part.first << " " << sample_mode::Name(part.second));
    CHECK(pushed_total[part] == count);
  }
}

TEST_CASE("hvprof-push keeps windows through a server that is down, slow or refusing, and counts every one",
          "[continuous][push][e2e]") {
  Host host(TestScenario("intel-arch-v4", 42));
  REQUIRE(host.Hvprof({"--start-daemon", "--event=CPU_CLK_UNHALTED:20000", "--continuous=50ms", "--keep-age=100ms",
                       "-g"})
              .status == 0);
  const uint16_t port = hvprof::testing::ClosedPort();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  // A request may take 1.5 s (a loaded machine answers slowly, not that slowly); the retries wait
  // longer than the slow server below takes, so each attempt meets the answer it expects.
  Pusher pusher(host, url, {"--timeout=1500ms", "--first-retry=1500ms", "--max-retry=3s"});
  WaitForState(host, [](const push::PushState& s) { return s.started; });
  REQUIRE(host.Hvprof({"--run-sim=110ms"}).status == 0);  // windows 0 and 1 close

  // Down: retried, said, nothing counted as lost.
  push::PushState down = WaitForState(host, [](const push::PushState& s) { return s.failures >= 2; });
  CHECK(down.windows_pushed == 0);
  CHECK(down.NotPushed() == 0);
  CHECK(down.last_error.find("is Pyroscope running") != std::string::npos);
  auto status = host.Hvprof({"--status"});
  CHECK(status.out.find("PUSH:    failing") != std::string::npos);

  {
    // Back, but failing (503), then slow past the timeout, then refusing a series of window 0
    // (400): its other series go, it is counted as not pushed whole, and window 1 goes through.
    LoopbackServer server({Reply{503, "ingester overloaded", "", 0}, Reply{200, "", "", 3000},
                           Reply{400, "invalid profile", "", 0}},
                          port);
    const push::PushState settled =
        WaitForState(host, [](const push::PushState& s) { return s.next_index == 2 && s.failures == 0; });
    INFO(pusher.log());
    CHECK(settled.not_pushed_refused == 1);
    CHECK(settled.windows_pushed == 1);
    CHECK(settled.last_window == 1);
    const std::vector<Request> requests = server.Stop();
    REQUIRE(requests.size() >= 4);
    // The three answered 503, too late and 400 are one series of window 0, sent again each time.
    CHECK(requests[1].query.at("name") == requests[0].query.at("name"));
    CHECK(requests[2].query.at("name") == requests[0].query.at("name"));
    // The rest of window 0's series and window 1's, each once; the refused one not again.
    const auto list = store::ListWindows(store::SessionPaths{host.session_root()});
    REQUIRE(list.windows.size() == 2);
    const size_t expected = SeriesOf(list.windows[0].directory).size() - 1 + SeriesOf(list.windows[1].directory).size();
    // (Series of two windows share their names: the window is in the times, not the labels.)
    CHECK(requests.size() == 3 + expected);
    for (size_t i = 3; i < requests.size(); ++i) (void)ReadSeries(requests[i]);
    CHECK(requests[3].query.at("name") != requests[0].query.at("name"));
    CHECK(settled.series_pushed == expected);
    CHECK(pusher.log().find("invalid profile") != std::string::npos);
  }

  // Down again while the budget (--keep-age=100ms) removes windows: the one removed before it
  // could be pushed is counted, the others wait and go once the server is back.
  REQUIRE(host.Hvprof({"--run-sim=200ms"}).status == 0);  // windows 2 to 5 close; 0 to 2 are removed
  WaitForState(host, [](const push::PushState& s) { return s.failures >= 1; });
  const auto kept = store::ListWindows(store::SessionPaths{host.session_root()});
  REQUIRE(!kept.windows.empty());
  CHECK(kept.windows.front().window.index == 3);
  uint64_t series = 0;
  for (const store::WindowEntry& w : kept.windows) series += SeriesOf(w.directory).size();
  LoopbackServer back({}, port);
  const push::PushState final_state = WaitForState(host, [&](const push::PushState& s) {
    return s.next_index == kept.windows.back().window.index + 1 && s.failures == 0;
  });
  CHECK(final_state.not_pushed_removed == kept.windows.front().window.index - 2);
  CHECK(final_state.not_pushed_refused == 1);
  CHECK(final_state.windows_pushed == 1 + kept.windows.size());
  CHECK(final_state.windows_pushed + final_state.NotPushed() == final_state.next_index);  // every window counted
  CHECK(back.Count() == series);  // each series of each window once
  status = host.Hvprof({"--status"});
  INFO(status.out);
  CHECK(status.out.find("NOT PUSHED: 2 windows (1 removed by the disk budget first, 1 refused by the server") !=
        std::string::npos);
  CHECK(pusher.Stop() == 0);
  CHECK(status.out.find("hvprof-push is not running") == std::string::npos);
  CHECK(host.Hvprof({"--status"}).out.find("hvprof-push is not running") != std::string::npos);

  // A restart continues from push.json: nothing is pushed twice.
  const size_t sent_before = back.Count();
  const auto once = hvprof::testing::RunProgram({hvprof::testing::Binary("hvprof-push"), "--url=" + back.url(),
                                                 "--session-dir=" + host.session_root(), "--once"});
  INFO(once.err);
  CHECK(once.status == 0);
  CHECK(once.out.find("hvprof-push: 0 windows pushed") != std::string::npos);
  CHECK(back.Stop().size() == sent_before);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
}

TEST_CASE("hvprof-push refuses credentials in the URL, a bad URL and a second pusher", "[continuous][push]") {
  Host host(TestScenario("intel-arch-v4", 43));
  REQUIRE(host.Hvprof({"--start-daemon", "--continuous=50ms"}).status == 0);
  const std::string root = "--session-dir=" + host.session_root();
  const std::string push = hvprof::testing::Binary("hvprof-push");
  auto secret = hvprof::testing::RunProgram({push, "--url=http://me:s3cret@127.0.0.1:4040", root, "--once"});
  CHECK(secret.status == 2);
  CHECK(secret.err.find("HVPROF_PUSH_PASSWORD") != std::string::npos);
  CHECK(secret.err.find("s3cret") == std::string::npos);
  auto ftp = hvprof::testing::RunProgram({push, "--url=ftp://127.0.0.1/", root, "--once"});
  CHECK(ftp.status == 2);
  CHECK(ftp.err.find("http://") != std::string::npos);
  auto missing = hvprof::testing::RunProgram({push, root});
  CHECK(missing.status == 2);
  CHECK(missing.err.find("--url is required") != std::string::npos);
  auto bad_wait = hvprof::testing::RunProgram({push, "--url=http://127.0.0.1:1", root, "--first-retry=soon"});
  CHECK(bad_wait.status == 2);
  CHECK(bad_wait.err.find("--first-retry=soon") != std::string::npos);

  LoopbackServer server;
  Pusher first(host, server.url(), {});
  WaitForState(host, [](const push::PushState& s) { return s.pid != 0; });
  auto second = hvprof::testing::RunProgram({push, "--url=" + server.url(), root, "--once"});
  CHECK(second.status == 1);
  CHECK(second.err.find("another hvprof-push runs for") != std::string::npos);
  CHECK(first.Stop() == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
}
