// `hvprof archive`: one tar holding a session directory's files and every image and debug file
// its samples need, by build-id (reader.h has the layout), so that `hvprof-report archive:FILE`
// reports it anywhere, without the original paths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvprof/base/result.h"

namespace hvprof::archive {

struct WriteOptions {
  // Ask the debuginfod servers of DEBUGINFOD_URLS for images missing here (or here but not the
  // ones profiled), and for the debug files of images that have none.
  bool debuginfod = true;
  // Write the archive without the images that are missing or are not the ones profiled (their
  // samples will be reported as "(no symbols)"), instead of refusing.
  bool partial = false;
};

struct WriteSummary {
  size_t files = 0;    // entries written
  uint64_t bytes = 0;  // of file contents
  // What the user should know: images stored by path (no build-id), files that came from
  // debuginfod, and with `partial` the images left out and why. Unescaped.
  std::vector<std::string> notes;
};

// Archives the session in `session_directory` to `output` (written as WriteOutput writes: a
// regular file is replaced only once the archive is whole).
Result<WriteSummary> WriteArchive(const std::string& session_directory, const std::string& output,
                                  const WriteOptions& options = {});

}  // namespace hvprof::archive
