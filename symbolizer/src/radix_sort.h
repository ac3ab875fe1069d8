// Internal: a stable LSD radix sort of (64-bit key, 32-bit index) pairs that only makes passes
// over the key bytes that actually differ. Addresses of one image usually differ in their low
// three bytes only, so a batch sorts in three linear passes instead of n log n comparisons.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace hvprof::symbolizer {

struct KeyIndex {
  uint64_t key;
  uint32_t index;
};

// Sorts `items` by key, keeping the input order among equal keys. `scratch` is reused storage.
inline void RadixSortKeyIndex(std::vector<KeyIndex>* items, std::vector<KeyIndex>* scratch) {
  const size_t n = items->size();
  if (n < 256) {
    std::stable_sort(items->begin(), items->end(),
                     [](const KeyIndex& a, const KeyIndex& b) { return a.key < b.key; });
    return;
  }
  const uint64_t first = (*items)[0].key;
  uint64_t differ = 0;
  std::array<std::array<uint32_t, 256>, 8> counts{};
  for (const KeyIndex& item : *items) {
    differ |= item.key ^ first;
    for (int b = 0; b < 8; ++b) ++counts[b][(item.key >> (8 * b)) & 0xff];
  }
  scratch->resize(n);
  KeyIndex* from = items->data();
  KeyIndex* to = scratch->data();
  bool in_scratch = false;
  for (int b = 0; b < 8; ++b) {
    if (((differ >> (8 * b)) & 0xff) == 0) continue;
    uint32_t offset = 0;
    std::array<uint32_t, 256> position;
    for (int d = 0; d < 256; ++d) {
      position[d] = offset;
      offset += counts[b][d];
    }
    for (size_t i = 0; i < n; ++i) {
      const KeyIndex& item = from[i];
      to[position[(item.key >> (8 * b)) & 0xff]++] = item;
    }
    std::swap(from, to);
    in_scratch = !in_scratch;
  }
  if (in_scratch) items->swap(*scratch);
}

}  // namespace hvprof::symbolizer
