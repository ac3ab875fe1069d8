// Counts samples per aggregate key at memory speed: an open-addressing table (linear probing,
// power-of-two size, at most three quarters full) fed through a short software pipeline that
// prefetches each key's slot a few keys before it is touched, so that a table far larger than
// the caches costs little more than one that fits. Runs of the same key are counted without a
// lookup.
//
// A slot is 16 bytes: the address, the number of its tag (domain, mode, event, pid: a session
// has few distinct ones, numbered as they come) and a 32-bit count; the rare count beyond 32 bits
// goes on in a side map. A large table (2 MiB and up) is anonymous memory with transparent huge
// pages asked for: a table of millions of keys read at random then misses the TLB once per 2 MiB
// instead of on nearly every key, and its pages need no zeroing by hand. A small one is heap.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hvprof/base/scoped_fd.h"
#include "hvprof/store/session.h"

namespace hvprof::store::detail {

class AddressCounter {
 public:
  explicit AddressCounter(size_t expected_keys = 1u << 16) {
    size_t capacity = 1024;
    while (capacity < 2 * expected_keys) capacity *= 2;
    Allocate(capacity);
  }

  void Add(const AggregateKey& key, uint64_t count = 1) {
    const uint64_t tag = Tag(key);
    if (run_count_ != 0 && key.ip == run_ip_ && tag == run_tag_) {
      run_count_ += count;
      return;
    }
    if (run_count_ != 0) Enqueue(run_ip_, run_tag_id_, run_count_);
    if (tag != run_tag_ || tags_.empty()) run_tag_id_ = TagId(tag);
    run_ip_ = key.ip;
    run_tag_ = tag;
    run_count_ = count;
  }

  // The memory its table takes.
  size_t bytes() const { return capacity_ * sizeof(Slot); }

