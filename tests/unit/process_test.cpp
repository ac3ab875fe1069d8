// /proc/PID/stat's fields, as the agents, the linux platform and hvprof read them.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "hvprof/base/process.h"

TEST_CASE("proc stat fields: after a comm with spaces and parentheses, numbered from the state", "[base][proc]") {
  const auto fields = hvprof::ProcStatFields("4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 9 0 0 20 0 1 0 123456 99\n");
  REQUIRE(fields.size() == 21);
  CHECK(fields[0] == "S");        // field 3
  CHECK(fields[1] == "1");        // field 4, the parent
  CHECK(fields[11] == "7");       // field 14, utime
  CHECK(fields[19] == "123456");  // field 22, the start time
  CHECK(fields[20] == "99");      // no newline kept
  CHECK(hvprof::ProcStatFields("no comm here").empty());
  CHECK(hvprof::ProcStatFields("1 (x").empty());
  // This process, as the kernel writes it.
  std::ifstream in("/proc/self/stat");
  std::stringstream text;
  text << in.rdbuf();
  const std::string stat = text.str();  // the fields point into it
  const auto own = hvprof::ProcStatFields(stat);
  REQUIRE(own.size() > 19);
  CHECK(own[0] == "R");
  CHECK(own[1] == std::to_string(::getppid()));
  CHECK(hvprof::ProcessRunning(::getpid()));
}

TEST_CASE("CPU progress: a busy process advances, a sleeping or ended one does not", "[base][proc]") {
  auto spawn = [](bool busy) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (busy) {
        for (;;) asm volatile("" ::: "memory");  // spin
      }
      ::pause();
      ::_exit(0);
    }
    return child;
  };
  const pid_t busy = spawn(true);
  const pid_t idle = spawn(false);
  REQUIRE(busy > 0);
  REQUIRE(idle > 0);
  ::usleep(100000);  // the idle child reaches pause() before its CPU time is first read
  hvprof::CpuProgress busy_progress(busy);
  hvprof::CpuProgress idle_progress(idle);
  // Clock ticks are 10 ms (or coarser); a busy loop gets several in half a second.
  ::usleep(500000);
  CHECK(busy_progress.Advanced());
  CHECK_FALSE(idle_progress.Advanced());
  CHECK(hvprof::ProcessCpuTicks(busy) > 0);
  ::kill(busy, SIGKILL);
  ::kill(idle, SIGKILL);
  ::waitpid(busy, nullptr, 0);
  ::waitpid(idle, nullptr, 0);
  CHECK_FALSE(busy_progress.Advanced());  // gone
  CHECK(hvprof::ProcessCpuTicks(busy) == -1);
}
