// ListenUnix: a socket that is there is a socket that listens, with the asked mode.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/base/socket.h"
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
