// Whole-file helpers with honest errors.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "hvprof/base/error.h"

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

}  // namespace hvprof
