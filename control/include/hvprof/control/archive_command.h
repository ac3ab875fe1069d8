// `hvprof archive [--session-dir=DIR] SESSION -o FILE.tar`: a session and every image and debug
// file its samples need, in one tar (archive/writer.h), for `hvprof-report archive:FILE`.
#pragma once

#include <string>

#include "hvprof/archive/writer.h"
#include "hvprof/base/result.h"
#include "hvprof/control/commands.h"

namespace hvprof::control {

struct ArchiveRequest {
  std::string session;       // a saved session's name, a session directory, or "" for the current one
  std::string session_root;  // --session-dir
  std::string output;        // -o
  archive::WriteOptions options;
};

Result<Outcome> Archive(const ArchiveRequest& request);

}  // namespace hvprof::control
