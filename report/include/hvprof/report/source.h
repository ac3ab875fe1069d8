// Where a report's session comes from, as the user named it: nothing (the current session), a
// saved session's name, or a session directory. Every command that reads sessions
// (hvprof-report, its --diff, hvprof run's --baseline) names them through here, so each
// spelling means the same everywhere.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hvprof/base/error.h"

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

}  // namespace hvprof::report
