#include "hvprof/buildid_cache/cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "hvprof/base/files.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace hvprof::buildid_cache {

namespace sym = hvprof::symbolizer;

namespace {

constexpr std::string_view kFolder = ".build-id";
constexpr std::string_view kDebugSuffix = ".debug";
constexpr std::string_view kTemporaryMark = ".tmp.";
constexpr const char* kLockFile = ".lock";
// A temporary copy this old was left by a process that died while copying.
constexpr time_t kStaleTemporarySeconds = 3600;

std::string Normalized(std::string_view build_id) {
  std::string id;
  if (!sym::NormalizeBuildIdHex(build_id, &id) || id.size() <= 2) return {};
  return id;
}

std::string MiB(uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// Creates each missing directory of `path` with mode 0755 whatever the umask (hvprofd's is 077):
// users read the cached copies of files they could read anyway.
Result<void> MakeReadableDirectories(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec).lexically_normal();
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot resolve {}", path));
  std::filesystem::path at;
  for (const auto& part : absolute) {
    at /= part;
    if (part.empty() || at == at.root_path()) continue;
    if (::mkdir(at.c_str(), 0755) == 0) {
      // The mode is set through the directory made, never through a link someone put there since.
      ScopedFd made(::open(at.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!made.valid() || ::fchmod(made.get(), 0755) != 0) {
        return ErrnoError(errno, fmt::format("cannot set the mode of {}", at.string()));
      }
    } else if (errno != EEXIST) {
      return ErrnoError(errno, fmt::format("cannot create directory {}", at.string()));
    }
  }
  struct stat st {};
  if (::stat(absolute.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorKind::kInvalidArgument, "{} exists and is not a directory", absolute.string());
  }
  return Ok();
}

// Whether everyone could read the file open at `fd`: it and every directory above where it is
// (as the kernel names the file opened, not the path asked for) let others read and search. A
// copy in the cache is readable by others only then.
bool EveryoneCouldRead(int fd, const struct stat& st) {
  if ((st.st_mode & S_IROTH) == 0) return false;
  std::error_code ec;
  std::filesystem::path real = std::filesystem::read_symlink(fmt::format("/proc/self/fd/{}", fd), ec);
  if (ec || !real.is_absolute()) return false;
  for (real = real.parent_path();; real = real.parent_path()) {
    struct stat dir {};
    if (::stat(real.c_str(), &dir) != 0 || (dir.st_mode & S_IXOTH) == 0) return false;
    if (real == real.root_path()) return true;
  }
}

// The build-id of the ELF file at `path`, or "" when it has none that can be read.
std::string BuildIdOf(const std::string& path) {
  auto id = sym::ReadBuildId(path);
  return id ? id.value() : std::string();
}

// Copies the first `size` bytes of `from` to the new file `to`; a file that is shorter now (cut
// while it was copied) is an error.
Result<uint64_t> CopyContents(int from, uint64_t size, int to, const std::string& to_path) {
  uint64_t copied = 0;
  bool kernel_copy = true;
  std::vector<char> buffer;
  while (copied < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size - copied, uint64_t{1} << 30));
    ssize_t n;
    if (kernel_copy) {
      loff_t in = static_cast<loff_t>(copied);
      n = ::copy_file_range(from, &in, to, nullptr, want, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        kernel_copy = false;
        buffer.resize(size_t{1} << 20);
        continue;
      }
    } else {
      n = ::pread(from, buffer.data(), std::min(buffer.size(), want), static_cast<off_t>(copied));
      if (n > 0) {
        HVPROF_TRYV(WriteAll(to, std::as_bytes(std::span(buffer.data(), static_cast<size_t>(n))), to_path));
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, fmt::format("cannot copy into {}", to_path));
    }
    if (n == 0) return MakeError(ErrorKind::kCorrupt, "it was cut while it was copied");
    copied += static_cast<uint64_t>(n);
  }
  return copied;
}

// Whether the file open at `fd` is as `before` says: not written to since.
bool Unchanged(int fd, const struct stat& before) {
  struct stat now {};
  return ::fstat(fd, &now) == 0 && now.st_size == before.st_size && now.st_mtim.tv_sec == before.st_mtim.tv_sec &&
         now.st_mtim.tv_nsec == before.st_mtim.tv_nsec && now.st_ctim.tv_sec == before.st_ctim.tv_sec &&
         now.st_ctim.tv_nsec == before.st_ctim.tv_nsec;
}

// One entry of the cache as its files say: its bytes and when a session last used it.
struct Entry {
  uint64_t bytes = 0;
  struct timespec used {};
  bool has_image = false;
};

