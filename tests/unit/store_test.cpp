// The session store's formats: samples round-trip exactly; damage of every kind is found,
// named and skipped; metadata errors name the field.
#include <algorithm>
#include <array>
#include <sys/resource.h>
#include <zlib.h>

#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <tuple>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/store/aggregate_builder.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "chunk_files.h"
#include "hvprof/base/varint.h"
#include "temp_dir.h"

using namespace hvprof;
using namespace hvprof::store;
using hvprof::testing::Bytes;
using hvprof::testing::Chunks;
using hvprof::testing::ChunkSpan;
using hvprof::testing::Slice;
using hvprof::testing::TempDir;

namespace {

struct Owned {
  StoredSample sample;
  std::vector<uint64_t> frames;
};

std::vector<Owned> MakeSamples(size_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<Owned> out(count);
  for (size_t i = 0; i < count; ++i) {
    StoredSample& s = out[i].sample;
    s.ip = 0xffff82d040200000 + random() % 0x100000;
    s.time_ns = i * 1000 + random() % 500;
    s.period = (random() % 4 == 0) ? 100000 : 6000;
    s.pid = random() % 5 == 0 ? 0xFFFFFFFF : static_cast<uint32_t>(random() % 5000);
    s.tid = s.pid;
    s.domain = static_cast<uint16_t>(random() % 4 == 0 ? 0x7FFF : random() % 4);
    s.vcpu = static_cast<uint16_t>(random() % 8);
    s.pcpu = static_cast<uint16_t>(random() % 64);
    s.mode = static_cast<uint8_t>(random() % 3);
    s.event = static_cast<uint8_t>(random() % 3);
    s.flags = static_cast<uint16_t>(random() % 16);
    if (random() % 8 == 0) {
      out[i].frames.resize(1 + random() % 20);
      for (auto& frame : out[i].frames) frame = s.ip + random() % 4096 - 2048;
    }
  }
  for (auto& owned : out) owned.sample.frames = owned.frames;
  return out;
}

void WriteFile(const std::string& path, const std::vector<Owned>& samples, size_t flush_every) {
  const uint8_t id[16] = {1, 2, 3};
  auto writer = SamplesWriter::Open(path, std::span<const uint8_t, 16>(id, 16));
  REQUIRE(writer.has_value());
  for (size_t i = 0; i < samples.size(); ++i) {
    writer.value().Append(samples[i].sample);
    if (flush_every != 0 && (i + 1) % flush_every == 0) REQUIRE(writer.value().Flush(false).has_value());
  }
  REQUIRE(writer.value().Flush(true).has_value());
}

bool Same(const StoredSample& a, const Owned& b) {
  return a.ip == b.sample.ip && a.time_ns == b.sample.time_ns && a.period == b.sample.period &&
         a.pid == b.sample.pid && a.tid == b.sample.tid && a.domain == b.sample.domain &&
         a.vcpu == b.sample.vcpu && a.pcpu == b.sample.pcpu && a.mode == b.sample.mode &&
         a.event == b.sample.event && a.flags == b.sample.flags &&
         std::vector<uint64_t>(a.frames.begin(), a.frames.end()) == b.frames;
}

std::string AllProblems(const ReadSummary& summary) {
  std::string text;
  for (const auto& p : summary.problems) text += p.description + "\n";
  return text;
}

// Writes `samples` to PATH and checks its aggregate against a plain map's counts, in key order.
void CheckAggregateAgainstMap(const std::string& path, const std::vector<Owned>& samples) {
  WriteFile(path, samples, 20000);
  std::map<std::tuple<uint16_t, uint8_t, uint8_t, uint32_t, uint64_t>, uint64_t> expected;
  for (const auto& owned : samples) {
    const StoredSample& s = owned.sample;
    // The kernel's and hypervisor's code is counted across processes; a user address (with no
    // context to place it in a file) by its process.
    ++expected[{s.domain, s.mode, s.event, (s.ip >> 47) == 0 ? s.pid : kAnyProcess, s.ip}];
  }
  auto aggregate = AggregateSamplesFile(path);
  REQUIRE(aggregate.has_value());
  CHECK(aggregate.value().samples == samples.size());
  REQUIRE(aggregate.value().entries.size() == expected.size());
  size_t i = 0, wrong = 0;
  for (const auto& [key, count] : expected) {
    const AggregateEntry& entry = aggregate.value().entries[i++];
    wrong += std::tuple(entry.key.domain, entry.key.mode, entry.key.event, entry.key.pid, entry.key.ip) != key ||
             entry.count != count;
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("samples round-trip exactly, across chunks and appends", "[store]") {
  TempDir dir;
  const auto samples = MakeSamples(150000, 1);
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, {samples.begin(), samples.begin() + 100000}, 7000);
  WriteFile(path, {samples.begin() + 100000, samples.end()}, 0);  // a later run appends
  size_t i = 0;
  size_t mismatches = 0;
  auto summary = ReadSamplesFile(path, [&](const StoredSample& s) { mismatches += !Same(s, samples[i++]); });
  REQUIRE(summary.has_value());
  CHECK(summary.value().problems.empty());
  CHECK(summary.value().samples == samples.size());
  CHECK(i == samples.size());
  CHECK(mismatches == 0);
  CHECK(summary.value().chunks > 15);
  // Even with every field changing from one sample to the next (real sessions change far less
  // and take about 13 bytes a sample), the encoding stays below the 48 bytes of a raw record.
  CHECK(Bytes(path).size() < samples.size() * 30);
}

TEST_CASE("the aggregate counts exactly what a plain map counts, in key order", "[store]") {
  TempDir dir;
  // Runs of one key, keys repeated far apart, and enough distinct keys to grow the table.
  auto samples = MakeSamples(300000, 7);
  std::mt19937_64 random(9);
  for (size_t i = 1; i < samples.size(); ++i) {
    if (random() % 3 == 0) samples[i].sample = samples[i - 1].sample;
    if (random() % 5 == 0) samples[i].sample = samples[random() % i].sample;
    samples[i].frames.clear();
    samples[i].sample.frames = {};
  }
  CheckAggregateAgainstMap(dir.File("samples.hvs"), samples);
}

TEST_CASE("the aggregate sorts large groups of one task's addresses like a plain map", "[store]") {
  // Few tasks with many addresses each: each group of one (domain, mode, event, pid) is sorted
  // by its addresses' differing bytes (a radix sort), some groups spanning distant images.
  TempDir dir;
  std::mt19937_64 random(11);
  std::vector<Owned> samples(200000);
  for (size_t i = 0; i < samples.size(); ++i) {
    StoredSample& s = samples[i].sample;
    s.domain = static_cast<uint16_t>(random() % 2);
    s.mode = static_cast<uint8_t>(random() % 2);
    s.pid = s.mode == 0 ? 42 : 0xFFFFFFFF;
    s.tid = s.pid;
    const uint64_t base = s.mode == 1 ? 0xffffffff81000000 : random() % 8 == 0 ? 0x7f3a1c200000 : 0x555555554000;
    s.ip = base + random() % 0x1000000;
    s.time_ns = i * 1000;
    s.period = 6000;
  }
  CheckAggregateAgainstMap(dir.File("samples.hvs"), samples);
}

TEST_CASE("damage is named and skipped, the rest is read", "[store][bad-input]") {
  TempDir dir;
  const auto samples = MakeSamples(30000, 2);
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, samples, 10000);  // three chunks
  const std::vector<uint8_t> good = Bytes(path);
  auto read = [&](const std::vector<uint8_t>& bytes) {
    uint64_t count = 0;
    ReadSummary summary = ReadSamples(bytes, [&](const StoredSample&) { ++count; });
    CHECK(count == summary.samples);
    return summary;
  };
  ChunkHeader first;
  std::memcpy(&first, good.data() + sizeof(FileHeader), sizeof first);
  const size_t second_chunk = sizeof(FileHeader) + sizeof first + first.payload_bytes;

  SECTION("a flipped byte in a payload") {
    auto bytes = good;
    bytes[second_chunk + sizeof(ChunkHeader) + 77] ^= 0x40;
    auto summary = read(bytes);
    CHECK(summary.samples == 20000);
    CHECK(summary.damaged_chunks == 1);
    CHECK(AllProblems(summary).find("chunk 1 fails its checksum") != std::string::npos);
  }
  SECTION("a damaged chunk header: resynchronised at the next chunk") {
    auto bytes = good;
    bytes[second_chunk + 12] ^= 0xFF;  // its record count
    auto summary = read(bytes);
    CHECK(summary.samples == 20000);
    CHECK(AllProblems(summary).find("damaged chunk header") != std::string::npos);
  }
  SECTION("a torn last chunk (the writer was killed)") {
    auto bytes = good;
    bytes.resize(bytes.size() - 100);
    auto summary = read(bytes);
    CHECK(summary.samples == 20000);
    CHECK(AllProblems(summary).find("is truncated") != std::string::npos);
    bytes.resize(second_chunk + 20);  // inside a chunk header
    CHECK(AllProblems(read(bytes)).find("torn chunk header") != std::string::npos);
  }
  SECTION("a damaged file header") {
    auto bytes = good;
    bytes[0] = 'X';
    auto summary = read(bytes);
    CHECK_FALSE(summary.header_ok);
    CHECK(AllProblems(summary).find("file header") != std::string::npos);
  }
  SECTION("empty, tiny and random files") {
    CHECK(read({}).samples == 0);
    CHECK(read({1, 2, 3}).samples == 0);
    std::mt19937 random(3);
    for (int trial = 0; trial < 50; ++trial) {
      auto bytes = good;
      for (int k = 0; k < 20; ++k) bytes[random() % bytes.size()] = static_cast<uint8_t>(random());
      auto summary = read(bytes);
      CHECK(summary.samples <= 30000);
    }
  }
}

TEST_CASE("session metadata round-trips and names what is wrong", "[store]") {
  SessionMetadata m;
  m.session_id = "00112233445566778899aabbccddeeff";
  m.platform = "sim";
  m.cpu_type = "i386/arch_perfmon";
  m.events.push_back({5, "CPU_CLK_UNHALTED", 0x3C, 0, "zero", 100000, true, true, "the engine's timer interrupt"});
  DomainRecord dom0{0, "dom0", "active", 2, {}, {}};
  dom0.processes.push_back({1201, "xz", {{"/usr/lib/x86_64-linux-gnu/liblzma.so.5", 0x7f0000000000, 0x7f0000030000, 0x7f0000000000, "abcd"}}});
  dom0.tasks.push_back({1201, 1202, "xz worker"});  // a task that scheduling records name
  m.domains.push_back(dom0);
  m.images.push_back({"hypervisor", std::nullopt, "/usr/lib/debug/boot/xen-syms-4.17-amd64", "elf", "151b", 0});
  m.rings.push_back({0, 1, "vcpu", 64, 100, {5, 0, 0, 0, 0, 0, 0, 0}, 100, 0, 64});
  m.losses.ring_full = 5;
  m.samples_by_domain_mode["0/user"] = 7;
  auto parsed = ParseMetadata(SerializeMetadata(m), "session.json");
  REQUIRE(parsed.has_value());
  CHECK(SerializeMetadata(parsed.value()) == SerializeMetadata(m));
  CHECK(parsed.value().events.at(0).sampled_by == "the engine's timer interrupt");
  // Sessions written before it say nothing: a hardware counter.
  m.events[0].sampled_by.clear();
  const std::string older = SerializeMetadata(m);
  CHECK(older.find("sampled_by") == std::string::npos);
  auto counted = ParseMetadata(older, "session.json");
  REQUIRE(counted.has_value());
  CHECK(counted.value().events.at(0).sampled_by.empty());
  m.events[0].sampled_by = "the engine's timer interrupt";

  auto error = [](std::string text) {
    auto result = ParseMetadata(text, "s.json");
    return result ? std::string() : result.error().message();
  };
  std::string json = SerializeMetadata(m);
  CHECK(error("{not json").find("not valid JSON") != std::string::npos);
  CHECK(error(R"({"format": "something-else"})").find("not an hvprof session") != std::string::npos);
  std::string newer = json;
  newer.replace(newer.find("\"version\": 1"), 12, "\"version\": 9");
  CHECK(error(newer).find("version 9") != std::string::npos);
  std::string bad_type = json;
  bad_type.replace(bad_type.find("\"count\": 100000"), 15, "\"count\": \"lots\"");
  // A wrong type names the file, the field's path, what was expected and what was there.
  CHECK(error(bad_type).find("s.json: events[0].count: expected a whole number, got the string \"lots\"") !=
        std::string::npos);
  // Floats, negatives and out-of-range numbers are refused rather than converted.
  for (const char* number : {"7.7e36", "-3", "1.5"}) {
    std::string odd = json;
    odd.replace(odd.find("\"count\": 100000"), 15, std::string("\"count\": ") + number);
    CHECK(error(odd).find(std::string("s.json: events[0].count: expected a whole number, got ")) !=
          std::string::npos);
  }
  std::string too_big = json;
  too_big.replace(too_big.find("\"agent_domain\": 0"), 17, "\"agent_domain\": 70000");
  CHECK(error(too_big).find("s.json: agent_domain: expected a whole number from 0 to 65535, got 70000") !=
        std::string::npos);
  std::string no_events = json;
  no_events.replace(no_events.find("\"events\""), 8, "\"evnets\"");
  CHECK(error(no_events).find("s.json: events: required field is missing") != std::string::npos);
  std::string no_pid = json;
  no_pid.replace(no_pid.find("\"pid\""), 5, "\"pdi\"");
  CHECK(error(no_pid).find("s.json: domains[0].processes[0].pid: required field is missing") != std::string::npos);
  std::string bad_address = json;
  bad_address.replace(bad_address.find("\"bias\": \"0x"), 13, "\"bias\": \"0xzz");
  CHECK(error(bad_address).find("bias: expected an address") != std::string::npos);
}

TEST_CASE("the aggregate's stacks count every sample's whole stack, and survive the file", "[store][stacks]") {
  TempDir dir;
  // Chains of 1 to 20 frames; some samples repeat an earlier one exactly, others only its chain.
  auto samples = MakeSamples(60000, 21);
  std::mt19937_64 random(22);
  for (size_t i = 1; i < samples.size(); ++i) {
    if (random() % 3 == 0) samples[i] = samples[random() % i];
    if (random() % 4 == 0) samples[i].frames = samples[random() % i].frames;
    samples[i].sample.frames = samples[i].frames;
  }
  samples[0].frames.clear();
  samples[0].sample.frames = {};
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, samples, 5000);
  using Key = std::tuple<uint16_t, uint8_t, uint8_t, uint32_t, uint32_t, uint16_t, uint16_t, std::vector<uint64_t>>;
  std::map<Key, uint64_t> by_thread, merged;
  for (const auto& owned : samples) {
    const StoredSample& s = owned.sample;
    std::vector<uint64_t> words = {s.ip};
    words.insert(words.end(), owned.frames.begin(), owned.frames.end());
    ++by_thread[{s.domain, s.mode, s.event, s.pid, s.tid, s.vcpu, s.pcpu, words}];
    // Merged, a stack with no user address is every process's.
    const bool user = std::any_of(words.begin(), words.end(), [](uint64_t w) { return (w >> 47) == 0; });
    ++merged[{s.domain, s.mode, s.event, user ? s.pid : kAnyProcess, kNoTid, kUnknownPcpu, kUnknownPcpu, words}];
  }
  auto as_map = [](const Aggregate& aggregate) {
    std::map<Key, uint64_t> out;
    for (const CountedStack& stack : aggregate.stacks) {
      const auto words = aggregate.Addresses(stack);
      const StackKey& k = stack.key;
      out[{k.domain, k.mode, k.event, k.pid, k.tid, k.vcpu, k.pcpu, {words.begin(), words.end()}}] += stack.count;
    }
    return out;
  };
  auto threads = AggregateSamplesFile(path, nullptr, std::nullopt, StackDetail::kStacksByThread);
  REQUIRE(threads.has_value());
  REQUIRE(threads.value().has_stacks);
  CHECK(threads.value().stacks.size() == by_thread.size());
  CHECK(as_map(threads.value()) == by_thread);
  auto plain = AggregateSamplesFile(path, nullptr, std::nullopt, StackDetail::kStacks);
  REQUIRE(plain.has_value());
  CHECK(as_map(plain.value()) == merged);
  CHECK(merged.size() < by_thread.size());
  auto none = AggregateSamplesFile(path);
  REQUIRE(none.has_value());
  CHECK_FALSE(none.value().has_stacks);
  CHECK(none.value().stacks.empty());

