// Continuous mode's windows pushed to Pyroscope as they close: what `hvprof-push` does
// (docs/continuous.md, "Pushing to Pyroscope").
//
// - The queue is the windows on disk (store/windows.h), never a copy in memory: a window waits
//   in samples/ until it is pushed, so a server that is down for a day costs no memory, and the
//   disk budget hvprofd keeps bounds the backlog. A window the budget removes before it could be
//   pushed is counted (not_pushed_removed) and logged, never silently dropped.
// - Windows go in their order, each as one series per domain, mode and event (ProfileSeries,
//   by_mode), labelled host, platform, domain, domain_name, mode, event, and covering the window's
//   own start and end (WindowRecord's: wall-clock times, on the sim too).
// - A series the server accepted is recorded at once (PushState::done), so a retry after a
//   failure in the middle of a window sends only the series not yet accepted: no double counts.
// - A failure is retried with backoff: first_retry, doubled after each failure, at most
//   max_retry. A series refused for what it holds (HTTP 400 or 413, or a label hvprof itself
//   refuses) is not retried: the window's other series go, and the window is counted as not
//   pushed whole (not_pushed_refused), logged with the reason. A window that cannot be read is
//   counted likewise (not_pushed_unreadable).
// - The state is a file beside the windows, SESSION_ROOT/push.json, rewritten atomically after
//   every attempt: a restarted hvprof-push continues where the last one stopped, and
//   `hvprof --status` shows it. A first run starts with the window in progress (windows closed
//   before it are not pushed).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/push/profile.h"
#include "hvprof/store/session.h"

namespace hvprof::push {

inline constexpr std::string_view kPushStateFile = "push.json";
inline constexpr std::string_view kPushLockFile = "push.lock";  // held by the hvprof-push running
inline constexpr size_t kMaxDoneSeries = 4096;

struct PushState {
  int version = 1;
  std::string url;         // where to, as it may be shown (no credentials)
  bool started = false;    // next_index is known
  uint64_t next_index = 0; // the first window not settled (pushed, or counted as not pushed)
  // The series (SeriesName) of window next_index the server has accepted already.
  std::vector<std::string> done;
  uint64_t windows_pushed = 0;
  uint64_t series_pushed = 0;
  uint64_t bytes_pushed = 0;
  uint64_t last_window = 0;    // the last window pushed whole
  uint64_t last_push_ns = 0;   // when (unix ns; 0: none yet)
  uint64_t not_pushed_removed = 0;     // removed by the disk budget before they could be pushed
  uint64_t not_pushed_refused = 0;     // refused by the server (HTTP 400, 413)
  uint64_t not_pushed_unreadable = 0;  // could not be read
  uint64_t failures = 0;        // attempts that failed in a row (0: the last one worked)
  std::string last_error;       // the last failure or refusal, as logged
  uint64_t next_attempt_ns = 0; // unix ns: when a failed push is tried again
  uint64_t updated_ns = 0;      // when this was written
  uint32_t pid = 0;             // the hvprof-push that wrote it

  uint64_t NotPushed() const { return not_pushed_removed + not_pushed_refused + not_pushed_unreadable; }
};

std::string SerializePushState(const PushState& state);
// Every field checked; `origin` names the file.
Result<PushState> ParsePushState(std::string_view json, std::string_view origin);
// SESSION_ROOT/push.json; kNotFound when there is none (nothing was ever pushed from there).
Result<PushState> ReadPushState(const store::SessionPaths& paths);

struct WindowPushOptions {
  ProfilePush push;
  store::SessionPaths paths;
  std::chrono::milliseconds first_retry{std::chrono::seconds(1)};
  std::chrono::milliseconds max_retry{std::chrono::minutes(5)};
  // How often to look for a window closed since (a closed window is pushed within this).
  std::chrono::milliseconds poll{std::chrono::seconds(1)};
  // A first run (no push.json) starts with the oldest window kept, not the window in progress.
  bool start_oldest = false;
};

// Messages for the log: warnings and errors.
using PushLog = std::function<void(bool error, const std::string& message)>;

class WindowPusher {
 public:
  // Refuses options Open would refuse (a bad URL, tenant, application name or wait), touching
  // nothing: for a program to say so before it takes its lock.
  static Result<void> Check(const WindowPushOptions& options);
  // Reads the state (a damaged one is set aside as push.json.damaged, and said) and checks the
  // options: a bad URL, tenant or application name is refused here.
  static Result<WindowPusher> Open(WindowPushOptions options, PushLog log);

  // Settles the closed windows in order until one fails (then schedules its retry) or none is
  // left, writing the state after each; returns the unix ns at which to call it again. Before
  // a scheduled retry it sends nothing.
  uint64_t PushPending(uint64_t now_ns);

  // PushPending until `stop` turns true, sleeping in between (woken within 100 ms of a stop). A
  // push in progress is cancelled by the stop.
  void Run(const std::atomic<bool>& stop);
  // One pass now (hvprof-push --once), a retry scheduled by an earlier run or not; `stop` cancels
  // it between windows and in a request.
  void PushWaiting(const std::atomic<bool>& stop);

  const PushState& state() const { return state_; }

 private:
  WindowPusher(WindowPushOptions options, PushLog log, PushState state)
      : options_(std::move(options)), log_(std::move(log)), state_(std::move(state)) {}

  enum class Outcome { kPushed, kRetry, kSkipped };
  Outcome PushWindow(const std::string& directory, uint64_t index);
  void Fail(const std::string& message);
  void Settle(uint64_t index, bool pushed);
  void MoveTo(uint64_t index);  // the next window to settle, nothing of it pushed yet
  bool Stopping() const;
  void Save(uint64_t now_ns);

  WindowPushOptions options_;
  PushLog log_;
  PushState state_;
  std::string saved_problem_;  // the last failure to write the state, said once
  uint64_t load_failures_ = 0; // of window next_index, in a row
  uint64_t settled_changed_ns_ = 0;  // samples/'s mtime when a pass last left nothing to push
};

}  // namespace hvprof::push
