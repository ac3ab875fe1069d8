// Internal: a stable LSD radix sort of addresses with their input positions, which only makes
// passes over the key bytes that actually differ. Addresses of one batch usually differ in
// their low three bytes only, so a batch sorts in three linear passes instead of n log n
// comparisons; when they span less than 4 GiB (they nearly always do), each item is one 64-bit
// word (offset from the lowest address, position), half the memory traffic of a pair.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace hvprof::symbolizer {

struct KeyIndex {
  uint64_t key;
  uint32_t index;
};

struct SortScratch {
  std::vector<uint64_t> words[2];
  std::vector<KeyIndex> pairs[2];
};

namespace detail {

// LSD radix passes over the bytes of Item's key (KeyOf) set in `differ`; `counts` holds each
// byte's histogram. Returns the buffer that holds the result.
template <typename Item, typename KeyOf>
Item* RadixPasses(Item* from, Item* to, size_t n, uint64_t differ,
                  const std::array<std::array<uint32_t, 256>, 8>& counts, KeyOf key_of) {
  for (int b = 0; b < 8; ++b) {
    if (((differ >> (8 * b)) & 0xff) == 0) continue;
    uint32_t offset = 0;
    std::array<uint32_t, 256> position;
    for (int d = 0; d < 256; ++d) {
      position[d] = offset;
      offset += counts[b][d];
    }
    for (size_t i = 0; i < n; ++i) {
      to[position[(key_of(from[i]) >> (8 * b)) & 0xff]++] = from[i];
    }
    std::swap(from, to);
  }
  return from;
}

// Histograms of the bytes of key_of(items) that differ; returns which bits differ. Addresses
// differ in their low bytes: those are counted while finding which bytes differ at all, any
// others in a second pass only if they do.
template <typename Item, typename KeyOf>
uint64_t CountBytes(const Item* items, size_t n, std::array<std::array<uint32_t, 256>, 8>* counts,
                    KeyOf key_of) {
  constexpr int kFirstPass = 3;
  const uint64_t first = key_of(items[0]);
  uint64_t differ = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = key_of(items[i]);
    differ |= key ^ first;
    for (int b = 0; b < kFirstPass; ++b) ++(*counts)[b][(key >> (8 * b)) & 0xff];
  }
  if ((differ >> (8 * kFirstPass)) != 0) {
    for (size_t i = 0; i < n; ++i) {
      const uint64_t key = key_of(items[i]);
      for (int b = kFirstPass; b < 8; ++b) ++(*counts)[b][(key >> (8 * b)) & 0xff];
    }
  }
  return differ;
}

}  // namespace detail

// Calls visit(key, position) for every key of `keys` in increasing order of key, equal keys in
// input order. `keys` holds fewer than 2^32 keys.
template <typename Visit>
void SortKeys(std::span<const uint64_t> keys, SortScratch* scratch, Visit visit) {
  const size_t n = keys.size();
  if (n == 0) return;
  const auto [low, high] = std::minmax_element(keys.begin(), keys.end());
  const uint64_t base = *low;
  if (*high - base <= UINT32_MAX) {
    std::vector<uint64_t>& items = scratch->words[0];
    std::vector<uint64_t>& other = scratch->words[1];
    items.resize(n);
    other.resize(n);
    for (size_t i = 0; i < n; ++i) items[i] = (keys[i] - base) << 32 | i;
    auto key_of = [](uint64_t item) { return item >> 32; };
    std::array<std::array<uint32_t, 256>, 8> counts{};
    const uint64_t differ = detail::CountBytes(items.data(), n, &counts, key_of);
    const uint64_t* sorted = detail::RadixPasses(items.data(), other.data(), n, differ, counts, key_of);
    for (size_t i = 0; i < n; ++i) {
      visit(base + (sorted[i] >> 32), static_cast<uint32_t>(sorted[i]));
    }
    return;
  }
  std::vector<KeyIndex>& items = scratch->pairs[0];
  std::vector<KeyIndex>& other = scratch->pairs[1];
  items.resize(n);
  other.resize(n);
  for (size_t i = 0; i < n; ++i) items[i] = KeyIndex{keys[i], static_cast<uint32_t>(i)};
  auto key_of = [](const KeyIndex& item) { return item.key; };
  std::array<std::array<uint32_t, 256>, 8> counts{};
  const uint64_t differ = detail::CountBytes(items.data(), n, &counts, key_of);
  const KeyIndex* sorted = detail::RadixPasses(items.data(), other.data(), n, differ, counts, key_of);
  for (size_t i = 0; i < n; ++i) visit(sorted[i].key, sorted[i].index);
}

}  // namespace hvprof::symbolizer
