// Session directories: the current one and the saved ones, their names, moves and state.
#include "hvprof/store/session.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <type_traits>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "hvprof/base/json_fields.h"

#include "address_counter.h"
#include "samples_decode.h"
#include "hvprof/base/files.h"
#include "hvprof/base/process.h"

namespace hvprof::store {

using Json = nlohmann::json;

std::string DomainName(uint16_t id, std::string_view name) {
  if (id == kIdleDomain) return "idle";
  const std::string plain = fmt::format("dom{}", id);
  if (id == 0 || name.empty() || name == plain) return plain;
  return fmt::format("{} ({})", plain, name);
}

// ---- session directories

std::optional<std::string> NewestSavedSession(const SessionPaths& paths) {
  std::error_code error;
  std::optional<std::string> newest;
  std::filesystem::file_time_type newest_time;
  for (const auto& entry : std::filesystem::directory_iterator(paths.samples_dir(), error)) {
    const std::string name = entry.path().filename().string();
    if (name == "current" || !ValidateSessionName(name)) continue;
    const auto written = std::filesystem::last_write_time(entry.path() / "session.json", error);
    if (error) continue;
    if (!newest || written > newest_time) {
      newest = name;
      newest_time = written;
    }
  }
  return newest;
}

Result<void> ValidateSessionName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 100 && name != "current" && name[0] != '.' &&
                  name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
                      std::string::npos;
  if (!ok) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a valid session name: use letters, digits, '-', '_' and '.', not "
                     "'current', and do not start with '.'",
                     name);
  }
  return Ok();
}

namespace {

Error NameTaken(const std::string& name, const std::string& target) {
  return MakeError(ErrorKind::kBadState, "a session named '{}' exists already ({}); pick another name", name,
                   target);
}

}  // namespace

Result<std::string> CheckSave(const SessionPaths& paths, const std::string& directory, const std::string& name,
                              bool allow_empty) {
  HVPROF_TRYV(ValidateSessionName(name));
  const std::string target = paths.Saved(name);
  std::error_code ec;
  if (std::filesystem::exists(target, ec)) return NameTaken(name, target);
  if (!std::filesystem::exists(directory, ec)) {
    return MakeError(ErrorKind::kNotFound, "nothing to save: {} does not exist", directory);
  }
  if (!allow_empty) {
    auto session = OpenSession(directory);
    if (session && session.value().metadata.samples_stored == 0) {
      return MakeError(ErrorKind::kEmpty,
                       "the current session ({}) has no samples: nothing was saved. Profile first (--start, the "
                       "workload, --stop), then --save; `hvprof run` saves each run itself (hvprof-report --list "
                       "names them)",
                       directory);
    }
  }
  return target;
}

Result<void> MoveSession(const std::string& from, const std::string& to) {
  const auto taken = [&to] { return NameTaken(std::filesystem::path(to).filename().string(), to); };
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return Ok();
  int error = errno;
  if (error == EEXIST || error == ENOTEMPTY) return taken();
  if (error == EINVAL || error == ENOSYS) {
    // A file system without RENAME_NOREPLACE (NFS, some FUSE ones): look, then move. Only a
    // saver racing between the two could then replace an empty directory of that name.
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(to, ec))) return taken();
    if (::rename(from.c_str(), to.c_str()) == 0) return Ok();
    error = errno;
    if (error == EEXIST || error == ENOTEMPTY) return taken();
  }
  return ErrnoError(error, fmt::format("cannot move {} to {}", from, to));
}

Result<void> CheckSessionDirectories(const SessionPaths& paths) {
  HVPROF_TRYV(CheckTrustedDirectory(paths.root));
  std::error_code ec;
  for (const std::string& dir : {paths.samples_dir(), paths.current()}) {
    if (std::filesystem::exists(std::filesystem::symlink_status(dir, ec))) HVPROF_TRYV(CheckTrustedDirectory(dir));
  }
  return Ok();
}

bool SessionWriterAlive(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::absolute(directory, ec).lexically_normal();
  if (ec) return false;
  const fs::path current = dir.filename().empty() ? dir.parent_path() : dir;
  if (current.filename() != "current" || current.parent_path().filename() != "samples") return false;
  const fs::path root = current.parent_path().parent_path();
  auto lock = ReadFileToString(SessionPaths{root.string()}.lock(), 4096, Links::kRefuse);
  if (!lock) return false;
  return IsLiveHvprofd(std::strtol(lock.value().c_str(), nullptr, 10));
}

bool IsLiveHvprofd(long pid) { return ProcessRunning(pid, "hvprofd"); }

Result<SessionOnDisk> OpenSession(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string dir = directory;
  if (!fs::exists(dir + "/" + kMetadataFile, ec) && fs::exists(dir + "/samples/current", ec)) {
    dir += "/samples/current";
  }
  if (!fs::is_directory(dir, ec)) {
    return MakeError(ErrorKind::kNotFound,
                     "no session at {}: the directory does not exist (profile first with `hvprof "
                     "--start-daemon` and `hvprof --start`, or give --session-dir)",
                     directory);
  }
  const std::string metadata_path = dir + "/" + kMetadataFile;
  if (!fs::exists(metadata_path, ec)) {
    if (fs::exists(dir + "/" + kSamplesFile, ec)) {
      return MakeError(ErrorKind::kCorrupt,
                       "session {} has samples but no {} (metadata missing or deleted); the "
                       "samples cannot be interpreted without it",
                       dir, kMetadataFile);
    }
    return MakeError(ErrorKind::kNotFound, "no session at {}: it holds no {}", dir, kMetadataFile);
  }
  // session.json holds metadata only (kilobytes, whatever the run's length); sessions of hvprof
  // before context.hvc kept every process in it, tens of megabytes for a busy hour: read those too.
  constexpr size_t kMaxMetadataBytes = size_t{512} << 20;
  struct stat metadata_stat {};
  if (::stat(metadata_path.c_str(), &metadata_stat) == 0 &&
      static_cast<uint64_t>(metadata_stat.st_size) > kMaxMetadataBytes) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "{} is {} bytes, more than the {} MiB a report reads: without it the samples cannot be "
                     "interpreted. hvprof writes processes to context.hvc and keeps session.json small; a "
                     "session.json this large comes from an older hvprof that kept every process in it: read "
                     "the session with that version",
                     metadata_path, metadata_stat.st_size, kMaxMetadataBytes >> 20);
  }
  HVPROF_TRY(text, ReadFileToString(metadata_path, kMaxMetadataBytes, Links::kRefuse));
  auto metadata = ParseMetadata(text, metadata_path);
  if (!metadata) return metadata.error();
  SessionOnDisk session;
  session.directory = dir;
  session.metadata = std::move(metadata).value();
  return session;
}

}  // namespace hvprof::store
