#include "hvprof/base/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include "hvprof/base/scoped_fd.h"

namespace hvprof {

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string ExecutableDirectory() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  return Dirname(path);
}


namespace {

// What a file is, for messages: "a FIFO", "a symbolic link".
std::string_view KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The process's umask, read without changing it: umask(2) would, for a moment, change what
// every other thread's new files get.
mode_t CurrentUmask() {
  if (auto status = ReadFileToString("/proc/self/status", 1 << 16)) {
    const size_t at = status.value().find("\nUmask:");
    if (at != std::string::npos) return static_cast<mode_t>(std::strtoul(status.value().c_str() + at + 7, nullptr, 8));
  }
  return 022;
}

// Opens `path` without waiting on a FIFO or taking a terminal, through a link only when
// `follow`, and only if it is a regular file; for writing, only if no other hard link
// shares it. Back to blocking I/O once open.
Result<ScopedFd> OpenRegular(const std::string& path, int flags, int mode, bool follow) {
  int raw;
  do {
    raw = ::open(path.c_str(), flags | (follow ? 0 : O_NOFOLLOW) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) {
    if (!follow && errno == ELOOP) {
      return MakeError(ErrorKind::kPermissionDenied, "{} is a symbolic link; hvprof does not follow links there",
                       path);
    }
    if (errno == ENXIO) {
      return MakeError(ErrorKind::kPermissionDenied, "{} is a FIFO with no reader or a socket, not a regular file",
                       path);
    }
    return ErrnoError(errno, fmt::format("cannot open {}", path));
  }
  ScopedFd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", path));
  if (!S_ISREG(st.st_mode)) {
    return MakeError(follow ? ErrorKind::kInvalidArgument : ErrorKind::kPermissionDenied,
                     "{} is {}, not a regular file; hvprof reads and writes only regular files", path,
                     KindOf(st.st_mode));
  }
  // A hard link planted there would make a write land in another file.
  if (!follow && (flags & O_ACCMODE) != O_RDONLY && st.st_nlink > 1) {
    return MakeError(ErrorKind::kPermissionDenied, "{} has {} hard links; hvprof writes only files of its own there",
                     path, st.st_nlink);
  }
  const int status = ::fcntl(fd.get(), F_GETFL);
  if (status >= 0) ::fcntl(fd.get(), F_SETFL, status & ~O_NONBLOCK);
  return fd;
}

// A fresh name in the same directory as `path` (so rename is atomic), created exclusively: a
// link planted under any name there is never followed. A replaced file's permissions (never
// set-id bits: its owner may change) and, where root writes it, its owner are kept; a new one
// gets what the umask allows, as open(2) would give.
Result<ScopedFd> CreateTemporary(const std::string& path, const struct stat* existing, std::string* tmp) {
  *tmp = fmt::format("{}/.{}.tmp-XXXXXX", Dirname(path), Basename(path));
  int raw = ::mkostemp(tmp->data(), O_CLOEXEC);
  if (raw < 0) return ErrnoError(errno, fmt::format("cannot create a temporary file beside {}", path));
  ScopedFd fd(raw);
  auto fail = [&](Error error) {
    ::unlink(tmp->c_str());
    return error;
  };
  mode_t mode = 0;
  if (existing != nullptr) {
    mode = existing->st_mode & 0777;
    if (::geteuid() == 0 && ::fchown(fd.get(), existing->st_uid, existing->st_gid) != 0) {
      return fail(ErrnoError(errno, fmt::format("cannot keep the owner of {}", path)));
    }
  } else {
    mode = 0666 & ~CurrentUmask();
  }
  if (::fchmod(fd.get(), mode) != 0) return fail(ErrnoError(errno, fmt::format("cannot set the mode of {}", *tmp)));
  return fd;
}

// Syncs and closes the temporary file and renames it to `path`; removes it on failure.
Result<void> InstallTemporary(ScopedFd fd, const std::string& tmp, const std::string& path, bool replace) {
  auto fail = [&](Error error) {
    ::unlink(tmp.c_str());
    return error;
  };
  if (::fsync(fd.get()) != 0) return fail(ErrnoError(errno, fmt::format("cannot sync {}", path)));
  fd.Reset();
  // Where nothing was, nothing may appear meanwhile: a link created there now is not replaced.
  const unsigned flags = replace ? 0 : RENAME_NOREPLACE;
  int renamed = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), flags);
  if (renamed != 0 && errno == EINVAL && flags != 0) {
    // Filesystems without RENAME_NOREPLACE (NFS, 9p, some FUSE): link() refuses an existing
    // name as well, then the temporary name goes.
    renamed = ::link(tmp.c_str(), path.c_str());
    if (renamed == 0) ::unlink(tmp.c_str());
  }
  if (renamed != 0) {
    const int err = errno;
    if (err == EEXIST) {
      return fail(MakeError(ErrorKind::kBusy, "{} appeared while it was being written; not replaced", path));
    }
    return fail(ErrnoError(err, fmt::format("cannot rename {} to {}", tmp, path)));
  }
  return Ok();
}

