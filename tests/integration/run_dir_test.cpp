// Run directories as another local user attacks them (issue 38): she makes the directory another
// user's hvprof-hv will serve first (0777, hers), puts her own server in it, and waits to be
// spoken to as the hypervisor. hvprof-hv must refuse the directory, and no client may say a
// word to a server that is neither root's nor its own user's.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/base/socket.h"
#include "other_user.h"
#include "programs.h"
#include "sim_harness.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::testing::Binary;
using hvprof::testing::CommandResult;
using hvprof::testing::RunProgram;
using hvprof::testing::TempDir;

namespace {

using hvprof::testing::BecomeUser;

constexpr uid_t kSquatter = hvprof::testing::kNobody;
constexpr uid_t kVictim = 65533;  // a user with no hvprof-hv of her own yet

// The squatter's server on `socket_path`, in a child of hers: it accepts every connection and
// tells through a pipe, per connection, whether anything was said to it ('y') or not ('n').
class FakeServer {
 public:
  explicit FakeServer(const std::string& socket_path) {
    int ready[2], said[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(said, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      BecomeUser(kSquatter);
      auto listener = hvprof::ListenUnix(socket_path, {.mode = 0666, .owner = std::nullopt, .backlog = 8,
                                                       .nonblocking = false});
      if (!listener) ::_exit(4);
      (void)!::write(ready[1], "r", 1);
      for (;;) {
        const int client = ::accept(listener.value().get(), nullptr, nullptr);
        if (client < 0) continue;
        pollfd one = {client, POLLIN, 0};
        char byte = 0;
        // A client that speaks does so at once; one that checked who we are hangs up.
        const bool spoke = ::poll(&one, 1, 2000) > 0 && ::read(client, &byte, 1) > 0;
        (void)!::write(said[1], spoke ? "y" : "n", 1);
        ::close(client);
      }
    }
    ::close(ready[1]);
    ::close(said[1]);
    said_ = hvprof::ScopedFd(said[0]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
  }
  ~FakeServer() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  // What the connections so far were told: "n" per silent one, "y" per one spoken to.
  std::string Heard() {
    std::string heard;
    pollfd one = {said_.get(), POLLIN, 0};
    char byte = 0;
    while (::poll(&one, 1, 3000) > 0 && ::read(said_.get(), &byte, 1) == 1) heard += byte;
    return heard;
  }

 private:
  pid_t pid_ = -1;
  hvprof::ScopedFd said_;
};

// Runs `argv` as `uid` (0: as we are) with `environment`, waiting at most `limit`: a daemon that
// serves instead of refusing is ended then, and the result says so with status -1.
CommandResult RunWithin(const std::vector<std::string>& argv, uid_t uid, std::chrono::seconds limit,
                        const std::vector<std::string>& environment = {}) {
  TempDir out;
  REQUIRE(::chmod(out.path().c_str(), 0777) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int to = ::open(out.File("out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    const int err = ::open(out.File("err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (to < 0 || err < 0) ::_exit(5);
    ::dup2(to, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    if (uid != 0) BecomeUser(uid);
    ::clearenv();  // hers: no XDG_RUNTIME_DIR of ours
    ::setenv("PATH", "/usr/bin:/bin", 1);
    hvprof::testing::ExecProgram(argv, environment);
  }
  CommandResult result;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) != child) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.status = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = hvprof::testing::ReadText(out.File("out"));
  result.err = hvprof::testing::ReadText(out.File("err"));
  return result;
}

// Makes `path` as the squatter would: hers, open to all.
void Squat(const std::string& path) {
  REQUIRE(hvprof::testing::RunAsUser(kSquatter, [&] {
            ::umask(0);
            return ::mkdir(path.c_str(), 0777) == 0;
          }) == 0);
}

const std::string kScenario = std::string(HVPROF_SOURCE_DIR) + "/examples/default.json";

}  // namespace

TEST_CASE("a run directory another user made first is refused, and her server is never spoken to",
          "[hv][run-dir][safety]") {
  if (::geteuid() != 0 && hvprof::testing::SkipTest("the squatter runs as another user (nobody): needs root")) return;
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 01777) == 0);  // as /tmp: anyone may make a directory here
  const std::string run = dir.File("run");
  Squat(run);
  FakeServer server(run + "/domain-0.sock");

  // Root's clients check who serves there before they say anything.
  const CommandResult events = RunWithin({Binary("hvprof"), "--list-events", "--run-dir=" + run}, 0,
                                         std::chrono::seconds(60));
  INFO(events.err);
  CHECK(events.status == 1);
  CHECK(events.err.find("served by uid 65534") != std::string::npos);
  const CommandResult start =
      RunWithin({Binary("hvprof"), "--start-daemon", "--platform=sim", "--scenario=" + kScenario, "--run-dir=" + run,
                 "--session-dir=" + dir.File("sessions")},
                0, std::chrono::seconds(120));
  INFO(start.err);
  if (start.status == 0) {  // it started, through her server: end what it started
    (void)RunWithin({Binary("hvprof"), "--shutdown", "--session-dir=" + dir.File("sessions")}, 0,
                    std::chrono::seconds(60));
  }
  CHECK(start.status == 1);
  CHECK(start.err.find("owned by uid 65534") != std::string::npos);
  CHECK(server.Heard().find('y') == std::string::npos);

  // Root's hvprof-hv does not serve there.
  const CommandResult hv = RunWithin({Binary("hvprof-hv"), "--platform=sim", "--scenario=" + kScenario,
                                      "--run-dir=" + run},
                                     0, std::chrono::seconds(60));
  INFO(hv.err);
  CHECK(hv.status != -1);  // it ended by itself, refusing
  CHECK(hv.status != 0);
  CHECK(hv.err.find("not safe for the run directory") != std::string::npos);
  CHECK(hv.err.find("owned by uid 65534") != std::string::npos);
  struct stat socket {};
  REQUIRE(::lstat((run + "/domain-0.sock").c_str(), &socket) == 0);
  CHECK(socket.st_uid == kSquatter);  // hers is still there: ours did not replace it either
}

TEST_CASE("a user's default run directory made first by another user is refused", "[hv][run-dir][safety]") {
  if (::geteuid() != 0 && hvprof::testing::SkipTest("the users run as other uids (65533, nobody): needs root")) return;
  // Without XDG_RUNTIME_DIR, a user's hvprof-hv serves /tmp/hvprof-UID: a name anyone can take.
  const std::string run = "/tmp/hvprof-" + std::to_string(kVictim);
  std::error_code ec;
  std::filesystem::remove_all(run, ec);
  Squat(run);
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } cleanup{run};
  // A scenario the victim can load (System.map files anyone may read; kallsyms hides its
  // addresses from her).
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  dir.Write("host.json", hvprof::testing::TestScenario().dump());
  const CommandResult hv = RunWithin({Binary("hvprof-hv"), "--platform=sim", "--scenario=" + dir.File("host.json")},
                                     kVictim, std::chrono::seconds(60));
  INFO(hv.err);
  CHECK(hv.status != -1);
  CHECK(hv.status != 0);
  CHECK(hv.err.find(run) != std::string::npos);
  CHECK(hv.err.find("owned by uid 65534") != std::string::npos);
}
