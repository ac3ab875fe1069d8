// hvprof-report asks debuginfod servers for what is missing here: a real `debuginfod` (Debian's)
// serves a directory on loopback; a session whose image is gone is symbolized from it, and the
// report says which files came from there; --no-debuginfod asks nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "archive_support.h"
#include "programs.h"
#include "skip.h"
#include "temp_dir.h"

using namespace hvprof;
using hvprof::testing::Binary;
using hvprof::testing::CommandResult;
using hvprof::testing::RunProgram;
using hvprof::testing::TempDir;

namespace {

constexpr const char* kDebuginfod = "/usr/bin/debuginfod";

uint16_t FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

// The status code of GET `path` on 127.0.0.1:port, or 0 when nothing answers.
int HttpStatus(uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int status = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char reply[64] = {};
      if (::read(fd, reply, sizeof reply - 1) > 12) status = std::atoi(reply + 9);  // "HTTP/1.1 200"
    }
  }
  ::close(fd);
  return status;
}

// debuginfod serving the ELF files of `directory` on loopback, ended with the test.
class Server {
 public:
  Server(const std::string& directory, const std::string& work) : port_(FreeLoopbackPort()), log_(work + "/debuginfod.log") {
    const std::string port = std::to_string(port_), database = work + "/debuginfod.sqlite";
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out >= 0) {
        ::dup2(out, STDOUT_FILENO);
        ::dup2(out, STDERR_FILENO);
      }
      ::execl(kDebuginfod, kDebuginfod, "-F", "-p", port.c_str(), "-d", database.c_str(), "-t", "1", directory.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Server() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Waits until the server has indexed `build_id`'s executable.
  void WaitFor(const std::string& build_id) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (HttpStatus(port_, "/buildid/" + build_id + "/executable") != 200) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL("debuginfod exited; see " << log_);
      }
      if (std::chrono::steady_clock::now() > deadline) FAIL("debuginfod did not index the image in 60 s; see " << log_);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

 private:
  uint16_t port_;
  std::string log_;
  pid_t pid_ = -1;
};

}  // namespace

TEST_CASE("images missing here come from debuginfod by build-id, and the report says so", "[debuginfod]") {
  if (!std::filesystem::exists(kDebuginfod)) {
    (void)testing::SkipTest("needs the debuginfod server (Debian package debuginfod; scripts/install-deps.sh installs it)");
    return;
  }
  TempDir dir;
  const std::string served = dir.File("served"), image = dir.File("images/bin/inlined"), root = dir.File("root");
  testing::CopyFile(HVPROF_INLINED_FIXTURE, served + "/inlined");
  testing::CopyFile(HVPROF_INLINED_FIXTURE, image);
  const std::string build_id = testing::BuildIdOf(image);
  REQUIRE(!build_id.empty());
  testing::WriteImageSession(
      root, "run1",
      {{image, build_id, 0x400000, 0, {testing::FunctionAddress(image, "work"), testing::FunctionAddress(image, "main")}}});
  std::filesystem::create_directories(dir.File("work"));
  Server server(served, dir.File("work"));
  server.WaitFor(build_id);
  std::filesystem::remove(image);

  const std::vector<std::string> environment = {"DEBUGINFOD_URLS=" + server.url(),
                                                "DEBUGINFOD_CACHE_PATH=" + dir.File("cache")};
  auto report = [&](std::vector<std::string> args, const std::vector<std::string>& env) {
    std::vector<std::string> argv = {Binary("hvprof-report"), "--session-dir=" + root, "run1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv, env);
  };
  const std::string note = "from debuginfod: " + image + " (build-id " + build_id + ")";
  const CommandResult fetched = report({"-l"}, environment);
  INFO(fetched.err);
  CHECK(fetched.status == 0);
  CHECK(fetched.out.find(" work\n") != std::string::npos);
  CHECK(fetched.out.find("Note: " + note) != std::string::npos);
  // -f still names the image by the path that was profiled, not the cache's.
  CHECK(report({"-l", "-f"}, environment).out.find(image + " ") != std::string::npos);
  const CommandResult json = report({"-l", "--format=json"}, environment);
  REQUIRE(json.status == 0);
  const auto parsed = nlohmann::json::parse(json.out);
  bool noted = false;
  for (const auto& entry : parsed["notes"]) noted |= entry.get<std::string>().starts_with(note);
  CHECK(noted);

  // Off: nothing is asked, the image is missing and the report says that instead.
  for (const auto& [args, env] : {std::pair{std::vector<std::string>{"-l", "--no-debuginfod"}, environment},
                                  std::pair{std::vector<std::string>{"-l"}, std::vector<std::string>{}}}) {
    const CommandResult off = report(args, env);
    INFO(off.out << off.err);
    CHECK(off.status == 3);
    CHECK(off.out.find("from debuginfod") == std::string::npos);
    CHECK(off.out.find(" work\n") == std::string::npos);
    CHECK(off.out.find("(no symbols)") != std::string::npos);
  }

  // hvprof archive fills the missing image from the server too, and the archive then reports
  // without it.
  const std::string tar = dir.File("run1.tar");
  const CommandResult no_server =
      RunProgram({Binary("hvprof"), "archive", "--session-dir=" + root, "run1", "-o", tar});
  CHECK(no_server.status == 1);
  CHECK(no_server.err.find("DEBUGINFOD_URLS") != std::string::npos);
  const CommandResult archived =
      RunProgram({Binary("hvprof"), "archive", "--session-dir=" + root, "run1", "-o", tar}, environment);
  INFO(archived.err);
  REQUIRE(archived.status == 0);
  CHECK(archived.err.find(image + " (build-id " + build_id + ") came from debuginfod") != std::string::npos);
  const CommandResult from_archive = RunProgram({Binary("hvprof-report"), "archive:" + tar, "-l"});
  CHECK(from_archive.status == 0);
  CHECK(from_archive.out.find(" work\n") != std::string::npos);

  // An image here without its DWARF: for -g, its debug info comes from the server.
  testing::CopyFile(HVPROF_INLINED_FIXTURE, image);
  REQUIRE(RunProgram({"/usr/bin/objcopy", "--strip-debug", image}).status == 0);
  REQUIRE(testing::BuildIdOf(image) == build_id);
  const std::vector<std::string> fresh_cache = {"DEBUGINFOD_URLS=" + server.url(),
                                                "DEBUGINFOD_CACHE_PATH=" + dir.File("cache2")};
  const CommandResult lines = report({"-g"}, fresh_cache);
  INFO(lines.out << lines.err);
  CHECK(lines.out.find("inlined.c:") != std::string::npos);
  CHECK(lines.out.find("Note: from debuginfod: the debug info of " + image) != std::string::npos);
  CHECK(lines.out.find("Note: " + note) == std::string::npos);  // the image itself was here
  CHECK(report({"-g", "--no-debuginfod"}, fresh_cache).out.find("inlined.c:") == std::string::npos);
}