  // Written and read back: the same stacks, entries and totals.
  REQUIRE(WriteAggregate(dir.File("a.hva"), threads.value(), AggregateCompression::kPlain).has_value());
  auto back = ReadAggregate(dir.File("a.hva"));
  REQUIRE(back.has_value());
  CHECK(back.value().has_stacks);
  CHECK(as_map(back.value()) == by_thread);
  CHECK(back.value().entries.size() == threads.value().entries.size());
  CHECK(back.value().samples == samples.size());
  // Without stacks, an aggregate says so.
  REQUIRE(WriteAggregate(dir.File("b.hva"), none.value(), AggregateCompression::kPlain).has_value());
  auto flat = ReadAggregate(dir.File("b.hva"));
  REQUIRE(flat.has_value());
  CHECK_FALSE(flat.value().has_stacks);
  CHECK(flat.value().entries.size() == none.value().entries.size());
  // Versions 1 (before stacks: no stack section), 2 (before time slices: no slice section), 3
  // (before images: no image section, slices dense) and 4 (before regions) still read.
  for (const uint32_t version : {1u, 2u, 3u, 4u}) {
    auto bytes = Bytes(dir.File("b.hva"));
    bytes.erase(bytes.begin() + (version == 1 ? 48 : version == 2 ? 64 : version == 3 ? 88 : 96), bytes.begin() + 104);
    std::memcpy(bytes.data() + 8, &version, sizeof version);
    const uint32_t crc = static_cast<uint32_t>(crc32(0, bytes.data() + 48, static_cast<uInt>(bytes.size() - 48)));
    std::memcpy(bytes.data() + 40, &crc, sizeof crc);
    std::ofstream(dir.File("v1.hva"), std::ios::binary)
        .write(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    auto v1 = ReadAggregate(dir.File("v1.hva"));
    REQUIRE(v1.has_value());
    CHECK_FALSE(v1.value().has_stacks);
    CHECK(v1.value().entries.size() == none.value().entries.size());
    CHECK(v1.value().samples == samples.size());
  }

  // Damage: a stack whose length runs past the words, or counts that do not add up to the
  // total, are refused even with a checksum that matches (a forged file).
  auto forge = [&](size_t offset, uint32_t value) {
    auto bytes = Bytes(dir.File("a.hva"));
    std::memcpy(bytes.data() + offset, &value, sizeof value);
    const uint32_t crc = static_cast<uint32_t>(crc32(0, bytes.data() + 48, static_cast<uInt>(bytes.size() - 48)));
    std::memcpy(bytes.data() + 40, &crc, sizeof crc);
    std::ofstream(dir.File("forged.hva"), std::ios::binary)
        .write(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return ReadAggregate(dir.File("forged.hva"));
  };
  const size_t first_stack = 48 + 16 + 24 + 8 + 8 + 24 * threads.value().entries.size();
  CHECK(forge(first_stack + 24, 65536).error().kind() == ErrorKind::kCorrupt);   // its length
  CHECK(forge(first_stack + 24, 0).error().kind() == ErrorKind::kCorrupt);       // no address at all
  CHECK(forge(first_stack, 7777777).error().kind() == ErrorKind::kCorrupt);      // its count
  CHECK(forge(first_stack + 18, 9).error().kind() == ErrorKind::kCorrupt);       // its mode
  CHECK(forge(first_stack + 28, 1).error().kind() == ErrorKind::kCorrupt);       // reserved
  CHECK(forge(44, 6).error().kind() == ErrorKind::kCorrupt);                     // unknown flags
  CHECK(forge(48, 3).error().kind() == ErrorKind::kCorrupt);                     // the stack count
  CHECK(forge(64, 65).error().kind() == ErrorKind::kCorrupt);                    // too many time slices
  CHECK(forge(68, 1).error().kind() == ErrorKind::kCorrupt);                     // reserved
}

TEST_CASE("a stack ends at a frame no call could have made, and its aggregate reads back", "[store][stacks]") {
  // One process mapping one file; its samples' frame-pointer walks stray into data, as perf's do:
  // a non-canonical word (here text, "e/..") is no return address, and would read as an image word.
  ContextIndex index;
  context::ContextEvent born;
  born.kind = context::ContextKind::kProcess;
  born.pid = 7;
  born.comm = "basename";
  index.Apply(born);
  context::ContextEvent mapping;
  mapping.kind = context::ContextKind::kMapping;
  mapping.pid = 7;
  mapping.start = 0x400000;
  mapping.end = 0x500000;
  mapping.bias = 0x400000;
  mapping.path = "/usr/bin/basename";
  index.Apply(mapping);

  const std::vector<uint64_t> frames = {0x401100, 0xffffffff81000010, 0x2f65000000001234, 0x401200};
  StoredSample sample;
  sample.ip = 0x401000;
  sample.time_ns = 5;
  sample.pid = sample.tid = 7;
  sample.SetPlace(0, 0, 1, 0, 0);
  sample.frames = frames;
  AggregateKey key{};
  StackKey stack{};
  uint64_t words[kMaxFrames + 1];
  const size_t length = TranslateSample(sample, Translation{&index, false}, StackDetail::kStacksByCpu, &key, &stack, words);
  REQUIRE(length == 3);  // the sampled address and the two callers before the stray word
  CHECK(words[0] == ImageWord(1, 0x1000));
  CHECK(words[1] == ImageWord(1, 0x1100));
  CHECK(words[2] == 0xffffffff81000010);

  AggregateBuilder builder(StackDetail::kStacksByCpu, &index);
  builder.Add(sample);
  TempDir dir;
  const Aggregate aggregate = builder.Snapshot(1 << 20);  // as if samples.hvs had 1 MiB: stacks are kept
  REQUIRE(WriteAggregate(dir.File("a.hva"), aggregate, AggregateCompression::kDeflate).has_value());
  auto back = ReadAggregate(dir.File("a.hva"));
  REQUIRE(back.has_value());
  REQUIRE(back.value().stacks.size() == 1);
  CHECK(back.value().Addresses(back.value().stacks[0]).size() == 3);
}

TEST_CASE("the agent's aggregate names the regions of its per-process addresses, and reads them back", "[store][regions]") {
  // A JIT's process: its binary, a memfd mapping of generated code (a region: no file to open), a
  // heap the platform does not report; then its pid reused by a process whose memfd code sits at
  // the same address under another name. A second process runs only the binary.
  ContextIndex index;
  auto map = [&index](uint32_t pid, uint64_t time, uint64_t start, const std::string& path) {
    context::ContextEvent e;
    e.kind = context::ContextKind::kMapping;
    e.pid = pid;
    e.time_ns = time;
    e.start = start;
    e.end = start + 0x10000;
    e.bias = start;
    e.path = path;
    index.Apply(e);
  };
  auto born = [&index](uint32_t pid, uint64_t time) {
    context::ContextEvent e;
    e.kind = context::ContextKind::kProcess;
    e.pid = pid;
    e.time_ns = time;
    e.comm = "java";
    index.Apply(e);
  };
  born(10, 1);
  map(10, 1, 0x400000, "/usr/bin/java");
  map(10, 2, 0x7f0000000000, "/memfd:jit-code (deleted)");
  born(11, 1);
  map(11, 1, 0x400000, "/usr/bin/java");
  AggregateBuilder builder(StackDetail::kStacksByCpu, &index);
  auto sample = [&builder](uint32_t pid, uint64_t time, uint64_t ip, std::vector<uint64_t> frames) {
    StoredSample s;
    s.ip = ip;
    s.time_ns = time;
    s.pid = s.tid = pid;
    s.SetPlace(0, 0, 1, 0, 0);
    s.frames = frames;
    builder.Add(s);
  };
  sample(10, 5, 0x7f0000001000, {0x401000});            // in the JIT's code
  sample(10, 6, 0x401000, {0x7f0000002000, 0x402000});  // called from it
  sample(10, 7, 0x5000000, {});                          // the heap: in no mapping told
  sample(11, 8, 0x401000, {});                           // the binary only: nothing by process
  born(10, 20);                                          // the pid reused
  map(10, 20, 0x7f0000000000, "/memfd:other-jit");
  sample(10, 21, 0x7f0000003000, {});

  const Aggregate aggregate = builder.Snapshot(0);
  CHECK_FALSE(builder.regions_over_budget());
  REQUIRE(aggregate.has_regions);
  // One region per (domain, pid, start): the latest, as a report's lookup of the pid finds.
  REQUIRE(aggregate.regions.size() == 1);
  CHECK(aggregate.regions[0] == AggregateRegion{0, 10, 0x7f0000000000, 0x7f0000010000, 20, "/memfd:other-jit"});

  TempDir dir;
  for (const auto compression : {AggregateCompression::kPlain, AggregateCompression::kDeflate}) {
    REQUIRE(WriteAggregate(dir.File("r.hva"), aggregate, compression).has_value());
    auto back = ReadAggregate(dir.File("r.hva"));
    REQUIRE(back.has_value());
    CHECK(back.value().has_regions);
    CHECK(back.value().regions == aggregate.regions);
    CHECK(back.value().entries.size() == aggregate.entries.size());
  }
  // An aggregate without a context lists none, and says so: a report reads context.hvc.
  AggregateBuilder blind(StackDetail::kNone, nullptr);
  REQUIRE(WriteAggregate(dir.File("n.hva"), blind.Snapshot(0), AggregateCompression::kPlain).has_value());
  CHECK_FALSE(ReadAggregate(dir.File("n.hva")).value().has_regions);

  // Forged tables are refused: out of order, empty ranges, beyond user space, a path past the end.
  Aggregate two = aggregate;
  two.regions.push_back({0, 12, 0x10000, 0x20000, 3, "/dev/zero"});
  REQUIRE(WriteAggregate(dir.File("two.hva"), two, AggregateCompression::kPlain).has_value());
  REQUIRE(ReadAggregate(dir.File("two.hva")).has_value());
  const auto plain = Bytes(dir.File("two.hva"));
  const size_t table = plain.size() - (32 + 16) - (32 + 9);  // the region table is last
  auto forge = [&](size_t offset, uint64_t value, size_t bytes) {
    auto forged = plain;
    std::memcpy(forged.data() + offset, &value, bytes);
    const uint32_t crc = static_cast<uint32_t>(crc32(0, forged.data() + 48, static_cast<uInt>(forged.size() - 48)));
    std::memcpy(forged.data() + 40, &crc, sizeof crc);
    std::ofstream(dir.File("forged.hva"), std::ios::binary)
        .write(reinterpret_cast<char*>(forged.data()), static_cast<std::streamsize>(forged.size()));
    return ReadAggregate(dir.File("forged.hva"));
  };
  CHECK(forge(table, 0x7f0000000000, 8).has_value());  // the first region's start, as it is
  CHECK(forge(table + 24, 12, 4).error().kind() == ErrorKind::kCorrupt);  // pid 12 before 12: out of order
  CHECK(forge(table + 8, 0x7f0000000000, 8).error().kind() == ErrorKind::kCorrupt);  // ends where it starts
  CHECK(forge(table + 8, 0xffff800000000000, 8).error().kind() == ErrorKind::kCorrupt);  // past user space
  CHECK(forge(table + 30, 200, 2).error().kind() == ErrorKind::kCorrupt);   // its path runs past the table
  CHECK(forge(96, 3, 4).error().kind() == ErrorKind::kCorrupt);             // more regions than the table has
  uint32_t flags = 0;
  std::memcpy(&flags, plain.data() + 44, sizeof flags);
  CHECK(forge(44, flags & ~16u, 4).error().kind() == ErrorKind::kCorrupt);  // a table the flags deny
  CHECK(forge(8, 4, 4).error().kind() == ErrorKind::kCorrupt);              // regions in version 4
}

TEST_CASE("the agent's aggregate lists no regions past their budget, and a report then reads the context", "[store][regions]") {
  // A host that starts short JIT processes all day: each one's memfd code is a region of its own.
  ContextIndex index;
  AggregateBuilder builder(StackDetail::kNone, &index);
  for (uint32_t pid = 1; pid <= AggregateBuilder::kMaxRegions + 1; ++pid) {
    context::ContextEvent e;
    e.kind = context::ContextKind::kMapping;
    e.pid = pid;
    e.start = 0x7f0000000000;
    e.end = 0x7f0000010000;
    e.path = "/memfd:jit";
    index.Apply(e);
    StoredSample s;
    s.ip = 0x7f0000000100;
    s.time_ns = pid;
    s.pid = s.tid = pid;
    s.SetPlace(0, 0, 1, 0, 0);
    builder.Add(s);
    if (pid == AggregateBuilder::kMaxRegions) REQUIRE(builder.Snapshot(0).regions.size() == pid);
  }
  CHECK(builder.regions_over_budget());
  const Aggregate aggregate = builder.Snapshot(0);
  CHECK_FALSE(aggregate.has_regions);
  CHECK(aggregate.regions.empty());
  CHECK(aggregate.samples == AggregateBuilder::kMaxRegions + 1);
}

TEST_CASE("the agent's aggregate forgets its stacks past their memory budget, and keeps counting", "[store][stacks]") {
  // Every sample a distinct kernel stack: 64 KiB holds a few hundred of them.
  AggregateBuilder small(StackDetail::kStacksByCpu, nullptr, 64 << 10);
  AggregateBuilder large(StackDetail::kStacksByCpu, nullptr);
  std::vector<uint64_t> frames(8);
  for (uint64_t i = 0; i < 5000; ++i) {
    for (size_t f = 0; f < frames.size(); ++f) frames[f] = 0xffffffff81000000 + i * 64 + f;
    StoredSample sample;
    sample.ip = 0xffffffff82000000 + (i % 7) * 16;
    sample.time_ns = i * 1000;
    sample.pid = sample.tid = static_cast<uint32_t>(100 + i % 3);
    sample.SetPlace(0, 0, 0, 1, 0);
    sample.frames = frames;
    small.Add(sample);
    large.Add(sample);
  }
  CHECK(small.stacks_over_budget());
  CHECK_FALSE(large.stacks_over_budget());
  const Aggregate without = small.Snapshot(1 << 20);
  const Aggregate with = large.Snapshot(1 << 20);
  CHECK_FALSE(without.has_stacks);
  CHECK(without.stacks.empty());
  REQUIRE(with.has_stacks);
  CHECK(with.stacks.size() == 5000);
  // The entries are whole either way: 7 kernel addresses, across processes.
  CHECK(without.samples == 5000);
  REQUIRE(without.entries.size() == 7);
  CHECK(without.entries[0].key.pid == kAnyProcess);
  CHECK(without.entries.size() == with.entries.size());
  TempDir dir;
  REQUIRE(WriteAggregate(dir.File("a.hva"), without).has_value());
  auto back = ReadAggregate(dir.File("a.hva"));
  REQUIRE(back.has_value());
  CHECK_FALSE(back.value().has_stacks);
}

TEST_CASE("the agent's aggregate forgets its time spans past their memory budget, and keeps counting", "[store]") {
  // Every sample at an address of its own, over a long time: each span's table grows with the
  // addresses seen in it. 256 KiB holds the first spans' tables, not all 64.
  AggregateBuilder small(StackDetail::kNone, nullptr, AggregateBuilder::kDefaultStackBudgetBytes, 256 << 10);
  AggregateBuilder large(StackDetail::kNone, nullptr);
  constexpr uint64_t kSamples = 200000;
  for (uint64_t i = 0; i < kSamples; ++i) {
    StoredSample sample;
    sample.ip = 0xffffffff81000000 + i * 16;
    sample.time_ns = i * 1000000;  // 200 s: the spans widen to 4 s
    sample.pid = sample.tid = 100;
    sample.SetPlace(0, 0, 0, 1, 0);
    small.Add(sample);
    large.Add(sample);
  }
  CHECK(small.slices_over_budget());
  CHECK_FALSE(large.slices_over_budget());
  const Aggregate without = small.Snapshot(1 << 20);
  const Aggregate with = large.Snapshot(1 << 20);
  CHECK(without.time_slices == 0);
  CHECK(without.slice_counts.empty());
  REQUIRE(with.time_slices != 0);
  CHECK(with.slice_counts.size() == with.entries.size() * with.time_slices);
  // The entries are whole either way.
  CHECK(without.samples == kSamples);
  REQUIRE(without.entries.size() == kSamples);
  REQUIRE(with.entries.size() == kSamples);
  size_t differ = 0;
  for (size_t e = 0; e < kSamples; ++e) {
    differ += !(without.entries[e].key == with.entries[e].key) || without.entries[e].count != with.entries[e].count;
  }
  CHECK(differ == 0);
  TempDir dir;
  REQUIRE(WriteAggregate(dir.File("a.hva"), without).has_value());
  auto back = ReadAggregate(dir.File("a.hva"));
  REQUIRE(back.has_value());
  CHECK(back.value().time_slices == 0);
  CHECK(back.value().entries.size() == kSamples);
}

TEST_CASE("sessions on disk: absent, without metadata, or with a damaged aggregate", "[store][bad-input]") {
  TempDir dir;
  auto missing = OpenSession(dir.File("nothing-here"));
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().kind() == ErrorKind::kNotFound);
  CHECK(missing.error().message().find("no session at") != std::string::npos);

  std::filesystem::create_directories(dir.File("orphan"));
  std::ofstream(dir.File("orphan/samples.hvs")) << "x";
  auto orphan = OpenSession(dir.File("orphan"));
  REQUIRE_FALSE(orphan.has_value());
  CHECK(orphan.error().kind() == ErrorKind::kCorrupt);
  CHECK(orphan.error().message().find("no session.json") != std::string::npos);

  Aggregate aggregate;
  aggregate.entries = {{{0x1000, 5, 0, 1, 0}, 10}, {{0x2000, 5, 0, 1, 0}, 20}};
  aggregate.samples = 30;
  REQUIRE(WriteAggregate(dir.File("a.hva"), aggregate, AggregateCompression::kPlain).has_value());
  auto back = ReadAggregate(dir.File("a.hva"));
  REQUIRE(back.has_value());
  CHECK(back.value().entries.size() == 2);
  CHECK(back.value().entries[1].count == 20);
  auto bytes = Bytes(dir.File("a.hva"));
  bytes[48 + 16 + 24 + 8 + 8 + 6] ^= 1;  // in the first entry (after the header and four section headers)
  std::ofstream(dir.File("a.hva"), std::ios::binary).write(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  auto damaged = ReadAggregate(dir.File("a.hva"));
  REQUIRE_FALSE(damaged.has_value());
  CHECK(damaged.error().message().find("checksum") != std::string::npos);
}

TEST_CASE("session names for --save", "[store]") {
  CHECK(ValidateSessionName("baseline-1.2_x").has_value());
  for (const char* bad : {"", "current", ".hidden", "a/b", "../x", "with space"}) {
    INFO(bad);
    CHECK_FALSE(ValidateSessionName(bad).has_value());
  }
}

namespace {

// A session directory whose metadata says it holds `samples`.
void MakeSessionDirectory(const std::string& directory, uint64_t samples) {
  std::filesystem::create_directories(directory);
  SessionMetadata metadata;
  metadata.samples_stored = samples;
  std::ofstream(directory + "/" + kMetadataFile) << SerializeMetadata(metadata);
}

}  // namespace

TEST_CASE("saving a session: where it goes, why it cannot, and never over another", "[store]") {
  TempDir dir;
  const SessionPaths paths{dir.File("root")};
  MakeSessionDirectory(paths.current(), 7);

  SECTION("a session with samples moves under its name") {
    auto target = CheckSave(paths, paths.current(), "before", false);
    REQUIRE(target.has_value());
    CHECK(target.value() == paths.Saved("before"));
    REQUIRE(MoveSession(paths.current(), target.value()).has_value());
    CHECK_FALSE(std::filesystem::exists(paths.current()));
    auto saved = OpenSession(paths.Saved("before"));
    REQUIRE(saved.has_value());
    CHECK(saved.value().metadata.samples_stored == 7);
  }
  SECTION("refusals, each of its kind, and nothing moves") {
    CHECK(CheckSave(paths, paths.current(), "../x", false).error().kind() == ErrorKind::kInvalidArgument);
    CHECK(CheckSave(paths, dir.File("nowhere"), "x", false).error().kind() == ErrorKind::kNotFound);
    MakeSessionDirectory(paths.Saved("taken"), 1);
    auto taken = CheckSave(paths, paths.current(), "taken", false);
    REQUIRE_FALSE(taken.has_value());
    CHECK(taken.error().kind() == ErrorKind::kBadState);
    CHECK(taken.error().message().find("pick another name") != std::string::npos);
    CHECK(OpenSession(paths.current()).value().metadata.samples_stored == 7);
  }
  SECTION("an empty session is kept only when asked") {
    MakeSessionDirectory(dir.File("empty"), 0);
    auto refused = CheckSave(paths, dir.File("empty"), "e", false);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().kind() == ErrorKind::kEmpty);
    CHECK(refused.error().message().find("has no samples: nothing was saved") != std::string::npos);
    CHECK(CheckSave(paths, dir.File("empty"), "e", true).has_value());
  }
  SECTION("a name taken between the check and the move: the move refuses, and both stay") {
    auto target = CheckSave(paths, paths.current(), "raced", false);
    REQUIRE(target.has_value());
    MakeSessionDirectory(target.value(), 3);  // another saver got there first
    auto moved = MoveSession(paths.current(), target.value());
    REQUIRE_FALSE(moved.has_value());
    CHECK(moved.error().kind() == ErrorKind::kBadState);
    CHECK(OpenSession(paths.current()).value().metadata.samples_stored == 7);
    CHECK(OpenSession(target.value()).value().metadata.samples_stored == 3);
    // Not even over an empty directory, which a plain rename(2) would replace.
    std::filesystem::create_directories(dir.File("root/samples/hollow"));
    CHECK(MoveSession(paths.current(), paths.Saved("hollow")).error().kind() == ErrorKind::kBadState);
    CHECK(std::filesystem::exists(paths.current()));
  }
}

TEST_CASE("the facts samples carry: one definition, the ring ABI's values, names both ways", "[store]") {
  static_assert(sample_mode::kUser == static_cast<uint8_t>(hvpmu::ring::Mode::kUser));
  static_assert(sample_mode::kHypervisor == static_cast<uint8_t>(hvpmu::ring::Mode::kHypervisor));
  static_assert(kIdleDomain == hvpmu::kDomainIdle && kNoPid == hvpmu::ring::kNoPid);
  for (uint8_t byte = 0; byte < sample_mode::kCount; ++byte) {
    const std::optional<Mode> back = sample_mode::FromName(sample_mode::Name(byte));
    REQUIRE(back.has_value());
    CHECK(sample_mode::Byte(*back) == byte);
  }
  CHECK(sample_mode::FromName("xen") == Mode::kHypervisor);
  CHECK_FALSE(sample_mode::FromName("guest").has_value());
  CHECK_FALSE(sample_mode::IsValid(sample_mode::kCount));
  CHECK(sample_mode::Of(200) == Mode::kHypervisor);  // damage is read as the mode with no process
}

namespace {

uint64_t CountSamples(const std::vector<uint8_t>& bytes, ReadSummary* summary = nullptr) {
  uint64_t count = 0;
  ReadSummary read = ReadSamples(bytes, [&](const StoredSample&) { ++count; });
  CHECK(read.samples == count);
  if (summary != nullptr) *summary = std::move(read);
  return count;
}

}  // namespace

TEST_CASE("chunks carry their session and number: foreign, repeated and missing chunks are named, never counted",
          "[store][bad-input]") {
  TempDir dir;
  const auto samples = MakeSamples(30000, 11);
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, samples, 10000);  // three chunks of 10000, session {1, 2, 3}
  const std::vector<uint8_t> good = Bytes(path);
  const auto chunks = Chunks(good);
  REQUIRE(chunks.size() == 3);

