// Fuzzes the session store's readers: samples.hvs, sched.hvs and context.hvc (chunks, checksums,
// session ids, sequence numbers, records, resync after damage), the aggregate file and
// session.json.
// One input feeds them all; the record files' readers also get the input behind a valid file
// header, so the fuzzer reaches the chunk parser, and as the payload of a chunk whose
// checksums hold, so it reaches the record decoders. Beyond "no crash", it checks the
// accounting a report relies on: every record delivered is counted once and is well-formed,
// no chunk is counted twice, what was skipped fits in the file, and reading with the file's own
// session id given changes nothing; aggregating a samples file on several threads counts what
// one thread counts. What the aggregate and metadata readers accept must round-trip, and so must
// the processes context.hvc tells of (read, written again, read: the same index).
#include <stdlib.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <string_view>
#include <tuple>
#include <vector>

#include "hvprof/store/context_file.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/sched_file.h"
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

// Reads `bytes` as sched.hvs and checks the summary against what was delivered.
store::SchedReadSummary ReadSchedChecked(std::span<const uint8_t> bytes,
                                         std::optional<std::span<const uint8_t, 16>> id, uint64_t* checksum) {
  uint64_t delivered = 0;
  auto on_record = [&](const store::StoredSched& r) {
    ++delivered;
    Check(r.type >= 1 && r.type <= store::kMaxStoredSchedType);
    Check(r.old_state <= store::kMaxStoredState && r.new_state <= store::kMaxStoredState);
    Check((r.flags & store::kSchedFlagTask) != 0 || (r.pid == hvprof::kNoPid && r.tid == hvprof::kNoPid));
    Check(r.type == store::kSchedLost || (r.count == 0 && r.aux == 0));
    *checksum += r.time_ns + r.domain + r.pid + r.other_tid + r.count;
  };
  store::SchedReadSummary summary = store::ReadSched(bytes, on_record, id);
  Check(summary.records == delivered);
  // A chunk is delivered whole or not at all.
  Check(summary.records <= summary.chunks * store::kMaxChunkRecords);
  const uint64_t whole = summary.chunks + summary.foreign_chunks + summary.repeated_chunks;
  Check(whole <= bytes.size() / sizeof(store::ChunkHeader));
  Check(summary.skipped_bytes <= bytes.size() && summary.intact_end <= bytes.size());
  Check(summary.torn_bytes <= bytes.size() && (summary.torn_tail || summary.torn_bytes == 0));
  Check(summary.problems.size() <= 100);
  return summary;
}

// `data` behind a file header of `magic` and `version`, optionally as the payload of one chunk
// whose header and checksums hold (its record count from the first two bytes of `data`).
std::vector<uint8_t> AsFile(const char* magic, uint32_t version, uint32_t chunk_magic, const uint8_t* data,
                            size_t size, bool as_chunk) {
  store::FileHeader header{};
  std::memcpy(header.magic, magic, sizeof header.magic);
  header.version = version;
  header.header_bytes = sizeof header;
  std::vector<uint8_t> out(reinterpret_cast<const uint8_t*>(&header),
                           reinterpret_cast<const uint8_t*>(&header) + sizeof header);
  if (as_chunk && size >= 2) {
    store::ChunkHeader chunk{};
    chunk.magic = chunk_magic;
    chunk.version = 2;
    chunk.header_bytes = sizeof chunk;
    chunk.records = uint32_t{data[0]} | uint32_t{data[1]} << 8;
    data += 2;
    size -= 2;
    chunk.payload_bytes = static_cast<uint32_t>(size);
    chunk.payload_crc = static_cast<uint32_t>(::crc32_z(0, data, size));
    chunk.header_crc = static_cast<uint32_t>(
        ::crc32_z(0, reinterpret_cast<const Bytef*>(&chunk), offsetof(store::ChunkHeader, header_crc)));
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&chunk),
               reinterpret_cast<const uint8_t*>(&chunk) + sizeof chunk);
  }
  out.insert(out.end(), data, data + size);
  return out;
}