Result<void> WriteRegular(const std::string& path, std::string_view data, const struct stat* existing) {
  std::string tmp;
  HVPROF_TRY(fd, CreateTemporary(path, existing, &tmp));
  auto bytes = std::as_bytes(std::span(data.data(), data.size()));
  if (auto written = WriteAll(fd.get(), bytes, path); !written) {
    ::unlink(tmp.c_str());
    return written.error();
  }
  return InstallTemporary(std::move(fd), tmp, path, existing != nullptr);
}

}  // namespace

Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes, Links links) {
  HVPROF_TRY(fd, OpenRegular(path, O_RDONLY, 0, links == Links::kFollow));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", path));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return MakeError(ErrorKind::kInvalidArgument, "{} is {} bytes; at most {} are read from it", path, st.st_size,
                     max_bytes);
  }
  // Read in place: a file of known size in one buffer (one byte more, to see its end), one whose
  // size stat does not know (/proc) in a buffer that doubles. Files that grow while read stop at
  // the bound.
  const size_t limit = max_bytes == SIZE_MAX ? max_bytes : max_bytes + 1;
  std::string out(std::min<size_t>(st.st_size > 0 ? static_cast<size_t>(st.st_size) + 1 : 65536, limit), '\0');
  size_t used = 0;
  for (;;) {
    if (used == out.size()) {
      if (used > max_bytes) {
        return MakeError(ErrorKind::kInvalidArgument, "{} holds more than {} bytes; not read", path, max_bytes);
      }
      out.resize(std::min<size_t>(out.size() * 2, limit));
    }
    ssize_t n = ::read(fd.get(), out.data() + used, out.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, fmt::format("cannot read {}", path));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (used > max_bytes) {
    return MakeError(ErrorKind::kInvalidArgument, "{} holds more than {} bytes; not read", path, max_bytes);
  }
  out.resize(used);
  return out;
}

Result<ScopedFd> OpenRegularFile(const std::string& path, int flags, int mode) {
  return OpenRegular(path, flags, mode, /*follow=*/false);
}

Result<void> WriteAll(int fd, std::span<const std::byte> data, std::string_view what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, fmt::format("cannot write {}", what));
    }
    data = data.subspan(static_cast<size_t>(n));
  }
  return Ok();
}

Result<void> WriteFileAtomically(const std::string& path, std::string_view data) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoError(errno, fmt::format("cannot stat {}", path));
    return WriteRegular(path, data, nullptr);
  }
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorKind::kPermissionDenied, "{} is {}; hvprof writes only regular files there, and leaves it "
                     "as it is", path, KindOf(st.st_mode));
  }
  return WriteRegular(path, data, &st);
}

