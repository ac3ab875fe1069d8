// The decoder of samples.hvs chunk payloads, as a template: a reader that counts every sample
// (AggregateSamplesFile) calls its counting inline rather than through a std::function.
#pragma once

#include <cstdint>
#include <span>

#include "hvprof/store/chunk_file.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/base/varint.h"

namespace hvprof::store::detail {

using namespace varint;

// Record tag bits: which fields differ from the previous record of the chunk.
inline constexpr uint8_t kNewPlace = 1u << 0;   // domain, vcpu, pcpu
inline constexpr uint8_t kNewTask = 1u << 1;    // pid, tid
inline constexpr uint8_t kNewKind = 1u << 2;    // mode, event, flags
inline constexpr uint8_t kNewPeriod = 1u << 3;
inline constexpr uint8_t kHasFrames = 1u << 4;
inline constexpr uint8_t kKnownTags = 0x1F;

// Decodes one verified chunk payload. Returns false (with what was decoded so far delivered)
// if the payload does not hold `records` well-formed records.
template <typename OnSample>
bool DecodeChunk(std::span<const uint8_t> payload, uint32_t records, OnSample& on_sample, uint64_t* decoded) {
  Cursor in(payload);
  StoredSample previous;
  uint64_t frames[kMaxFrames];
  for (uint32_t r = 0; r < records; ++r) {
    StoredSample sample = previous;
    sample.frames = {};
    const uint8_t tag = in.Byte();
    if ((tag & ~kKnownTags) != 0 || (r == 0 && (tag & (kNewPlace | kNewTask | kNewKind | kNewPeriod)) !=
                                                   (kNewPlace | kNewTask | kNewKind | kNewPeriod))) {
      return false;
    }
    sample.ip = previous.ip + static_cast<uint64_t>(UnZigZag(in.Varint()));
    sample.time_ns = previous.time_ns + static_cast<uint64_t>(UnZigZag(in.Varint()));
    if (tag & kNewPlace) {
      const uint64_t domain = in.Varint(), vcpu = in.Varint(), pcpu = in.Varint();
      if (domain > 0xFFFF || vcpu > 0xFFFF || pcpu > 0xFFFF) return false;
      sample.domain = static_cast<uint16_t>(domain);
      sample.vcpu = static_cast<uint16_t>(vcpu);
      sample.pcpu = static_cast<uint16_t>(pcpu);
    }
    if (tag & kNewTask) {
      const uint64_t pid = in.Varint(), tid = in.Varint();
      if (pid > 0x100000000ULL || tid > 0x100000000ULL) return false;
      sample.pid = static_cast<uint32_t>(pid - 1);  // stored plus one, so "none" is 0
      sample.tid = static_cast<uint32_t>(tid - 1);
    }
    if (tag & kNewKind) {
      sample.mode = in.Byte();
      sample.event = in.Byte();
      const uint64_t flags = in.Varint();
      if (!sample_mode::IsValid(sample.mode) || flags > 0xFFFF) return false;
      sample.flags = static_cast<uint16_t>(flags);
    }
    if (tag & kNewPeriod) sample.period = in.Varint();
    if (tag & kHasFrames) {
      const uint64_t count = in.Varint();
      if (count == 0 || count > kMaxFrames) return false;
      for (uint64_t i = 0; i < count; ++i) {
        frames[i] = sample.ip + static_cast<uint64_t>(UnZigZag(in.Varint()));
      }
      sample.frames = std::span<const uint64_t>(frames, count);
    }
    if (!in.ok()) return false;
    on_sample(sample);
    ++*decoded;
    previous = sample;
  }
  return in.done();
}

// One chunk's samples to `on_sample`; samples before a malformed one are delivered.
template <typename OnSample>
ChunkDecode DecodeSamples(std::span<const uint8_t> payload, uint32_t records, OnSample& on_sample) {
  ChunkDecode result;
  result.ok = DecodeChunk(payload, records, on_sample, &result.delivered);
  result.well_formed = result.delivered;
  return result;
}

}  // namespace hvprof::store::detail
