// Fuzzes the session store's readers: samples.hvs (chunks, checksums, session ids, sequence
// numbers, records, resync after damage), the aggregate file and session.json. One input
// feeds all three; the samples reader also gets the input behind a valid file header, so the
// fuzzer reaches the chunk parser. Beyond "no crash", it checks the accounting a report relies
// on: every sample delivered is counted once and is well-formed, no chunk is counted twice,
// what was skipped fits in the file, and reading with the file's own session id given changes
// nothing. What the aggregate and metadata readers accept must round-trip.
#include <zlib.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "memfd_file.h"

namespace store = hvprof::store;

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

// Reads `bytes` and checks the summary against what was delivered.
store::ReadSummary ReadChecked(std::span<const uint8_t> bytes, std::optional<std::span<const uint8_t, 16>> id,
                               uint64_t* checksum) {
  uint64_t delivered = 0;
  auto on_sample = [&](const store::StoredSample& s) {
    ++delivered;
    Check(s.mode <= 2 && s.frames.size() <= store::kMaxFrames);
    *checksum += s.ip + s.frames.size();
    for (uint64_t frame : s.frames) *checksum ^= frame;
  };
  store::ReadSummary summary = store::ReadSamples(bytes, on_sample, id);
  Check(summary.samples == delivered);
  // Every chunk whose header held (read, foreign, repeated, or with a bad payload) took a whole
  // header's bytes; each damaged header was followed by at least one byte skipped.
  const uint64_t whole = summary.chunks + summary.foreign_chunks + summary.repeated_chunks;
  Check(whole <= bytes.size() / sizeof(store::ChunkHeaderV1));
  Check(summary.damaged_chunks <= bytes.size() / sizeof(store::ChunkHeaderV1) + summary.skipped_bytes + 1);
  Check(summary.samples <= uint64_t{summary.chunks + summary.damaged_chunks} * store::kMaxChunkRecords);
  Check(summary.skipped_bytes <= bytes.size() && summary.intact_end <= bytes.size());
  Check(summary.problems.size() <= 100);
  return summary;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t checksum = 0;
  const std::span<const uint8_t> input(data, size);
  const store::ReadSummary plain = ReadChecked(input, std::nullopt, &checksum);
  if (plain.header_ok) {
    // The header's own id, given: the same reading.
    uint64_t again_checksum = 0;
    const store::ReadSummary again =
        ReadChecked(input, std::span<const uint8_t, 16>(plain.session_id, 16), &again_checksum);
    Check(again.samples == plain.samples && again.chunks == plain.chunks && again_checksum == checksum);
  }

  std::vector<uint8_t> with_header(sizeof(store::FileHeader) + size);
  store::FileHeader header{};
  std::memcpy(header.magic, store::kSamplesFileMagic, sizeof header.magic);
  header.version = store::kSamplesFileVersion;
  header.header_bytes = sizeof header;
  std::memcpy(with_header.data(), &header, sizeof header);
  if (size != 0) std::memcpy(with_header.data() + sizeof header, data, size);
  const store::ReadSummary behind = ReadChecked(with_header, std::nullopt, &checksum);
  Check(behind.header_ok && behind.version == store::kSamplesFileVersion);

  // As an aggregate: as it comes, and with its checksum made right so that the sections behind
  // it are reached.
  auto read_aggregate = [&checksum](const uint8_t* bytes, size_t length) {
    hvprof::fuzz::MemfdFile file(bytes, length);
    if (!file.ok()) return;
    auto aggregate = store::ReadAggregate(file.path());
    if (!aggregate) return;
    const store::Aggregate& a = aggregate.value();
    for (const store::AggregateEntry& entry : a.entries) {
      Check(entry.key.mode <= 2);
      checksum += entry.count;
    }
    uint64_t samples = 0, words = 0;
    for (const store::CountedStack& stack : a.stacks) {
      Check(stack.key.mode <= 2 && stack.length >= 1 && stack.length <= store::kMaxFrames + 1);
      Check(stack.first == words && uint64_t{stack.first} + stack.length <= a.stack_words.size());
      for (uint64_t address : a.Addresses(stack)) checksum += address;
      words += stack.length;
      samples += stack.count;
    }
    Check(!a.has_stacks || (samples == a.samples && words == a.stack_words.size()));
  };
  read_aggregate(data, size);
  if (size >= 48) {
    std::vector<uint8_t> fixed(data, data + size);
    const uint32_t crc = static_cast<uint32_t>(::crc32_z(0, fixed.data() + 48, fixed.size() - 48));
    std::memcpy(fixed.data() + 40, &crc, sizeof crc);
    read_aggregate(fixed.data(), fixed.size());
  }

  auto metadata = store::ParseMetadata(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (metadata) {
    const std::string text = store::SerializeMetadata(metadata.value());
    auto reparsed = store::ParseMetadata(text, "fuzz");
    Check(reparsed.has_value() && store::SerializeMetadata(reparsed.value()) == text);
  }
  return checksum == 1 ? 1 : 0;  // keeps the reads from being optimised away; never 1 in practice
}
