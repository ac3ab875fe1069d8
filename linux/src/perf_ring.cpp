#include "hvprof/linux/perf_ring.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <cstring>

namespace hvprof::linux_host {

using hvprof::ErrorKind;
using hvprof::MakeError;

struct PerfRing::Meta : perf_event_mmap_page {};

hvprof::Result<PerfRing> PerfRing::Attach(void* base, uint64_t bytes, uint64_t page_size) {
  if (base == nullptr || page_size < sizeof(perf_event_mmap_page) || bytes <= page_size) {
    return MakeError(ErrorKind::kInvalidArgument, "perf ring: a mapping of {} bytes is too small",
                     bytes);
  }
  PerfRing ring;
  ring.meta_ = static_cast<Meta*>(base);
  uint64_t offset = __atomic_load_n(&ring.meta_->data_offset, __ATOMIC_RELAXED);
  uint64_t size = __atomic_load_n(&ring.meta_->data_size, __ATOMIC_RELAXED);
  if (offset == 0 && size == 0) {  // before Linux 4.1
    offset = page_size;
    size = bytes - page_size;
  }
  if (offset < sizeof(perf_event_mmap_page) || size == 0 || (size & (size - 1)) != 0 ||
      offset > bytes || size > bytes - offset) {
    return MakeError(ErrorKind::kCorrupt,
                     "perf ring: data area at {} of {} bytes does not fit a mapping of {} bytes",
                     offset, size, bytes);
  }
  ring.data_ = static_cast<const uint8_t*>(base) + offset;
  ring.data_size_ = size;
  ring.tail_ = __atomic_load_n(&ring.meta_->data_tail, __ATOMIC_RELAXED);
  return ring;
}

uint64_t PerfRing::Pending() const {
  if (meta_ == nullptr) return 0;
  const uint64_t head = __atomic_load_n(&meta_->data_head, __ATOMIC_ACQUIRE);
  return head >= tail_ ? head - tail_ : 0;
}

PerfRing::View PerfRing::Peek() const {
  View view;
  if (meta_ == nullptr) return view;
  // Acquire: the record bytes the kernel wrote before publishing head are visible below.
  view.head = __atomic_load_n(&meta_->data_head, __ATOMIC_ACQUIRE);
  if (view.head < tail_ || view.head - tail_ > data_size_) {
    view.corrupt = true;  // the kernel never overwrites unread data: nothing here can be trusted
    return view;
  }
  const uint64_t length = view.head - tail_;
  const uint64_t start = tail_ & (data_size_ - 1);
  const uint64_t first = std::min(length, data_size_ - start);
  view.first = std::span<const uint8_t>(data_ + start, first);
  view.second = std::span<const uint8_t>(data_, length - first);
  return view;
}

void PerfRing::Release(const View& view) {
  if (meta_ == nullptr) return;
  tail_ = view.head;
  // Release: our reads of the data complete before the kernel may reuse the space.
  __atomic_store_n(&meta_->data_tail, tail_, __ATOMIC_RELEASE);
}

}  // namespace hvprof::linux_host
