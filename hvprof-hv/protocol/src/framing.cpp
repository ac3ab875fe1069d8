#include "hvprof/hv/framing.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace hvprof::hv {

using hvprof::ErrorKind;
using hvprof::MakeError;
using hvprof::Result;

const char* ProtocolErrorName(ProtocolError error) {
  switch (error) {
    case ProtocolError::kOk: return "ok";
    case ProtocolError::kMalformed: return "malformed request";
    case ProtocolError::kUnknownType: return "unknown message type";
    case ProtocolError::kDenied: return "not allowed for this domain";
    case ProtocolError::kNoSuchRegion: return "no such region shared with this domain";
    case ProtocolError::kUnsupported: return "not supported on this platform";
    case ProtocolError::kBadVersion: return "protocol version mismatch";
    case ProtocolError::kInternal: return "internal error in hvprof-hv";
    case ProtocolError::kBusy: return "too many requests waiting; retry once one is answered";
  }
  return "unknown protocol error";
}

Result<void> ValidateHeader(const MessageHeader& header, uint32_t max_payload) {
  if (header.magic != kProtocolMagic) {
    return MakeError(ErrorKind::kProtocol, "bad message magic {:#x}", header.magic);
  }
  if (header.version != kProtocolVersion) {
    return MakeError(ErrorKind::kProtocol, "peer speaks protocol version {}, this is version {}",
                     header.version, kProtocolVersion);
  }
  if (header.length > max_payload) {
    return MakeError(ErrorKind::kProtocol, "message of {} bytes exceeds the limit of {}",
                     header.length, max_payload);
  }
  return hvprof::Ok();
}

Result<void> SendMessage(int socket, uint16_t type, uint32_t sequence,
                         std::span<const std::byte> payload, std::span<const int> fds) {
  if (fds.size() > kMaxFdsPerMessage) {
    return MakeError(ErrorKind::kInternal, "{} descriptors in one message", fds.size());
  }
  MessageHeader header{kProtocolMagic, kProtocolVersion, type,
                       static_cast<uint32_t>(payload.size()), sequence};
  iovec iov[2] = {{&header, sizeof header},
                  {const_cast<std::byte*>(payload.data()), payload.size()}};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msghdr message{};
  message.msg_iov = iov;
  message.msg_iovlen = payload.empty() ? 1 : 2;
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&message);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  size_t total = sizeof header + payload.size();
  size_t sent = 0;
  bool first = true;
  while (sent < total) {
    ssize_t n;
    if (first) {
      n = ::sendmsg(socket, &message, MSG_NOSIGNAL);
    } else {
      // The descriptors went with the first chunk; send the rest as plain bytes.
      const auto* base = reinterpret_cast<const char*>(&header);
      if (sent < sizeof header) {
        n = ::send(socket, base + sent, sizeof header - sent, MSG_NOSIGNAL);
      } else {
        n = ::send(socket, payload.data() + (sent - sizeof header), total - sent, MSG_NOSIGNAL);
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return hvprof::ErrnoError(ErrorKind::kIo, errno, "cannot send to hvprof-hv peer");
    }
    sent += static_cast<size_t>(n);
    first = false;
  }
  return hvprof::Ok();
}

namespace {

Result<void> ReadExactly(int socket, void* buffer, size_t bytes) {
  auto* out = static_cast<char*>(buffer);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::recv(socket, out + got, bytes - got, 0);
    if (n == 0) return MakeError(ErrorKind::kIo, "peer closed the connection");
    if (n < 0) {
      if (errno == EINTR) continue;
      return hvprof::ErrnoError(ErrorKind::kIo, errno, "cannot read from hvprof-hv peer");
    }
    got += static_cast<size_t>(n);
  }
  return hvprof::Ok();
}

}  // namespace

Result<Message> ReceiveMessage(int socket, uint32_t max_payload) {
  Message message;
  // The header comes with recvmsg so that descriptors attached to its first byte are taken.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  iovec iov{&message.header, sizeof message.header};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return MakeError(ErrorKind::kIo, "peer closed the connection");
  if (n < 0) return hvprof::ErrnoError(ErrorKind::kIo, errno, "cannot read from hvprof-hv peer");
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof fd);
      message.fds.emplace_back(fd);
    }
  }
  if (static_cast<size_t>(n) < sizeof message.header) {
    HVPROF_TRYV(ReadExactly(socket, reinterpret_cast<char*>(&message.header) + n,
                            sizeof message.header - static_cast<size_t>(n)));
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    return MakeError(ErrorKind::kProtocol, "peer sent more descriptors than a message may carry");
  }
  HVPROF_TRYV(ValidateHeader(message.header, max_payload));
  message.payload.resize(message.header.length);
  if (message.header.length != 0) {
    HVPROF_TRYV(ReadExactly(socket, message.payload.data(), message.payload.size()));
  }
  return message;
}

}  // namespace hvprof::hv