// Reads `bytes` as context.hvc into an index, checks what it holds and that the events, written
// again by the writer, read back to the same index.
void ReadContextChecked(std::span<const uint8_t> bytes, uint64_t* checksum) {
  store::ContextIndex index;
  const store::ContextReadSummary summary = store::ReadContext(bytes, index);
  Check(summary.records <= summary.chunks * store::kMaxChunkRecords);
  Check(summary.skipped_bytes <= bytes.size() && summary.problems.size() <= 100);
  for (const store::ContextImage& image : index.images()) {
    Check(image.id >= 1 && image.id <= index.images().size() && index.image(image.id) == &image);
    *checksum += image.path.size();
  }
  *checksum += index.processes() + index.mappings();
  if (!summary.header_ok || summary.chunks == 0) return;
  // The file's events, as a writer is given them, written to a session of the same id.
  hvprof::fuzz::TempFile file(bytes.data(), bytes.size());
  Check(file.ok());
  std::vector<store::ContextEvent> events;
  auto read = store::ReadContextEvents(file.path(), {}, [&](store::ContextEvent&& e) { events.push_back(std::move(e)); });
  Check(read.has_value() && read.value().records == summary.records);
  Check(events.size() <= summary.records);
  char directory[] = "/tmp/hvprof-fuzz-context-XXXXXX";
  Check(::mkdtemp(directory) != nullptr);
  {
    store::ContextIndex rewritten;
    auto writer = store::ContextWriter::Open(directory, std::span<const uint8_t, 16>(summary.session_id, 16), rewritten);
    Check(writer.has_value());
    for (const store::ContextEvent& event : events) writer.value().Add(event, rewritten);
    Check(writer.value().Flush(false).has_value());
    store::ContextIndex again;
    auto reread = store::ReadContextFile(std::string(directory) + "/" + store::kContextFile, {}, again);
    Check(reread.has_value() && reread.value().problems.empty());
    // Two images of one path (a forged file) are one when written again: their mappings may merge.
    Check(again.processes() == index.processes() && again.mappings() <= index.mappings());
    Check(again.images().size() <= index.images().size());
  }
  std::filesystem::remove_all(directory);
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

  for (bool as_chunk : {false, true}) {
    const auto with_header =
        AsFile(store::kSamplesFileMagic, store::kSamplesFileVersion, store::kChunkMagic, data, size, as_chunk);
    const store::ReadSummary behind = ReadChecked(with_header, std::nullopt, &checksum);
    Check(behind.header_ok && behind.version == store::kSamplesFileVersion);
  }

  // Aggregated by several threads and by one: the same counts, stacks and problems. Only inputs
  // with chunks to share out (a parallel read is the same as one thread's when there is one).
  if (plain.chunks + plain.damaged_chunks >= 2) {
    hvprof::fuzz::TempFile file(data, size);
    Check(file.ok());
    store::ReadSummary one_summary, many_summary;
    auto one = store::AggregateSamplesFile(file.path(), &one_summary, std::nullopt,
                                           store::StackDetail::kStacksByThread, {3, 0, 1u << 20}, 1);
    auto many = store::AggregateSamplesFile(file.path(), &many_summary, std::nullopt,
                                            store::StackDetail::kStacksByThread, {3, 0, 1u << 20}, 3);
    Check(one.has_value() && many.has_value());
    {
      const store::Aggregate& a = one.value();
      const store::Aggregate& b = many.value();
      Check(a.samples == b.samples && a.entries.size() == b.entries.size() && a.stacks.size() == b.stacks.size() &&
            a.stack_words == b.stack_words && a.slice_counts == b.slice_counts);
      for (size_t i = 0; i < a.entries.size(); ++i) {
        Check(!(a.entries[i].key < b.entries[i].key) && !(b.entries[i].key < a.entries[i].key) &&
              a.entries[i].count == b.entries[i].count);
      }
      Check(one_summary.chunks == many_summary.chunks && one_summary.damaged_chunks == many_summary.damaged_chunks &&
            one_summary.problems.size() == many_summary.problems.size());
      for (size_t i = 0; i < one_summary.problems.size(); ++i) {
        Check(one_summary.problems[i].description == many_summary.problems[i].description);
      }
    }
  }

  // As sched.hvs: as it comes, with its own session id, and behind a header and a chunk header.
  uint64_t sched_checksum = 0;
  const store::SchedReadSummary sched = ReadSchedChecked(input, std::nullopt, &sched_checksum);
  if (sched.header_ok) {
    uint64_t again_checksum = 0;
    const store::SchedReadSummary again =
        ReadSchedChecked(input, std::span<const uint8_t, 16>(sched.session_id, 16), &again_checksum);
    Check(again.records == sched.records && again.chunks == sched.chunks && again_checksum == sched_checksum);
  }
  checksum += sched_checksum;
  for (bool as_chunk : {false, true}) {
    const auto with_header =
        AsFile(store::kSchedFileMagic, store::kSchedFileVersion, store::kSchedChunkMagic, data, size, as_chunk);
    const store::SchedReadSummary behind = ReadSchedChecked(with_header, std::nullopt, &checksum);
    Check(behind.header_ok && behind.version == store::kSchedFileVersion);
  }

  // As context.hvc: as it comes, and behind a header and a chunk header.
  ReadContextChecked(input, &checksum);
  for (bool as_chunk : {false, true}) {
    const auto with_header = AsFile(store::kContextFileMagic, store::kContextFileVersion, store::kContextChunkMagic,
                                    data, size, as_chunk);
    ReadContextChecked(with_header, &checksum);
  }

  // As an aggregate: as it comes, and with its checksum made right so that the sections behind
  // it are reached.
  auto read_aggregate = [&checksum](const uint8_t* bytes, size_t length) {
    hvprof::fuzz::TempFile file(bytes, length);
    Check(file.ok());
    auto aggregate = store::ReadAggregate(file.path());
    if (!aggregate) return;
    const store::Aggregate& a = aggregate.value();
    // An image word names an image of the table.
    auto named = [&a](uint64_t word) { return !store::IsImageWord(word) || store::ImageOfWord(word) <= a.images.size(); };
    for (const store::AggregateEntry& entry : a.entries) {
      Check(entry.key.mode <= 2 && named(entry.key.ip));
      checksum += entry.count;
    }
    for (size_t i = 0; i < a.images.size(); ++i) Check(a.images[i].id == i + 1);
    uint64_t samples = 0, words = 0;
    for (const store::CountedStack& stack : a.stacks) {
      Check(stack.key.mode <= 2 && stack.length >= 1 && stack.length <= store::kMaxFrames + 1);
      Check(stack.first == words && uint64_t{stack.first} + stack.length <= a.stack_words.size());
      for (uint64_t address : a.Addresses(stack)) checksum += address, Check(named(address));
      words += stack.length;
      samples += stack.count;
    }
    Check(!a.has_stacks || (samples == a.samples && words == a.stack_words.size()));
    // Regions: only in a table the flags grant, each a range of user space, in order.
    Check(a.has_regions || a.regions.empty());
    for (size_t i = 0; i < a.regions.size(); ++i) {
      const store::AggregateRegion& r = a.regions[i];
      Check(r.start < r.end && (r.end - 1) >> 47 == 0);
      if (i != 0) {
        const store::AggregateRegion& p = a.regions[i - 1];
        Check(std::tie(p.domain, p.pid, p.start) < std::tie(r.domain, r.pid, r.start));
      }
      checksum += r.path.size();
    }
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
