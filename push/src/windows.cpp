#include "hvprof/push/windows.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/base/json_fields.h"
#include "hvprof/report/load.h"
#include "hvprof/report/views/stacks.h"
#include "hvprof/store/windows.h"

namespace hvprof::push {

namespace {

// Load failures of one window before it is counted as unreadable: a window being reduced to its
// aggregate by the budget may fail to load once.
constexpr uint64_t kLoadAttempts = 3;

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

std::string StatePath(const store::SessionPaths& paths) { return paths.root + "/" + std::string(kPushStateFile); }

// The window in progress, from the current session (nullopt when there is none).
std::optional<store::WindowRecord> WindowInProgress(const store::SessionPaths& paths) {
  auto current = store::OpenSession(paths.current());
  if (!current) return std::nullopt;
  return current.value().metadata.window;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

std::string SerializePushState(const PushState& s) {
  const json::Value root{{"version", s.version},
                         {"url", s.url},
                         {"started", s.started},
                         {"next_index", s.next_index},
                         // A window of more series than this is resent from the first one
                         // past it after a restart (not after a retry, which remembers them all).
                         {"done", std::vector<std::string>(s.done.begin(),
                                                           s.done.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                                                s.done.size(), kMaxDoneSeries)))},
                         {"windows_pushed", s.windows_pushed},
                         {"series_pushed", s.series_pushed},
                         {"bytes_pushed", s.bytes_pushed},
                         {"last_window", s.last_window},
                         {"last_push_ns", s.last_push_ns},
                         {"not_pushed_removed", s.not_pushed_removed},
                         {"not_pushed_refused", s.not_pushed_refused},
                         {"not_pushed_unreadable", s.not_pushed_unreadable},
                         {"failures", s.failures},
                         {"last_error", s.last_error},
                         {"next_attempt_ns", s.next_attempt_ns},
                         {"updated_ns", s.updated_ns},
                         {"pid", s.pid}};
  // A URL may hold bytes that are not UTF-8: replaced, never an exception.
  return root.dump(2, ' ', false, json::Value::error_handler_t::replace) + "\n";
}

Result<PushState> ParsePushState(std::string_view text, std::string_view origin) {
  HVPROF_TRY(root, json::Node::Parse(text, std::string(origin), ErrorKind::kCorrupt));
  if (!root.IsObject()) return root.Fail("expected an object, got {}", root.Describe());
  PushState s;
  HVPROF_TRY(version, root.Get<int>("version"));
  if (version != 1) return root.Fail("version {} is not known (this hvprof reads version 1)", version);
  HVPROF_TRY(url, root.Get("url", ""));
  HVPROF_TRY(started, root.Get<bool>("started", false));
  HVPROF_TRY(next_index, root.Get<uint64_t>("next_index", 0));
  HVPROF_TRY(done, root.OptionalArray("done", kMaxDoneSeries));
  for (const json::Node& name : done) {
    HVPROF_TRY(text_name, name.String(16384));
    s.done.push_back(std::move(text_name));
  }
  struct Counter {
    const char* key;
    uint64_t PushState::*member;
  };
  static constexpr Counter kCounters[] = {
      {"windows_pushed", &PushState::windows_pushed},
      {"series_pushed", &PushState::series_pushed},
      {"bytes_pushed", &PushState::bytes_pushed},
      {"last_window", &PushState::last_window},
      {"last_push_ns", &PushState::last_push_ns},
      {"not_pushed_removed", &PushState::not_pushed_removed},
      {"not_pushed_refused", &PushState::not_pushed_refused},
      {"not_pushed_unreadable", &PushState::not_pushed_unreadable},
      {"failures", &PushState::failures},
      {"next_attempt_ns", &PushState::next_attempt_ns},
      {"updated_ns", &PushState::updated_ns},
  };
  for (const Counter& counter : kCounters) {
    HVPROF_TRY(value, root.Get<uint64_t>(counter.key, 0));
    s.*counter.member = value;
  }
  HVPROF_TRY(last_error, root.Get("last_error", ""));
  HVPROF_TRY(pid, root.Get<uint32_t>("pid", 0));
  s.version = version;
  s.url = std::move(url);
  s.started = started;
  s.next_index = next_index;
  s.last_error = std::move(last_error);
  s.pid = pid;
  return s;
}

Result<PushState> ReadPushState(const store::SessionPaths& paths) {
  const std::string path = StatePath(paths);
  HVPROF_TRY(text, ReadFileToString(path, size_t{4} << 20, Links::kRefuse));
  return ParsePushState(text, path);
}

Result<void> WindowPusher::Check(const WindowPushOptions& options) {
  HVPROF_TRYV(CheckPushOptions(options.push.options, /*allow_credentials=*/false));
  HVPROF_TRYV(ValidateAppName(options.push.app));
  if (options.first_retry.count() <= 0 || options.max_retry < options.first_retry || options.poll.count() <= 0) {
    return MakeError(ErrorKind::kInvalidArgument, "push: the retry waits and the poll interval must be above 0, "
                                                  "the longest wait at least the first");
  }
  return Ok();
}

Result<WindowPusher> WindowPusher::Open(WindowPushOptions options, PushLog log) {
  HVPROF_TRYV(Check(options));
  PushState state;
  auto read = ReadPushState(options.paths);
  if (read) {
    state = std::move(read).value();
  } else if (read.error().kind() == ErrorKind::kCorrupt) {
    // Pushing again from the window in progress beats not pushing at all; the old file stays
    // for whoever wants to know what it said.
    const std::string path = StatePath(options.paths);
    std::error_code ec;
    std::filesystem::rename(path, path + ".damaged", ec);
    if (ec) return MakeError(ErrorKind::kIo, "{}; cannot set it aside: {}", read.error().message(), ec.message());
    log(true, fmt::format("{}; set aside as {}.damaged: pushing from the window in progress on (windows closed "
                          "before it are not pushed)",
                          read.error().message(), path));
  } else if (read.error().kind() != ErrorKind::kNotFound) {
    return read.error();  // unreadable now (permissions, I/O): better to stop than to start over
  }
  const std::string url = RedactUrls(options.push.options.url);
  if (!state.url.empty() && state.url != url) {
    // Another server: what the old one took says nothing about the new one's.
    log(false, fmt::format("pushing to {} now, not {}: window {} goes whole, the windows before it are not sent again",
                           url, state.url, state.next_index));
    state.done.clear();
  }
  state.url = url;
  return WindowPusher(std::move(options), std::move(log), std::move(state));
}

void WindowPusher::Save(uint64_t now_ns) {
  state_.updated_ns = now_ns;
  state_.pid = static_cast<uint32_t>(::getpid());
  auto written = WriteFileAtomically(StatePath(options_.paths), SerializePushState(state_));
  if (!written) {
    if (saved_problem_ != written.error().message()) {
      log_(true, fmt::format("cannot record what was pushed: {} (a restart would push again what was pushed since)",
                             written.error().message()));
    }
    saved_problem_ = written.error().message();
    return;
  }
  saved_problem_.clear();
}

void WindowPusher::MoveTo(uint64_t index) {
  state_.next_index = index;
  state_.done.clear();
  load_failures_ = 0;
}

void WindowPusher::Settle(uint64_t index, bool pushed) {
  const uint64_t now_ns = NowNs();  // a push may take long: not the time the pass began
  if (pushed) {
    ++state_.windows_pushed;
    state_.last_window = index;
    state_.last_push_ns = now_ns;
  }
  MoveTo(index + 1);
  state_.failures = 0;
  state_.next_attempt_ns = 0;
  Save(now_ns);
}

void WindowPusher::Fail(const std::string& message) {
  const uint64_t now_ns = NowNs();  // after the failed request, which may have waited out its timeout
  ++state_.failures;
  const uint64_t first = static_cast<uint64_t>(options_.first_retry.count()) * 1'000'000;
  const uint64_t most = static_cast<uint64_t>(options_.max_retry.count()) * 1'000'000;
  uint64_t wait = first;
  for (uint64_t doubled = 1; doubled < state_.failures && wait < most; ++doubled) wait = wait > most / 2 ? most : wait * 2;
  wait = std::min(wait, most);
  state_.next_attempt_ns = SaturatingAdd(now_ns, wait);
  // Said on the first failure and when the reason changes, not at every retry of an outage.
  if (state_.failures == 1 || message != state_.last_error) {
    log_(false, fmt::format("{}; trying again in {:.1f} s, then less often (at most every {} s); the windows wait "
                            "on disk",
                            message, static_cast<double>(wait) / 1e9, options_.max_retry.count() / 1000));
  }
  state_.last_error = message;
  Save(now_ns);
}

WindowPusher::Outcome WindowPusher::PushWindow(const std::string& directory, uint64_t index) {
  report::LoadOptions load;
  load.stacks = true;
  auto profile = report::LoadProfile(directory, load);
  if (!profile) {
    if (++load_failures_ < kLoadAttempts) return Outcome::kRetry;
    ++state_.not_pushed_unreadable;
    state_.last_error = fmt::format("window {} was not pushed: it cannot be read: {}", index, profile.error().message());
    log_(true, state_.last_error);
    return Outcome::kSkipped;
  }
  load_failures_ = 0;
  const store::SessionMetadata& m = profile.value().metadata();
  SeriesChoice choice;
  choice.by_mode = true;
  if (m.window) {
    // On the sim too these are wall-clock times: the simulated time laid after the moment
    // continuous profiling began, as reports over time take them.
    choice.from_ns = m.window->start_ns;
    choice.until_ns = std::max(m.window->end_ns, m.window->start_ns);
  }
  std::vector<PyroscopeSeries> series;
  for (const store::EventRecord& event : m.events) {
    report::StackFilter filter;
    filter.events = {event.counter};
    auto built = ProfileSeries(profile.value(), filter, options_.push, choice);
    if (!built) {
      if (built.error().kind() == ErrorKind::kNotFound) continue;  // no stack of this event
      ++state_.not_pushed_unreadable;
      state_.last_error = fmt::format("window {} was not pushed: {}", index, built.error().message());
      log_(true, state_.last_error);
      return Outcome::kSkipped;
    }
    for (PyroscopeSeries& one : built.value()) series.push_back(std::move(one));
  }
  // A series the server (or the checks before sending) refuses for what it holds is left out, and
  // the window counted as not pushed whole; the window's other series still go.
  std::optional<std::string> refused;
  for (const PyroscopeSeries& one : series) {
    auto name = SeriesName(one);
    if (!name) {
      refused = name.error().message();
      continue;
    }
    if (std::find(state_.done.begin(), state_.done.end(), name.value()) != state_.done.end()) continue;
    long status = 0;
    auto pushed = PushToPyroscope(options_.push.options, std::span(&one, 1), &status);
    if (!pushed) {
      if (pushed.error().kind() == ErrorKind::kBadState && options_.push.options.cancel != nullptr &&
          options_.push.options.cancel->load()) {
        return Outcome::kRetry;  // shutting down: tried again at the next start
      }
      if (status == 400 || status == 413 || (status == 0 && pushed.error().kind() == ErrorKind::kInvalidArgument)) {
        refused = pushed.error().message();
        continue;
      }
      Fail(fmt::format("window {}: {}", index, pushed.error().message()));
      return Outcome::kRetry;
    }
    state_.done.push_back(std::move(name).value());
    ++state_.series_pushed;
    state_.bytes_pushed += pushed.value().bytes;
    Save(NowNs());
  }
  if (refused) {
    ++state_.not_pushed_refused;
    state_.last_error = fmt::format("window {} was not pushed whole: {}", index, *refused);
    log_(true, state_.last_error + " (its other series went; the window stays on disk for reports)");
    return Outcome::kSkipped;
  }
  return Outcome::kPushed;
}

uint64_t WindowPusher::PushPending(uint64_t now_ns) {
  const uint64_t poll_ns = static_cast<uint64_t>(options_.poll.count()) * 1'000'000;
  const uint64_t most_ns = static_cast<uint64_t>(options_.max_retry.count()) * 1'000'000;
  // A retry is never further off than the longest wait: the wall clock may have stepped back
  // since it was scheduled (a push.json from before a reboot).
  state_.next_attempt_ns = std::min(state_.next_attempt_ns, SaturatingAdd(now_ns, most_ns));
  if (state_.next_attempt_ns > now_ns) return state_.next_attempt_ns;
  // Listing reads every window's session.json: only when samples/ changed (a window saved or
  // removed renames an entry there) since a pass that left nothing to push.
  struct stat samples {};
  const uint64_t changed_ns = ::stat(options_.paths.samples_dir().c_str(), &samples) == 0
                                  ? static_cast<uint64_t>(samples.st_mtim.tv_sec) * 1'000'000'000 +
                                        static_cast<uint64_t>(samples.st_mtim.tv_nsec)
                                  : 0;
  if (state_.started && changed_ns != 0 && changed_ns == settled_changed_ns_) return now_ns + poll_ns;
  const store::WindowList list = store::ListWindows(options_.paths);
  if (!state_.started) {
    // The first run: from the window in progress on.
    const std::optional<store::WindowRecord> current = WindowInProgress(options_.paths);
    if (options_.start_oldest && !list.windows.empty()) {
      MoveTo(list.windows.front().window.index);
    } else {
      MoveTo(current ? current->index : list.windows.empty() ? 0 : list.windows.back().window.index + 1);
    }
    state_.started = true;
    Save(now_ns);
  }
  bool any = false;
  for (const store::WindowEntry& entry : list.windows) {
    const uint64_t index = entry.window.index;
    if (index < state_.next_index) continue;
    if (Stopping()) return NowNs() + poll_ns;
    any = true;
    if (index > state_.next_index) {
      const uint64_t gone = index - state_.next_index;
      state_.not_pushed_removed += gone;
      state_.last_error = fmt::format("{} ({} to {}) removed by the disk budget before they could be pushed",
                                      gone == 1 ? std::string("1 window") : fmt::format("{} windows", gone),
                                      state_.next_index, index - 1);
      log_(true, state_.last_error + ": give hvprofd a larger --keep-size, or fix the push sooner");
      MoveTo(index);
    }
    const Outcome outcome = PushWindow(entry.directory, index);
    if (outcome == Outcome::kRetry) {
      // A failure schedules its retry; a load to try again (or a stop) comes back at the next poll.
      return state_.next_attempt_ns > now_ns ? state_.next_attempt_ns : NowNs() + poll_ns;
    }
    Settle(index, outcome == Outcome::kPushed);
  }
  if (!any) {
    // hvprofd's windows were numbered from 0 again (samples/ emptied, a new series begun): follow
    // from the new series' first window.
    const std::optional<store::WindowRecord> current = WindowInProgress(options_.paths);
    if (current && current->index < state_.next_index) {
      uint64_t first = current->index;
      for (const store::WindowEntry& entry : list.windows) {
        if (entry.window.series == current->series) first = std::min(first, entry.window.index);
      }
      log_(false, fmt::format("the windows are numbered from {} again (hvprofd began a new series): pushing from "
                              "there",
                              first));
      MoveTo(first);
      Save(now_ns);
      return NowNs();
    }
  }
  settled_changed_ns_ = changed_ns;
  return now_ns + poll_ns;
}

bool WindowPusher::Stopping() const {
  return options_.push.options.cancel != nullptr && options_.push.options.cancel->load();
}

void WindowPusher::PushWaiting(const std::atomic<bool>& stop) {
  options_.push.options.cancel = &stop;
  state_.next_attempt_ns = 0;  // now, whatever a running hvprof-push had scheduled
  (void)PushPending(NowNs());
  options_.push.options.cancel = nullptr;
}

void WindowPusher::Run(const std::atomic<bool>& stop) {
  options_.push.options.cancel = &stop;
  while (!stop.load()) {
    const uint64_t next = PushPending(NowNs());
    while (!stop.load() && NowNs() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  options_.push.options.cancel = nullptr;
}

}  // namespace hvprof::push
