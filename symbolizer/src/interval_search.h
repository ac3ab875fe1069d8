// Internal: "which interval holds this address" over a sorted vector of interval starts, with a
// cursor so that sorted queries gallop forward instead of searching the whole vector.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hvprof::symbolizer {

inline constexpr size_t kNoInterval = static_cast<size_t>(-1);

// Returns the index of the last start <= address, or kNoInterval if address < starts[0].
// `cursor` holds the previous answer (or anything, e.g. 0) and is updated.
inline size_t FindInterval(const std::vector<uint64_t>& starts, uint64_t address, size_t* cursor) {
  const size_t n = starts.size();
  if (n == 0 || address < starts[0]) return kNoInterval;
  size_t i = *cursor < n ? *cursor : 0;
  size_t lo;
  size_t hi;
  if (starts[i] > address) {
    lo = 0;
    hi = i;
  } else {
    size_t step = 1;
    lo = i;
    while (lo + step < n && starts[lo + step] <= address) {
      lo += step;
      step *= 2;
    }
    hi = std::min(n, lo + step);
  }
  auto it = std::upper_bound(starts.begin() + static_cast<ptrdiff_t>(lo),
                             starts.begin() + static_cast<ptrdiff_t>(hi), address);
  i = static_cast<size_t>(it - starts.begin()) - 1;
  *cursor = i;
  return i;
}

}  // namespace hvprof::symbolizer
