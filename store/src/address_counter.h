// Counts samples per aggregate key at memory speed: an open-addressing table (linear probing,
// power-of-two size, at most half full) fed through a short software pipeline that prefetches
// each key's slot a few keys before it is touched, so that a table far larger than the caches
// costs little more than one that fits. Runs of the same key are counted without a lookup.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "hvprof/store/session.h"

namespace hvprof::store::detail {

class AddressCounter {
 public:
  explicit AddressCounter(size_t expected_keys = 1u << 16) {
    size_t capacity = 1024;
    while (capacity < 2 * expected_keys) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }

  void Add(const AggregateKey& key) {
    const uint64_t tag = Tag(key);
    if (run_count_ != 0 && key.ip == run_ip_ && tag == run_tag_) {
      ++run_count_;
      return;
    }
    if (run_count_ != 0) Enqueue(run_ip_, run_tag_, run_count_);
    run_ip_ = key.ip;
    run_tag_ = tag;
    run_count_ = 1;
  }

  // Every key with its count, sorted like AggregateKey::operator<.
  std::vector<AggregateEntry> TakeSorted() {
    if (run_count_ != 0) Enqueue(run_ip_, run_tag_, run_count_);
    run_count_ = 0;
    while (queued_ != 0) Retire();
    std::vector<AggregateEntry> entries;
    entries.reserve(used_);
    for (const Slot& slot : slots_) {
      if (slot.count == 0) continue;
      entries.push_back({KeyOf(slot.ip, slot.tag), slot.count});
    }
    // The tag orders domain, mode, event, pid like operator<, and the ip breaks ties.
    std::sort(entries.begin(), entries.end(), [](const AggregateEntry& a, const AggregateEntry& b) {
      const uint64_t ta = Tag(a.key), tb = Tag(b.key);
      return ta != tb ? ta < tb : a.key.ip < b.key.ip;
    });
    slots_.clear();
    used_ = 0;
    return entries;
  }

 private:
  struct Slot {
    uint64_t ip = 0;
    uint64_t tag = 0;
    uint64_t count = 0;  // 0: empty
  };
  struct Pending {
    uint64_t ip;
    uint64_t tag;
    uint64_t count;
    uint64_t hash;
  };
  static constexpr size_t kDistance = 16;  // keys between a prefetch and its use

  static uint64_t Tag(const AggregateKey& key) {
    return uint64_t{key.domain} << 48 | uint64_t{key.mode} << 40 | uint64_t{key.event} << 32 | key.pid;
  }
  static AggregateKey KeyOf(uint64_t ip, uint64_t tag) {
    return {ip, static_cast<uint32_t>(tag), static_cast<uint16_t>(tag >> 48), static_cast<uint8_t>(tag >> 40),
            static_cast<uint8_t>(tag >> 32)};
  }
  static uint64_t Hash(uint64_t ip, uint64_t tag) {
    uint64_t h = (ip ^ (tag * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 31);
  }

  void Enqueue(uint64_t ip, uint64_t tag, uint64_t count) {
    if (queued_ == kDistance) Retire();
    const uint64_t hash = Hash(ip, tag);
    __builtin_prefetch(&slots_[hash & mask_], 1);
    queue_[(head_ + queued_) % kDistance] = {ip, tag, count, hash};
    ++queued_;
  }

  void Retire() {
    const Pending item = queue_[head_];
    head_ = (head_ + 1) % kDistance;
    --queued_;
    Insert(item);
  }

  void Insert(const Pending& item) {
    for (size_t i = item.hash & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.count == 0) {
        slot = {item.ip, item.tag, item.count};
        if (++used_ * 2 > slots_.size()) Grow();
        return;
      }
      if (slot.ip == item.ip && slot.tag == item.tag) {
        slot.count += item.count;
        return;
      }
    }
  }

  void Grow() {
    std::vector<Slot> old(slots_.size() * 2, Slot{});
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.count == 0) continue;
      for (size_t i = Hash(slot.ip, slot.tag) & mask_;; i = (i + 1) & mask_) {
        if (slots_[i].count == 0) {
          slots_[i] = slot;
          break;
        }
      }
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t used_ = 0;
  std::array<Pending, kDistance> queue_{};
  size_t head_ = 0;
  size_t queued_ = 0;
  uint64_t run_ip_ = 0;
  uint64_t run_tag_ = 0;
  uint64_t run_count_ = 0;
};

}  // namespace hvprof::store::detail
