// The task tracker on this host's kernel: which task ran on a CPU when, checked against times a
// child read on that CPU while it ran, and the child's life told as context events of the
// tracker's domain.
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/linux/task_tracker.h"
#include "live_support.h"

using hvprof::context::ContextKind;
using hvprof::linux_host::TaskTracker;

namespace {

uint64_t RawNow() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_RAW, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(now.tv_nsec);
}

}  // namespace

TEST_CASE("the task tracker says which task ran on a CPU when, and tells the domain's processes",
          "[linux][live][tasks]") {
  if (!hvprof::testing::PerfUsable()) return;
  TaskTracker::Options options;
  options.domain = 5;
  auto opened = TaskTracker::Open(options);
  REQUIRE(opened.has_value());
  TaskTracker& tracker = *opened.value();

  // The child, on CPU 0, reads the clock while it spins (each reading is a time it ran there),
  // then becomes /bin/true.
  constexpr int kProbes = 8;
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(0, &cpus);
    if (::sched_setaffinity(0, sizeof cpus, &cpus) != 0) ::_exit(2);
    std::array<uint64_t, kProbes> probes{};
    const uint64_t start = RawNow();
    for (int i = 0; i < kProbes; ++i) {
      while (RawNow() - start < static_cast<uint64_t>(i + 1) * 20'000'000) {
      }
      probes[i] = RawNow();
      if (::sched_getcpu() != 0) ::_exit(3);
    }
    if (::write(pipe_fds[1], probes.data(), sizeof probes) != static_cast<ssize_t>(sizeof probes)) ::_exit(4);
    ::execl("/bin/true", "true", static_cast<char*>(nullptr));
    ::_exit(5);
  }
  ::close(pipe_fds[1]);
  std::array<uint64_t, kProbes> probes{};
  REQUIRE(::read(pipe_fds[0], probes.data(), sizeof probes) == static_cast<ssize_t>(sizeof probes));
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  tracker.Drain();

  for (uint64_t probe : probes) {
    auto task = tracker.TaskAt(0, probe);
    REQUIRE(task.has_value());
    CHECK(task->pid == static_cast<uint32_t>(child));
    CHECK(task->tid == static_cast<uint32_t>(child));
  }
  CHECK(tracker.stats().switches > 0);
  CHECK(tracker.stats().lost_records == 0);
  // Before anything was recorded there is no answer, rather than a guess; nor after the last
  // drain.
  CHECK(!tracker.TaskAt(0, 1).has_value());
  CHECK(!tracker.TaskAt(0, RawNow() + 1'000'000'000).has_value());
  CHECK(!tracker.TaskAt(100000, probes[0]).has_value());

  // The child's life, as context events of domain 5: born, renamed by its exec, mapping
  // /bin/true (or what it links to), gone.
  auto events = tracker.TakeEvents(0, 1u << 20);
  bool born = false, exec = false, mapped = false, exited = false;
  for (const auto& event : events.events) {
    CHECK(event.domain == 5);
    if (event.pid != static_cast<uint32_t>(child)) continue;
    born |= event.kind == ContextKind::kProcess;
    exec |= (event.kind == ContextKind::kComm || event.kind == ContextKind::kProcess) && event.comm == "true";
    mapped |= event.kind == ContextKind::kMapping && event.path.find("true") != std::string::npos;
    exited |= event.kind == ContextKind::kExit;
  }
  CHECK(born);
  CHECK(exec);
  CHECK(mapped);
  CHECK(exited);
}
