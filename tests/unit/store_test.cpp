// The session store's formats: samples round-trip exactly; damage of every kind is found,
// named and skipped; metadata errors name the field.
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "temp_dir.h"

using namespace hvprof;
using namespace hvprof::store;
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

std::vector<uint8_t> Bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), {}};
}

std::string AllProblems(const ReadSummary& summary) {
  std::string text;
  for (const auto& p : summary.problems) text += p.description + "\n";
  return text;
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
  const std::string path = dir.File("samples.hvs");
  WriteFile(path, samples, 20000);
  std::map<std::tuple<uint16_t, uint8_t, uint8_t, uint32_t, uint64_t>, uint64_t> expected;
  for (const auto& owned : samples) {
    const StoredSample& s = owned.sample;
    ++expected[{s.domain, s.mode, s.event, s.pid, s.ip}];
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

TEST_CASE("damage is named and skipped; the rest is read", "[store][bad-input]") {
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
  m.events.push_back({5, "CPU_CLK_UNHALTED", 0x3C, 0, "zero", 100000, true, true});
  DomainRecord dom0{0, "dom0", "active", 2, {}};
  dom0.processes.push_back({1201, "xz", {{"/usr/lib/x86_64-linux-gnu/liblzma.so.5", 0x7f0000000000, 0x7f0000030000, 0x7f0000000000, "abcd"}}});
  m.domains.push_back(dom0);
  m.images.push_back({"hypervisor", std::nullopt, "/usr/lib/debug/boot/xen-syms-4.17-amd64", "elf", "151b", 0});
  m.rings.push_back({0, 1, "vcpu", 64, 100, {5, 0, 0, 0, 0, 0, 0, 0}, 100, 0, 64});
  m.losses.ring_full = 5;
  m.samples_by_domain_mode["0/user"] = 7;
  auto parsed = ParseMetadata(SerializeMetadata(m), "session.json");
  REQUIRE(parsed.has_value());
  CHECK(SerializeMetadata(parsed.value()) == SerializeMetadata(m));

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
  REQUIRE(WriteAggregate(dir.File("a.hva"), aggregate).has_value());
  auto back = ReadAggregate(dir.File("a.hva"));
  REQUIRE(back.has_value());
  CHECK(back.value().entries.size() == 2);
  CHECK(back.value().entries[1].count == 20);
  auto bytes = Bytes(dir.File("a.hva"));
  bytes[60] ^= 1;
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
