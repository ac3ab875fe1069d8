// ListenUnix: a socket that is there is a socket that listens, with the asked mode.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/base/socket.h"
#include "other_user.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::testing::TempDir;

namespace {

// connect(2) to `path`; the errno on failure, 0 on success.
int ConnectTo(const std::string& path) {
  hvprof::ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 ? 0 : errno;
}

}  // namespace

TEST_CASE("ListenUnix: the socket appears listening, with its mode, and replaces a stale one", "[base][socket]") {
  TempDir dir;
  const std::string path = dir.File("server.sock");
  // A client polling for the path, as the test harnesses and hvprof do, must never be refused.
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0}, connected{0};
  std::thread client([&] {
    while (!stop) {
      if (!std::filesystem::exists(path)) continue;
      const int err = ConnectTo(path);
      if (err == 0) ++connected;
      else if (err != ENOENT) ++refused;
    }
  });
  for (int round = 0; round < 50; ++round) {
    auto listener = hvprof::ListenUnix(path, {.mode = 0600, .owner = std::nullopt, .backlog = 64, .nonblocking = true});
    REQUIRE(listener.has_value());
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ::unlink(path.c_str());
  }
  stop = true;
  client.join();
  CHECK(refused == 0);
  CHECK(connected > 0);
  // No temporary names are left behind.
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++files;
  CHECK(files == 0);

  // A stale socket (its server gone) is replaced.
  { auto first = hvprof::ListenUnix(path); REQUIRE(first.has_value()); }
  CHECK(ConnectTo(path) == ECONNREFUSED);
  auto second = hvprof::ListenUnix(path);
  REQUIRE(second.has_value());
  CHECK(ConnectTo(path) == 0);
}

TEST_CASE("ListenUnix: a path longer than sun_path is refused with what to do", "[base][socket]") {
  const std::string path = "/tmp/" + std::string(120, 'x') + ".sock";
  auto listener = hvprof::ListenUnix(path);
  REQUIRE_FALSE(listener.has_value());
  CHECK_THAT(listener.error().message(), Catch::Contains("too long"));
}

TEST_CASE("ConnectUnix: a server of root's or ours is spoken to, another user's is not", "[base][socket][safety]") {
  // Issue 38: a user who made another's run directory first could put her own server there, and
  // the clients spoke to it as to hvprof-hv.
  if (::geteuid() != 0 && hvprof::testing::SkipTest("running a server as another user needs root")) return;
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  const std::string ours = dir.File("ours.sock"), theirs = dir.File("theirs.sock");
  auto listener = hvprof::ListenUnix(ours, {.mode = 0666, .owner = std::nullopt, .backlog = 4, .nonblocking = false});
  REQUIRE(listener.has_value());
  auto connected = hvprof::ConnectUnix(ours, "do something");
  CHECK(connected.has_value());

  // Nobody's server: it records whether anything was said to it.
  int ready[2], said[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(said) == 0);
  const pid_t server = ::fork();
  REQUIRE(server >= 0);
  if (server == 0) {
    hvprof::testing::BecomeUser(hvprof::testing::kNobody);
    auto theirs_listener =
        hvprof::ListenUnix(theirs, {.mode = 0666, .owner = std::nullopt, .backlog = 4, .nonblocking = false});
    if (!theirs_listener) ::_exit(4);
    (void)!::write(ready[1], "r", 1);
    const int client = ::accept(theirs_listener.value().get(), nullptr, nullptr);
    char byte = 0;
    const ssize_t got = client >= 0 ? ::read(client, &byte, 1) : -1;  // 0: closed without a word
    (void)!::write(said[1], got > 0 ? "y" : "n", 1);
    ::_exit(0);
  }
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  {
    auto refused = hvprof::ConnectUnix(theirs, "remove the directory if it is not yours");
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().kind() == hvprof::ErrorKind::kPermissionDenied);
    CHECK(refused.error().message().find("served by uid 65534") != std::string::npos);
    CHECK(refused.error().message().find("remove the directory if it is not yours") != std::string::npos);
  }
  REQUIRE(::read(said[0], &byte, 1) == 1);
  CHECK(byte == 'n');  // nothing was said to it
  int status = 0;
  REQUIRE(::waitpid(server, &status, 0) == server);
  for (int fd : {ready[0], ready[1], said[0], said[1]}) ::close(fd);
  auto nothing = hvprof::ConnectUnix(dir.File("none.sock"), "");
  REQUIRE_FALSE(nothing.has_value());
  CHECK(nothing.error().kind() == hvprof::ErrorKind::kNotFound);
}