  SECTION("a chunk copied in from another session is skipped") {
    const uint8_t other_id[16] = {9, 9, 9};
    const std::string other_path = dir.File("other.hvs");
    {
      auto writer = SamplesWriter::Open(other_path, std::span<const uint8_t, 16>(other_id, 16));
      REQUIRE(writer.has_value());
      for (size_t i = 0; i < 5000; ++i) writer.value().Append(samples[i].sample);
      REQUIRE(writer.value().Flush(true).has_value());
    }
    const auto other = Bytes(other_path);
    // Even with the number this file expects next, it is not this session's.
    auto forged = good;
    const auto stranger = Slice(other, Chunks(other)[0]);
    forged.insert(forged.end(), stranger.begin(), stranger.end());
    ReadSummary summary;
    CHECK(CountSamples(forged, &summary) == 30000);
    CHECK(summary.foreign_chunks == 1);
    CHECK(AllProblems(summary).find("belongs to session 09090900") != std::string::npos);
    // A whole file of another session, read as this one's (the report passes session.json's id).
    uint64_t count = 0;
    const uint8_t expected[16] = {1, 2, 3};
    ReadSummary foreign_file =
        ReadSamples(other, [&](const StoredSample&) { ++count; }, std::span<const uint8_t, 16>(expected, 16));
    CHECK(count == 0);
    CHECK(AllProblems(foreign_file).find("copied in from another one") != std::string::npos);
  }
  SECTION("a repeated chunk is counted once") {
    auto forged = good;
    const auto again = Slice(good, chunks[1]);
    forged.insert(forged.end(), again.begin(), again.end());
    ReadSummary summary;
    CHECK(CountSamples(forged, &summary) == 30000);
    CHECK(summary.repeated_chunks == 1);
    CHECK(AllProblems(summary).find("chunk 1 (10000 samples) repeats") != std::string::npos);
  }
  SECTION("a removed chunk is a gap, named") {
    auto forged = good;
    forged.erase(forged.begin() + static_cast<ptrdiff_t>(chunks[1].offset),
                 forged.begin() + static_cast<ptrdiff_t>(chunks[1].offset + chunks[1].bytes));
    ReadSummary summary;
    CHECK(CountSamples(forged, &summary) == 20000);
    CHECK(summary.missing_chunks == 1);
    CHECK(summary.damaged_chunks == 0);
    CHECK(AllProblems(summary).find("chunk 1 is missing") != std::string::npos);
  }
  SECTION("a file cut at a chunk boundary ends early: its next sequence number shows it") {
    auto cut = good;
    cut.resize(chunks[2].offset);
    ReadSummary summary;
    CHECK(CountSamples(cut, &summary) == 20000);
    CHECK(summary.next_sequence == 2);  // the metadata says 3 were written: the report names the loss
    CHECK(summary.problems.empty());
  }
  SECTION("a damaged chunk header does not read as a gap") {
    auto damaged = good;
    damaged[chunks[1].offset + 12] ^= 0xFF;
    ReadSummary summary;
    CHECK(CountSamples(damaged, &summary) == 20000);
    CHECK(summary.missing_chunks == 0);
    CHECK(summary.damaged_chunks == 1);
  }
}

