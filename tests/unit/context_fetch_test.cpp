// How hvprofd takes what the platform learned of the processes (FetchContextUntilCaughtUp):
// again only while a reply says more were already waiting, never merely because events came.
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/agent/agent_daemon.h"

namespace {

using hvprof::agent::FetchContextUntilCaughtUp;
using Batch = hvprof::context::ContextEventBatch;

// A platform whose queue holds `waiting` events when first asked, `per_reply` a reply, and whose
// host forks without pause: `arrive` more events reach its queue during every request.
struct Platform {
  uint64_t waiting = 0;
  uint64_t per_reply = 8192;
  uint64_t arrive = 0;
  uint64_t head = 1;  // the number the next event gets
  std::vector<std::pair<uint64_t, bool>> requests;  // (from, settle)

  hvprof::Result<Batch> Fetch(uint64_t from, bool settle) {
    requests.emplace_back(from, settle);
    if (requests.size() == 1) head += waiting;
    head += arrive;  // came while the platform drained its rings for this request
    Batch batch;
    batch.first = batch.next = from;
    for (; batch.next < head && batch.events.size() < per_reply; ++batch.next) {
      batch.events.emplace_back();
    }
    batch.more = batch.next < head;
    return batch;
  }
};

uint64_t Take(Platform& platform, uint64_t from, bool settle, std::vector<Batch>* seen = nullptr) {
  uint64_t next = from;
  auto taken = FetchContextUntilCaughtUp(
      from, settle, [&](uint64_t at, bool s) { return platform.Fetch(at, s); },
      [&](const Batch& batch) {
        CHECK(batch.first == next);
        next = batch.next;
        if (seen != nullptr) seen->push_back(batch);
      });
  REQUIRE(taken.has_value());
  return next;
}

}  // namespace

TEST_CASE("context events: a host that forks all day gets one request a drain, not a chase", "[agent][long]") {
  Platform platform;
  platform.arrive = 50;  // every request finds new events, as on a busy host
  uint64_t next = 1;
  for (int drain = 0; drain < 10; ++drain) next = Take(platform, next, false);
  // One request per drain, each reply with what had come (the events since stay for the next).
  CHECK(platform.requests.size() == 10);
  CHECK(next == 1 + 10 * 50);
}

TEST_CASE("context events: a reply cut short by its bound is followed at once, to the end", "[agent][long]") {
  Platform platform;
  platform.waiting = 3 * 8192 + 100;
  std::vector<Batch> seen;
  const uint64_t next = Take(platform, 1, true, &seen);
  // Four replies: three full ones that say more, then the rest; only the first settles.
  REQUIRE(platform.requests.size() == 4);
  CHECK(platform.requests[0] == std::make_pair(uint64_t{1}, true));
  CHECK(platform.requests[1] == std::make_pair(uint64_t{1 + 8192}, false));
  CHECK(platform.requests[3].second == false);
  CHECK(seen[0].more);
  CHECK_FALSE(seen[3].more);
  CHECK(next == 1 + 3 * 8192 + 100);
}

TEST_CASE("context events: a reply that says more but moves nothing on ends the requests", "[agent][bad-input]") {
  int requests = 0;
  auto taken = FetchContextUntilCaughtUp(
      5, false,
      [&](uint64_t from, bool) -> hvprof::Result<Batch> {
        ++requests;
        Batch batch;
        batch.first = batch.next = from;
        batch.more = true;
        return batch;
      },
      [](const Batch&) {});
  CHECK(taken.has_value());
  CHECK(requests == 1);
  // A platform that always says more and always moves on is bounded too.
  requests = 0;
  taken = FetchContextUntilCaughtUp(
      5, false,
      [&](uint64_t from, bool) -> hvprof::Result<Batch> {
        ++requests;
        Batch batch;
        batch.first = from;
        batch.next = from + 1;
        batch.more = true;
        return batch;
      },
      [](const Batch&) {}, 16);
  CHECK(requests == 16);
}

TEST_CASE("context events: a failed request ends them with its error, after the replies before it", "[agent][bad-input]") {
  int requests = 0, handed = 0;
  auto taken = FetchContextUntilCaughtUp(
      1, false,
      [&](uint64_t from, bool) -> hvprof::Result<Batch> {
        if (++requests == 2) return hvprof::MakeError(hvprof::ErrorKind::kProtocol, "the link went away");
        Batch batch;
        batch.first = from;
        batch.next = from + 10;
        batch.more = true;
        return batch;
      },
      [&](const Batch&) { ++handed; });
  REQUIRE_FALSE(taken.has_value());
  CHECK(taken.error().message().find("the link went away") != std::string::npos);
  CHECK(requests == 2);
  CHECK(handed == 1);
}
