// The reader of mapped files' ELF headers (issue 38): a file whose owner holds its reads up costs
// a thread for a while, never the reading of every later file.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/linux/image_reader.h"

namespace {

using hvprof::linux_host::ImageReader;
using namespace std::chrono_literals;

// A read that waits for `Release` when its key starts with "slow", as a FUSE file its owner
// serves slowly would.
class HeldReads {
 public:
  ImageReader::Answer Read(const ImageReader::Request& request) {
    if (request.key.starts_with("slow")) {
      std::unique_lock lock(mutex_);
      released_.wait(lock, [&] { return release_; });
    }
    ImageReader::Answer answer;
    answer.key = request.key;
    answer.ok = true;
    return answer;
  }
  void Release() {
    {
      std::lock_guard lock(mutex_);
      release_ = true;
    }
    released_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  bool release_ = false;
};

ImageReader::Request Asking(std::string key) {
  ImageReader::Request request;
  request.key = std::move(key);
  return request;
}

}  // namespace

TEST_CASE("a stuck read is left to its thread and reading goes on once it ends", "[linux][images]") {
  HeldReads reads;
  ImageReader::Limits limits;
  limits.stuck_after = 50ms;
  limits.max_stuck = 2;
  ImageReader reader(limits, [&](const ImageReader::Request& request) { return reads.Read(request); });

  // Each slow file takes a thread until it is given up on; a new thread serves the next.
  for (const char* key : {"slow-1", "slow-2"}) {
    REQUIRE(reader.Submit(Asking(key)));
    CHECK(reader.WaitIdle(10s));
  }
  REQUIRE(reader.Submit(Asking("fast-1")));
  CHECK(reader.WaitIdle(10s));
  // A third stuck read is one too many: nothing more is asked while they are stuck.
  REQUIRE(reader.Submit(Asking("slow-3")));
  CHECK(reader.WaitIdle(10s));
  CHECK_FALSE(reader.Submit(Asking("refused")));

  // The owner lets them go: their answers come, and files are read again.
  reads.Release();
  bool accepted = false;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!accepted && std::chrono::steady_clock::now() < deadline) {
    accepted = reader.Submit(Asking("fast-2"));
    if (!accepted) std::this_thread::sleep_for(10ms);
  }
  REQUIRE(accepted);
  REQUIRE(reader.WaitIdle(30s));
  // WaitIdle waits for the serving thread only: a read given up on answers when it ends, which
  // may be after the fresh file's answer.
  const std::set<std::string> expected{"slow-1", "slow-2", "slow-3", "fast-1", "fast-2"};
  std::set<std::string> answered;
  while (answered != expected && std::chrono::steady_clock::now() < deadline) {
    for (const ImageReader::Answer& answer : reader.Take()) {
      CHECK(answer.ok);
      CHECK(answered.insert(answer.key).second);
    }
    if (answered != expected) std::this_thread::sleep_for(10ms);
  }
  CHECK(answered == expected);
}