TEST_CASE("an existing samples file is appended to only by its own session, after its torn tail is cut",
          "[store][bad-input]") {
  TempDir dir;
  const auto samples = MakeSamples(20000, 12);
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, {samples.begin(), samples.begin() + 10000}, 5000);
  const uint8_t other_id[16] = {7};
  auto refused = SamplesWriter::Open(path, std::span<const uint8_t, 16>(other_id, 16));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message().find("holds the samples of session 01020300") != std::string::npos);

  // A writer killed mid-chunk leaves a torn tail.
  auto bytes = Bytes(path);
  const size_t whole = bytes.size();
  {
    std::ofstream append(path, std::ios::binary | std::ios::app);
    const auto torn = Slice(bytes, Chunks(bytes)[0]);
    append.write(reinterpret_cast<const char*>(torn.data()), static_cast<std::streamsize>(torn.size() / 2));
  }
  const uint8_t id[16] = {1, 2, 3};
  auto writer = SamplesWriter::Open(path, std::span<const uint8_t, 16>(id, 16));
  REQUIRE(writer.has_value());
  CHECK(writer.value().stats().torn_bytes > 0);
  CHECK(writer.value().stats().samples == 10000);
  CHECK(writer.value().stats().bytes == whole);
  for (size_t i = 10000; i < 20000; ++i) writer.value().Append(samples[i].sample);
  REQUIRE(writer.value().Flush(true).has_value());
  size_t i = 0, mismatches = 0;
  auto summary = ReadSamplesFile(path, [&](const StoredSample& s) { mismatches += !Same(s, samples[i++]); });
  REQUIRE(summary.has_value());
  CHECK(summary.value().problems.empty());
  CHECK(summary.value().samples == 20000);
  CHECK(mismatches == 0);
}

