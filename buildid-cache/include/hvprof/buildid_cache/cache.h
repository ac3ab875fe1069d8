// The build-id cache: copies of the images (and their separate debug files) that sessions
// sampled, kept by build-id, so that an old session still reports its symbols after its binaries
// were rebuilt, upgraded or removed, as perf's ~/.debug does for perf.data.
//
//   DIR/.build-id/ab/cdef...        an image whose build-id is abcdef...
//   DIR/.build-id/ab/cdef....debug  its separate debug file, when it had one
//
// the layout of /usr/lib/debug and of an archive (archive/reader.h), so that the symbolizer
// finds a cached debug file as it finds any other. hvprofd adds to the cache when it writes a
// session (Cache::Add); reports, diffs and `hvprof archive` read from it (FindImage) when the file
// at the recorded path is gone or is not the one that was sampled.
//
// Bounded: after each addition the least recently used entries (an entry is used when a session
// samples it again) are removed until the cache holds at most its size. A copy is only ever made
// of the file that was sampled (its build-id is checked on the copy), and is readable by others
// only when they could read the original. docs/build-id-cache.md says all of this for users.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"

namespace hvprof::symbolizer {
class Symbolizer;
}

namespace hvprof::buildid_cache {

// Where root's hvprofd keeps the cache, and where every report looks.
inline constexpr std::string_view kSystemDirectory = "/var/cache/hvprof/build-id";
// The default bound of a cache's size.
inline constexpr uint64_t kDefaultMaxBytes = uint64_t{2} << 30;
// What turns the cache off (--build-id-cache=none).
inline constexpr std::string_view kNone = "none";

// The environment variable that names the default cache instead (kNone: none), as perf's
// PERF_BUILDID_DIR: for hvprofd's default, and the one place a report looks besides the session's.
inline constexpr const char* kEnvironment = "HVPROF_BUILD_ID_CACHE";

// This user's default cache: $HVPROF_BUILD_ID_CACHE when set; else kSystemDirectory for root,
// and $XDG_CACHE_HOME/hvprof/build-id (~/.cache/hvprof/build-id) for others.
std::string DefaultDirectory();
// Where a report looks for the images of a session, first to last, each once: the cache the
// session recorded (may be empty), then $HVPROF_BUILD_ID_CACHE when set (none: nothing more),
// else this user's default and the system's.
std::vector<std::string> SearchDirectories(const std::string& recorded);

// DIR/.build-id/xx/yyyy... for a build-id (lower-case hex, at least 2 bytes), and its debug
// file (the same with ".debug"). Empty for a build-id that is not hex.
std::string ImageFile(const std::string& directory, std::string_view build_id);
std::string DebugFile(const std::string& directory, std::string_view build_id);

// The cached copy of the image with `build_id` in the first of `directories` that has one this
// user may read, when that directory is one nobody but root and this user could have changed (as
// a session root); empty when none has it. What the copy holds is for the caller to check (the symbolizer checks
// its build-id).
std::string FindImage(const std::vector<std::string>& directories, std::string_view build_id);

// An image a session sampled: its recorded path and build-id.
struct Wanted {
  std::string path;
  std::string build_id;
};

struct AddSummary {
  size_t added = 0;          // images copied in
  size_t debug_added = 0;    // separate debug files copied in with them
  size_t present = 0;        // already there (now marked used)
  uint64_t bytes_added = 0;
  size_t evicted = 0;        // entries removed to stay within the size
  uint64_t bytes_evicted = 0;
  uint64_t bytes = 0;        // what the cache holds afterwards
  // Images not kept, each with why ("PATH is not the file that was sampled ..."): for the log.
  std::vector<std::string> skipped;
  // The build-ids of those not kept for a reason that holds at the next dump too (rebuilt, gone,
  // too large); not those a full disk or a busy cache kept out.
  std::vector<std::string> not_kept;
};

class Cache {
 public:
  // Creates `directory` (0755, and its parents) when it is missing, and checks that nobody but
  // root and this user could change it or a directory above it. `max_bytes`: the size kept.
  static Result<Cache> Open(const std::string& directory, uint64_t max_bytes);
  Cache(Cache&&) noexcept;
  Cache& operator=(Cache&&) noexcept;
  ~Cache();

  const std::string& directory() const { return directory_; }
  uint64_t max_bytes() const { return max_bytes_; }

  // Copies in each wanted image that is not cached yet (and the separate debug file the
  // symbolizer finds for it), after checking that the file at its path is still the one sampled;
  // marks those already cached as used now; then removes the least recently used entries (never
  // one of these) until the cache holds at most max_bytes. An image that cannot be kept (gone,
  // rebuilt, unreadable, larger than a quarter of the cache) is in AddSummary::skipped; an error
  // only when the cache itself cannot be used (another process has held its lock for 2 s). A
  // full disk stops the copying: what is cached is still marked used, and the eviction runs.
  // Safe against other processes adding to the same cache at the same time. A file is copied
  // only as it was opened: one written to (or cut) while it is copied is not kept.
  Result<AddSummary> Add(std::span<const Wanted> images);

 private:
  Cache(std::string directory, uint64_t max_bytes);
  std::string directory_;
  uint64_t max_bytes_ = kDefaultMaxBytes;
  std::unique_ptr<symbolizer::Symbolizer> symbolizer_;
};

// "2G", "512M", "100k", "1048576" (bytes; k, M, G, T are powers of 1024): the size option.
Result<uint64_t> ParseSize(std::string_view text);

}  // namespace hvprof::buildid_cache
