// Reading an archive `hvprof archive` wrote (writer.h): a tar holding
//   hvprof-archive.json           what it is: {"hvprof_archive": 1, "session_directory": ...,
//                                 "files": [...]} (docs/session-format.md, Archives)
//   session/...                   the session directory's files (session.json, samples.hvs, ...)
//   .build-id/xx/rest             images, by the build-id the session recorded (gdb's and
//   .build-id/xx/rest.debug       debuginfod's layout), and their separate debug files
//   by-path/RECORDED/PATH         images recorded without a build-id (kallsyms, System.map...)
// The tar is untrusted input: it is unpacked only into a directory of our own, only regular
// files and directories, only relative names without "." or "..", within bounded sizes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "hvprof/base/result.h"

namespace hvprof::archive {

inline constexpr int kArchiveVersion = 1;
inline constexpr const char* kManifestFile = "hvprof-archive.json";
inline constexpr const char* kSessionFolder = "session";
inline constexpr const char* kBuildIdFolder = ".build-id";
inline constexpr const char* kByPathFolder = "by-path";

struct UnpackLimits {
  uint64_t max_entry_bytes = uint64_t{16} << 30;  // one file
  uint64_t max_total_bytes = uint64_t{64} << 30;  // all of them (and never more than the tar holds)
  size_t max_entries = 100000;
  size_t max_name_bytes = 4096;
  uint64_t spare_bytes = uint64_t{64} << 20;  // left free where it is unpacked
};

struct Unpacked {
  std::string root;                // `destination`: the root of .build-id/ and by-path/
  std::string session_directory;   // root/session
  std::string original_directory;  // the session directory that was archived
};

// Unpacks `archive` (a tar) into `destination`, an empty directory only this process writes in
// (from mkdtemp). Refuses (and stops at) the first entry that is not a regular file or a
// directory, whose name is absolute or has "." or ".." in it, that appears twice, that is
// sparse, that exceeds `limits`, that would bring what is unpacked past the tar's own size, or
// that does not fit where it goes with limits.spare_bytes to spare. On an error, what was
// unpacked so far is left for the caller to remove.
Result<Unpacked> Unpack(const std::string& archive, const std::string& destination, const UnpackLimits& limits = {});
// The same from bytes in memory (the fuzzer's way in); `name` names it in messages.
Result<Unpacked> UnpackMemory(std::span<const uint8_t> bytes, const std::string& name, const std::string& destination,
                              const UnpackLimits& limits = {});

}  // namespace hvprof::archive