TEST_CASE("a chunk that cannot be written is cut off and counted, writing resumes when there is room",
          "[store][bad-input]") {
  // An injected write failure: the file size limit (EFBIG), as a full disk (ENOSPC) fails.
  TempDir dir;
  const auto samples = MakeSamples(30000, 13);
  const std::string path = dir.File("samples.hvs");
  const uint8_t id[16] = {1, 2, 3};
  auto writer = SamplesWriter::Open(path, std::span<const uint8_t, 16>(id, 16));
  REQUIRE(writer.has_value());
  for (size_t i = 0; i < 10000; ++i) writer.value().Append(samples[i].sample);
  REQUIRE(writer.value().Flush(false).has_value());
  const uint64_t size_before = Bytes(path).size();

  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto previous_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit tight = saved;
  tight.rlim_cur = size_before + 1000;  // room for part of the next chunk only
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &tight) == 0);
  for (size_t i = 10000; i < 20000; ++i) writer.value().Append(samples[i].sample);
  auto failed = writer.value().Flush(false);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
  ::signal(SIGXFSZ, previous_handler);

  REQUIRE_FALSE(failed.has_value());
  CHECK(writer.value().stats().failed == 10000);
  CHECK(writer.value().stats().failed_chunks == 1);
  CHECK(writer.value().failure().has_value());
  CHECK(Bytes(path).size() == size_before);  // the partial chunk was cut off
  for (size_t i = 20000; i < 30000; ++i) writer.value().Append(samples[i].sample);
  REQUIRE(writer.value().Flush(true).has_value());
  CHECK_FALSE(writer.value().failure().has_value());
  CHECK(writer.value().stats().samples == 20000);

  ReadSummary summary;
  CHECK(CountSamples(Bytes(path), &summary) == 20000);
  CHECK(summary.problems.empty());  // no gap: the failed chunk never took a number
  CHECK(summary.next_sequence == 2);
}