Result<OutputFile> OutputFile::Open(const std::string& path) {
  OutputFile out;
  out.path_ = path;
  if (path == "-") {
    out.standard_output_ = true;
    out.path_ = "standard output";
    return out;
  }
  if (path.empty()) return MakeError(ErrorKind::kInvalidArgument, "no output file named");
  struct stat st {};
  const bool exists = ::lstat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return ErrnoError(errno, fmt::format("cannot stat {}", path));
  if (!exists || S_ISREG(st.st_mode)) {
    HVPROF_TRY(fd, CreateTemporary(path, exists ? &st : nullptr, &out.temporary_));
    out.fd_ = std::move(fd);
    out.replace_ = exists;
    return out;
  }
  // A device or a pipe, or a link to one (/dev/stdout, /dev/fd/N), is written in place, as a
  // shell redirection would: nothing is replaced. Anything else is refused below.
  const bool link = S_ISLNK(st.st_mode);
  struct stat target = st;
  if (link && ::stat(path.c_str(), &target) != 0) target.st_mode = S_IFLNK;
  if (S_ISCHR(target.st_mode) || S_ISFIFO(target.st_mode)) {
    HVPROF_TRY(fd, OpenFile(path.c_str(), O_WRONLY | O_NOCTTY | (link ? 0 : O_NOFOLLOW)));
    struct stat opened {};
    if (::fstat(fd.get(), &opened) != 0 || opened.st_ino != target.st_ino || opened.st_dev != target.st_dev) {
      return MakeError(ErrorKind::kBusy, "{} changed while it was being opened; not written", path);
    }
    out.fd_ = std::move(fd);
    return out;
  }
  const std::string_view advice = S_ISLNK(st.st_mode) ? "; name the file it points to instead" : "";
  return MakeError(ErrorKind::kInvalidArgument, "{} is {}; output is not written there{}", path, KindOf(st.st_mode),
                   advice);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      temporary_(std::exchange(other.temporary_, {})),
      replace_(other.replace_),
      fd_(std::move(other.fd_)),
      standard_output_(other.standard_output_) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
    path_ = std::move(other.path_);
    temporary_ = std::exchange(other.temporary_, {});
    replace_ = other.replace_;
    fd_ = std::move(other.fd_);
    standard_output_ = other.standard_output_;
  }
  return *this;
}

OutputFile::~OutputFile() {
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

int OutputFile::fd() const { return standard_output_ ? STDOUT_FILENO : fd_.get(); }

Result<void> OutputFile::Write(std::span<const std::byte> data) {
  if (fd() < 0) return MakeError(ErrorKind::kInvalidArgument, "{}: written after it was closed", path_);
  return WriteAll(fd(), data, path_);
}

Result<void> OutputFile::Commit() {
  if (temporary_.empty()) {
    fd_.Reset();
    standard_output_ = false;
    return Ok();
  }
  const std::string tmp = std::exchange(temporary_, {});
  return InstallTemporary(std::move(fd_), tmp, path_, replace_);
}

Result<void> WriteOutput(const std::string& path, std::string_view data) {
  HVPROF_TRY(out, OutputFile::Open(path));
  HVPROF_TRYV(out.Write(std::as_bytes(std::span(data.data(), data.size()))));
  return out.Commit();
}

Result<void> MakeDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot create directory {}", path));
  if (!std::filesystem::is_directory(path, ec)) {
    return MakeError(ErrorKind::kInvalidArgument, "{} exists and is not a directory", path);
  }
  return Ok();
}

