// hvprof-hv: the hosted hypervisor. It runs the engine on a machine (the simulated one, or
// Linux in a later platform) and serves the profiling operations to each domain over that
// domain's own Unix socket, as docs/hosted-protocol.md describes.
//
// Threads: the server thread (Run) owns the sockets and answers requests; the machine thread
// advances the machine. Both take `machine_mutex_` around anything that touches the machine,
// the engine or the platform, so engine operations always run with the machine stopped. The
// server takes it through LockMachine, and the machine thread lets it in between two steps of
// simulated time, so a long run never leaves the other domains unanswered.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hvpmu/engine.h"
#include "hvpmu/pmu_drivers.h"
#include "hvpmu/timer_source.h"
#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/context/domains.h"
#include "hvprof/hv/protocol.h"
#include "hvprof/linux/linux_machine.h"
#include "hvprof/sim/machine.h"
#include "hvprof/sim/scenario.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace hvprof::hv {

using hvpmu::DomainId;
using hvpmu::Engine;
using hvpmu::PmuDrivers;

struct DaemonOptions {
  std::string platform = "sim";               // sim or linux
  std::string scenario_path;                  // sim
  std::string domain_map;                     // linux: --domain-map
  bool force_software = false;                // linux: cpu-clock even with a hardware PMU
  // sim: what samples, as Xen's `hvprof=` boot option chooses (xen-engine/): auto (the PMU if
  // the scenario's CPU has one the drivers know, else the engine's timer), pmu or timer.
  std::string sample_source = "auto";
  std::string run_dir;                        // sockets and the pid file; see DefaultRunDir
  std::optional<sim::Speed> speed;            // overrides the scenario's run.speed
  std::optional<double> factor;               // with realtime speed
  std::optional<uint64_t> duration_ns;        // overrides run.duration_ms
  std::optional<uint64_t> seed;               // overrides the scenario's seed
  std::string ground_truth_path;              // written on exit, if set
};

class SimXenTrace;  // src/xen_trace.h

using hv::DefaultRunDir;
using hv::DomainSocketPath;

class Daemon {
 public:
  static hvprof::Result<std::unique_ptr<Daemon>> Create(const DaemonOptions& options);
  ~Daemon();

  // Serves until Stop() or SIGTERM/SIGINT (if HandleSignals was called). Returns once every
  // socket is closed and the machine thread has ended.
  hvprof::Result<void> Run();
  // Thread-safe and async-signal-safe: makes Run return.
  void Stop();
  // Routes SIGTERM and SIGINT to Stop (call before Run, from the main thread).
  static void HandleSignals(Daemon* daemon);

  const std::string& run_dir() const { return options_.run_dir; }
  sim::SimMachine* sim_machine() { return machine_.get(); }  // null on linux

 private:
  struct Connection;

  explicit Daemon(const DaemonOptions& options);
  hvprof::Result<void> Start();
  hvprof::Result<void> OpenSockets();
  void MachineLoop();
  void Accept(DomainId domain, int listener);
  void ReadFrom(Connection& connection);
  void Handle(Connection& connection, const hv::MessageHeader& header,
              std::span<const std::byte> payload);
  // One handler per message type.
  void HandleHello(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleOp(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleMapRegion(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleNotifyFds(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleContext(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleContextEvents(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleSimControl(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleGroundTruth(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleXenTrace(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandlePlatformInfo(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandlePublish(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  void HandleFetchPublished(Connection& connection, uint32_t sequence, std::span<const std::byte> payload);
  // A request that cannot be read: kError with what is wrong.
  void Malformed(Connection& connection, uint32_t sequence, std::string_view what);
  void Reply(Connection& connection, uint32_t sequence, hv::MessageType type,
             std::span<const std::byte> payload, std::span<const int> fds = {});
  void ReplyStatus(Connection& connection, uint32_t sequence, hv::MessageType type,
                   hv::ProtocolError error, std::string_view text = {});
  void Close(Connection& connection, std::string_view why);
  void FinishRuns();
  void Shutdown();
  // The server thread's hold on machine_mutex_; see lock_waiters_.
  std::unique_lock<std::mutex> LockMachine();

  DaemonOptions options_;
  sim::Scenario scenario_;
  hvprof::symbolizer::Symbolizer symbolizer_;
  std::unique_ptr<sim::SimMachine> machine_;           // --platform=sim
  std::unique_ptr<linux_host::LinuxMachine> linux_;    // --platform=linux
  hosted::HostedPlatform& platform();
  hvprof::Result<void> StartSim();
  hvprof::Result<void> StartLinux();
  void LinuxLoop();
  // The images `domain` runs, as the platform knows them.
  context::DomainImages ImagesOf(DomainId domain);
  // What the platform has told of `caller`'s processes from sequence `from` on (at most `max`
  // events), encoded, with the reply's counts (protocol.h, ContextEvents).
  std::string ContextEventsFor(DomainId caller, uint64_t from, uint32_t max, uint32_t flags,
                               hv::ContextEventsReply* reply);
  // The domains `caller` may know of: every one for dom0, itself for a guest.
  std::vector<context::DomainInfo> DomainsFor(DomainId caller);
  std::unique_ptr<PmuDrivers> drivers_;
  std::unique_ptr<hvpmu::TimerSource> timer_;  // sim: when the timer samples
  std::unique_ptr<Engine> engine_;
  // --platform=sim: Xen's trace buffers, once dom0 (the fake Xen) asks for them (kXenTrace).
  std::unique_ptr<SimXenTrace> xen_trace_;

  std::mutex machine_mutex_;  // guards the machine, the engine and the platform
  // Server threads waiting for machine_mutex_: the machine thread pauses between steps while
  // there are any, as a std::mutex promises no turn to a waiter.
  std::atomic<int> lock_waiters_{0};
  std::condition_variable machine_wake_;
  uint64_t run_target_ns_ = 0;  // max speed: run until this simulated time
  bool halted_ = false;
  std::atomic<bool> stopping_{false};
  std::thread machine_thread_;

  hvprof::ScopedFd wake_fd_;  // eventfd: Stop() and finished runs wake the server
  hvprof::ScopedFd epoll_;    // the server's: wake_fd_, the listeners and the connections
  hvprof::ScopedFd pid_file_;
  std::map<DomainId, hvprof::ScopedFd> listeners_;
  std::map<int, std::unique_ptr<Connection>> connections_;  // by fd
  // Profiles guests published for dom0 (kPublish), the latest per domain.
  struct Published {
    std::vector<std::byte> bytes;
    uint64_t sequence = 0;
  };
  std::map<DomainId, Published> published_;
  uint64_t publish_sequence_ = 0;
  struct PendingRun {
    int fd;
    uint32_t sequence;
    uint64_t target_ns;
  };
  // At most hv::kMaxPendingSimRuns, one per connection.
  std::vector<PendingRun> pending_runs_;
};

}  // namespace hvprof::hv