TEST_CASE("a chunk header's times span its own samples, not those of the chunk before", "[store]") {
  TempDir dir;
  const std::string path = dir.File("samples.hvs");
  const std::array<uint8_t, 16> id{1, 2, 3};
  auto writer = SamplesWriter::Open(path, id);
  REQUIRE(writer.has_value());
  StoredSample sample;
  for (uint64_t time : {3000, 1000}) {  // the second chunk is earlier (another pCPU's samples)
    sample.time_ns = time;
    writer.value().Append(sample);
    sample.time_ns = time + 10;
    writer.value().Append(sample);
    REQUIRE(writer.value().Flush(false).has_value());
  }
  const auto bytes = Bytes(path);
  const auto chunks = Chunks(bytes);
  REQUIRE(chunks.size() == 2);
  ChunkHeader second;
  std::memcpy(&second, bytes.data() + chunks[1].offset, sizeof second);
  CHECK(second.first_time_ns == 1000);
  CHECK(second.last_time_ns == 1010);
}

TEST_CASE("version 1 samples files (hvprof 0.1) are still read", "[store]") {
  TempDir dir;
  const auto samples = MakeSamples(12000, 14);
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, samples, 6000);
  const auto v2 = Bytes(path);
  // The same chunks in version 1's layout.
  std::vector<uint8_t> v1(v2.begin(), v2.begin() + sizeof(FileHeader));
  FileHeader file_header;
  std::memcpy(&file_header, v1.data(), sizeof file_header);
  file_header.version = 1;
  std::memcpy(v1.data(), &file_header, sizeof file_header);
  for (const ChunkSpan& chunk : Chunks(v2)) {
    ChunkHeader h;
    std::memcpy(&h, v2.data() + chunk.offset, sizeof h);
    ChunkHeaderV1 old{h.magic, 1, sizeof(ChunkHeaderV1), h.sequence, h.records, h.payload_bytes, h.payload_crc,
                      h.first_time_ns, h.last_time_ns, 0, 0};
    old.header_crc = static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(&old),
                                                   offsetof(ChunkHeaderV1, header_crc)));
    const auto* raw = reinterpret_cast<const uint8_t*>(&old);
    v1.insert(v1.end(), raw, raw + sizeof old);
    v1.insert(v1.end(), v2.begin() + static_cast<ptrdiff_t>(chunk.offset + sizeof h),
              v2.begin() + static_cast<ptrdiff_t>(chunk.offset + chunk.bytes));
  }
  size_t i = 0, mismatches = 0;
  ReadSummary summary = ReadSamples(v1, [&](const StoredSample& s) { mismatches += !Same(s, samples[i++]); });
  CHECK(summary.version == 1);
  CHECK(summary.samples == 12000);
  CHECK(mismatches == 0);
  CHECK(summary.problems.empty());
}

TEST_CASE("the aggregate's time slices: written, read back, and checked against the counts", "[store]") {
  TempDir dir;
  Aggregate aggregate;
  aggregate.entries = {{{0x1000, 5, 0, 1, 0}, 10}, {{0x2000, 5, 0, 1, 0}, 20}};
  aggregate.samples = 30;
  aggregate.time_slices = 3;
  aggregate.slices_first_ns = 100;
  aggregate.slices_last_ns = 400;
  aggregate.slice_counts = {1, 2, 7, 20, 0, 0};
  REQUIRE(WriteAggregate(dir.File("a.hva"), aggregate).has_value());
  auto back = ReadAggregate(dir.File("a.hva"));
  REQUIRE(back.has_value());
  CHECK(back.value().time_slices == 3);
  CHECK(back.value().slices_first_ns == 100);
  CHECK(back.value().slices_last_ns == 400);
  CHECK(back.value().slice_counts == aggregate.slice_counts);
  // Kept sparsely: a count of 0 takes no room, and reads back as 0.
  REQUIRE(WriteAggregate(dir.File("p.hva"), aggregate, AggregateCompression::kPlain).has_value());
  CHECK(std::filesystem::file_size(dir.File("p.hva")) == 104 + 2 * 24 + 2 * 8 + 4 * 4);
  auto plain = ReadAggregate(dir.File("p.hva"));
  REQUIRE(plain.has_value());
  CHECK(plain.value().slice_counts == aggregate.slice_counts);
  // Slices that do not add up to their entry's count are refused, checksum or not.
  aggregate.slice_counts[0] = 2;
  REQUIRE(WriteAggregate(dir.File("b.hva"), aggregate).has_value());
  auto forged = ReadAggregate(dir.File("b.hva"));
  REQUIRE_FALSE(forged.has_value());
  CHECK(forged.error().message().find("time slices") != std::string::npos);
}

TEST_CASE("an aggregate's entries: image words only in an image's entries, and each names a listed image",
          "[store][bad-input]") {
  TempDir dir;
  auto read_back = [&](uint64_t ip, uint32_t pid) {
    Aggregate aggregate;
    aggregate.images = {{1, "/usr/bin/true", ""}};
    aggregate.entries = {{{ip, pid, 0, 0, 0}, 3}};
    aggregate.samples = 3;
    aggregate.source_bytes = 1 << 20;
    REQUIRE(WriteAggregate(dir.File("e.hva"), aggregate).has_value());
    return ReadAggregate(dir.File("e.hva"));
  };
  CHECK(read_back(ImageWord(1, 0x1000), kAnyProcess).has_value());
  CHECK(read_back(0x401000, 42).has_value());
  CHECK(read_back(0xffffffff81000000, 42).has_value());
  const auto unlisted = read_back(ImageWord(2, 0x1000), kAnyProcess);
  REQUIRE_FALSE(unlisted.has_value());
  CHECK(unlisted.error().message().find("names image 2, which it does not list") != std::string::npos);
  // The kernel's code is counted across processes; a user address only as an image word.
  CHECK(read_back(0xffffffff81000000, kAnyProcess).has_value());
  const auto raw_by_image = read_back(0x401000, kAnyProcess);
  REQUIRE_FALSE(raw_by_image.has_value());
  CHECK(raw_by_image.error().message().find("names no image") != std::string::npos);
  // A process's entry at a non-canonical address would be read as an image's.
  const auto word_of_process = read_back(ImageWord(1, 0x1000), 42);
  REQUIRE_FALSE(word_of_process.has_value());
  CHECK(word_of_process.error().message().find("at which no CPU runs") != std::string::npos);
}

