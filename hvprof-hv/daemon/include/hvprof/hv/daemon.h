// hvprof-hv: the hosted hypervisor. It runs the engine on a machine (a scenario's simulated one,
// or this Linux host) and serves the profiling operations to each domain over that domain's own
// Unix socket, as docs/hosted-protocol.md describes. The machine is a Host (src/host.h): the
// daemon serves the protocol and asks its host for the rest, whatever the platform.
//
// Threads: the server thread (Run) owns the sockets and answers requests; the machine thread
// runs the host's machine. Both take the machine lock (src/host.h, MachineLock) around anything
// that touches the machine, the engine or the platform, so engine operations always run with the
// machine stopped. The machine thread lets a waiting server thread in between two of its steps,
// so a long run never leaves the other domains unanswered.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hvpmu/engine.h"
#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/hv/protocol.h"
#include "hvprof/sim/scenario.h"

namespace hvprof::hv {

using hvpmu::DomainId;

// What hvprof-hv serves: the platform, and each platform's own settings.
struct DaemonOptions {
  std::string platform = "sim";               // sim or linux (Host::Create)
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

class Host;          // src/host.h
struct MachineLock;  // src/host.h

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

 private:
  struct Connection;

  explicit Daemon(const DaemonOptions& options);
  hvprof::Result<void> Start();
  hvprof::Result<void> OpenSockets();
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
  void HandleDomains(Connection& connection, uint32_t sequence);
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
  // What the host has told of `caller`'s processes from sequence `from` on (at most `max`
  // events), encoded, with the reply's counts (protocol.h, ContextEvents).
  std::string ContextEventsFor(DomainId caller, uint64_t from, uint32_t max, uint32_t flags,
                               hv::ContextEventsReply* reply);

  DaemonOptions options_;
  std::unique_ptr<MachineLock> lock_;
  std::unique_ptr<Host> host_;
  std::map<DomainId, uid_t> owners_;  // the user each socket is served to
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
  // dom0's runs of the simulated clock (kSimControl) waiting for their end: at most
  // hv::kMaxPendingSimRuns, one per connection. Guarded by the machine lock.
  std::vector<PendingRun> pending_runs_;
};

}  // namespace hvprof::hv
