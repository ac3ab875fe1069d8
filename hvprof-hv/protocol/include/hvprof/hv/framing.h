// Sending and receiving hvprof-hv protocol messages over a Unix stream socket, with file
// descriptors. Blocking, for clients; the server frames incoming bytes itself (it must never
// block on one slow client) and uses SendMessage for replies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/hv/protocol.h"

namespace hvprof::hv {

struct Message {
  MessageHeader header{};
  std::vector<std::byte> payload;
  std::vector<hvprof::ScopedFd> fds;
};

// Checks a received header: magic, version and the payload limit.
hvprof::Result<void> ValidateHeader(const MessageHeader& header, uint32_t max_payload);

hvprof::Result<void> SendMessage(int socket, uint16_t type, uint32_t sequence,
                                 std::span<const std::byte> payload,
                                 std::span<const int> fds = {});

// Reads one whole message, with any descriptors sent alongside it.
hvprof::Result<Message> ReceiveMessage(int socket, uint32_t max_payload);

// Payload helpers: a fixed struct followed by optional trailing bytes.
template <typename T>
std::vector<std::byte> Pack(const T& head, std::span<const std::byte> tail = {}) {
  std::vector<std::byte> out(sizeof(T) + tail.size());
  __builtin_memcpy(out.data(), &head, sizeof(T));
  if (!tail.empty()) __builtin_memcpy(out.data() + sizeof(T), tail.data(), tail.size());
  return out;
}

template <typename T>
bool Unpack(std::span<const std::byte> payload, T* head, std::span<const std::byte>* tail = nullptr) {
  if (payload.size() < sizeof(T) || (tail == nullptr && payload.size() != sizeof(T))) return false;
  __builtin_memcpy(head, payload.data(), sizeof(T));
  if (tail != nullptr) *tail = payload.subspan(sizeof(T));
  return true;
}

inline std::span<const std::byte> AsBytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

}  // namespace hvprof::hv