bool Older(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec;
}

// A file a session sampled (or its debug file), opened as the archive opens them: links
// followed, never a FIFO or a device; what it holds is checked by its build-id, on the copy.
Result<UserFile> OpenSampled(const std::string& path) {
  return OpenUserFile(path, FileTrust{.links = Links::kFollow, .users = {}, .refuse_replaceable = false,
                                      .check_path = true});
}

// Takes the cache's lock: one process at a time adds and evicts (two hvprofds may share the
// cache). Another one adding now is waited for up to 2 s, then left for the next stop (this runs
// where the agent drains, and a copy may take long).
Result<ScopedFd> LockCache(const std::string& directory) {
  HVPROF_TRY(lock, OpenRegularFile(directory + "/" + kLockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  for (int tries = 0; ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0; ++tries) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      return ErrnoError(errno, fmt::format("cannot lock the build-id cache {}", directory));
    }
    if (tries == 40) {
      return MakeError(ErrorKind::kBusy, "another process has been adding to the build-id cache {} for 2 s",
                       directory);
    }
    ::usleep(50000);
  }
  return lock;
}

// Copies the file open at `fd` (as `st` says it was when opened) to `file`, through a temporary
// file that is renamed into place once the source is seen unchanged and the copy's build-id is
// `id`. Returns the bytes copied.
Result<uint64_t> CopyIn(int fd, const struct stat& st, const std::string& file, const std::string& id, mode_t mode) {
  static uint64_t counter = 0;
  HVPROF_TRYV(MakeReadableDirectories(Dirname(file)));
  const std::string temporary = fmt::format("{}{}{}.{}", file, kTemporaryMark, ::getpid(), ++counter);
  HVPROF_TRY(out, OpenRegularFile(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  auto copied = CopyContents(fd, static_cast<uint64_t>(st.st_size), out.get(), temporary);
  if (copied && !Unchanged(fd, st)) copied = MakeError(ErrorKind::kCorrupt, "it changed while it was copied");
  // The mode asked for, whatever the umask.
  if (copied && ::fchmod(out.get(), mode) != 0) copied = ErrnoError(errno, fmt::format("cannot set the mode of {}", temporary));
  out.Reset();
  if (copied && BuildIdOf(temporary) != id) copied = MakeError(ErrorKind::kCorrupt, "it changed while it was copied");
  if (copied && ::rename(temporary.c_str(), file.c_str()) != 0) {
    copied = ErrnoError(errno, fmt::format("cannot rename {} to {}", temporary, file));
  }
  if (!copied) ::unlink(temporary.c_str());
  return copied;
}

// Sums what the cache holds, entry by entry (an image with its debug file), removes the
// temporary files of copies that died, then removes the least recently used entries but those
// in `used` until the cache holds at most `max_bytes`; into `summary`.
Result<void> Evict(const std::string& directory, uint64_t max_bytes, const std::set<std::string>& used,
                   AddSummary& summary) {
  std::map<std::string, Entry> entries;
  const std::string root = directory + "/" + std::string(kFolder);
  const time_t now = ::time(nullptr);
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(root, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string prefix = it->path().filename().string();
    if (prefix.size() != 2 || it->is_symlink(ec) || !it->is_directory(ec)) continue;
    std::error_code inner;
    for (auto file = std::filesystem::directory_iterator(it->path(), inner);
         !inner && file != std::filesystem::directory_iterator(); file.increment(inner)) {
      const std::string path = file->path().string();
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (file->path().filename().string().find(kTemporaryMark) != std::string::npos) {
        if (now - st.st_mtim.tv_sec > kStaleTemporarySeconds) ::unlink(path.c_str());
        continue;
      }
      const bool debug = path.ends_with(kDebugSuffix);
      Entry& entry = entries[debug ? path.substr(0, path.size() - kDebugSuffix.size()) : path];
      entry.bytes += static_cast<uint64_t>(st.st_size);
      if (!debug || !entry.has_image) entry.used = st.st_mtim;
      entry.has_image = entry.has_image || !debug;
    }
  }
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot list the build-id cache {}", root));
  for (const auto& [stem, entry] : entries) summary.bytes += entry.bytes;
  if (summary.bytes > max_bytes) {
    std::vector<std::pair<std::string, Entry>> oldest(entries.begin(), entries.end());
    std::sort(oldest.begin(), oldest.end(), [](const auto& a, const auto& b) { return Older(a.second.used, b.second.used); });
    for (const auto& [stem, entry] : oldest) {
      if (summary.bytes <= max_bytes) break;
      if (used.count(stem) != 0) continue;
      if (::unlink(stem.c_str()) != 0 && errno != ENOENT) continue;
      ::unlink((stem + std::string(kDebugSuffix)).c_str());
      summary.bytes -= entry.bytes;
      summary.bytes_evicted += entry.bytes;
      ++summary.evicted;
    }
  }
  return Ok();
}

}  // namespace

std::string DefaultDirectory() {
  if (const char* chosen = std::getenv(kEnvironment); chosen != nullptr && chosen[0] != '\0') return chosen;
  if (::geteuid() == 0) return std::string(kSystemDirectory);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/hvprof/build-id";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    return std::string(home) + "/.cache/hvprof/build-id";
  }
  return std::string(kSystemDirectory);
}