Result<void> CheckTrustedDirectory(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec).lexically_normal();
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot resolve {}", path));
  const fs::path leaf = absolute.filename().empty() ? absolute.parent_path() : absolute;
  struct stat st {};
  if (::lstat(leaf.c_str(), &st) != 0) return ErrnoError(errno, fmt::format("cannot inspect {}", leaf.string()));
  if (S_ISLNK(st.st_mode)) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "the session directory {} is a symbolic link; give the directory it points to "
                     "(--session-dir), so that nobody can point it elsewhere while hvprofd writes there",
                     leaf.string());
  }
  if (!S_ISDIR(st.st_mode)) return MakeError(ErrorKind::kInvalidArgument, "{} is not a directory", leaf.string());
  // The directories above, as they really are (links resolved).
  char* real_parent = ::realpath(leaf.parent_path().c_str(), nullptr);
  if (real_parent == nullptr) {
    return ErrnoError(errno, fmt::format("cannot resolve {}", leaf.parent_path().string()));
  }
  std::vector<fs::path> chain = {leaf};
  for (fs::path p(real_parent);; p = p.parent_path()) {
    chain.push_back(p);
    if (p == p.parent_path()) break;
  }
  std::free(real_parent);
  const uid_t user = ::geteuid();
  const gid_t group = ::getegid();
  // The path as given goes through links and directories of its own: a link someone else owns
  // could be pointed elsewhere later, and each directory it passes must be safe as well.
  {
    fs::path prefix = absolute.root_path();
    for (const fs::path& part : absolute.relative_path()) {
      prefix /= part;
      if (prefix == leaf) break;
      if (::lstat(prefix.c_str(), &st) != 0) return ErrnoError(errno, fmt::format("cannot inspect {}", prefix.string()));
      if (S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != user) {
        return MakeError(ErrorKind::kPermissionDenied,
                         "{} is not safe for hvprof's sessions: {} is a symbolic link owned by uid {}, who could point "
                         "it elsewhere while hvprofd writes there; give the path without it",
                         leaf.string(), prefix.string(), st.st_uid);
      }
      if (!S_ISLNK(st.st_mode)) chain.push_back(prefix);
    }
  }
  for (size_t i = 0; i < chain.size(); ++i) {
    const std::string dir = chain[i].string();
    if (::stat(dir.c_str(), &st) != 0) return ErrnoError(errno, fmt::format("cannot inspect {}", dir));
    const bool sticky_above = i != 0 && (st.st_mode & S_ISVTX) != 0;
    std::string fault;
    if (st.st_uid != 0 && st.st_uid != user) {
      fault = fmt::format("is owned by uid {}, who could replace what is in it", st.st_uid);
    } else if ((st.st_mode & S_IWOTH) != 0 && !sticky_above) {
      fault = "is writable by every user";
    } else if ((st.st_mode & S_IWGRP) != 0 && st.st_gid != 0 && st.st_gid != group && !sticky_above) {
      fault = fmt::format("is writable by group {}", st.st_gid);
    }
    if (!fault.empty()) {
      return MakeError(ErrorKind::kPermissionDenied,
                       "{} is not safe for hvprof's sessions: {} {} (mode {:04o}), so others could plant links or files "
                       "that hvprofd would write through. Use a directory only root{} can change (e.g. `chmod go-w "
                       "{}`), or give another --session-dir",
                       leaf.string(), i == 0 ? std::string("it") : dir, fault, st.st_mode & 07777,
                       user == 0 ? std::string() : " and you", dir);
    }
  }
  return Ok();
}

Result<std::optional<ScopedFd>> LockPidFile(const std::string& path, std::string_view note) {
  HVPROF_TRY(file, OpenRegularFile(path, O_RDWR | O_CREAT, 0644));
  if (::flock(file.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return std::optional<ScopedFd>();
    return ErrnoError(errno, fmt::format("cannot lock {}", path));
  }
  const std::string pid = std::to_string(::getpid()) + "\n" + (note.empty() ? "" : std::string(note) + "\n");
  if (::ftruncate(file.get(), 0) != 0) return ErrnoError(errno, fmt::format("cannot write {}", path));
  HVPROF_TRYV(WriteAll(file.get(), std::as_bytes(std::span(pid.data(), pid.size())), path));
  return std::optional<ScopedFd>(std::move(file));
}

}  // namespace hvprof
