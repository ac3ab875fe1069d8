#include "hvprof/base/socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace hvprof {
namespace {

Result<sockaddr_un> AddressOf(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    return MakeError(ErrorKind::kInvalidArgument, "socket path {} is {}; use a shorter directory", path,
                     path.empty() ? "empty" : "too long");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// A temporary name: a short dot file beside `path`, random (so that no other process, not even
// one of the same pid in another namespace, uses it), and short, so that it fits sun_path
// wherever `path` does, or nearly.
std::string TemporaryName(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  uint32_t random = 0;
  if (::getrandom(&random, sizeof random, 0) != sizeof random) random = static_cast<uint32_t>(::getpid());
  return fmt::format("{}.{:08x}", dir, random);
}

}  // namespace

Result<ScopedFd> ListenUnix(const std::string& path, const UnixListenOptions& options) {
  HVPROF_TRYV(AddressOf(path));
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (options.nonblocking ? SOCK_NONBLOCK : 0), 0));
  if (!fd.valid()) return ErrnoError(errno, "socket");
  std::string temporary;
  for (int attempt = 0;; ++attempt) {
    temporary = TemporaryName(path);
    if (temporary.size() >= sizeof(sockaddr_un::sun_path)) {
      temporary = path;  // no room: bind in place, over a stale socket
      ::unlink(path.c_str());
    }
    HVPROF_TRY(address, AddressOf(temporary));
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) break;
    if (errno != EADDRINUSE || temporary == path || attempt == 8) {
      return ErrnoError(errno, fmt::format("cannot bind {}", temporary));
    }
  }
  auto fail = [&](int err, std::string what) {
    ::unlink(temporary.c_str());
    return ErrnoError(err, std::move(what));
  };
  if (::chmod(temporary.c_str(), static_cast<mode_t>(options.mode)) != 0) {
    return fail(errno, fmt::format("cannot set the mode of {}", temporary));
  }
  if (options.owner && ::chown(temporary.c_str(), *options.owner, static_cast<gid_t>(-1)) != 0) {
    return fail(errno, fmt::format("cannot give {} to uid {}", path, *options.owner));
  }
  if (::listen(fd.get(), options.backlog) != 0) return fail(errno, fmt::format("cannot listen on {}", path));
  if (temporary != path && ::rename(temporary.c_str(), path.c_str()) != 0) {
    return fail(errno, fmt::format("cannot put the socket in place at {}", path));
  }
  return fd;
}

Result<ScopedFd> ConnectUnix(const std::string& path, std::string_view advice) {
  HVPROF_TRY(address, AddressOf(path));
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError(errno, "socket");
  int connected;
  do {
    connected = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  } while (connected != 0 && errno == EINTR);
  if (connected != 0) {
    const int err = errno;
    if (err == ENOENT || err == ECONNREFUSED) {
      return MakeError(ErrorKind::kNotFound, "nothing listens on {}", path);
    }
    return ErrnoError(err, fmt::format("cannot connect to {}", path));
  }
  ucred peer{};
  socklen_t length = sizeof peer;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
    return ErrnoError(errno, fmt::format("cannot tell who serves {}", path));
  }
  if (peer.uid != 0 && peer.uid != ::geteuid()) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "{} is served by uid {} (pid {}), neither root nor you: not spoken to, since someone else could "
                     "have put their own server there; {}",
                     path, peer.uid, peer.pid, advice);
  }
  return fd;
}

}  // namespace hvprof
