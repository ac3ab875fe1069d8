#include "hvprof/store/stack_counter.h"

#include <algorithm>

namespace hvprof::store {

namespace {

uint64_t Hash(const StackKey& key, std::span<const uint64_t> addresses) {
  // Each word mixed in fully (multiply, fold the high half down): addresses of one image differ
  // only in their low bits.
  uint64_t hash = (uint64_t{key.domain} << 48) ^ (uint64_t{key.mode} << 40) ^ (uint64_t{key.event} << 32) ^ key.pid;
  hash = (hash ^ ((uint64_t{key.vcpu} << 48) | (uint64_t{key.pcpu} << 32) | key.tid)) * 0x9E3779B97F4A7C15ULL;
  for (uint64_t address : addresses) {
    hash = (hash ^ address) * 0x9E3779B97F4A7C15ULL;
    hash ^= hash >> 32;
  }
  return hash;
}

}  // namespace

void StackCounter::Add(const StackKey& key, std::span<const uint64_t> addresses, uint64_t count) {
  const uint64_t hash = Hash(key, addresses);
  if (slots_.empty()) slots_.assign(1024, 0);
  const size_t mask = slots_.size() - 1;
  for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    if (slots_[slot] == 0) {
      slots_[slot] = static_cast<uint32_t>(stacks_.size() + 1);
      stacks_.push_back({key, static_cast<uint32_t>(words_.size()), static_cast<uint32_t>(addresses.size()), count});
      hashes_.push_back(hash);
      words_.insert(words_.end(), addresses.begin(), addresses.end());
      if (stacks_.size() * 2 > slots_.size()) Grow();
      return;
    }
    const size_t index = slots_[slot] - 1;
    CountedStack& stack = stacks_[index];
    if (hashes_[index] == hash && stack.length == addresses.size() && stack.key == key &&
        std::equal(addresses.begin(), addresses.end(), words_.begin() + stack.first)) {
      stack.count += count;
      return;
    }
  }
}

void StackCounter::Reserve(size_t stacks, size_t words) {
  stacks_.reserve(stacks);
  hashes_.reserve(stacks);
  words_.reserve(words);
  size_t slots = std::max<size_t>(slots_.size(), 1024);
  while (slots < 2 * stacks) slots *= 2;
  if (slots != slots_.size()) {
    slots_.assign(slots, 0);
    // Re-place what is there already.
    const size_t mask = slots - 1;
    for (size_t i = 0; i < stacks_.size(); ++i) {
      size_t slot = hashes_[i] & mask;
      while (slots_[slot] != 0) slot = (slot + 1) & mask;
      slots_[slot] = static_cast<uint32_t>(i + 1);
    }
  }
}

void StackCounter::Grow() {
  std::vector<uint32_t> slots(slots_.size() * 2, 0);
  const size_t mask = slots.size() - 1;
  for (size_t i = 0; i < stacks_.size(); ++i) {
    size_t slot = hashes_[i] & mask;
    while (slots[slot] != 0) slot = (slot + 1) & mask;
    slots[slot] = static_cast<uint32_t>(i + 1);
  }
  slots_ = std::move(slots);
}

void StackCounter::Take(std::vector<CountedStack>* stacks, std::vector<uint64_t>* words) {
  *stacks = std::move(stacks_);
  *words = std::move(words_);
  stacks_.clear();
  words_.clear();
  hashes_.clear();
  slots_.clear();
}

}  // namespace hvprof::store
