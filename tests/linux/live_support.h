// Helpers for the linux platform's tests: a whole engine session on a LinuxMachine (dom0
// primary and active, some passive domains), its rings drained as the dom0 agent would, and
// child processes running the fixture.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvprof/agent/ring_reader.h"
#include "hvprof/base/scoped_fd.h"
#include "hvpmu/engine.h"
#include "hvprof/linux/linux_machine.h"

namespace hvprof::testing {

struct CollectedSample {
  hvpmu::DomainId region_owner;  // whose region the ring is in
  uint32_t ring;                 // ring index in that region
  hvpmu::ring::SampleRecord record;
  std::vector<uint64_t> frames;
};

struct SessionOptions {
  std::vector<hvpmu::DomainId> passive;
  uint32_t backtrace_depth = 0;
  uint32_t capacity = 16384;
  uint16_t event = 0x3C;  // CPU_CLK_UNHALTED
  uint64_t count = 100000;
  bool sched = false;  // ask for scheduling rings (--sched): the machine opens its tracepoints
};

class EngineSession {
 public:
  // Runs init, get_buffer_v2, set_active(0), set_passive_v2..., set_backtrace, reserve,
  // counter, setup_events, enable_virq; REQUIREs each to succeed.
  EngineSession(hvprof::linux_host::LinuxMachine& machine, SessionOptions options);
  ~EngineSession();

  void Start();
  void Stop();
  // Engine rings -> samples().
  void DrainRings();
  // Waits for perf, drains it into the engine and the engine's rings, until `duration` has
  // passed or `done` returns true.
  void Pump(std::chrono::milliseconds duration, const std::function<bool()>& done = {});

  const std::vector<CollectedSample>& samples() const { return samples_; }
  // With SessionOptions::sched: the scheduling records drained, in each ring's order.
  const std::vector<hvpmu::ring::SchedRecord>& sched() const { return sched_; }
  hvpmu::Status Status();
  hvpmu::Engine& engine() { return *engine_; }

 private:
  struct Region {
    hvpmu::DomainId owner = 0;
    hvpmu::BufferV2 buffer{};
    hvprof::ScopedMmap map;
    std::vector<hvprof::agent::RingReader> readers;
  };
  void MapRegion(hvpmu::DomainId owner, const hvpmu::BufferV2& buffer);

  hvprof::linux_host::LinuxMachine& machine_;
  std::unique_ptr<hvpmu::Engine> engine_;
  std::vector<std::unique_ptr<Region>> regions_;
  std::vector<CollectedSample> samples_;
  std::vector<hvpmu::ring::SchedRecord> sched_;
  bool started_ = false;
};

// Why perf events cannot be used here, for a skip at the start of a live test: the kernel has
// none (ENOSYS) or does not allow system-wide ones (EACCES, EPERM), asked of the kernel directly.
// Any other answer is nullopt: the code under test must then work, or report and fail.
std::optional<std::string> PerfUnusable();
// Why KVM cannot run a guest here (no /dev/kvm, or KVM_CREATE_VM refused), or nullopt.
std::optional<std::string> KvmUnusable();
// False after SkipTest with PerfUnusable's reason. Call it first in a live test.
bool PerfUsable();
// Whether tracefs and the scheduler's tracepoints can be read here, as a reason to skip
// (tracefs absent and not mountable, or not readable): nullopt where they can. Any other error
// (a format hvprof cannot parse) is the code under test's, and the test goes on to fail on it.
std::optional<std::string> TracepointsUnusable();

// The user and system CPU time process `pid` used so far, from /proc/PID/stat (0 once it is gone).
double CpuSeconds(pid_t pid);

// A machine sampling this host; FAILs when it cannot be made (check PerfUnusable() first).
std::unique_ptr<hvprof::linux_host::LinuxMachine> LiveMachine(
    hvprof::linux_host::LinuxOptions options);

// The fixture (or any program) in a child process.
class Child {
 public:
  // With `hold`, the child's stdin is a pipe and the fixture (--wait) waits for Go().
  Child(const std::vector<std::string>& args, bool hold);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void Go();
  // True once the child has exited (reaped).
  bool Exited();
  int Wait();
  // Ends the child with SIGTERM (if it still runs) and reaps it.
  void Stop();
  // Whatever the child wrote to stdout so far.
  std::string Output();

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  hvprof::ScopedFd stdin_;
  hvprof::ScopedFd stdout_;
  std::string output_;
};

// Waits until the KVM fixture (HVPROF_LINUX_KVM_GUEST) in `guest` runs guest code; FAILs if it
// exits first (check KvmUnusable() at the start of the test).
void KvmGuestRunning(Child& guest);
// The domain `machine` numbered the VMM process `vmm` as (REQUIREs one).
hvpmu::DomainId GuestDomainOf(hvprof::linux_host::LinuxMachine& machine, pid_t vmm);

}  // namespace hvprof::testing
