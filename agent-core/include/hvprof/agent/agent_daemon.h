// What hvprofd is in either role: a loop that drains rings into the session store, flushes it
// every second and answers `hvprof` on the control socket. The dom0 agent (dom0-agent/) and
// the guest agent (guest-agent/) add how they set profiling up and tear it down.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "hvprof/agent/agent_status.h"
#include "hvprof/agent/control_channel.h"
#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/agent/jit_snapshots.h"
#include "hvprof/agent/ring_set.h"
#include "hvprof/agent/session_writer.h"
#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/buildid_cache/cache.h"
#include "hvprof/store/session.h"
#include "hvprof/store/windows.h"

namespace hvprof::agent {

// Takes what the platform learned of the processes from event `from` on: asks `fetch` (the
// first request settling when `settle`, HypervisorLink::FetchContextEvents) and hands each reply
// to `on_batch`, asking again only while a reply says more were already waiting
// (ContextEventBatch::more) and moved `next` on, at most `max_requests` times. Not while replies
// merely have events: on a host that forks all day every request (each a drain of hvprof-hv's
// rings) finds new ones, and asking until none came could take hundreds of rounds a drain once
// a round trip grew. Events that come after belong to samples not drained yet. A failed request
// ends it with its error; the replies before it were handed on.
using ContextFetch = std::function<Result<context::ContextEventBatch>(uint64_t from, bool settle)>;
Result<void> FetchContextUntilCaughtUp(uint64_t from, bool settle, const ContextFetch& fetch,
                                       const std::function<void(const context::ContextEventBatch&)>& on_batch,
                                       int max_requests = 1024);

class AgentDaemon {
 public:
  virtual ~AgentDaemon();
  AgentDaemon(const AgentDaemon&) = delete;
  AgentDaemon& operator=(const AgentDaemon&) = delete;

  // Serves control requests and drains until shutdown (a request, SIGTERM or SIGINT).
  Result<void> Run();
  // Async-signal-safe.
  void RequestShutdown();
  // Async-signal-safe: the loop reads the settings again (ReloadSettings) at its next turn.
  void RequestReload();
  // Routes SIGTERM and SIGINT to RequestShutdown, SIGHUP to RequestReload.
  static void HandleSignals(AgentDaemon* agent);

  // A one-line summary of what was set up, for `hvprof --start-daemon` to print.
  virtual std::string Describe() const = 0;

 protected:
  AgentDaemon(std::string role, store::SessionPaths paths, std::unique_ptr<HypervisorLink> link);

  // Runs an op; a refusal becomes an Error naming it unless `tolerate_refusal`.
  Result<void> Op(uint32_t op, std::span<std::byte> argument, bool tolerate_refusal = false);
  template <typename T>
  Result<void> Op(uint32_t op, T* argument) {
    return Op(op, std::as_writable_bytes(std::span(argument, 1)));
  }
  // The engine's state, with the first page of its domains (Status::domains).
  Result<hvpmu::Status> EngineStatus();
  // Every domain the engine lists (all pages), in id order; a non-primary caller sees itself.
  Result<std::vector<hvpmu::DomainStatus>> ListedDomains();
  // Takes the link's exclusive lock, if it has one, for as long as this agent lives.
  // One agent per domain and host: refuses, naming the one that runs (its pid and session
  // directory), when another holds the profiler. `session_root` is written for that message.
  Result<void> LockProfiler(const std::string& session_root);

  // The metadata every session starts with: who wrote it, and the machine from `init`.
  store::SessionMetadata NewMetadata(const hvpmu::InitV2& init, const std::string& hvprof_version) const;
  // Which domains' user-space pids are processes of the system this agent runs on, whose JIT
  // files (perf maps, jitdumps) it copies into the session (JitSnapshots). Set before
  // OpenSession.
  enum class JitScope { kNone, kOwnDomain, kAllDomains };
  void SetJitScope(JitScope scope) { jit_scope_ = scope; }
  // Keeps copies of the images each session samples in the build-id cache `directory` (empty:
  // buildid_cache::DefaultDirectory(); "none": no cache) of at most `max_bytes` (0: the default),
  // at each dump with the counters off (KeepSampledImages). A directory given that cannot be used
  // is an error; the default one a warning, and no cache. Called before OpenSession: the
  // sessions name it.
  Result<void> OpenBuildIdCache(const std::string& directory, uint64_t max_bytes);
  // The same cache with another size (hvprof --reload): what is over it goes the next time images
  // are kept (a stop, a window's close). A failure keeps the cache as it was.
  Result<void> ResizeBuildIdCache(uint64_t max_bytes);
  // Opens (or continues) the current session with `base` as its metadata.
  Result<void> OpenSession(store::SessionMetadata base);
  Result<void> ListenForControl();
  void StopListening();
  // `final` after profiling stopped: also the legacy rings' last backtrace groups. Then what the
  // platform learned of the processes (FetchContext), and the drained samples are counted.
  void DrainAll(bool final = false);
  // The platform's context events since the last call, into the session; `final`: the
  // session closes, the platform first settles what it still finds out (FetchContextEvents).
  void FetchContext(bool final);
  // Records every ring's counters and the losses the engine reports (`status`; null where the
  // hypervisor has no status op) in the session metadata: what they grew by since the session
  // opened (a window, or a session after --save, repeats none of the one before).
  void UpdateMetadata(const hvpmu::Status* status);
  // A loss count the hypervisor or the platform keeps for the agent's life (`absolute`, now), as
  // the current session counts it: what it grew by since the session opened.
  uint64_t SinceSessionOpened(uint64_t store::LossRecord::*field, uint64_t absolute);

