// Fuzzes the agents' ring consumers with rings written by a hostile producer: the input is the
// shared memory of a v2 or v3 (scheduling) ring (header and slots) and of a legacy ring,
// indexes included. The readers must never read outside the mapping, loop forever or hand out a
// malformed sample or scheduling record.
#include <algorithm>
#include <cstring>
#include <vector>

#include "hvprof/agent/ring_reader.h"

namespace ring = hvpmu::ring;
namespace legacy = hvpmu::legacy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint32_t kCapacity = 64;
  {
    std::vector<uint8_t> memory(ring::RingBytes(kCapacity), 0);
    std::memcpy(memory.data(), data, std::min(size, memory.size()));
    auto reader = hvprof::agent::RingReader::Attach(memory.data(), memory.size(), kCapacity);
    if (reader) {
      for (int pass = 0; pass < 2; ++pass) {
        (void)reader.value().DrainRecords(
            [](const ring::SampleRecord& sample, std::span<const uint64_t> frames) {
              if (sample.kind != static_cast<uint8_t>(ring::RecordKind::kSample) ||
                  frames.size() > ring::kMaxBacktraceDepth) {
                __builtin_trap();
              }
            },
            [](const ring::SchedRecord& record) {
              if (record.kind != static_cast<uint8_t>(ring::RecordKind::kSched) || record.type == 0 ||
                  record.type > ring::kMaxSchedType || record.slots == 0 ||
                  record.slots > hvprof::agent::kMaxSchedSlots) {
                __builtin_trap();
              }
            });
        // The producer moves the head again between drains.
        if (size >= 8) std::memcpy(memory.data() + 64, data + size - 8, 8);
      }
    }
  }
  {
    constexpr uint32_t kRecords = 32;
    std::vector<uint8_t> memory(legacy::kBufHeaderSize + kRecords * sizeof(legacy::EventLog), 0);
    if (size > 0) {
      // The second half of the input, so both readers see different bytes.
      const size_t half = size / 2;
      std::memcpy(memory.data(), data + half, std::min(size - half, memory.size()));
    }
    auto reader = hvprof::agent::LegacyRingReader::Attach(memory.data(), memory.size(), kRecords);
    if (reader) {
      auto check = [](const hvprof::agent::LegacySample& sample) {
        if (sample.frames.size() > ring::kMaxBacktraceDepth) __builtin_trap();
      };
      (void)reader.value().Drain(check);
      reader.value().Flush(check);
    }
  }
  return 0;
}
