// The integer codings of hvprof's binary records (the session's chunk payloads, the context
// events hvprof-hv sends): LEB128 varints, zigzag for signed differences, and a bounded reader over
// one payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace hvprof::varint {

inline uint64_t ZigZag(int64_t value) {
  return (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
}
inline int64_t UnZigZag(uint64_t value) {
  return static_cast<int64_t>(value >> 1) ^ -static_cast<int64_t>(value & 1);
}

// Writes `value` at `out` (room for kMaxVarint bytes) and returns the end.
inline constexpr size_t kMaxVarint = 10;
inline uint8_t* PutVarint(uint8_t* out, uint64_t value) {
  while (value >= 0x80) {
    *out++ = static_cast<uint8_t>(value | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<uint8_t>(value);
  return out;
}

// A bounded reader over one chunk's payload; any overrun marks it failed.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool ok() const { return ok_; }
  bool done() const { return position_ == bytes_.size(); }
  uint8_t Byte() {
    if (position_ >= bytes_.size()) return Fail();
    return bytes_[position_++];
  }
  uint64_t Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ >= bytes_.size()) return Fail();
      const uint8_t byte = bytes_[position_++];
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return Fail();
  }

 private:
  uint8_t Fail() {
    ok_ = false;
    position_ = bytes_.size();
    return 0;
  }
  std::span<const uint8_t> bytes_;
  size_t position_ = 0;
  bool ok_ = true;
};

}  // namespace hvprof::varint
