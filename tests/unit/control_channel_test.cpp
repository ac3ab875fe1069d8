// The control channel's patience: a request waits for a late answer while the caller's check
// says the agent is still at work, and gives up (kBusy) once it says not.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/agent/control_channel.h"
#include "temp_dir.h"

using hvprof::ErrorKind;
using hvprof::agent::Json;

namespace {

// Answers one request after `delay`.
std::thread SlowServer(int listener, std::chrono::milliseconds delay) {
  return std::thread([listener, delay] {
    for (int i = 0; i < 500; ++i) {
      hvprof::ScopedFd client(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
      if (!client.valid()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      auto request = hvprof::agent::ReadMessage(client.get(), std::chrono::seconds(5));
      std::this_thread::sleep_for(delay);
      if (request) (void)hvprof::agent::WriteMessage(client.get(), hvprof::agent::OkResponse({{"late", true}}));
      return;
    }
  });
}

}  // namespace

TEST_CASE("control requests wait for a busy agent and give up on a hung one", "[agent][control]") {
  ::signal(SIGPIPE, SIG_IGN);  // the server answers a client that gave up, as hvprofd may
  hvprof::testing::TempDir dir;
  const std::string path = dir.File("control.sock");
  auto listener = hvprof::agent::Listen(path);
  REQUIRE(listener.has_value());

  SECTION("still working: the answer comes after three timeouts") {
    std::thread server = SlowServer(listener.value().get(), std::chrono::milliseconds(700));
    int asked = 0;
    auto response = hvprof::agent::Request(path, Json{{"action", "ping"}}, std::chrono::milliseconds(200),
                                           [&] { return ++asked < 100; });
    server.join();
    REQUIRE(response.has_value());
    CHECK(response.value().value("late", false));
    CHECK(asked >= 2);
  }
  SECTION("not working: the request gives up after one timeout, as kBusy") {
    std::thread server = SlowServer(listener.value().get(), std::chrono::milliseconds(700));
    int asked = 0;
    auto response = hvprof::agent::Request(path, Json{{"action", "ping"}}, std::chrono::milliseconds(200),
                                           [&] { return ++asked, false; });
    server.join();
    REQUIRE_FALSE(response.has_value());
    CHECK(response.error().kind() == ErrorKind::kBusy);
    CHECK(asked == 1);
  }
}
