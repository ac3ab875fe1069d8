// Continuous mode: the window in progress, closing it into a saved session without stopping the
// counters, and the windows' budget (agent_daemon.h, store/windows.h).
#include <fmt/format.h>

#include "hvprof/agent/agent_daemon.h"
#include "hvprof/base/log.h"
#include "hvprof/store/windows.h"

namespace hvprof::agent {

void AgentDaemon::BeginContinuous(uint64_t window_ns, const store::WindowBudget& budget, bool sim, uint64_t clock_ns) {
  Continuous c;
  c.window_ns = window_ns;
  c.budget = budget;
  c.sim = sim;
  const uint64_t wall = WallClockNs();
  c.offset_ns = sim ? wall - clock_ns : 0;
  const uint64_t now = clock_ns + c.offset_ns;
  const store::WindowList listed = store::ListWindows(paths_);
  const std::optional<store::WindowRecord>& open = session_ ? session_->metadata().window : std::nullopt;
  if (open && open->end_ns == 0 && open->start_ns <= now) {
    // An earlier hvprofd's window in progress, continued with what it had written.
    c.series = open->series;
    c.index = open->index;
    c.start_ns = open->start_ns;
  } else {
    c.series = !listed.windows.empty() ? listed.windows.back().window.series
               : session_                ? session_->metadata().session_id
                                         : std::string();
    c.index = !listed.windows.empty() ? listed.windows.back().window.index + 1 : 0;
    c.start_ns = now;
  }
  // A window continued past its end (hvprofd was down, or the sim's time is counted from this
  // start's wall clock) closes at the first drain.
  const uint64_t due = c.start_ns + window_ns;
  c.due_ns = due > now ? due - c.offset_ns : clock_ns;
  c.status.window_ns = window_ns;
  c.status.clock = sim ? "sim" : "realtime";
  c.status.keep_bytes = budget.bytes;
  c.status.keep_age_ns = budget.age_ns;
  c.status.windows = listed.windows.size();
  for (const store::WindowEntry& entry : listed.windows) c.status.bytes += entry.bytes;
  continuous_ = std::move(c);
  StampWindow();
  Log(LogLevel::kInfo, "continuous: window {} opens; one every {} s, kept within {} MiB and {} h", continuous_->index,
      static_cast<double>(window_ns) / 1e9, budget.bytes >> 20, budget.age_ns / 3'600'000'000'000);
}

void AgentDaemon::StampWindow() {
  if (!continuous_ || !session_) return;
  const Continuous& c = *continuous_;
  session_->metadata().window = store::WindowRecord{.series = c.series, .index = c.index, .start_ns = c.start_ns,
                                                    .end_ns = 0, .clock = c.sim ? "sim" : "realtime"};
}

uint64_t AgentDaemon::WindowDueNs() const { return continuous_ ? continuous_->due_ns : UINT64_MAX; }

void AgentDaemon::CloseWindowIfDue(uint64_t clock_ns) {
  if (!continuous_ || !session_ || hypervisor_lost_ || clock_ns < continuous_->due_ns) return;
  Continuous& c = *continuous_;
  const uint64_t end = clock_ns + c.offset_ns;
  if (!session_->metadata().window) StampWindow();
  session_->metadata().window->end_ns = end;
  const std::string name = store::WindowName(c.index, c.start_ns);
  auto saved = Save(name, /*allow_empty=*/true);
  if (!saved) {
    // Still the window in progress: it grows until a save works.
    if (session_ && session_->metadata().window) session_->metadata().window->end_ns = 0;
    c.due_ns = clock_ns + c.window_ns;
    c.status.last_problem = fmt::format("window {} could not be closed: {}", c.index, saved.error().message());
    Log(LogLevel::kError, "continuous: {}; it stays open and is tried again in {} s", *c.status.last_problem,
        static_cast<double>(c.window_ns) / 1e9);
    return;
  }
  c.status.last_problem.reset();
  ++c.status.windows;
  ++c.index;
  c.start_ns = end;
  // On the window grid (a drain period late at most), unless the clock jumped a window ahead.
  c.due_ns = c.due_ns + c.window_ns > clock_ns ? c.due_ns + c.window_ns : clock_ns + c.window_ns;
  StampWindow();
  ApplyBudget(end);
}

void AgentDaemon::ApplyBudget(uint64_t now_ns) {
  Continuous& c = *continuous_;
  uint64_t other = session_ ? store::DiskBytes(session_->directory()) : 0;
  if (build_id_cache_) other += store::DiskBytes(build_id_cache_->directory());
  store::PruneOutcome pruned = store::PruneWindows(paths_, c.budget, now_ns, other);
  c.status.removed += pruned.removed;
  c.status.thinned += pruned.thinned;
  c.status.windows = pruned.kept;
  c.status.bytes = pruned.bytes;
  c.status.other_bytes = other;
  if (pruned.removed != 0 || pruned.thinned != 0) {
    Log(LogLevel::kInfo, "continuous: the budget removed {} windows and dropped the raw samples of {}; {} kept, {} MiB",
        pruned.removed, pruned.thinned, pruned.kept, pruned.bytes >> 20);
  }
  for (const std::string& problem : pruned.problems) {
    Log(LogLevel::kWarning, "continuous: {}", problem);
    c.status.last_problem = problem;
  }
  if (c.budget.bytes != 0 && pruned.bytes + other > c.budget.bytes) {
    c.status.last_problem = fmt::format(
        "the windows ({} MiB) and the current session and build-id cache ({} MiB) take more than --keep-size={} MiB "
        "even with one window kept: give more, or a smaller --build-id-cache-size",
        pruned.bytes >> 20, other >> 20, c.budget.bytes >> 20);
  }
}

std::optional<ContinuousStatus> AgentDaemon::ContinuousState() const {
  if (!continuous_) return std::nullopt;
  ContinuousStatus status = continuous_->status;
  status.index = continuous_->index;
  status.start_ns = continuous_->start_ns;
  return status;
}

}  // namespace hvprof::agent
