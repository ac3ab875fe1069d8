// What an hvprofd says of itself when `hvprof --status` asks (the control channel's "status"
// action): one record for dom0's agent and an active guest's, written by the agent and read
// by `hvprof` through the one codec below.
//
// Where a part does not apply it is absent, not zero: a guest sees no engine-wide losses,
// Xen's legacy interface gives no engine state of its own, and only the sim has a clock.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/base/result.h"
#include "hvprof/facts/sample.h"
#include "hvprof/store/session.h"

namespace hvprof::agent {

// Which agent answered.
enum class AgentRole : uint8_t {
  kDom0,   // the host's agent: drives the profiler, sees every domain
  kGuest,  // an active guest's agent: sees its own domain only
};
const char* AgentRoleName(AgentRole role);

// One event the profiler counts, as it was set up.
struct EventStatus {
  uint32_t counter = 0;
  std::string name;
  uint64_t count = 0;  // events per sample
  uint32_t unit_mask = 0;
  bool kernel = true;
  bool user = true;
};

// Samples lost, by cause. Xen's legacy interface counts full rings only (in the rings' own
// headers); the engine counts every cause.
struct Losses {
  uint64_t ring_full = 0;
  std::optional<uint64_t> corrupt_index;      // a ring's index was bad (engine only)
  std::optional<uint64_t> no_ring;            // the vCPU had no ring (engine only)
  std::optional<uint64_t> unprofiled_domain;  // engine-wide only: a domain not profiled ran

  uint64_t Total() const {
    return ring_full + corrupt_index.value_or(0) + no_ring.value_or(0) + unprofiled_domain.value_or(0);
  }
};

// What one domain's rings took and lost, from the engine's status or (Xen's legacy interface)
// from the rings' own headers, which count only full rings.
struct DomainRingsStatus {
  uint16_t id = 0;
  std::string label;  // "dom1 (web)"
  std::string role;   // active, passive, ignored
  // Whether an active domain's agent joined; unknown on Xen's legacy interface from dom0.
  std::optional<bool> activated;
  uint32_t rings = 0;
  uint64_t capacity = 0;  // samples per ring
  uint64_t max_fill = 0;  // the most any of its rings held at once
  std::array<uint64_t, sample_mode::kCount> samples{};  // by sample_mode
  Losses lost;
};

// The session's writer: samples it could not write (a full disk), and its current failure.
struct StoreHealth {
  uint64_t failed = 0;
  uint64_t failed_chunks = 0;
  std::optional<std::string> error;  // set while writing still fails
};

// Scheduling records (--sched), on any platform.
struct SchedStatus {
  std::string source;  // engine, perf, xentrace
  uint64_t records = 0;
  store::SchedLosses lost;
  std::vector<std::string> notes;
};

// The sim's clock.
struct SimClockStatus {
  uint64_t time_ns = 0;
  uint64_t pmis = 0;
  bool halted = false;  // its --duration was reached
};

// Continuous mode (hvprofd --continuous): the window in progress and the windows' budget.
struct ContinuousStatus {
  uint64_t window_ns = 0;         // each window's length
  uint64_t index = 0;             // of the window in progress
  uint64_t start_ns = 0;          // its start (WindowRecord's clock)
  std::string clock;              // realtime, sim
  uint64_t windows = 0;           // closed windows kept
  uint64_t bytes = 0;             // what the windows take on disk, at the last close
  uint64_t other_bytes = 0;       // and what else counts against the budget (current session, build-id cache)
  uint64_t keep_bytes = 0;        // the budget
  uint64_t keep_age_ns = 0;
  uint64_t removed = 0;           // windows removed by the budget since hvprofd started
  uint64_t thinned = 0;           // windows whose raw samples it dropped
  std::optional<std::string> last_problem;  // the last close's or prune's failure, if any
};

struct AgentStatus {
  AgentRole role = AgentRole::kDom0;
  // Dom0: whether this agent has the counters running. A guest: whether dom0's profiler does
  // (false where Xen does not tell a guest).
  bool profiling = false;
  std::string platform;  // sim, linux, xen
  std::string machine;
  std::string state;     // the engine's state, or what the agent knows of it
  std::string cpu_type;  // empty where unknown (a guest on Xen's legacy interface)
  uint32_t cpus = 0;
  std::string session;   // the current session's directory; empty before the first
  uint64_t samples_stored = 0;
  StoreHealth store;
  std::vector<EventStatus> events;
  uint32_t ring_capacity = 0;  // samples per ring
  uint32_t watermark = 0;
  uint32_t poll_interval_ms = 0;
  std::vector<DomainRingsStatus> domains;

  // A guest only: its domain and whether it joined.
  uint16_t domain = 0;
  std::string label;
  bool joined = false;
  // The domain that drives the profiler (dom0's agent; kInvalidDomain when none does). Only
  // the engine says.
  std::optional<uint16_t> primary;

  // Dom0 only: the losses of every domain, and the idle loop's samples (engine only).
  std::optional<Losses> lost;
  std::optional<uint64_t> idle_samples;
  std::optional<uint64_t> total_samples;
  std::optional<uint32_t> backtrace_depth;
  // Xen's legacy interface keeps no state or losses of its own: the status is what the agent
  // set up and its rings' headers say, and this note says so.
  std::optional<std::string> note;

  std::optional<SchedStatus> sched;
  std::optional<SimClockStatus> sim;
  std::optional<ContinuousStatus> continuous;
};

// The record as the control channel carries it, and back. Reading refuses a record that lacks
// a required member or has one of the wrong type, and says which ("hvprofd's status: cpus:
// ..."): an hvprofd older than this hvprof is the likely cause, and the message says to
// restart it.
nlohmann::json ToJson(const AgentStatus& status);
Result<AgentStatus> ParseAgentStatus(const nlohmann::json& message);

}  // namespace hvprof::agent
