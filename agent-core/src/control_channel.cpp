#include "hvprof/agent/control_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hvprof/base/files.h"
#include "hvprof/base/socket.h"

namespace hvprof::agent {

namespace {

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "control socket path {} is too long; use a shorter --session-dir", path);
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

Result<void> ReadExactly(int fd, void* buffer, size_t bytes, std::chrono::milliseconds timeout,
                         const std::function<bool()>& still_working) {
  auto* out = static_cast<char*>(buffer);
  size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (got < bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (still_working && still_working()) {
        deadline = std::chrono::steady_clock::now() + timeout;
        continue;
      }
      return MakeError(ErrorKind::kBusy, "timed out waiting for the agent");
    }
    const ssize_t n = ::read(fd, out + got, bytes - got);
    if (n == 0) return MakeError(ErrorKind::kIo, "the agent closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError(errno, "read from the control socket");
    }
    got += static_cast<size_t>(n);
  }
  return Ok();
}

}  // namespace

Result<void> WriteMessage(int fd, const Json& message) {
  // Names from outside (a VM's, a process's) need not be UTF-8: replaced, not thrown on.
  const std::string text = message.dump(-1, ' ', false, Json::error_handler_t::replace);
  const uint32_t length = static_cast<uint32_t>(text.size());
  std::string frame(reinterpret_cast<const char*>(&length), sizeof length);
  frame += text;
  return WriteAll(fd, std::as_bytes(std::span(frame.data(), frame.size())), "the control socket");
}

Result<Json> ReadMessage(int fd, std::chrono::milliseconds timeout, const std::function<bool()>& still_working) {
  uint32_t length = 0;
  HVPROF_TRYV(ReadExactly(fd, &length, sizeof length, timeout, still_working));
  if (length > kMaxControlMessage) {
    return MakeError(ErrorKind::kProtocol, "control message of {} bytes is too large", length);
  }
  std::string text(length, '\0');
  HVPROF_TRYV(ReadExactly(fd, text.data(), length, timeout, still_working));
  Json message = Json::parse(text, nullptr, false);
  if (message.is_discarded() || !message.is_object()) {
    return MakeError(ErrorKind::kProtocol, "control message is not a JSON object");
  }
  return message;
}

Result<Json> Request(const std::string& socket_path, const Json& request,
                     std::chrono::milliseconds timeout) {
  return Request(socket_path, request, timeout, {});
}

Result<Json> Request(const std::string& socket_path, const Json& request,
                     std::chrono::milliseconds timeout, const std::function<bool()>& still_working) {
  HVPROF_TRYV(Address(socket_path));  // the advice for a long path names --session-dir
  // Only an hvprofd of root's or ours is told anything (its peer credentials).
  auto connected = ConnectUnix(socket_path, "check who made the session directory, or give another --session-dir");
  if (!connected) {
    if (connected.error().kind() == ErrorKind::kNotFound) {
      return MakeError(ErrorKind::kNotFound, "no agent listens on {}", socket_path);
    }
    return connected.error().WithContext("cannot reach the agent");
  }
  ScopedFd fd = std::move(connected).value();
  HVPROF_TRYV(WriteMessage(fd.get(), request));
  return ReadMessage(fd.get(), timeout, still_working);
}

Result<ScopedFd> Listen(const std::string& socket_path) {
  HVPROF_TRYV(Address(socket_path));  // the advice for a long path names --session-dir
  return ListenUnix(socket_path, UnixListenOptions{.mode = 0600, .owner = std::nullopt, .backlog = 8, .nonblocking = true});
}

Json OkResponse(Json fields) {
  fields["ok"] = true;
  return fields;
}

Json ErrorResponse(const Error& error) {
  return Json{{"ok", false},
              {"error", error.message()},
              {"kind", std::string(ErrorKindName(error.kind()))}};
}

Result<Json> CheckResponse(Json response) {
  if (response.value("ok", false)) return response;
  const std::string kind = response.value("kind", "");
  ErrorKind error_kind = ErrorKind::kInternal;
  for (ErrorKind candidate : {ErrorKind::kInvalidArgument, ErrorKind::kNotFound,
                              ErrorKind::kPermissionDenied, ErrorKind::kCorrupt, ErrorKind::kIo,
                              ErrorKind::kNoSpace, ErrorKind::kUnsupported, ErrorKind::kBusy,
                              ErrorKind::kBadState, ErrorKind::kProtocol, ErrorKind::kEmpty,
                              ErrorKind::kInternal}) {
    if (ErrorKindName(candidate) == kind) error_kind = candidate;
  }
  return Error(error_kind, response.value("error", std::string("the agent reported an error")));
}

}  // namespace hvprof::agent
