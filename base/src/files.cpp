#include "hvprof/base/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

// Opens what the O_PATH descriptor `at` (a regular file, `st`) refers to with `flags`, through
// /proc/self/fd: what was looked at is what is opened, and nothing is waited on.
Result<ScopedFd> Reopen(int at, const struct stat& st, int flags, const std::string& path) {
  const std::string self = fmt::format("/proc/self/fd/{}", at);
  int raw;
  do {
    raw = ::open(self.c_str(), (flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW)) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) {
    if (errno == ENOENT && ::access("/proc/self/fd", F_OK) != 0) {
      return MakeError(ErrorKind::kUnsupported, "cannot open {}: /proc is not mounted, and hvprof opens files others "
                       "could change only through it; mount it",
                       path);
    }
    return ErrnoError(errno, fmt::format("cannot open {}", path));
  }
  ScopedFd fd(raw);
  struct stat now {};
  if (::fstat(fd.get(), &now) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", path));
  if (now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
    return MakeError(ErrorKind::kBusy, "{} changed while it was being opened; not opened", path);
  }
  const int status = ::fcntl(fd.get(), F_GETFL);
  if (status >= 0) ::fcntl(fd.get(), F_SETFL, status & ~O_NONBLOCK);
  return fd;
}

// Opens `path` without waiting on a FIFO, opening a device or taking a terminal: what is there
// is looked at through O_PATH first (through a link only when `follow`), and opened only if it
// is a regular file; for writing, only if no other hard link shares it. An absent file is
// created (O_CREAT) exclusively, so that nothing planted meanwhile is opened. Back to blocking
// I/O once open.
Result<ScopedFd> OpenRegular(const std::string& path, int flags, int mode, bool follow) {
  for (int attempt = 0;; ++attempt) {
    if ((flags & O_EXCL) == 0) {
      int raw;
      do {
        raw = ::open(path.c_str(), O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
      } while (raw < 0 && errno == EINTR);
      if (raw >= 0) {
        ScopedFd at(raw);
        struct stat st {};
        if (::fstat(at.get(), &st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", path));
        if (S_ISLNK(st.st_mode)) {
          return MakeError(ErrorKind::kPermissionDenied, "{} is a symbolic link; hvprof does not follow links there",
                           path);
        }
        if (!S_ISREG(st.st_mode)) {
          return MakeError(follow ? ErrorKind::kInvalidArgument : ErrorKind::kPermissionDenied,
                           "{} is {}, not a regular file; hvprof reads and writes only regular files", path,
                           KindOf(st.st_mode));
        }
        // A hard link planted there would make a write land in another file.
        if (!follow && (flags & O_ACCMODE) != O_RDONLY && st.st_nlink > 1) {
          return MakeError(ErrorKind::kPermissionDenied,
                           "{} has {} hard links; hvprof writes only files of its own there", path, st.st_nlink);
        }
        return Reopen(at.get(), st, flags, path);
      }
      if (errno != ENOENT || (flags & O_CREAT) == 0) return ErrnoError(errno, fmt::format("cannot open {}", path));
    }
    int raw;
    do {
      raw = ::open(path.c_str(), flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode);
    } while (raw < 0 && errno == EINTR);
    if (raw >= 0) {
      ScopedFd fd(raw);
      const int status = ::fcntl(fd.get(), F_GETFL);
      if (status >= 0) ::fcntl(fd.get(), F_SETFL, status & ~O_NONBLOCK);
      return fd;
    }
    // Something appeared there meanwhile: look at it again, as above.
    if (errno == EEXIST && (flags & O_EXCL) == 0 && attempt < 8) continue;
    return ErrnoError(errno, fmt::format("cannot create {}", path));
  }
}

// Who else than root and this process's user (and `users`) could change what a directory or
// file holds, as a phrase ("is owned by uid 1000, who could replace what is in it"); empty
// when nobody. `sticky_ok`: a sticky directory (such as /tmp) others can write is fine, when
// what is looked up in it is checked in turn: they cannot rename what is not theirs.
bool TrustedUser(uid_t uid, const std::vector<uid_t>& users) {
  return uid == 0 || uid == ::geteuid() || std::find(users.begin(), users.end(), uid) != users.end();
}

std::string OthersCanChange(const struct stat& st, const std::vector<uid_t>& users, bool sticky_ok) {
  const gid_t group = ::getegid();
  const bool sticky = sticky_ok && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0;
  if (!TrustedUser(st.st_uid, users)) {
    return fmt::format("is owned by uid {}, who could replace what is in it", st.st_uid);
  }
  if ((st.st_mode & S_IWOTH) != 0 && !sticky) return "is writable by every user";
  if ((st.st_mode & S_IWGRP) != 0 && st.st_gid != 0 && st.st_gid != group && !sticky) {
    return fmt::format("is writable by group {}", st.st_gid);
  }
  return {};
}

std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (at < path.size()) {
    const size_t slash = std::min(path.find('/', at), path.size());
    if (slash > at) parts.emplace_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  return parts;
}

// Walks `path` a component at a time with O_PATH and returns the descriptor of what it names
// (`st` says what that is), following links but the last one unless trust.links says so, and
// noting in `replaceable` the first thing on the way someone else could change.
Result<ScopedFd> WalkPath(const std::string& path, const FileTrust& trust, struct stat* st, std::string* replaceable) {
  if (path.empty()) return MakeError(ErrorKind::kInvalidArgument, "no file named");
  auto note = [&](const std::string& where, const std::string& why) {
    if (replaceable->empty()) *replaceable = fmt::format("{} {}", where, why);
  };
  // Whether the directory being walked is one where others may create names (sticky, writable by
  // all or a group, as /tmp): a name there may be another user's hard link to a file she could
  // not read herself (fs.protected_hardlinks=0), so such a file's owner proves nothing.
  bool shared_sticky = false;
  auto shared = [](const struct stat& dir) {
    return (dir.st_mode & S_ISVTX) != 0 && (dir.st_mode & (S_IWOTH | S_IWGRP)) != 0;
  };
  auto open_start = [&](bool absolute, std::string* shown) -> Result<ScopedFd> {
    *shown = absolute ? "/" : ".";
    HVPROF_TRY(start, OpenFile(shown->c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    struct stat dir {};
    if (::fstat(start.get(), &dir) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", *shown));
    if (std::string why = OthersCanChange(dir, trust.users, true); !why.empty()) note(*shown, why);
    shared_sticky = shared(dir);
    return start;
  };
  std::string shown;
  HVPROF_TRY(dir, open_start(path[0] == '/', &shown));
  std::vector<std::string> todo = SplitPath(path);
  std::reverse(todo.begin(), todo.end());  // a stack: the next component last
  int links = 0;
  bool resolved = false;
  ScopedFd here;
  while (!todo.empty()) {
    const std::string name = std::move(todo.back());
    todo.pop_back();
    if (name == ".") continue;
    const bool last = todo.empty();
    const std::string at = shown == "/" ? "/" + name : shown + "/" + name;
    int raw;
    do {
      raw = ::openat(dir.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    } while (raw < 0 && errno == EINTR);
    if (raw < 0) return ErrnoError(errno, fmt::format("cannot open {}", path));
    here = ScopedFd(raw);
    if (::fstat(here.get(), st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", at));
    if (S_ISLNK(st->st_mode)) {
      if (last && trust.links == Links::kRefuse) {
        return MakeError(ErrorKind::kPermissionDenied,
                         "{} is a symbolic link; hvprof does not follow a link to a file it opens for others", path);
      }
      // A link's mode says nothing; its owner can point it elsewhere.
      if (!TrustedUser(st->st_uid, trust.users)) {
        note(at, fmt::format("is a symbolic link owned by uid {}, who could point it elsewhere", st->st_uid));
      }
      if (++links > 40) return MakeError(ErrorKind::kInvalidArgument, "{}: too many symbolic links", path);
      std::string target(4096, '\0');
      const ssize_t n = ::readlinkat(here.get(), "", target.data(), target.size());
      if (n <= 0 || static_cast<size_t>(n) >= target.size()) {
        return ErrnoError(n < 0 ? errno : ENAMETOOLONG, fmt::format("cannot read the link {}", at));
      }
      target.resize(static_cast<size_t>(n));
      std::vector<std::string> more = SplitPath(target);
      for (auto it = more.rbegin(); it != more.rend(); ++it) todo.push_back(std::move(*it));
      if (target[0] == '/') {
        HVPROF_TRY(root, open_start(true, &shown));
        dir = std::move(root);
      }
      if (todo.empty()) {  // a link to "/" or "."
        here = ScopedFd(::dup(dir.get()));
        if (!here.valid() || ::fstat(here.get(), st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", at));
        resolved = true;
      }
      continue;
    }
    resolved = true;
    if (last) {
      if (std::string why = OthersCanChange(*st, trust.users, false); !why.empty()) note(at, why);
      if (S_ISREG(st->st_mode) && st->st_nlink > 1 && shared_sticky) {
        note(at, fmt::format("has {} hard links and is in a sticky directory others can write to, where another user "
                             "could have linked it",
                             st->st_nlink));
      }
      break;
    }
    if (!S_ISDIR(st->st_mode)) {
      return MakeError(ErrorKind::kNotFound, "cannot open {}: {} is {}, not a directory", path, at, KindOf(st->st_mode));
    }
    if (std::string why = OthersCanChange(*st, trust.users, true); !why.empty()) note(at, why);
    shared_sticky = shared(*st);
    dir = std::move(here);
    shown = name == ".." ? Dirname(shown) : at;
  }
  if (!resolved) {  // "/" or "." itself
    here = ScopedFd(::dup(dir.get()));
    if (!here.valid() || ::fstat(here.get(), st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", path));
  }
  return here;
}

// A fresh name in the same directory as `path` (so rename is atomic), created exclusively: a
// link planted under any name there is never followed. A replaced file's permissions (never
// set-id bits: its owner may change) and, where root writes it, its owner are kept; a new one
// gets what the umask allows, as open(2) would give.
Result<ScopedFd> CreateTemporary(const std::string& path, const struct stat* existing, std::string* tmp,
                                 int* intended = nullptr) {
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
  // Private until shared: its owner's bits only, and AllowSharing gives it the rest.
  if (intended != nullptr) {
    *intended = static_cast<int>(mode);
    mode &= 0700;
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

Result<std::string> ReadToEnd(int fd, const std::string& what, size_t max_bytes, size_t size_hint) {
  // Read in place: a file of known size in one buffer (one byte more, to see its end), one whose
  // size stat does not know (/proc) in a buffer that doubles. Files that grow while read stop at
  // the bound.
  const size_t limit = max_bytes == SIZE_MAX ? max_bytes : max_bytes + 1;
  std::string out(std::min<size_t>(size_hint > 0 ? size_hint + 1 : 65536, limit), '\0');
  size_t used = 0;
  for (;;) {
    if (used == out.size()) {
      if (used > max_bytes) {
        return MakeError(ErrorKind::kInvalidArgument, "{} holds more than {} bytes; not read", what, max_bytes);
      }
      out.resize(std::min<size_t>(out.size() * 2, limit));
    }
    ssize_t n = ::read(fd, out.data() + used, out.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, fmt::format("cannot read {}", what));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (used > max_bytes) {
    return MakeError(ErrorKind::kInvalidArgument, "{} holds more than {} bytes; not read", what, max_bytes);
  }
  out.resize(used);
  return out;
}

Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes, Links links) {
  HVPROF_TRY(fd, OpenRegular(path, O_RDONLY, 0, links == Links::kFollow));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", path));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return MakeError(ErrorKind::kInvalidArgument, "{} is {} bytes; at most {} are read from it", path, st.st_size,
                     max_bytes);
  }
  return ReadToEnd(fd.get(), path, max_bytes, static_cast<size_t>(st.st_size));
}

Result<UserFile> OpenUserFile(const std::string& path, const FileTrust& trust) {
  UserFile file;
  ScopedFd at;
  if (trust.check_path) {
    HVPROF_TRY(walked, WalkPath(path, trust, &file.st, &file.replaceable));
    at = std::move(walked);
  } else {
    HVPROF_TRY(opened, OpenFile(path.c_str(), O_PATH | O_CLOEXEC | (trust.links == Links::kFollow ? 0 : O_NOFOLLOW)));
    at = std::move(opened);
    if (::fstat(at.get(), &file.st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", path));
    if (S_ISLNK(file.st.st_mode)) {
      return MakeError(ErrorKind::kPermissionDenied,
                       "{} is a symbolic link; hvprof does not follow a link to a file it opens for others", path);
    }
  }
  if (!S_ISREG(file.st.st_mode)) {
    return MakeError(ErrorKind::kPermissionDenied, "{} is {}, not a regular file; not opened", path,
                     KindOf(file.st.st_mode));
  }
  if (!file.replaceable.empty() && trust.refuse_replaceable) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "{}: not opened, since someone other than root{} could have replaced it: {}", path,
                     ::geteuid() == 0 ? std::string() : " and you", file.replaceable);
  }
  HVPROF_TRY(fd, Reopen(at.get(), file.st, O_RDONLY, path));
  file.fd = std::move(fd);
  return file;
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

Result<OutputFile> OutputFile::Open(const std::string& path, Sharing sharing) {
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
    HVPROF_TRY(fd, CreateTemporary(path, exists ? &st : nullptr, &out.temporary_,
                                   sharing == Sharing::kPrivate ? &out.shared_mode_ : nullptr));
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
      shared_mode_(other.shared_mode_),
      fd_(std::move(other.fd_)),
      standard_output_(other.standard_output_) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
    path_ = std::move(other.path_);
    temporary_ = std::exchange(other.temporary_, {});
    replace_ = other.replace_;
    shared_mode_ = other.shared_mode_;
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

Result<void> OutputFile::AllowSharing() {
  if (shared_mode_ < 0 || !fd_.valid()) return Ok();
  if (::fchmod(fd_.get(), static_cast<mode_t>(shared_mode_)) != 0) {
    return ErrnoError(errno, fmt::format("cannot set the mode of {}", path_));
  }
  return Ok();
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
  return CheckTrustedDirectory(path, "hvprof's sessions", "or give another --session-dir");
}

Result<void> CheckTrustedDirectory(const std::string& path, std::string_view what, std::string_view advice) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec).lexically_normal();
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot resolve {}", path));
  const fs::path leaf = absolute.filename().empty() ? absolute.parent_path() : absolute;
  struct stat st {};
  if (::lstat(leaf.c_str(), &st) != 0) return ErrnoError(errno, fmt::format("cannot inspect {}", leaf.string()));
  if (S_ISLNK(st.st_mode)) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "{} ({}) is a symbolic link; give the directory it points to, so that nobody can point it "
                     "elsewhere while hvprof works there",
                     leaf.string(), what);
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
                         "{} is not safe for {}: {} is a symbolic link owned by uid {}, who could point it elsewhere "
                         "while hvprof works there; give the path without it",
                         leaf.string(), what, prefix.string(), st.st_uid);
      }
      if (!S_ISLNK(st.st_mode)) chain.push_back(prefix);
    }
  }
  for (size_t i = 0; i < chain.size(); ++i) {
    const std::string dir = chain[i].string();
    if (::stat(dir.c_str(), &st) != 0) return ErrnoError(errno, fmt::format("cannot inspect {}", dir));
    // Above the directory itself, a sticky one such as /tmp is fine: others cannot rename what
    // is ours in it. The directory itself must be ours: files in it could be planted.
    const std::string fault = OthersCanChange(st, {}, i != 0);
    if (!fault.empty()) {
      return MakeError(ErrorKind::kPermissionDenied,
                       "{} is not safe for {}: {} {} (mode {:04o}), so others could plant links or files that hvprof "
                       "would follow. Use a directory only root{} can change (e.g. `chmod go-w {}`), {}",
                       leaf.string(), what, i == 0 ? std::string("it") : dir, fault, st.st_mode & 07777,
                       user == 0 ? std::string() : " and you", dir, advice);
    }
  }
  return Ok();
}

Result<void> MakePrivateDirectory(const std::string& path, std::string_view what, std::string_view advice) {
  if (path.empty()) return MakeError(ErrorKind::kInvalidArgument, "no directory named for {}", what);
  const std::string parent = Dirname(path);
  if (parent != path) HVPROF_TRYV(MakeDirectories(parent));
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError(errno, fmt::format("cannot create {} {}", what, path));
  }
  return CheckTrustedDirectory(path, what, advice);
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

std::optional<PidFileHolder> ReadPidFile(const std::string& path) {
  auto file = OpenRegularFile(path, O_RDONLY);
  if (!file) return std::nullopt;
  PidFileHolder holder;
  // A shared lock is refused while the holder keeps its exclusive one; read-only is enough. One
  // that was granted is given back at once: a process taking the lock meanwhile must get it.
  if (::flock(file.value().get(), LOCK_SH | LOCK_NB) == 0) {
    ::flock(file.value().get(), LOCK_UN);
  } else {
    holder.held = errno == EWOULDBLOCK;
  }
  auto text = ReadFileToString(path, 8192, Links::kRefuse);
  if (!text) return holder;
  std::string_view lines = text.value();
  const size_t newline = lines.find('\n');
  holder.pid = std::string(lines.substr(0, newline));
  if (newline != std::string_view::npos) {
    std::string_view note = lines.substr(newline + 1);
    while (!note.empty() && note.back() == '\n') note.remove_suffix(1);
    holder.note = std::string(note);
  }
  return holder;
}

}  // namespace hvprof