TEST_CASE("the aggregate deflated: the same aggregate read back, smaller, and damage refused", "[store][bad-input]") {
  TempDir dir;
  Aggregate aggregate;
  aggregate.images = {{1, "/usr/lib/libz.so.1", "ab12"}, {2, "/usr/bin/true", ""}};
  for (uint64_t i = 0; i < 2000; ++i) {
    aggregate.entries.push_back({{ImageWord(1 + i % 2, 0x1000 + 16 * i), kAnyProcess, 0, 0, 0}, 1 + i % 3});
    aggregate.samples += 1 + i % 3;
  }
  std::sort(aggregate.entries.begin(), aggregate.entries.end(),
            [](const AggregateEntry& a, const AggregateEntry& b) { return a.key < b.key; });
  aggregate.has_stacks = true;
  for (const AggregateEntry& entry : aggregate.entries) {
    const uint32_t first = static_cast<uint32_t>(aggregate.stack_words.size());
    aggregate.stack_words.push_back(entry.key.ip);
    aggregate.stack_words.push_back(0xffffffff81000000 + entry.key.ip % 4096);
    aggregate.stacks.push_back({{kAnyProcess, kNoTid, 0, 0, 0, kUnknownPcpu, 1}, first, 2, entry.count});
  }
  aggregate.source_bytes = 1 << 20;
  REQUIRE(WriteAggregate(dir.File("plain.hva"), aggregate, AggregateCompression::kPlain).has_value());
  REQUIRE(WriteAggregate(dir.File("deflated.hva"), aggregate).has_value());
  CHECK(std::filesystem::file_size(dir.File("deflated.hva")) * 3 < std::filesystem::file_size(dir.File("plain.hva")));
  auto plain = ReadAggregate(dir.File("plain.hva"));
  auto deflated = ReadAggregate(dir.File("deflated.hva"));
  REQUIRE(plain.has_value());
  REQUIRE(deflated.has_value());
  CHECK(deflated.value().entries.size() == aggregate.entries.size());
  CHECK(deflated.value().stack_words == aggregate.stack_words);
  CHECK(deflated.value().images == aggregate.images);
  CHECK(deflated.value().samples == aggregate.samples);
  for (size_t i = 0; i < aggregate.entries.size(); ++i) {
    CHECK(deflated.value().entries[i].count == plain.value().entries[i].count);
  }

  const auto original = Bytes(dir.File("deflated.hva"));
  auto write = [&](const std::vector<uint8_t>& bytes) {
    std::ofstream(dir.File("bad.hva"), std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return ReadAggregate(dir.File("bad.hva"));
  };
  // Cut short, a byte of the stream changed, bytes after the stream, an inflated size that lies
  // (smaller, larger, beyond the bound): each is refused as damaged, never read past.
  auto cut = original;
  cut.resize(cut.size() - 20);
  CHECK(write(cut).error().kind() == ErrorKind::kCorrupt);
  auto flipped = original;
  flipped[flipped.size() / 2] ^= 0x40;
  CHECK(write(flipped).error().kind() == ErrorKind::kCorrupt);
  auto longer = original;
  longer.push_back(0);
  CHECK(write(longer).error().kind() == ErrorKind::kCorrupt);
  for (const uint64_t size : {uint64_t{100}, uint64_t{100'000'000}, uint64_t{1} << 40}) {
    auto lying = original;
    std::memcpy(lying.data() + 48, &size, sizeof size);
    auto read = write(lying);
    INFO(size);
    REQUIRE_FALSE(read.has_value());
    CHECK(read.error().kind() == ErrorKind::kCorrupt);
  }
}

TEST_CASE("counting a samples file in time slices", "[store]") {
  TempDir dir;
  const std::array<uint8_t, 16> id{1, 2, 3};
  {
    auto writer = SamplesWriter::Open(dir.File("s.hvs"), id);
    REQUIRE(writer.has_value());
    // Address 0x10 at times 0..99, address 0x20 only in the last tenth.
    for (uint64_t t = 0; t < 100; ++t) {
      StoredSample sample;
      sample.ip = t >= 90 && t % 2 == 0 ? 0x20 : 0x10;
      sample.time_ns = 1000 + t;
      writer.value().Append(sample);
    }
    REQUIRE(writer.value().Flush(true).has_value());
  }
  auto counted = AggregateSamplesFile(dir.File("s.hvs"), nullptr, std::nullopt, StackDetail::kNone, {10, 1000, 1099});
  REQUIRE(counted.has_value());
  const Aggregate& a = counted.value();
  REQUIRE(a.time_slices == 10);
  REQUIRE(a.entries.size() == 2);
  // Entries sorted by ip: 0x10 first. Each slice is 10 ns wide.
  for (uint32_t k = 0; k < 9; ++k) CHECK(a.slice_counts[0 * 10 + k] == 10);
  CHECK(a.slice_counts[0 * 10 + 9] == 5);
  for (uint32_t k = 0; k < 9; ++k) CHECK(a.slice_counts[1 * 10 + k] == 0);
  CHECK(a.slice_counts[1 * 10 + 9] == 5);
}

TEST_CASE("without a time span, the chunks' headers give it", "[store]") {
  TempDir dir;
  const std::array<uint8_t, 16> id{1, 2, 3};
  {
    auto writer = SamplesWriter::Open(dir.File("s.hvs"), id);
    REQUIRE(writer.has_value());
    // Times out of order, as drains of several vCPUs write them: 5000..5099 in two chunks.
    for (uint64_t t = 0; t < 100; ++t) {
      StoredSample sample;
      sample.ip = 0x10;
      sample.time_ns = 5000 + (t * 37) % 100;
      writer.value().Append(sample);
      if (t == 49) REQUIRE(writer.value().Flush(false).has_value());
    }
    REQUIRE(writer.value().Flush(true).has_value());
  }
  auto counted = AggregateSamplesFile(dir.File("s.hvs"), nullptr, std::nullopt, StackDetail::kNone, {10, 0, 0});
  REQUIRE(counted.has_value());
  const Aggregate& a = counted.value();
  CHECK(a.slices_first_ns == 5000);
  CHECK(a.slices_last_ns == 5099);
  REQUIRE(a.time_slices == 10);
  REQUIRE(a.entries.size() == 1);
  for (uint32_t k = 0; k < 10; ++k) CHECK(a.slice_counts[k] == 10);
}

TEST_CASE("a watch sees every sample counted once, with the slice it was counted in", "[store]") {
  TempDir dir;
  const auto samples = MakeSamples(20000, 5);
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, samples, 3000);
  const TimeSlicing slicing{4, samples.front().sample.time_ns, samples.back().sample.time_ns};
  for (unsigned readers : {1u, 4u}) {
    INFO(readers << " readers");
    // Per reader: what its observer saw per slice, and how many samples came with another slice
    // than their time's (Catch2's checks are for this thread only).
    struct Seen {
      std::vector<uint64_t> per_slice;
      uint64_t wrong_slice = 0;
    };
    std::deque<Seen> per_reader;
    unsigned made = 0;
    const SampleWatch watch = [&](unsigned) -> SampleObserver {
      ++made;
      Seen& seen = per_reader.emplace_back(Seen{std::vector<uint64_t>(slicing.count, 0), 0});
      return [&seen, &slicing](const StoredSample& sample, uint32_t slice) {
        seen.wrong_slice += slice != slicing.SliceOf(sample.time_ns);
        ++seen.per_slice[slice];
      };
    };
    auto counted = AggregateSamplesFile(path, nullptr, std::nullopt, StackDetail::kNone, slicing, readers, {}, watch);
    REQUIRE(counted.has_value());
    CHECK(made == readers);
    std::vector<uint64_t> seen(slicing.count, 0), sliced(slicing.count, 0);
    for (const Seen& one : per_reader) {
      CHECK(one.wrong_slice == 0);
      for (uint32_t k = 0; k < slicing.count; ++k) seen[k] += one.per_slice[k];
    }
    for (size_t e = 0; e < counted.value().entries.size(); ++e) {
      for (uint32_t k = 0; k < slicing.count; ++k) sliced[k] += counted.value().slice_counts[e * slicing.count + k];
    }
    CHECK(seen == sliced);
    CHECK(std::accumulate(seen.begin(), seen.end(), uint64_t{0}) == counted.value().samples);
  }
}

