// The consumer side of one perf mmap ring: a metadata page (struct perf_event_mmap_page)
// followed by a power-of-two data area. The kernel publishes data_head (we load it with
// acquire, so the bytes before it are visible); we read everything up to it (in place, or
// copied out), and only then store data_tail with release, which hands the space back.
#pragma once

#include <cstdint>
#include <span>

#include "hvprof/base/result.h"

namespace hvprof::linux_host {

class PerfRing {
 public:
  PerfRing() = default;
  // `base` is the start of the mapping (`bytes` long: one metadata page plus the data area).
  // Checks data_offset/data_size against the mapping; on older kernels that leave them zero,
  // the data area is everything after the first page.
  static hvprof::Result<PerfRing> Attach(void* base, uint64_t bytes, uint64_t page_size);

  // The published bytes, in place: one span, or two when they wrap the end of the data area.
  // The kernel does not write over them until Release. Impossible indices (head behind the
  // tail, or more than the ring ahead) give no bytes, `corrupt` set, and Release skips to head.
  struct View {
    std::span<const uint8_t> first;
    std::span<const uint8_t> second;
    uint64_t head = 0;
    bool corrupt = false;
  };
  View Peek() const;
  // Hands the bytes of `view` back to the kernel.
  void Release(const View& view);
  // Published bytes not yet read.
  uint64_t Pending() const;
  uint64_t data_size() const { return data_size_; }
  bool attached() const { return meta_ != nullptr; }

 private:
  struct Meta;
  Meta* meta_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  uint64_t tail_ = 0;  // our own copy; the shared one is only ever written
};

}  // namespace hvprof::linux_host