  // The actions both roles share.
  Result<Json> Dump();
  Result<Json> Reset();
  // Renames the current session to `name` and opens a new one; one without samples only with
  // `allow_empty` (hvprof run keeps every run, an empty one too).
  Result<Json> Save(const std::string& name, bool allow_empty);
  // What status says of this agent's session, whatever its role: the platform and machine, the
  // current session, what its writer could not write (and why); for dom0, scheduling too
  // (--sched: where the records come from, how many sched.hvs holds, and what was lost, by
  // cause, as session.json's "sched" counts them).
  AgentStatus SessionStatus(AgentRole role) const;
  // Marks the current profiling interval as started or stopped in the metadata.
  void MarkProfiling(bool on);

  // Continuous mode (setup::SetupOptions::window_ns): windows of `window_ns` follow each other,
  // each closed into a saved session of its own (store/windows.h) within `budget`. Called once
  // the session is open and the counters run. `clock_ns` is the window clock's now: the wall
  // clock (CLOCK_REALTIME), or with `sim` the simulated time, which the windows record from the
  // wall clock of this call on. A current session that an earlier hvprofd left as an open window
  // stays that window (its series, index and start).
  void BeginContinuous(uint64_t window_ns, const store::WindowBudget& budget, bool sim, uint64_t clock_ns);
  bool continuous() const { return continuous_.has_value(); }
  // When the window in progress is due to close, on the window clock given to BeginContinuous.
  uint64_t WindowDueNs() const;
  // Closes the window in progress when `clock_ns` reached its end: everything drained so far
  // goes into it, it is saved as samples/window-INDEX-START, the next one opens where it ended
  // (the counters run on: each sample is in one window), and the budget is applied. A failed
  // save (a full disk) keeps the window open, says why in the status and the log, and tries
  // again a window later.
  void CloseWindowIfDue(uint64_t clock_ns);
  std::optional<ContinuousStatus> ContinuousState() const;
  // New lengths and budget for the windows (hvprof --reload): the window in progress keeps its
  // end, the next ones last `window_ns`; the budget applies at once.
  void UpdateWindows(uint64_t window_ns, const store::WindowBudget& budget);
  // SIGHUP or the "reload" request: reads daemonrc.json again and takes on what a running agent
  // can (setup::CompareSettings's live settings), saying what it took and what needs a restart.
  // The guest's agent has nothing to reload (kUnsupported).
  virtual Result<Json> ReloadSettings();

  // Role-specific.
  virtual Result<Json> Start() = 0;
  virtual Result<Json> Stop() = 0;
  virtual Result<Json> Shutdown() = 0;
  virtual Result<AgentStatus> Status() = 0;
  // Actions only one role has ("run-sim", "publish"); kNotFound for an unknown action.
  virtual Result<Json> HandleOther(const std::string& action, const Json& request);
  // Drain period in milliseconds.
  virtual uint32_t PollIntervalMs() const = 0;
  // Called once per loop turn, after draining (at least every PollIntervalMs()).
  virtual void OnTick() {}
  // Called by Dump before it writes the session.
  virtual void OnDump() {}
  // hvprof-hv went away: everything left in the rings is drained, the session is written and
  // marked incomplete if profiling was on, and the agent exits (Run returns), so that the next
  // `hvprof --start-daemon` finds no stale daemon.
  void OnHypervisorLost();
  // Scheduling as the rings and the platform's own recording say it so far: the source and the
  // losses on their side (none of sched.hvs's counts); nullopt without --sched.
  std::optional<store::SchedSummary> RecordedSched() const;

