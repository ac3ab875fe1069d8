#include "hvprof/linux/image_reader.h"

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "hvprof/base/files.h"

namespace hvprof::linux_host {

using Clock = std::chrono::steady_clock;

struct ImageReader::Lane {
  std::thread thread;
  bool busy = false;
  Clock::time_point busy_since;
  bool abandoned = false;
  bool finished = false;  // abandoned, and its read has ended: its thread is gone
};

struct ImageReader::Shared {
  std::mutex mutex;
  std::condition_variable work;  // a request queued, or stop
  std::condition_variable idle;  // a request answered
  std::deque<Request> queue;
  std::vector<Answer> answers;
  std::atomic<bool> has_answers{false};
  std::list<Lane> lanes;  // nodes do not move: each thread keeps its own
  size_t stuck = 0;       // lanes abandoned in a read that has not ended yet
  uint64_t dropped = 0;
  bool stop = false;
  ReadFunction read;

  // Under `mutex`: whether a lane that is not given up on reads a request.
  bool Busy() const {
    for (const Lane& lane : lanes) {
      if (lane.busy && !lane.abandoned) return true;
    }
    return false;
  }
};

ImageReader::ImageReader() : ImageReader(Limits{}) {}

ImageReader::ImageReader(Limits limits, ReadFunction read) : shared_(std::make_shared<Shared>()), limits_(limits) {
  shared_->read = std::move(read);
  std::lock_guard lock(shared_->mutex);
  StartLane();
}

void ImageReader::StartLane() {
  // Under shared_->mutex.
  Lane& lane = shared_->lanes.emplace_back();
  lane.thread = std::thread([shared = shared_, &lane] { Serve(shared, &lane); });
}

ImageReader::~ImageReader() {
  std::list<Lane*> joinable;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stop = true;
    shared_->queue.clear();
    for (Lane& lane : shared_->lanes) {
      // A thread in a read (which may never end) is left to it: it holds the shared state, and
      // ends after.
      if (lane.abandoned) continue;
      if (lane.busy) {
        lane.abandoned = true;
        ++shared_->stuck;
        lane.thread.detach();
      } else {
        joinable.push_back(&lane);
      }
    }
  }
  shared_->work.notify_all();
  for (Lane* lane : joinable) lane->thread.join();
}

void ImageReader::Unstick() {
  // Under shared_->mutex. Lanes whose stuck read ended are forgotten (their threads are gone).
  shared_->lanes.remove_if([](const Lane& lane) { return lane.finished; });
  const auto now = Clock::now();
  size_t serving = 0;
  for (Lane& lane : shared_->lanes) {
    if (!lane.abandoned && lane.busy && now - lane.busy_since > limits_.stuck_after) {
      lane.abandoned = true;
      lane.thread.detach();
      ++shared_->stuck;
    }
    serving += lane.abandoned ? 0 : 1;
  }
  // A new thread serves the queue unless too many are stuck; once their reads end (the file's
  // owner let them go), reading starts again.
  if (serving == 0 && shared_->stuck <= limits_.max_stuck && !shared_->stop) StartLane();
}

bool ImageReader::Submit(Request request) {
  {
    std::lock_guard lock(shared_->mutex);
    Unstick();
    if (shared_->queue.size() >= limits_.max_queued || shared_->stuck > limits_.max_stuck) {
      ++shared_->dropped;
      return false;
    }
    shared_->queue.push_back(std::move(request));
  }
  shared_->work.notify_one();
  return true;
}

bool ImageReader::HasAnswers() const { return shared_->has_answers.load(std::memory_order_acquire); }

std::vector<ImageReader::Answer> ImageReader::Take() {
  std::lock_guard lock(shared_->mutex);
  shared_->has_answers.store(false, std::memory_order_release);
  return std::exchange(shared_->answers, {});
}

bool ImageReader::WaitIdle(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::unique_lock lock(shared_->mutex);
  for (;;) {
    Unstick();
    const bool serving = shared_->stuck <= limits_.max_stuck;
    if ((shared_->queue.empty() || !serving) && !shared_->Busy()) return shared_->queue.empty();
    const auto now = Clock::now();
    if (now >= deadline) return false;
    // Wake to give up on a stuck read, if one gets stuck before the deadline.
    auto until = deadline;
    for (const Lane& lane : shared_->lanes) {
      if (lane.busy && !lane.abandoned) until = std::min(until, lane.busy_since + limits_.stuck_after);
    }
    shared_->idle.wait_until(lock, std::max(until, now + std::chrono::milliseconds(1)));
  }
}

uint64_t ImageReader::dropped() const {
  std::lock_guard lock(shared_->mutex);
  uint64_t stuck_requests = 0;
  for (const Lane& lane : shared_->lanes) stuck_requests += lane.abandoned && lane.busy ? 1 : 0;
  return shared_->dropped + stuck_requests;
}

ImageReader::Answer ImageReader::Read(const Request& request) {
  Answer answer;
  answer.key = request.key;
  // The file the process really mapped (it may since have been replaced or deleted, or live in
  // another mount namespace): the kernel names it, whatever the path says now.
  const std::string map_file =
      fmt::format("{}/{}/map_files/{:x}-{:x}", request.proc_root, request.pid, request.start, request.end);
  auto opened = OpenUserFile(map_file, FileTrust{.links = Links::kFollow, .users = {}, .refuse_replaceable = true,
                                                 .check_path = false});
  if (!opened) {
    // The mapping is gone: the path, if it is still a file only root or the process's user
    // could have put there.
    FileTrust trust;
    struct stat process {};
    if (::stat(fmt::format("{}/{}", request.proc_root, request.pid).c_str(), &process) == 0) {
      trust.users.push_back(process.st_uid);
    }
    opened = OpenUserFile(request.path, trust);
  }
  if (!opened) return answer;
  auto info = ReadElfInfo(opened.value().fd.get());
  if (info) {
    answer.ok = true;
    answer.info = std::move(info).value();
  }
  return answer;
}

void ImageReader::Serve(const std::shared_ptr<Shared>& shared, Lane* lane) {
  std::unique_lock lock(shared->mutex);
  for (;;) {
    shared->work.wait(lock, [&] { return shared->stop || lane->abandoned || !shared->queue.empty(); });
    if (shared->stop || lane->abandoned) return;
    ImageReader::Request request = std::move(shared->queue.front());
    shared->queue.pop_front();
    lane->busy = true;
    lane->busy_since = Clock::now();
    lock.unlock();
    ImageReader::Answer answer = shared->read(request);
    lock.lock();
    lane->busy = false;
    shared->answers.push_back(std::move(answer));
    shared->has_answers.store(true, std::memory_order_release);
    shared->idle.notify_all();
    if (lane->abandoned) {
      // Given up on while it read: the lane is no longer counted as stuck, and its thread ends
      // (detached; the node goes at the next Unstick, which touches it no more after this).
      --shared->stuck;
      lane->finished = true;
      return;
    }
  }
}

}  // namespace hvprof::linux_host