  // Every key with its count, sorted like AggregateKey::operator<, the counter going on as it was.
  std::vector<AggregateEntry> SortedCopy() {
    if (run_count_ != 0) Enqueue(run_ip_, run_tag_id_, run_count_);
    run_count_ = 0;
    while (queued_ != 0) Retire();
    std::vector<Slot> used;
    used.reserve(used_);
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].count != 0) used.push_back(slots_[i]);
    }
    std::vector<Slot> sorted(used.size());
    SortByTagAndIp(used.data(), used.size(), sorted.data());
    return EntriesOf(sorted);
  }

  // Every key with its count, sorted like AggregateKey::operator<.
  std::vector<AggregateEntry> TakeSorted() {
    if (run_count_ != 0) Enqueue(run_ip_, run_tag_id_, run_count_);
    run_count_ = 0;
    while (queued_ != 0) Retire();
    // The used slots, moved to the front of the table, then sorted by (tag, ip): the tag orders
    // domain, mode, event, pid like operator<, and the ip breaks ties.
    Slot* end = std::remove_if(slots_, slots_ + capacity_, [](const Slot& slot) { return slot.count == 0; });
    const size_t used = static_cast<size_t>(end - slots_);
    std::vector<Slot> sorted(used);
    SortByTagAndIp(slots_, used, sorted.data());
    std::vector<AggregateEntry> entries = EntriesOf(sorted);
    memory_.Reset();
    slots_ = nullptr;
    capacity_ = 0;
    mask_ = 0;
    used_ = 0;
    return entries;
  }

 private:
  struct Slot {
    uint64_t ip = 0;
    uint32_t tag_id = 0;
    uint32_t count = 0;  // 0: empty; at kMaxCount, the rest is in overflow_
  };
  static_assert(sizeof(Slot) == 16);
  struct Pending {
    uint64_t ip;
    uint64_t count;
    uint64_t hash;
    uint32_t tag_id;
  };
  static constexpr size_t kDistance = 16;  // keys between a prefetch and its use
  static constexpr uint32_t kMaxCount = UINT32_MAX;

  std::vector<AggregateEntry> EntriesOf(const std::vector<Slot>& sorted) const {
    std::vector<AggregateEntry> entries;
    entries.reserve(sorted.size());
    for (const Slot& slot : sorted) {
      uint64_t count = slot.count;
      if (!overflow_.empty()) {
        const auto more = overflow_.find({slot.ip, slot.tag_id});
        if (more != overflow_.end()) count += more->second;
      }
      entries.push_back({KeyOf(slot.ip, tags_[slot.tag_id]), count});
    }
    return entries;
  }

  static uint64_t Tag(const AggregateKey& key) {
    return uint64_t{key.domain} << 48 | uint64_t{key.mode} << 40 | uint64_t{key.event} << 32 | key.pid;
  }
  static AggregateKey KeyOf(uint64_t ip, uint64_t tag) {
    return {ip, static_cast<uint32_t>(tag), static_cast<uint16_t>(tag >> 48), static_cast<uint8_t>(tag >> 40),
            static_cast<uint8_t>(tag >> 32)};
  }
  static uint64_t Hash(uint64_t ip, uint32_t tag_id) {
    uint64_t h = (ip ^ (uint64_t{tag_id} * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 31);
  }

  uint32_t TagId(uint64_t tag) {
    const auto [it, added] = tag_ids_.try_emplace(tag, static_cast<uint32_t>(tags_.size()));
    if (added) tags_.push_back(tag);
    return it->second;
  }

  // Sorts `n` slots by (tag, ip) into `out`: grouped by tag first, then each group by ip with a
  // radix sort over the bytes its addresses differ in (three or four, in one image), std::sort
  // for small groups. `slots` is scratch afterwards.
  void SortByTagAndIp(Slot* slots, size_t n, Slot* out) const {
    // Group g holds the tag of rank g.
    std::vector<uint32_t> by_rank(tags_.size());
    for (uint32_t id = 0; id < by_rank.size(); ++id) by_rank[id] = id;
    std::sort(by_rank.begin(), by_rank.end(), [this](uint32_t a, uint32_t b) { return tags_[a] < tags_[b]; });
    std::vector<uint32_t> rank(tags_.size());
    for (uint32_t r = 0; r < by_rank.size(); ++r) rank[by_rank[r]] = r;
    std::vector<size_t> group_start(tags_.size() + 1, 0);
    for (size_t i = 0; i < n; ++i) ++group_start[rank[slots[i].tag_id] + 1];
    for (size_t g = 0; g < tags_.size(); ++g) group_start[g + 1] += group_start[g];
    std::vector<size_t> fill(group_start.begin(), group_start.end() - 1);
    for (size_t i = 0; i < n; ++i) out[fill[rank[slots[i].tag_id]]++] = slots[i];
    for (size_t g = 0; g < tags_.size(); ++g) {
      Slot* group = out + group_start[g];
      const size_t size = group_start[g + 1] - group_start[g];
      if (size < 4096) {
        std::sort(group, group + size, [](const Slot& a, const Slot& b) { return a.ip < b.ip; });
        continue;
      }
      uint64_t differ = 0;
      for (size_t i = 0; i < size; ++i) differ |= group[i].ip ^ group[0].ip;
      Slot* from = group;
      Slot* to = slots;
      for (int b = 0; b < 8; ++b) {
        if (((differ >> (8 * b)) & 0xff) == 0) continue;
        std::array<size_t, 256> position{};
        for (size_t i = 0; i < size; ++i) ++position[(from[i].ip >> (8 * b)) & 0xff];
        size_t offset = 0;
        for (size_t& p : position) offset += std::exchange(p, offset);
        for (size_t i = 0; i < size; ++i) to[position[(from[i].ip >> (8 * b)) & 0xff]++] = from[i];
        std::swap(from, to);
      }
      if (from != group) std::copy(from, from + size, group);
    }
  }

  // A zeroed table of `capacity` slots (a power of two): in huge pages once it is large, else
  // from the heap.
  void Allocate(size_t capacity) {
    const size_t bytes = capacity * sizeof(Slot);
    Memory memory;
    if (bytes >= kHugeTableBytes) {
      auto mapping = ScopedMmap::MapAnonymous(bytes, /*huge_pages=*/true);
      if (!mapping) throw std::bad_alloc();  // as a vector of the same size would
      memory.mapping = std::move(mapping).value();
      slots_ = static_cast<Slot*>(memory.mapping.data());
    } else {
      memory.heap.reset(static_cast<Slot*>(std::calloc(capacity, sizeof(Slot))));
      if (!memory.heap) throw std::bad_alloc();
      slots_ = memory.heap.get();
    }
    memory_ = std::move(memory);
    capacity_ = capacity;
    mask_ = capacity - 1;
  }

  void Enqueue(uint64_t ip, uint32_t tag_id, uint64_t count) {
    if (queued_ == kDistance) Retire();
    const uint64_t hash = Hash(ip, tag_id);
    __builtin_prefetch(&slots_[hash & mask_], 1);
    queue_[(head_ + queued_) % kDistance] = {ip, count, hash, tag_id};
    ++queued_;
  }

  void Retire() {
    const Pending item = queue_[head_];
    head_ = (head_ + 1) % kDistance;
    --queued_;
    Insert(item);
  }

  // Adds `count` to a slot's count, the part beyond 32 bits to overflow_.
  void Count(Slot& slot, uint64_t count) {
    const uint64_t total = slot.count + count;
    if (total <= kMaxCount) {
      slot.count = static_cast<uint32_t>(total);
      return;
    }
    overflow_[{slot.ip, slot.tag_id}] += total - kMaxCount;
    slot.count = kMaxCount;
  }

  void Insert(const Pending& item) {
    for (size_t i = item.hash & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.count == 0) {
        slot.ip = item.ip;
        slot.tag_id = item.tag_id;
        Count(slot, item.count);
        if (++used_ * 4 > capacity_ * 3) Grow();
        return;
      }
      if (slot.ip == item.ip && slot.tag_id == item.tag_id) {
        Count(slot, item.count);
        return;
      }
    }
  }

  void Grow() {
    const Memory old = std::move(memory_);
    const Slot* old_slots = slots_;
    const size_t old_capacity = capacity_;
    Allocate(old_capacity * 2);
    for (size_t o = 0; o < old_capacity; ++o) {
      const Slot& slot = old_slots[o];
      if (slot.count == 0) continue;
      for (size_t i = Hash(slot.ip, slot.tag_id) & mask_;; i = (i + 1) & mask_) {
        if (slots_[i].count == 0) {
          slots_[i] = slot;
          break;
        }
      }
    }
  }

  // The table's memory. Small tables come from the heap, which hands a freed block to the next
  // table: unmapping a mapping makes the kernel interrupt every CPU the process ran on to flush
  // its TLB, and continuous mode, whose every window starts a builder with dozens of small
  // tables (its time spans), spent most of its CPU there.
  static constexpr size_t kHugeTableBytes = size_t{2} << 20;
  struct FreeSlots {
    void operator()(Slot* slots) const { std::free(slots); }
  };
  struct Memory {
    ScopedMmap mapping;                  // a large table
    std::unique_ptr<Slot, FreeSlots> heap;  // a small one
    void Reset() {
      mapping.Reset();
      heap.reset();
    }
  };
  Memory memory_;
  Slot* slots_ = nullptr;  // in memory_
  size_t capacity_ = 0;
  size_t mask_ = 0;
  size_t used_ = 0;
  std::vector<uint64_t> tags_;  // by tag id
  std::unordered_map<uint64_t, uint32_t> tag_ids_;
  std::map<std::pair<uint64_t, uint32_t>, uint64_t> overflow_;  // (ip, tag id) -> count beyond kMaxCount
  std::array<Pending, kDistance> queue_{};
  size_t head_ = 0;
  size_t queued_ = 0;
  uint64_t run_ip_ = 0;
  uint64_t run_tag_ = 0;
  uint32_t run_tag_id_ = 0;
  uint64_t run_count_ = 0;
};

}  // namespace hvprof::store::detail
