// Counts samples per distinct call stack: the thread the sample was taken in (domain, mode,
// event, process, thread, vCPU, pCPU) and its addresses, the sampled one first. Millions of
// samples fall on a few hundred thousand stacks, so the stacks are kept flat (their addresses in
// one arena) and found through an open-addressing table of indexes; a node per stack made the
// lookups the cost of the whole read.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hvprof/facts/sample.h"

namespace hvprof::store {

struct StackKey {
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint16_t domain = 0;
  uint8_t mode = sample_mode::kUser;  // sample_mode::
  uint8_t event = 0;
  uint16_t vcpu = 0;
  uint16_t pcpu = 0;
  bool operator==(const StackKey&) const = default;
};

// A distinct stack and its samples; its addresses are `length` words from `first` in the
// counter's (or the aggregate's) words.
struct CountedStack {
  StackKey key;
  uint32_t first = 0;
  uint32_t length = 0;
  uint64_t count = 0;
};

class StackCounter {
 public:
  // `addresses` holds at least one word (the sampled address).
  void Add(const StackKey& key, std::span<const uint64_t> addresses, uint64_t count = 1);
  // Room for `stacks` stacks of `words` addresses in all, so that none moves while they are added.
  void Reserve(size_t stacks, size_t words);

  const std::vector<CountedStack>& stacks() const { return stacks_; }
  const std::vector<uint64_t>& words() const { return words_; }
  std::span<const uint64_t> Addresses(const CountedStack& stack) const {
    return {words_.data() + stack.first, stack.length};
  }
  // Hands the stacks and their words over; the counter is empty afterwards.
  void Take(std::vector<CountedStack>* stacks, std::vector<uint64_t>* words);

 private:
  void Grow();
  std::vector<CountedStack> stacks_;
  std::vector<uint64_t> hashes_;   // per stack
  std::vector<uint64_t> words_;
  std::vector<uint32_t> slots_;  // index + 1 into stacks_; 0 is empty; a power of two long
};

}  // namespace hvprof::store