  std::string role_;
  store::SessionPaths paths_;
  std::unique_ptr<HypervisorLink> link_;
  RingSet rings_;
  // Scheduling records the hypervisor keeps its own way (Xen's trace buffers), with --sched.
  std::unique_ptr<SchedSource> sched_source_;
  std::unique_ptr<SessionWriter> session_;
  JitScope jit_scope_ = JitScope::kNone;
  std::unique_ptr<JitSnapshots> jit_;  // with the session, when jit_scope_ says so
  std::optional<buildid_cache::Cache> build_id_cache_;
  std::set<std::string> not_kept_images_;  // build-ids of the session's images the cache could not keep
  store::SessionMetadata base_metadata_;
  bool configured_ = false;
  bool profiling_ = false;  // as far as this agent's session is concerned
  bool hypervisor_lost_ = false;  // the link hung up: no more operations
  std::vector<std::string> notes_;
  uint64_t context_next_ = 0;        // the next context event to ask for (0: a new session)
  bool context_warned_ = false;
  uint64_t context_lost_ = 0;        // events the platform dropped before this agent took them

 private:
  Json Handle(const Json& request);
  // The images the session sampled, into the build-id cache (those there marked used), while
  // profiling is off; what could not be kept is logged.
  void KeepSampledImages();

  struct Continuous {
    uint64_t window_ns = 0;
    store::WindowBudget budget;
    bool sim = false;
    uint64_t offset_ns = 0;  // window clock + offset = the time windows record
    uint64_t due_ns = 0;     // on the window clock
    std::string series;
    uint64_t index = 0;
    uint64_t start_ns = 0;   // recorded time
    std::vector<store::WindowEntry> windows;  // the closed windows kept, oldest first
    ContinuousStatus status;
  };
  // The window record of the current session, as the window in progress says.
  void StampWindow();
  void ApplyBudget(uint64_t now_ns);

  // The counts the engine, the rings and the platform keep for the agent's life, as last read and
  // as they stood when the current session opened.
  struct LifetimeCounts {
    store::LossRecord losses;
    uint64_t idle = 0;
    std::map<std::tuple<uint16_t, uint32_t, std::string>, store::RingRecord> rings;  // owner, index, kind
  };
  LifetimeCounts counts_now_;
  LifetimeCounts counts_at_open_;

  std::optional<Continuous> continuous_;
  // What the build-id cache holds, as its last use said (continuous mode counts it).
  std::optional<uint64_t> build_id_cache_bytes_;
  ScopedFd control_;
  ScopedFd profiler_lock_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> reload_requested_{false};
  ScopedFd wake_;  // eventfd written by RequestShutdown
};

// The most samples per second one CPU can take of an event sampled every `count` events:
// CPU_CLOCK counts nanoseconds; any other event is taken to count at most 3e9 a second (a busy
// CPU's cycles). 0 for a count of 0.
double PeakSampleRate(std::string_view event_name, uint64_t count);
// A drain period that empties a ring of `capacity` slots four times in the time a fully busy
// CPU needs to fill it at `samples_per_second` (the sum of its events' PeakSampleRate), within
// 1-250 ms. The ring's watermark wakes the agent sooner when samples come faster.
uint32_t PollIntervalFor(double samples_per_second, uint32_t capacity);

// Slots per ring when --buffer-size is not given.
inline constexpr uint32_t kDefaultRingCapacity = 16384;

// Told how a long setup advances (thousands of domains): what is being done, and how much of
// how much. hvprofd passes it on to the `hvprof --start-daemon` that waits.
using SetupProgress = std::function<void(std::string_view what, uint64_t done, uint64_t total)>;
// get_buffer's / set_passive's max_samples for rings of `capacity` samples (Xen keeps one
// record empty, and caps the buffer at 32 pages a domain).
int32_t LegacyMaxSamples(uint32_t capacity);

// What Xen's legacy init says of the PMU, as the v2 init would say it: general counters only,
// and counts below 2^31 (xenoprof's limits); `cpus` as the caller sees them.
hvpmu::InitV2 FromLegacyInit(const hvpmu::legacy::Init& init, uint32_t cpus);

// Now, as the session metadata records times (CLOCK_REALTIME, ns).
uint64_t WallClockNs();

// Names for status output.
const char* EngineStateName(uint32_t state);
const char* DomainRoleName(uint32_t role);
// One domain's line of the engine's status, as `hvprof --status` shows it.
DomainRingsStatus DomainStatusOf(const hvpmu::DomainStatus& domain, const std::string& label);

}  // namespace hvprof::agent
