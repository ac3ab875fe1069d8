// Continuous mode: the window in progress, closing it into a saved session without stopping the
// counters, and the windows' budget (agent_daemon.h, store/windows.h).
#include <filesystem>

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
  c.offset_ns = sim ? WallClockNs() - clock_ns : 0;
  store::WindowList listed = store::ListWindows(paths_);
  for (const std::string& problem : listed.problems) Log(LogLevel::kWarning, "continuous: {}", problem);
  c.windows = std::move(listed.windows);
  const std::optional<store::WindowRecord>& open = session_ ? session_->metadata().window : std::nullopt;
  if (open) {
    // An earlier hvprofd's window in progress (its close cut short, if it has an end), continued
    // with what it had written. Its times stay ahead of the new clock's: a sim's time may have
    // run ahead of the wall clock, or restarted.
    c.series = open->series;
    c.index = open->index;
    c.start_ns = open->start_ns;
    if (clock_ns + c.offset_ns < c.start_ns) c.offset_ns = c.start_ns - clock_ns;
  } else {
    c.series = !c.windows.empty() ? c.windows.back().window.series
               : session_          ? session_->metadata().session_id
                                   : std::string();
    c.index = !c.windows.empty() ? c.windows.back().window.index + 1 : 0;
    // Never before the last window's end (a sim's clock may be behind the series' times).
    const uint64_t last_end = !c.windows.empty() ? c.windows.back().window.end_ns : 0;
    if (clock_ns + c.offset_ns < last_end) c.offset_ns = last_end - clock_ns;
    c.start_ns = clock_ns + c.offset_ns;
  }
  // A window continued past its end (hvprofd was down) closes at the first drain.
  const uint64_t now = clock_ns + c.offset_ns;
  const uint64_t due = c.start_ns + window_ns;
  c.due_ns = due > now ? clock_ns + (due - now) : clock_ns;
  c.status.window_ns = window_ns;
  c.status.clock = sim ? "sim" : "realtime";
  c.status.keep_bytes = budget.bytes;
  c.status.keep_age_ns = budget.age_ns;
  c.status.windows = c.windows.size();
  for (const store::WindowEntry& entry : c.windows) c.status.bytes += entry.bytes;
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
  // On disk now: a report of a range finds the window in progress by it, and an hvprofd that
  // dies before the first dump leaves it for the next one to continue.
  if (auto written = session_->WriteMetadata(); !written) {
    Log(LogLevel::kWarning, "continuous: cannot record window {} in {}: {}", c.index, session_->directory(),
        written.error().message());
  }
}

uint64_t AgentDaemon::WindowDueNs() const { return continuous_ ? continuous_->due_ns : UINT64_MAX; }

void AgentDaemon::CloseWindowIfDue(uint64_t clock_ns) {
  if (!continuous_ || hypervisor_lost_) return;
  Continuous& c = *continuous_;
  if (!session_) {
    // A window was saved but its successor could not be opened (a full disk): tried at every
    // drain, said once.
    if (auto opened = OpenSession(base_metadata_); !opened) {
      const std::string problem = fmt::format("no session to write the samples to: {}", opened.error().message());
      if (c.status.last_problem != problem) Log(LogLevel::kError, "continuous: {}", problem);
      c.status.last_problem = problem;
      return;
    }
    StampWindow();
  }
  if (clock_ns < c.due_ns) return;
  const uint64_t end = clock_ns + c.offset_ns;
  if (!session_->metadata().window) StampWindow();
  session_->metadata().window->end_ns = end;
  const std::string name = store::WindowName(c.index, c.start_ns);
  auto saved = Save(name, /*allow_empty=*/true);
  std::error_code ec;
  const bool moved = saved || (!session_ && std::filesystem::exists(paths_.Saved(name), ec));
  if (!moved) {
    // Still the window in progress: it grows until a save works; the budget may make room.
    if (session_ && session_->metadata().window) session_->metadata().window->end_ns = 0;
    c.due_ns = clock_ns + c.window_ns;
    c.status.last_problem = fmt::format("window {} could not be closed: {}", c.index, saved.error().message());
    Log(LogLevel::kError, "continuous: {}; it stays open and is tried again in {} s", *c.status.last_problem,
        static_cast<double>(c.window_ns) / 1e9);
    ApplyBudget(end);
    return;
  }
  if (saved) c.status.last_problem.reset();
  else c.status.last_problem = fmt::format("window {} was saved, but no new one opened: {}", c.index, saved.error().message());
  const std::string directory = saved ? saved.value().value("saved", paths_.Saved(name)) : paths_.Saved(name);
  store::WindowEntry entry{.name = name, .directory = directory, .window = {}, .bytes = store::DiskBytes(directory)};
  if (auto closed = store::OpenSession(directory); closed && closed.value().metadata.window) {
    entry.window = *closed.value().metadata.window;
    entry.samples = closed.value().metadata.samples_stored;
  } else {
    entry.window = store::WindowRecord{.series = c.series, .index = c.index, .start_ns = c.start_ns, .end_ns = end,
                                       .clock = c.sim ? "sim" : "realtime"};
  }
  c.windows.push_back(std::move(entry));
  ++c.index;
  c.start_ns = end;
  // On the window grid (a drain period late at most), unless the clock jumped a window ahead.
  c.due_ns = c.due_ns + c.window_ns > clock_ns ? c.due_ns + c.window_ns : clock_ns + c.window_ns;
  StampWindow();
  ApplyBudget(end);
}

void AgentDaemon::ApplyBudget(uint64_t now_ns) {
  Continuous& c = *continuous_;
  // What else the budget holds: the window in progress (as large as the last one closed will
  // grow: it was just opened) and the build-id cache.
  uint64_t other = session_ ? store::DiskBytes(session_->directory()) : 0;
  if (!c.windows.empty()) other = std::max(other, c.windows.back().bytes);
  if (build_id_cache_) {
    if (!build_id_cache_bytes_) build_id_cache_bytes_ = store::DiskBytes(build_id_cache_->directory());
    other += *build_id_cache_bytes_;
  }
  store::PruneOutcome pruned = store::PruneWindows(c.windows, c.budget, now_ns, other);
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
        "the windows ({} MiB) with the window in progress and the build-id cache ({} MiB) take more than "
        "--keep-size={} MiB even with one window kept: give more, or a smaller --build-id-cache-size",
        pruned.bytes >> 20, other >> 20, c.budget.bytes >> 20);
  }
}

void AgentDaemon::UpdateWindows(uint64_t window_ns, const store::WindowBudget& budget) {
  if (!continuous_) return;
  Continuous& c = *continuous_;
  c.window_ns = window_ns;
  c.budget = budget;
  c.status.window_ns = window_ns;
  c.status.keep_bytes = budget.bytes;
  c.status.keep_age_ns = budget.age_ns;
  // On the sim the windows' time moves only as the clock is run: the window in progress's start
  // is now enough for the age (a window that is too old then goes at the next close).
  ApplyBudget(c.sim ? c.start_ns : WallClockNs());
}

std::optional<ContinuousStatus> AgentDaemon::ContinuousState() const {
  if (!continuous_) return std::nullopt;
  ContinuousStatus status = continuous_->status;
  status.index = continuous_->index;
  status.start_ns = continuous_->start_ns;
  return status;
}

}  // namespace hvprof::agent
