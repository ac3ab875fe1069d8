// Where a report's session comes from, as the user named it: nothing (the current session), a
// saved session's name, or a session directory. Every command that reads sessions
// (hvprof-report, its --diff, hvprof run's --baseline) names them through here, so each
// spelling means the same everywhere.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/store/session.h"

namespace hvprof::report {

struct SessionSource {
  std::string argument;   // as the user gave it ("" for the current session)
  std::string directory;  // the session directory to load
  // Directories laid out as .build-id/xx/rest (gdb's and debuginfod's layout) where images are
  // looked up by build-id before their recorded paths.
  std::vector<std::string> build_id_roots;
  // What reports call the session: an archive's original session directory ("" for `directory`).
  std::string shown_directory;
  // Whatever the directory needs to stay valid for as long as the source is used.
  std::shared_ptr<void> keep_alive;
};

// `argument` is a saved session's name, a path to a session directory, `archive:FILE` (a tar
// that `hvprof archive` wrote: unpacked into a private temporary directory that keep_alive
// removes), or empty for the current session under `session_root`.
Result<SessionSource> OpenSessionSource(const std::string& argument, const std::string& session_root);

// One session under a session root, as `hvprof-report --list` shows it (from its metadata,
// read by store::OpenSession).
struct SessionSummary {
  std::string name;        // "current", or the saved session's name
  std::string directory;
  bool current = false;
  uint64_t created_ns = 0;  // wall clock; 0 when unknown
  std::string platform;
  std::string machine;
  uint64_t sampled_ns = 0;  // the platform's clock from the first sample to the last
  uint64_t samples = 0;     // stored
  uint64_t lost = 0;        // lost on the way, every cause (not the unprofiled domains)
  // "complete", "running" (profiling is on and hvprofd writes it), "incomplete" (the session
  // says why, or profiling was never stopped and no hvprofd writes it), "damaged" (its metadata
  // could not be read: `problem` says why).
  std::string state;
  std::string problem;
  bool chosen = false;  // what a report takes when no session is named (ChooseSession)
  // Continuous mode's window (store/windows.h), when it is one (the window in progress too).
  std::optional<store::WindowRecord> window;
  // Time between its profiling intervals, when no hvprofd profiled (a window continued by a
  // restarted hvprofd spans the time it was down).
  uint64_t stopped_ns = 0;
};

// Every session under `session_root` (its saved sessions and the current one), oldest first by
// created_ns, then by name; the current one last among equals. An empty list when there is none.
std::vector<SessionSummary> ListSessions(const std::string& session_root);

// What a report reads when the user names no session: the current session if it has samples,
// else the newest saved session (by created_ns) with samples, else the current one (which may
// not exist: loading it says so). `note` is empty for the current session, else one line
// saying which session was taken and how to name another.
struct ChosenSession {
  SessionSource source;
  std::string name;  // "current" or the saved name
  std::string note;
};
Result<ChosenSession> ChooseSession(const std::string& session_root);

}  // namespace hvprof::report
