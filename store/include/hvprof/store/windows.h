// Continuous mode's windows (hvprofd --continuous) under a session root: saved sessions named
// window-INDEX-START that follow each other without a gap, listed in order and kept within a
// disk budget (docs/continuous.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/store/session.h"

namespace hvprof::store {

inline constexpr std::string_view kWindowPrefix = "window-";

// "window-00000042-20261130T142500Z": the index (8 digits at least, so that names sort by it)
// and the start time, UTC to the second.
std::string WindowName(uint64_t index, uint64_t start_ns);

struct WindowEntry {
  std::string name;
  std::string directory;
  WindowRecord window;
  uint64_t samples = 0;  // what session.json says it stored
  uint64_t lost = 0;     // and lost, every cause (LossRecord)
  uint64_t bytes = 0;    // on disk (allocated blocks)
};

struct WindowList {
  std::vector<WindowEntry> windows;  // by index
  // Directories named as windows that are not readable ones (their session.json is missing or
  // damaged): left alone, and said.
  std::vector<std::string> problems;
};

WindowList ListWindows(const SessionPaths& paths);

// The bytes `directory` takes on disk, everything under it (allocated blocks, not lengths).
uint64_t DiskBytes(const std::string& directory);

// The budget of the windows: bytes on disk (0: none) and the age of the newest sample kept
// (0: none).
struct WindowBudget {
  uint64_t bytes = 0;
  uint64_t age_ns = 0;
};

struct PruneOutcome {
  uint64_t removed = 0;  // windows removed whole
  uint64_t thinned = 0;  // windows whose raw samples were dropped, their aggregate kept
  uint64_t kept = 0;     // windows afterwards
  uint64_t bytes = 0;    // their bytes
  std::vector<std::string> problems;
};

// Keeps `windows` (ListWindows's, kept up to date by the caller) within `budget`, oldest first:
// removes the windows that ended more than age_ns before `now_ns`; then, while the windows and
// `other_bytes` (what else the budget holds: the window in progress, the build-id cache) take
// more than budget.bytes, drops the raw samples (samples.hvs, context.hvc, sched.hvs) of the
// oldest window that still has them and an aggregate that stands for them, and once none has,
// removes the oldest window (renamed to .removing-NAME first, so that no one lists it half
// removed). The newest window is never removed: a budget smaller than one window keeps one.
// `windows` is left as what remains.
PruneOutcome PruneWindows(std::vector<WindowEntry>& windows, const WindowBudget& budget, uint64_t now_ns,
                          uint64_t other_bytes);

// Drops a window's raw samples, keeping its aggregate (and JIT files, published profiles):
// session.json first says so (WindowRecord::raw_dropped), then the files go (again, when a crash
// came between). Refused (kBadState) for a window whose aggregate is missing, damaged, or does not
// stand for all its samples (written before its last samples, or without the regions that name
// per-process addresses when context.hvc would go).
Result<void> DropRawSamples(const std::string& directory);

}  // namespace hvprof::store