std::vector<std::string> SearchDirectories(const std::string& recorded) {
  std::vector<std::string> candidates{recorded, DefaultDirectory()};
  // HVPROF_BUILD_ID_CACHE names the one cache besides the session's (none: no other).
  const char* chosen = std::getenv(kEnvironment);
  if (chosen == nullptr || chosen[0] == '\0') candidates.emplace_back(kSystemDirectory);
  std::vector<std::string> out;
  for (const std::string& directory : candidates) {
    if (directory.empty() || directory == kNone) continue;
    if (std::find(out.begin(), out.end(), directory) == out.end()) out.push_back(directory);
  }
  return out;
}

std::string ImageFile(const std::string& directory, std::string_view build_id) {
  const std::string id = Normalized(build_id);
  if (id.empty()) return {};
  return fmt::format("{}/{}/{}/{}", directory, kFolder, id.substr(0, 2), id.substr(2));
}

std::string DebugFile(const std::string& directory, std::string_view build_id) {
  const std::string image = ImageFile(directory, build_id);
  return image.empty() ? image : image + std::string(kDebugSuffix);
}

std::string FindImage(const std::vector<std::string>& directories, std::string_view build_id) {
  for (const std::string& directory : directories) {
    const std::string file = ImageFile(directory, build_id);
    struct stat st {};
    // A copy this user may not read (of a file only root could) leaves the next cache to try.
    if (file.empty() || ::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(file.c_str(), R_OK) != 0) {
      continue;
    }
    if (!CheckTrustedDirectory(directory, "the build-id cache", "")) continue;
    return file;
  }
  return {};
}

Cache::Cache(std::string directory, uint64_t max_bytes)
    : directory_(std::move(directory)), max_bytes_(max_bytes), symbolizer_(std::make_unique<sym::Symbolizer>()) {}
Cache::Cache(Cache&&) noexcept = default;
Cache& Cache::operator=(Cache&&) noexcept = default;
Cache::~Cache() = default;

Result<Cache> Cache::Open(const std::string& directory, uint64_t max_bytes) {
  if (directory.empty() || directory[0] != '/') {
    return MakeError(ErrorKind::kInvalidArgument,
                     "the build-id cache must be an absolute path (got '{}'); give --build-id-cache=DIR or none",
                     directory);
  }
  if (max_bytes == 0) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "a build-id cache of 0 bytes keeps nothing: give a size (e.g. 2G), or --build-id-cache=none");
  }
  HVPROF_TRYV(MakeReadableDirectories(directory));
  HVPROF_TRYV(CheckTrustedDirectory(directory, "the build-id cache", "or give another --build-id-cache (or none)"));
  HVPROF_TRYV(MakeReadableDirectories(directory + "/" + std::string(kFolder)));
  return Cache(directory, max_bytes);
}

