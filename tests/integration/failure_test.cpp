// Failures while profiling, as a user meets them: a full disk, hvprof-hv dying, hvprofd killed
// or hung, a samples file cut or repeated. Each is counted, said by --status and the report
// (exit 3, "incomplete"), and never stops the user from shutting down or starting again.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "host_harness.h"
#include "sim_harness.h"
#include "skip.h"

using namespace hvprof;
using hvprof::testing::CommandResult;
using hvprof::testing::Host;
using hvprof::testing::SkipTest;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;

namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Alive, and not a zombie that nobody has reaped yet (a daemon's parent may be a reaper that
// takes its time).
bool Alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

bool WaitGone(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (Alive(pid)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A small tmpfs over `directory`, for as long as this lives (root only).
class Tmpfs {
 public:
  Tmpfs(const std::string& directory, const std::string& size) : directory_(directory) {
    std::filesystem::create_directories(directory);
    mounted_ = ::mount("tmpfs", directory.c_str(), "tmpfs", 0, ("mode=0755,size=" + size).c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(directory_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string directory_;
  bool mounted_ = false;
  std::string error_;
};

uint64_t SamplesInFile(const std::string& session) {
  uint64_t count = 0;
  auto read = store::ReadSamplesFile(session + "/samples.hvs", [&](const store::StoredSample&) { ++count; });
  REQUIRE(read.has_value());
  return count;
}

Json ReportJson(Host& host, int expected_status, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--format=json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const CommandResult report = host.Report(args);
  INFO(report.err);
  CHECK(report.status == expected_status);
  Json json = Json::parse(report.out, nullptr, false);
  REQUIRE(json.is_object());
  return json;
}

std::string Problems(const Json& report) {
  std::string text;
  for (const Json& problem : report.value("problems", Json::array())) text += problem.get<std::string>() + "\n";
  return text;
}

}  // namespace

TEST_CASE("a full disk: samples not written are counted, and status, stop, shutdown and the report say so",
          "[agent][failure]") {
  Host host(TestScenario("intel-arch-v4", 31));
  // 3 MiB: the session's 1 MiB reserve, and room for about 150k samples.
  Tmpfs disk(host.session_root(), "3m");
  if (!disk.mounted()) {
    (void)SkipTest("cannot mount a small tmpfs to fill (" + disk.error() + "); needs root");
    return;
  }
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=2"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  for (int i = 0; i < 40 && !Contains(host.Hvprof({"--status"}).out, "NOT WRITTEN"); ++i) {
    REQUIRE(host.Hvprof({"--run-sim=200ms"}).status == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the periodic flush
  }
  const CommandResult status = host.Hvprof({"--status"});
  INFO(status.out);
  REQUIRE(Contains(status.out, "NOT WRITTEN"));
  CHECK(Contains(status.out, "the disk is full"));

  const CommandResult stopped = host.Hvprof({"--stop"});
  INFO(stopped.out << stopped.err);
  CHECK(stopped.status == 3);
  CHECK(Contains(stopped.out, "warning:"));
  CHECK(Contains(stopped.out, "could not be written"));
  const pid_t agent = host.AgentPid();
  const CommandResult shut = host.Hvprof({"--shutdown"});
  INFO(shut.out << shut.err);
  CHECK(shut.status == 3);
  CHECK(Contains(shut.out, "profiling shut down"));
  CHECK(WaitGone(agent, std::chrono::seconds(5)));

  // The agent's own accounting: every sample drained is stored or counted as not written.
  auto session = store::OpenSession(host.current());
  REQUIRE(session.has_value());
  const store::SessionMetadata& m = session.value().metadata;
  uint64_t drained = 0, malformed = 0;
  for (const store::RingRecord& ring : m.rings) {
    drained += ring.drained;
    malformed += ring.malformed;
  }
  CHECK(m.losses.store_failed > 0);
  CHECK(m.samples_stored == SamplesInFile(host.current()));
  CHECK(drained - malformed == m.samples_stored + m.losses.store_failed);
  REQUIRE(!m.incomplete.empty());
  CHECK(Contains(m.incomplete.back(), "could not be written"));

  const Json report = ReportJson(host, 3);
  CHECK(Contains(Problems(report), "the session is incomplete"));
  bool store_loss = false;
  for (const Json& loss : report["losses"]) {
    store_loss |= loss.value("count", uint64_t{0}) == m.losses.store_failed && m.losses.store_failed > 0;
  }
  CHECK(store_loss);
}

TEST_CASE("hvprof-hv dies while profiling: hvprofd keeps the session, marks it incomplete and exits",
          "[agent][failure]") {
  Host host(TestScenario("intel-arch-v4", 32));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=2"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=200ms"}).status == 0);
  const pid_t agent = host.AgentPid();
  REQUIRE(agent > 0);
  host.KillHypervisor();
  // It notices at once (its link hangs up), writes the session and goes.
  CHECK(WaitGone(agent, std::chrono::seconds(10)));

  const CommandResult status = host.Hvprof({"--status"});
  INFO(status.out);
  CHECK(Contains(status.out, "not running"));
  CHECK(Contains(status.out, "incomplete: hvprof-hv (the hypervisor side) went away while profiling"));
  const Json report = ReportJson(host, 3);
  CHECK(Contains(Problems(report), "went away while profiling"));
  auto session = store::OpenSession(host.current());
  REQUIRE(session.has_value());
  CHECK(session.value().metadata.samples_stored > 0);
  CHECK(session.value().metadata.samples_stored == SamplesInFile(host.current()));
  CHECK(session.value().metadata.profiling.back().stop_ns != 0);

  // Nothing stale is left behind: the next --start-daemon says what is really wrong.
  const CommandResult again = host.Hvprof({"--start-daemon", "--passive-domains=2"});
  INFO(again.out << again.err);
  CHECK(again.status != 0);
  CHECK_FALSE(Contains(again.err, "already running"));
  CHECK(Contains(again.err, "hvprof-hv"));
  // Stop and shutdown with nobody running are not errors.
  CHECK(host.Hvprof({"--stop"}).status == 0);
  CHECK(host.Hvprof({"--shutdown"}).status == 0);
}

TEST_CASE("a hung hvprofd: --shutdown ends it in bounded time and the next one recovers", "[agent][failure]") {
  Host host(TestScenario("intel-arch-v4", 33));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=2"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=100ms"}).status == 0);
  REQUIRE(host.Hvprof({"--dump"}).status == 0);
  const pid_t agent = host.AgentPid();
  REQUIRE(::kill(agent, SIGSTOP) == 0);
  const auto started = std::chrono::steady_clock::now();
  const CommandResult shut = host.Hvprof({"--shutdown"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(shut.out << shut.err);
  CHECK(shut.status == 3);
  CHECK(Contains(shut.out, "did not answer"));
  CHECK(seconds < 20);
  CHECK(WaitGone(agent, std::chrono::seconds(1)));

  // SIGTERM (with SIGCONT, for a stopped one) lets it close the session properly; one that
  // does not react gets SIGKILL, which the killed-agent test covers.
  CHECK(Contains(shut.out, "ended with SIGTERM"));
  const CommandResult again = host.Hvprof({"--start-daemon", "--passive-domains=2"});
  INFO(again.out << again.err);
  REQUIRE(again.status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=100ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  auto session = store::OpenSession(host.current());
  REQUIRE(session.has_value());
  const store::SessionMetadata& m = session.value().metadata;
  // The continued session counts what both agents wrote.
  CHECK(m.samples_stored == SamplesInFile(host.current()));
  uint64_t by_mode = 0;
  for (const auto& [key, count] : m.samples_by_domain_mode) by_mode += count;
  CHECK(by_mode == m.samples_stored);
  CHECK(m.incomplete.empty());
  (void)ReportJson(host, 0);
}

TEST_CASE("a samples file cut short or with a chunk repeated is reported as such, never double-counted",
          "[report][bad-input][failure]") {
  Host host(TestScenario("intel-arch-v4", 34));
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=2"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=100ms"}).status == 0);
  REQUIRE(host.Hvprof({"--dump"}).status == 0);
  const std::string samples = host.current() + "/samples.hvs";
  const auto first_part = std::filesystem::file_size(samples);
  REQUIRE(host.Hvprof({"--run-sim=100ms"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  const Json whole = ReportJson(host, 0);
  const uint64_t total = whole["session"]["samples"].get<uint64_t>();
  REQUIRE(total > 0);
  const auto whole_size = std::filesystem::file_size(samples);
  REQUIRE(whole_size > first_part);

  SECTION("chunks appended again") {
    {
      std::string bytes(whole_size - first_part, '\0');
      std::FILE* in = std::fopen(samples.c_str(), "rb");
      REQUIRE(in != nullptr);
      std::fseek(in, static_cast<long>(first_part), SEEK_SET);
      REQUIRE(std::fread(bytes.data(), 1, bytes.size(), in) == bytes.size());
      std::fclose(in);
      std::FILE* out = std::fopen(samples.c_str(), "ab");
      REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), out) == bytes.size());
      std::fclose(out);
    }
    const Json report = ReportJson(host, 3);
    CHECK(report["session"]["samples"].get<uint64_t>() == total);
    CHECK(Contains(Problems(report), "repeats a chunk read before"));
  }
  SECTION("the last chunks cut off at a chunk boundary") {
    std::filesystem::resize_file(samples, first_part);
    const Json report = ReportJson(host, 3);
    CHECK(report["session"]["samples"].get<uint64_t>() < total);
    CHECK(Contains(Problems(report), "was cut short"));
  }
}

TEST_CASE("a session directory others could change is refused before anything starts", "[agent][safety]") {
  Host host(TestScenario("intel-arch-v4", 35));
  std::filesystem::create_directories(host.session_root());
  REQUIRE(::chmod(host.session_root().c_str(), 0777) == 0);
  const CommandResult started = host.Hvprof({"--start-daemon", "--passive-domains=2"});
  INFO(started.out << started.err);
  CHECK(started.status != 0);
  CHECK(Contains(started.err, "is not safe for hvprof's sessions: it is writable by every user"));
  CHECK_FALSE(std::filesystem::exists(host.session_root() + "/daemonrc.json"));
  CHECK_FALSE(std::filesystem::exists(host.session_root() + "/lock"));
  // Made safe, it is used.
  REQUIRE(::chmod(host.session_root().c_str(), 0755) == 0);
  CHECK(host.Hvprof({"--start-daemon", "--passive-domains=2"}).status == 0);
}
