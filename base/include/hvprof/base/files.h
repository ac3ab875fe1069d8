// Whole-file helpers with honest errors.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "hvprof/base/error.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof {

Result<std::string> ReadFileToString(const std::string& path);

// Writes `data` to a temporary file beside `path`, fsyncs it, and renames it over `path`, so a
// crash leaves either the old or the new contents. A full disk is reported as kNoSpace and the
// old file is kept.
Result<void> WriteFileAtomically(const std::string& path, std::string_view data);

// Writes all of `data` to fd, retrying on EINTR and short writes.
Result<void> WriteAll(int fd, std::span<const std::byte> data, std::string_view what);

// Creates `path` and its parents (mode 0755). Succeeds if it already exists as a directory.
Result<void> MakeDirectories(const std::string& path);

// Creates `path` if need be, locks it for as long as the descriptor lives and writes this
// process's pid into it. nullopt when another process holds the lock (the file names its pid).
Result<std::optional<ScopedFd>> LockPidFile(const std::string& path);

}  // namespace hvprof
