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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <string_view>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "archive_support.h"
#include "hvprof/base/scoped_fd.h"
#include "programs.h"
#include "skip.h"
#include "temp_dir.h"

using namespace hvprof;
using hvprof::testing::Binary;
using hvprof::testing::CommandResult;
using hvprof::testing::RunProgram;
using hvprof::testing::TempDir;
using hvprof::ScopedFd;

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

namespace {

// A hostile debuginfod on loopback: it answers every request as `behaviour` says, and counts them.
class HostileServer {
 public:
  enum class Behaviour {
    kFile,  // 200 with `file`'s bytes (whatever they are)
    kHuge,  // 200, then zeros without end (no length), until the client hangs up
    kSlow,  // 200 with a length, then a byte every 200 ms
  };
  HostileServer(Behaviour behaviour, std::string file = "") : behaviour_(behaviour), file_(std::move(file)) {
    listener_ = ScopedFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(listener_.valid());
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_.get(), 16) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~HostileServer() {
    stop_ = true;
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  // With credentials in it, as a user's DEBUGINFOD_URLS may have: no message may show them.
  std::string url() const { return "http://hvprof:s3cretPW@127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }

 private:
  void Serve() {
    while (!stop_) {
      const int client = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      ++requests_;
      std::thread([this, client] { Answer(client); }).detach();
    }
  }
  void Answer(int client) {
    char request[4096];
    (void)!::read(client, request, sizeof request);
    auto send = [client](std::string_view bytes) {
      return ::send(client, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
    };
    if (behaviour_ == Behaviour::kFile) {
      const std::string body = testing::ReadText(file_);
      send("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
           body);
    } else if (behaviour_ == Behaviour::kHuge) {
      send("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
      const std::string zeros(1 << 16, '\0');
      for (int i = 0; i < (1 << 14) && !stop_ && send(zeros); ++i) {  // at most 1 GiB
      }
    } else {
      send("HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n");
      for (int i = 0; i < 1000 && !stop_ && send("x"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ::close(client);
  }

  Behaviour behaviour_;
  std::string file_;
  ScopedFd listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// The build-id of `image` as readelf reads its note (a stripped image has no symbols to
// describe it by).
std::string NoteBuildId(const std::string& image) {
  const CommandResult notes = RunProgram({"/usr/bin/readelf", "-n", image});
  REQUIRE(notes.status == 0);
  const size_t at = notes.out.find("Build ID: ");
  REQUIRE(at != std::string::npos);
  return notes.out.substr(at + 10, notes.out.find('\n', at) - at - 10);
}

// The largest file under `directory` (a debuginfod cache), in bytes.
uintmax_t LargestFile(const std::string& directory) {
  uintmax_t largest = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory, ec)) {
    if (entry.is_regular_file(ec)) largest = std::max(largest, entry.file_size(ec));
  }
  return largest;
}

}  // namespace

TEST_CASE("a hostile debuginfod can neither rename an image's functions nor hold a report up", "[debuginfod][safety]") {
  // Issue 38: a debug file without a build-id was used (every sample of the image renamed), and
  // named as used even when refused; downloads had no bound on size (3 GB into the cache) or time
  // (a report stalled for minutes); the credentials of DEBUGINFOD_URLS reached messages.
  TempDir dir;
  // The image here is stripped: its functions' names come from its debug info.
  const std::string image = dir.File("images/bin/inlined");
  testing::CopyFile(HVPROF_INLINED_FIXTURE, image);
  REQUIRE(RunProgram({"/usr/bin/objcopy", "--strip-all", image}).status == 0);
  const std::string build_id = NoteBuildId(image);
  REQUIRE(build_id == testing::BuildIdOf(HVPROF_INLINED_FIXTURE));
  const uint64_t work = testing::FunctionAddress(HVPROF_INLINED_FIXTURE, "work");
  const std::string root = dir.File("root");
  testing::WriteImageSession(root, "run1", {{image, build_id, 0x400000, 0, {work, work + 1}}});
  // Another stripped image, for a second question to the same server.
  const std::string other = dir.File("images/bin/other");
  testing::CopyFile("/usr/bin/true", other);
  const std::string other_id = NoteBuildId(other);
  REQUIRE(!other_id.empty());
  testing::WriteImageSession(root, "run2", {{image, build_id, 0x400000, 0, {work}},
                                            {other, other_id, 0x7f0000000000, 0x7f0000000000, {0x7f0000001000}}});
  auto report = [&](const std::string& session, const std::string& url, std::vector<std::string> limits) {
    limits.push_back("DEBUGINFOD_URLS=" + url);
    limits.push_back("DEBUGINFOD_CACHE_PATH=" + dir.File("cache"));
    return RunProgram({Binary("hvprof-report"), "--session-dir=" + root, session, "-l"}, limits);
  };

  SECTION("a file without a build-id is not used, nor named as used, nor kept") {
    // The fixture's own debug info with every function renamed, and no build-id: served as
    // whatever is asked for.
    const std::string forged = dir.File("forged.debug");
    REQUIRE(RunProgram({"/usr/bin/objcopy", "--only-keep-debug", "--remove-section=.note.gnu.build-id",
                        "--prefix-symbols=EVIL_", HVPROF_INLINED_FIXTURE, forged}).status == 0);
    HostileServer server(HostileServer::Behaviour::kFile, forged);
    // As the image (the one here has no symbols of its own).
    const CommandResult as_image = report("run1", server.url(), {});
    INFO(as_image.out << as_image.err);
    CHECK(server.requests() >= 1);
    CHECK(as_image.out.find("EVIL_") == std::string::npos);
    CHECK(as_image.out.find("from debuginfod: " + image) == std::string::npos);
    CHECK(as_image.out.find("has no build-id") != std::string::npos);
    CHECK((as_image.out + as_image.err).find("s3cretPW") == std::string::npos);
    CHECK(LargestFile(dir.File("cache")) < 1000);  // not kept for next time (the cache keeps only its settings)
    // As the debug info of an image that has its symbols but no DWARF (-g asks for lines).
    const std::string lined = dir.File("images/bin/lined");
    testing::CopyFile(HVPROF_INLINED_FIXTURE, lined);
    REQUIRE(RunProgram({"/usr/bin/objcopy", "--strip-debug", lined}).status == 0);
    testing::WriteImageSession(root, "run3", {{lined, build_id, 0x400000, 0, {work, work + 1}}});
    const CommandResult as_debug =
        RunProgram({Binary("hvprof-report"), "--session-dir=" + root, "run3", "-g"},
                   {"DEBUGINFOD_URLS=" + server.url(), "DEBUGINFOD_CACHE_PATH=" + dir.File("cache3")});
    INFO(as_debug.out << as_debug.err);
    CHECK(as_debug.out.find(" work") != std::string::npos);
    CHECK(as_debug.out.find("EVIL_") == std::string::npos);
    CHECK(as_debug.out.find("from debuginfod: the debug info") == std::string::npos);
    CHECK(as_debug.out.find("has no build-id") != std::string::npos);
    CHECK((as_debug.out + as_debug.err).find("s3cretPW") == std::string::npos);
    CHECK(LargestFile(dir.File("cache3")) < 1000);
  }
  SECTION("a download without end is cut at DEBUGINFOD_MAXSIZE") {
    HostileServer server(HostileServer::Behaviour::kHuge);
    const CommandResult result = report("run1", server.url(), {"DEBUGINFOD_MAXSIZE=1000000"});
    INFO(result.out << result.err);
    CHECK(result.out.find("sent more than 1000000 bytes") != std::string::npos);
    CHECK(result.out.find("http://127.0.0.1:") != std::string::npos);  // the server, named
    CHECK((result.out + result.err).find("s3cretPW") == std::string::npos);
    CHECK(LargestFile(dir.File("cache")) < 2000000);
  }
  SECTION("hvprof archive names the server without the credentials of DEBUGINFOD_URLS") {
    std::filesystem::remove(image);  // asked of the server, which sends nothing of use
    HostileServer server(HostileServer::Behaviour::kFile, dir.File("nothing"));
    const CommandResult archived =
        RunProgram({Binary("hvprof"), "archive", "--session-dir=" + root, "run1", "-o", dir.File("run1.tar")},
                   {"DEBUGINFOD_URLS=" + server.url(), "DEBUGINFOD_CACHE_PATH=" + dir.File("cache")});
    INFO(archived.err);
    CHECK(archived.status == 1);
    CHECK(server.requests() >= 1);
    CHECK(archived.err.find("http://127.0.0.1:") != std::string::npos);
    CHECK(archived.err.find("s3cretPW") == std::string::npos);
  }
  SECTION("a server slower than DEBUGINFOD_MAXTIME is given up on, once for all") {
    HostileServer server(HostileServer::Behaviour::kSlow);
    const CommandResult result = report("run2", server.url(), {"DEBUGINFOD_MAXTIME=2"});
    INFO(result.out << result.err);
    CHECK(result.out.find("took more than 2 s") != std::string::npos);
    CHECK(result.out.find("http://127.0.0.1:") != std::string::npos);
    CHECK((result.out + result.err).find("s3cretPW") == std::string::npos);
    CHECK(server.requests() == 1);  // the second image's question was not asked of it
  }
}
