#include "hvprof/base/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "hvprof/base/scoped_fd.h"

namespace hvprof {

Result<std::string> ReadFileToString(const std::string& path) {
  HVPROF_TRY(fd, OpenFile(path.c_str(), O_RDONLY));
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, fmt::format("cannot read {}", path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
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
  std::string tmp = path + ".tmp";
  HVPROF_TRY(fd, OpenFile(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
  auto bytes = std::as_bytes(std::span(data.data(), data.size()));
  if (auto written = WriteAll(fd.get(), bytes, tmp); !written) {
    ::unlink(tmp.c_str());
    return written.error();
  }
  if (::fsync(fd.get()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError(err, fmt::format("cannot sync {}", tmp));
  }
  fd.Reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError(err, fmt::format("cannot rename {} to {}", tmp, path));
  }
  return Ok();
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

Result<std::optional<ScopedFd>> LockPidFile(const std::string& path) {
  HVPROF_TRY(file, OpenFile(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (::flock(file.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return std::optional<ScopedFd>();
    return ErrnoError(errno, fmt::format("cannot lock {}", path));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(file.get(), 0) != 0) return ErrnoError(errno, fmt::format("cannot write {}", path));
  HVPROF_TRYV(WriteAll(file.get(), std::as_bytes(std::span(pid.data(), pid.size())), path));
  return std::optional<ScopedFd>(std::move(file));
}

}  // namespace hvprof