TEST_CASE("the aggregate is the same whatever the number of threads reading the file, damage included",
          "[store][bad-input]") {
  TempDir dir;
  const auto samples = MakeSamples(60000, 11);
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, samples, 5000);  // twelve chunks
  // A damaged payload in the fourth chunk and a damaged header in the ninth.
  std::vector<uint8_t> bytes = Bytes(path);
  std::vector<size_t> starts;
  for (size_t at = sizeof(FileHeader); at + sizeof(ChunkHeader) <= bytes.size();) {
    starts.push_back(at);
    ChunkHeader header;
    std::memcpy(&header, bytes.data() + at, sizeof header);
    at += sizeof header + header.payload_bytes;
  }
  REQUIRE(starts.size() == 12);
  bytes[starts[3] + sizeof(ChunkHeader) + 40] ^= 0x10;
  bytes[starts[8] + 12] ^= 0xFF;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const TimeSlicing slicing{5, samples.front().sample.time_ns, samples.back().sample.time_ns};
  ReadSummary one_summary;
  auto one = AggregateSamplesFile(path, &one_summary, std::nullopt, StackDetail::kStacksByThread, slicing, 1);
  REQUIRE(one.has_value());
  CHECK(one.value().samples == 50000);
  CHECK(one_summary.damaged_chunks == 2);
  for (unsigned readers : {2u, 3u, 16u}) {
    ReadSummary summary;
    auto many = AggregateSamplesFile(path, &summary, std::nullopt, StackDetail::kStacksByThread, slicing, readers);
    REQUIRE(many.has_value());
    INFO(readers << " readers");
    const Aggregate& a = one.value();
    const Aggregate& b = many.value();
    CHECK(b.samples == a.samples);
    REQUIRE(b.entries.size() == a.entries.size());
    size_t different = 0;
    for (size_t i = 0; i < a.entries.size(); ++i) {
      different += a.entries[i].key < b.entries[i].key || b.entries[i].key < a.entries[i].key ||
                   a.entries[i].count != b.entries[i].count;
    }
    CHECK(different == 0);
    CHECK(b.slice_counts == a.slice_counts);
    REQUIRE(b.stacks.size() == a.stacks.size());  // in the same order: the stacks as first seen
    size_t stacks_differ = 0;
    for (size_t i = 0; i < a.stacks.size(); ++i) {
      const auto wa = a.Addresses(a.stacks[i]);
      const auto wb = b.Addresses(b.stacks[i]);
      stacks_differ += a.stacks[i].count != b.stacks[i].count || a.stacks[i].key.tid != b.stacks[i].key.tid ||
                       !std::equal(wa.begin(), wa.end(), wb.begin(), wb.end());
    }
    CHECK(stacks_differ == 0);
    CHECK(summary.samples == one_summary.samples);
    CHECK(summary.chunks == one_summary.chunks);
    CHECK(summary.damaged_chunks == one_summary.damaged_chunks);
    CHECK(summary.next_sequence == one_summary.next_sequence);
    CHECK(AllProblems(summary) == AllProblems(one_summary));
  }
}

TEST_CASE("a chain that runs off its outermost frame ends there, and short processes of one binary share its stack",
          "[store][stacks]") {
  // Two runs of one binary, each a process of its own mapping the same file. Their frame-pointer
  // walks end with a 0 (the outermost frame's return address): kept, that word is an address no
  // image holds, and every process would have a stack of its own.
  ContextIndex index;
  for (uint32_t pid : {7u, 8u}) {
    context::ContextEvent born;
    born.kind = context::ContextKind::kProcess;
    born.pid = pid;
    born.comm = "true";
    index.Apply(born);
    context::ContextEvent mapping;
    mapping.kind = context::ContextKind::kMapping;
    mapping.pid = pid;
    mapping.start = 0x400000 + pid * 0x1000000;  // each run at its own address (ASLR)
    mapping.end = mapping.start + 0x100000;
    mapping.bias = mapping.start;
    mapping.path = "/usr/bin/true";
    index.Apply(mapping);
  }
  AggregateBuilder builder(StackDetail::kStacksByCpu, &index);
  for (uint32_t pid : {7u, 8u}) {
    const uint64_t base = 0x400000 + pid * 0x1000000;
    for (const uint64_t end : {uint64_t{0}, uint64_t{0xff8}}) {  // 0, and another word of the first page
      const std::vector<uint64_t> frames = {base + 0x1100, end, base + 0x1200};
      StoredSample sample;
      sample.ip = base + 0x1000;
      sample.time_ns = 5;
      sample.pid = sample.tid = pid;
      sample.SetPlace(0, 0, 1, 0, 0);
      sample.frames = frames;
      AggregateKey key{};
      StackKey stack{};
      uint64_t words[kMaxFrames + 1];
      REQUIRE(TranslateSample(sample, Translation{&index, false}, StackDetail::kStacksByCpu, &key, &stack, words) == 2);
      CHECK(words[1] == ImageWord(1, 0x1100));
      CHECK(stack.pid == kAnyProcess);
      builder.Add(sample);
    }
  }
  const Aggregate aggregate = builder.Snapshot(1 << 20);
  REQUIRE(aggregate.stacks.size() == 1);
  CHECK(aggregate.stacks[0].count == 4);
  CHECK(aggregate.stacks[0].key.pid == kAnyProcess);
}

TEST_CASE("a varint is the canonical LEB128 bytes at every length, whatever was in the buffer", "[store]") {
  // The on-disk coding (docs/session-format.md): seven bits a byte, low group first, the top bit
  // set on every byte but the last, no more bytes than the value needs. The bytes past its end
  // (the room PutVarint is promised) may be anything: they must not leak into it.
  std::vector<uint64_t> values = {0, 1, 0x7F, 0x80, UINT64_MAX, UINT64_MAX - 1};
  for (unsigned bit = 0; bit < 64; ++bit) {
    values.push_back(uint64_t{1} << bit);
    values.push_back((uint64_t{1} << bit) - 1);
    values.push_back((uint64_t{1} << bit) | 0x55);
  }
  std::mt19937_64 random(7);
  for (int i = 0; i < 2000; ++i) values.push_back(random() >> (random() % 64));
  for (const uint64_t value : values) {
    std::vector<uint8_t> expected;
    uint64_t rest = value;
    do {
      const uint8_t group = rest & 0x7F;
      rest >>= 7;
      expected.push_back(rest != 0 ? group | 0x80 : group);
    } while (rest != 0);
    for (const uint8_t fill : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0xA5}}) {
      std::array<uint8_t, hvprof::varint::kMaxVarint + 4> buffer;
      buffer.fill(fill);
      const uint8_t* end = hvprof::varint::PutVarint(buffer.data() + 2, value);
      INFO("value " << value << " fill " << int(fill));
      REQUIRE(end - (buffer.data() + 2) == static_cast<ptrdiff_t>(expected.size()));
      CHECK(std::equal(expected.begin(), expected.end(), buffer.begin() + 2));
      CHECK(buffer[0] == fill);  // nothing written before it
      CHECK(buffer[1] == fill);
      hvprof::varint::Cursor cursor(std::span<const uint8_t>(buffer.data() + 2, expected.size()));
      CHECK(cursor.Varint() == value);
      CHECK((cursor.ok() && cursor.done()));
    }
  }
}

TEST_CASE("samples round-trip exactly with values at every varint length and the extremes", "[store]") {
  // Every field at 0, at the edges of each length of a varint (7, 14, ... 63 bits), and at its
  // largest, with differences from one sample to the next of every size, both signs.
  std::vector<uint64_t> values = {0, 1, UINT64_MAX, UINT64_MAX - 1, uint64_t{1} << 63};
  for (unsigned bits = 7; bits < 64; bits += 7) {
    values.push_back((uint64_t{1} << bits) - 1);
    values.push_back(uint64_t{1} << bits);
    values.push_back(~((uint64_t{1} << bits) - 1));
  }
  std::vector<Owned> samples;
  for (size_t i = 0; i < values.size() * values.size(); ++i) {
    const uint64_t a = values[i % values.size()], b = values[i / values.size()];
    Owned owned;
    StoredSample& s = owned.sample;
    s.ip = a;
    s.time_ns = b;
    s.period = a ^ b;
    s.pid = static_cast<uint32_t>(b);  // 0xFFFFFFFF included: no pid
    s.tid = static_cast<uint32_t>(a >> 32);
    s.domain = static_cast<uint16_t>(a);
    s.vcpu = static_cast<uint16_t>(b >> 48);
    s.pcpu = static_cast<uint16_t>(a >> 16);
    s.mode = static_cast<uint8_t>(i % 3);
    s.event = static_cast<uint8_t>(b);
    s.flags = static_cast<uint16_t>(b >> 8);
    if (i % 5 == 0) owned.frames = {b, a, ~a, a + 1, 0, UINT64_MAX};
    samples.push_back(std::move(owned));
  }
  for (auto& owned : samples) owned.sample.frames = owned.frames;
  TempDir dir;
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, samples, 97);
  size_t i = 0, mismatches = 0;
  auto summary = ReadSamplesFile(path, [&](const StoredSample& s) { mismatches += !Same(s, samples[i++]); });
  REQUIRE(summary.has_value());
  CHECK(summary.value().problems.empty());
  CHECK(i == samples.size());
  CHECK(mismatches == 0);
}