Result<AddSummary> Cache::Add(std::span<const Wanted> images) {
  AddSummary summary;
  auto locked = LockCache(directory_);
  if (!locked) return locked.error();
  const ScopedFd lock = std::move(locked).value();  // held until the eviction is done
  std::set<std::string> used;  // the entries of this call: never evicted by it
  bool disk_full = false;  // then nothing more is copied; what is cached is still marked used
  auto not_kept = [&](const std::string& id, std::string why) {
    summary.skipped.push_back(std::move(why));
    if (!id.empty()) summary.not_kept.push_back(id);
  };
  for (const Wanted& wanted : images) {
    const std::string id = Normalized(wanted.build_id);
    if (id.empty()) {
      not_kept(id, fmt::format("{} has no build-id: a copy could not be told from a rebuilt file", wanted.path));
      continue;
    }
    const std::string image_file = ImageFile(directory_, id);
    const std::string debug_file = image_file + std::string(kDebugSuffix);
    if (!used.insert(image_file).second) continue;
    struct stat st {};
    if (::lstat(image_file.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      // Used again: the least recently used go first.
      ::utimensat(AT_FDCWD, image_file.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
      ::utimensat(AT_FDCWD, debug_file.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
      ++summary.present;
      continue;
    }
    if (disk_full) continue;  // not copied now, nor marked as never to be
    auto source = OpenSampled(wanted.path);
    if (!source) {
      not_kept(id, fmt::format("{}: {}", wanted.path, source.error().message()));
      continue;
    }
    const uint64_t size = static_cast<uint64_t>(source.value().st.st_size);
    if (size > max_bytes_ / 4) {
      not_kept(id, fmt::format("{} is {}, more than a quarter of the cache's {}: not kept (a larger "
                               "--build-id-cache-size keeps it)",
                               wanted.path, MiB(size), MiB(max_bytes_)));
      continue;
    }
    const int fd = source.value().fd.get();
    const std::string found = BuildIdOf(fmt::format("/proc/self/fd/{}", fd));
    if (found != id) {
      not_kept(id, fmt::format("{} is no longer the file that was sampled (its build-id is {}, the session's {}): "
                               "not kept",
                               wanted.path, found.empty() ? "none" : found, id));
      continue;
    }
    const mode_t mode = EveryoneCouldRead(fd, source.value().st) ? 0644 : 0600;
    auto copied = CopyIn(fd, source.value().st, image_file, id, mode);
    if (!copied) {
      if (copied.error().kind() == ErrorKind::kNoSpace) {
        disk_full = true;
        summary.skipped.push_back(fmt::format("{}: {}; nothing more is copied until there is room", wanted.path,
                                              copied.error().message()));
      } else {
        not_kept(id, fmt::format("{}: {}", wanted.path, copied.error().message()));
      }
      continue;
    }
    ++summary.added;
    summary.bytes_added += copied.value();
    // Its separate debug file, where the symbolizer finds it for the file at its path (by
    // build-id under /usr/lib/debug, or by .gnu_debuglink), when it has one.
    auto info = symbolizer_->Describe(sym::ImageSpec::Elf(wanted.path));
    const std::string debug = info && info.value().build_id == id ? info.value().debug_file : std::string();
    symbolizer_->ClearCache();
    if (debug.empty()) continue;
    auto debug_source = OpenSampled(debug);
    if (!debug_source || static_cast<uint64_t>(debug_source.value().st.st_size) > max_bytes_ / 4) {
      summary.skipped.push_back(fmt::format("{}, the debug file of {}: {}", debug, wanted.path,
                                            debug_source ? "more than a quarter of the cache; not kept"
                                                         : debug_source.error().message()));
      continue;
    }
    const bool shared = mode == 0644;  // literal: a file mode
    const int debug_fd = debug_source.value().fd.get();
    const mode_t debug_mode = shared && EveryoneCouldRead(debug_fd, debug_source.value().st) ? 0644 : 0600;
    auto debug_copied = CopyIn(debug_fd, debug_source.value().st, debug_file, id, debug_mode);
    if (!debug_copied) {
      disk_full = disk_full || debug_copied.error().kind() == ErrorKind::kNoSpace;
      summary.skipped.push_back(fmt::format("{}, the debug file of {}: {}", debug, wanted.path,
                                            debug_copied.error().message()));
      continue;
    }
    ++summary.debug_added;
    summary.bytes_added += debug_copied.value();
  }

  HVPROF_TRYV(Evict(directory_, max_bytes_, used, summary));
  return summary;
}

Result<uint64_t> ParseSize(std::string_view text) {
  uint64_t number = 0;
  const char* end = text.data() + text.size();
  const auto [rest, error] = std::from_chars(text.data(), end, number);
  const std::string_view unit(rest, static_cast<size_t>(end - rest));
  int shift = -1;
  if (unit.empty()) shift = 0;
  else if (unit == "k" || unit == "K" || unit == "KiB") shift = 10;
  else if (unit == "M" || unit == "MiB") shift = 20;
  else if (unit == "G" || unit == "GiB") shift = 30;
  else if (unit == "T" || unit == "TiB") shift = 40;
  if (error != std::errc() || rest == text.data() || shift < 0 || (shift != 0 && number > (UINT64_MAX >> shift))) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a size: give bytes, or a number with k, M, G or T (powers of 1024), e.g. 2G", text);
  }
  return number << shift;
}

}  // namespace hvprof::buildid_cache
