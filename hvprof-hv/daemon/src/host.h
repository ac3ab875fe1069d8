// The machine hvprof-hv serves, behind one interface. The daemon (daemon.h) owns the sockets, the
// connections and the protocol; a Host owns its machine, the engine on it, and what the machine
// thread does. Two hosts: SimHost (sim_host.h), a scenario's simulated machine, and LinuxHost
// (linux_host.h), this Linux host through perf_event_open. The daemon asks a host what it can do
// (a simulated clock, clock()), never which platform it is.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvpmu/engine.h"
#include "hvprof/base/result.h"
#include "hvprof/context/context_event.h"
#include "hvprof/context/domains.h"
#include "hvprof/context/ground_truth.h"
#include "hvprof/context/platform_stats.h"
#include "hvprof/hv/daemon.h"
#include "hvprof/hv/protocol.h"

namespace hvprof::hosted {
class HostedPlatform;
}

namespace hvprof::hv {

class SimXenTrace;

// How the server threads and the machine thread take turns on the machine. `mutex` guards the
// machine, the engine and the platform. The machine thread lets a waiting server thread in
// between two of its steps (a std::mutex promises no turn to a waiter): it waits on `wake` while
// `waiters` is not 0.
struct MachineLock {
  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<int> waiters{0};
  std::atomic<bool> stopping{false};

  // After `stopping` is set: wakes the machine thread. Taking the mutex first means a thread
  // between its look at `stopping` and its wait cannot miss it. Not from a signal handler.
  void WakeMachine() {
    { std::lock_guard hold(mutex); }
    wake.notify_all();
  }

  // A server thread's hold on `mutex`.
  std::unique_lock<std::mutex> Take() {
    ++waiters;
    std::unique_lock lock(mutex);
    --waiters;
    wake.notify_all();  // a machine thread that paused for us goes on once we unlock
    return lock;
  }
};

// A domain that gets a socket, and the user it is served to when not the daemon's own.
struct ServedDomain {
  hvpmu::DomainId id = 0;
  std::optional<uid_t> owner;
};

// The clock of a simulated machine, for dom0's kSimControl, kGroundTruth and kXenTrace. Every
// call is made with the machine lock held.
class SimulatedClock {
 public:
  virtual ~SimulatedClock() = default;
  virtual uint64_t now_ns() const = 0;
  // The scenario's duration is reached: the clock stands still.
  virtual bool halted() const = 0;
  virtual uint64_t pmis_delivered() const = 0;
  // At full speed, runs the clock on to `target_ns` at least; the machine thread calls its
  // `runs_due` once it gets there.
  virtual void RunTo(uint64_t target_ns) = 0;
  virtual context::GroundTruth GroundTruth() = 0;
  virtual void ResetGroundTruth() = 0;
  // The machine's Xen trace buffers, made when first asked for.
  virtual SimXenTrace& XenTrace() = 0;
};

class Host {
 public:
  // The host `options.platform` names (sim or linux), with its engine attached.
  static hvprof::Result<std::unique_ptr<Host>> Create(const DaemonOptions& options, MachineLock& lock);
  virtual ~Host() = default;

  // What kHello tells an agent.
  virtual PlatformKind kind() const = 0;
  virtual std::string_view platform_name() const = 0;
  virtual const std::string& machine_name() const = 0;
  virtual uint32_t num_cpus() const = 0;
  // The domains that get a socket.
  virtual std::vector<ServedDomain> ServedDomains() const = 0;

  // The rest is called with the machine lock held, except where said.
  virtual hosted::HostedPlatform& platform() = 0;
  virtual hvpmu::Engine& engine() = 0;
  // The machine thread: runs until the lock's `stopping`, taking the lock around its work, and
  // calls `runs_due` when a run dom0 waits for may have ended. Without the lock.
  virtual void RunMachine(const std::function<void()>& runs_due) = 0;
  // Makes a RunMachine that waits on something else than the lock's `wake` look at `stopping`.
  // Thread-safe and async-signal-safe; without the lock.
  virtual void Wake() {}
  // An engine operation for `domain`, with what the host does around it.
  virtual hvpmu::ErrorCode DoOp(hvpmu::DomainId domain, uint32_t op, void* argument, uint32_t size) = 0;
  // The images `domain` runs, told to `asker` (dom0 or the domain itself).
  virtual context::DomainImages Images(hvpmu::DomainId domain, hvpmu::DomainId asker) = 0;
  // Every domain of the machine.
  virtual std::vector<context::DomainInfo> Domains() = 0;
  // The context events of `caller`'s processes from `from` on (at most `max`). Takes the lock
  // itself, as `flags` (protocol.h: kContextEventsSettle) may need to wait without it.
  virtual context::ContextEventBatch ContextEvents(hvpmu::DomainId caller, uint64_t from, uint32_t max, uint32_t flags) = 0;
  // The platform's statistics and notes, for dom0's kPlatformInfo.
  virtual context::PlatformInfo Info() = 0;
  // The simulated clock, on a host that has one.
  virtual SimulatedClock* clock() { return nullptr; }
  // The daemon ends: profiling is stopped. With the lock.
  virtual void Shutdown() {}
};

}  // namespace hvprof::hv
