// push.json, what hvprof-push records of its pushes (push/windows.h): written and read back
// whole; a damaged or unknown one is refused with the field that is wrong; and the pusher's
// options are checked before it takes a lock or reads anything.
#include <catch2/catch.hpp>

#include "hvprof/push/windows.h"

using hvprof::push::ParsePushState;
using hvprof::push::PushState;
using hvprof::push::SerializePushState;

TEST_CASE("push state: every field is written and read back", "[push][state]") {
  PushState s;
  s.url = "https://profiles.example.net/pyroscope";
  s.started = true;
  s.next_index = 41;
  s.done = {"hvprof{domain=0,domain_name=dom0,mode=user,event=CPU_CLK_UNHALTED}", "second"};
  s.windows_pushed = 38;
  s.series_pushed = 212;
  s.bytes_pushed = uint64_t{5} << 32;
  s.last_window = 40;
  s.last_push_ns = 1'796'000'000'000'000'000;
  s.not_pushed_removed = 1;
  s.not_pushed_refused = 2;
  s.not_pushed_unreadable = 3;
  s.failures = 4;
  s.last_error = "window 41: connection refused";
  s.next_attempt_ns = 1'796'000'009'000'000'000;
  s.updated_ns = 1'796'000'001'000'000'000;
  s.pid = 4242;
  const std::string text = SerializePushState(s);
  auto read = ParsePushState(text, "push.json");
  REQUIRE(read.has_value());
  CHECK(SerializePushState(read.value()) == text);
  CHECK(read.value().done == s.done);
  CHECK(read.value().bytes_pushed == s.bytes_pushed);
  CHECK(read.value().NotPushed() == 6);
}

TEST_CASE("push state: a damaged or unknown file is refused, naming the field", "[push][state]") {
  const auto refused = [](const char* text) {
    auto read = ParsePushState(text, "/var/lib/hvprof/push.json");
    REQUIRE(!read.has_value());
    CHECK(read.error().kind() == hvprof::ErrorKind::kCorrupt);
    CHECK(read.error().message().find("/var/lib/hvprof/push.json") != std::string::npos);
    return read.error().message();
  };
  CHECK(refused("{\"version\": 2}").find("version 2") != std::string::npos);
  CHECK(refused("{\"next_index\": 3}").find("version") != std::string::npos);
  CHECK(refused("{\"version\": 1, \"next_index\": -3}").find("next_index") != std::string::npos);
  CHECK(refused("{\"version\": 1, \"done\": [7]}").find("done[0]") != std::string::npos);
  CHECK(refused("{\"version\": 1, \"failures\": \"many\"}").find("failures") != std::string::npos);
  CHECK(refused("[1]").find("object") != std::string::npos);
  refused("{\"version\": 1,");
  auto minimal = ParsePushState("{\"version\": 1}", "push.json");
  REQUIRE(minimal.has_value());
  CHECK(!minimal.value().started);
  CHECK(minimal.value().NotPushed() == 0);
}

TEST_CASE("push: the pusher's options are checked before anything is touched", "[push][state]") {
  hvprof::push::WindowPushOptions options;
  options.paths.root = "/nonexistent/hvprof";
  options.push.options.url = "http://127.0.0.1:4040";
  CHECK(hvprof::push::WindowPusher::Check(options).has_value());
  options.push.options.url = "http://user:pw@127.0.0.1:4040";
  auto secret = hvprof::push::WindowPusher::Check(options);
  REQUIRE(!secret.has_value());
  CHECK(secret.error().message().find("HVPROF_PUSH_USER") != std::string::npos);
  CHECK(secret.error().message().find("pw") == std::string::npos);
  options.push.options.url = "http://127.0.0.1:4040";
  options.push.app = "has space";
  CHECK(!hvprof::push::WindowPusher::Check(options).has_value());
  options.push.app = "hvprof";
  options.max_retry = std::chrono::milliseconds(10);
  options.first_retry = std::chrono::milliseconds(20);
  CHECK(!hvprof::push::WindowPusher::Check(options).has_value());
}
