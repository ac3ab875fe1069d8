// sched.hvs (issue 21): scheduling records round-trip field by field, damage is found and
// skipped a chunk at a time, the file is refused to another session, continued by its own, and
// a full disk costs counted records only; session.json's "sched" object.
#include <sys/resource.h>

#include <array>
#include <csignal>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/store/sched_file.h"
#include "hvprof/store/session.h"
#include "chunk_files.h"
#include "temp_dir.h"

using namespace hvprof;
using namespace hvprof::store;
using hvprof::testing::Bytes;
using hvprof::testing::Chunks;
using hvprof::testing::ChunkSpan;
using hvprof::testing::Reseal;
using hvprof::testing::Slice;
using hvprof::testing::TempDir;

namespace {

constexpr std::array<uint8_t, 16> kId{1, 2, 3};
constexpr std::array<uint8_t, 16> kOtherId{9, 9, 9};
const std::string kIdHex = SessionIdHex(kId);

StoredSched Runstate(uint16_t pcpu, uint64_t time, uint16_t domain, uint16_t vcpu, uint8_t from, uint8_t to) {
  StoredSched r;
  r.type = kSchedRunstate;
  r.pcpu = pcpu;
  r.time_ns = time;
  r.domain = domain;
  r.vcpu = vcpu;
  r.old_state = from;
  r.new_state = to;
  return r;
}

// Every type, every field each type keeps, extreme values, and times that go back (records of
// two pCPUs interleaved, a lost mark whose first loss is earlier than itself).
std::vector<StoredSched> EveryKind() {
  std::vector<StoredSched> out;
  out.push_back(Runstate(0, 1'000'000, 1, 0, 1, 0));  // runnable -> running
  out.push_back(Runstate(1, 999'000, 0x7FFF, 1, 0, 2));  // earlier, on another pCPU: the idle vCPU
  StoredSched task = Runstate(1, 1'000'500, 3, 2, 0, 1);
  task.flags = kSchedFlagTask;
  task.pid = 4242;
  task.tid = 4243;
  out.push_back(task);
  StoredSched no_pid = task;  // a task whose pid is unknown: kept as such
  no_pid.pid = kNoPid;
  no_pid.tid = 0;
  no_pid.time_ns = 1'000'400;
  out.push_back(no_pid);
  StoredSched wakeup;
  wakeup.type = kSchedWakeup;
  wakeup.flags = kSchedFlagTask | kSchedFlagOther | 4;  // 4: derived by the host
  wakeup.pcpu = 0;
  wakeup.time_ns = 1'000'600;
  wakeup.domain = 2;
  wakeup.vcpu = 7;
  wakeup.pid = 0xFFFFFFFE;
  wakeup.tid = 1;
  wakeup.other_domain = 0xFFFF;
  wakeup.other_vcpu = 0xFFFF;
  wakeup.other_pid = kNoPid;
  wakeup.other_tid = 77;
  wakeup.old_state = 2;
  wakeup.new_state = 1;
  wakeup.to_pcpu = 1;
  out.push_back(wakeup);
  StoredSched waker_only = wakeup;  // a waker, no subject task
  waker_only.flags = kSchedFlagOther;
  waker_only.pid = waker_only.tid = kNoPid;
  waker_only.time_ns = 1'000'601;
  waker_only.to_pcpu = kUnknownPcpu;
  out.push_back(waker_only);
  StoredSched migrate;
  migrate.type = kSchedMigrate;
  migrate.pcpu = 0xFFFE;
  migrate.time_ns = 1'000'700;
  migrate.domain = 2;
  migrate.vcpu = 7;
  migrate.from_pcpu = 0;
  migrate.to_pcpu = 0xFFFE;
  out.push_back(migrate);
  StoredSched lost;
  lost.type = kSchedLost;
  lost.pcpu = 1;
  lost.time_ns = 1'000'800;
  lost.domain = 0xFFFF;
  lost.count = 123456789012ULL;
  lost.aux = 1'000'100;  // the first loss, before the mark
  out.push_back(lost);
  StoredSched late = lost;  // a loss "after" the mark would be a lie, but is kept as written
  late.count = 1;
  late.aux = UINT64_MAX;
  late.time_ns = 0;
  out.push_back(late);
  out.push_back(Runstate(3, UINT64_MAX, 1, 1, 3, 0));  // offline -> running, at the end of time
  out.push_back(Runstate(3, 5, 1, 1, 0, 3));           // and back to the start
  return out;
}

std::vector<StoredSched> Random(size_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<StoredSched> out(count);
  uint64_t time = 1'000'000'000;
  for (StoredSched& r : out) {
    time += random() % 20000;
    r.type = static_cast<uint8_t>(1 + random() % kMaxStoredSchedType);
    r.pcpu = static_cast<uint16_t>(random() % 8);
    r.time_ns = time - random() % 50000;  // pCPUs interleave
    r.domain = static_cast<uint16_t>(random() % 5 == 0 ? 0x7FFF : random() % 6);
    r.vcpu = static_cast<uint16_t>(random() % 4);
    r.old_state = static_cast<uint8_t>(random() % 4);
    r.new_state = static_cast<uint8_t>(random() % 4);
    r.flags = static_cast<uint8_t>(random() % 8);
    if (r.flags & kSchedFlagTask) {
      r.pid = static_cast<uint32_t>(random() % 100000);
      r.tid = r.pid + static_cast<uint32_t>(random() % 3);
    }
    if (r.flags & kSchedFlagOther) {
      r.other_domain = static_cast<uint16_t>(random() % 6);
      r.other_vcpu = static_cast<uint16_t>(random() % 4);
      r.other_pid = random() % 2 == 0 ? kNoPid : static_cast<uint32_t>(random() % 100000);
      r.other_tid = r.other_pid;
    }
    if (r.type == kSchedMigrate || (r.type == kSchedWakeup && random() % 2 == 0)) {
      r.from_pcpu = static_cast<uint16_t>(random() % 8);
      r.to_pcpu = static_cast<uint16_t>(random() % 8);
    }
    if (r.type == kSchedLost) {
      r.count = random() % 1000 + 1;
      r.aux = r.time_ns - random() % 1000000;
    }
  }
  return out;
}

void Write(const std::string& directory, const std::vector<StoredSched>& records, size_t flush_every,
           std::array<uint8_t, 16> id = kId) {
  auto writer = SchedWriter::Open(directory, id);
  REQUIRE(writer.has_value());
  for (size_t i = 0; i < records.size(); ++i) {
    writer.value().Add(records[i]);
    if (flush_every != 0 && (i + 1) % flush_every == 0) REQUIRE(writer.value().Flush().has_value());
  }
  REQUIRE(writer.value().Dump().has_value());
}

std::vector<StoredSched> ReadAll(const std::string& path, SchedReadSummary* summary = nullptr,
                                 std::string_view id = kIdHex) {
  std::vector<StoredSched> out;
  auto read = ReadSchedFile(path, id, [&](const StoredSched& r) { out.push_back(r); });
  REQUIRE(read.has_value());
  CHECK(read.value().records == out.size());
  if (summary != nullptr) *summary = read.value();
  return out;
}

void Store(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string AllProblems(const ChunkReadSummary& summary) {
  std::string text;
  for (const auto& p : summary.problems) text += p.description + "\n";
  return text;
}

}  // namespace

TEST_CASE("scheduling records round-trip, every type and every field it keeps", "[store][sched]") {
  TempDir dir;
  const auto records = EveryKind();
  Write(dir.path(), records, 0);
  SchedReadSummary summary;
  const auto back = ReadAll(dir.File(kSchedFile), &summary);
  CHECK(summary.present);
  CHECK(summary.problems.empty());
  CHECK(summary.chunks == 1);
  REQUIRE(back.size() == records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    CHECK(back[i] == records[i]);
  }
}

TEST_CASE("what a record's type and flags say is not there is not kept", "[store][sched]") {
  TempDir dir;
  StoredSched r = Runstate(2, 1000, 1, 1, 0, 1);
  r.pid = 7;             // without kSchedFlagTask
  r.other_domain = 3;    // without kSchedFlagOther
  r.other_pid = 8;
  r.count = 5;           // not a records-lost mark
  r.aux = 6;
  r.new_state = 200;     // beyond the 4 bits kept: unknown
  StoredSched unknown = r;
  unknown.type = kMaxStoredSchedType + 1;
  StoredSched zero = r;
  zero.type = 0;
  auto writer = SchedWriter::Open(dir.path(), kId);
  REQUIRE(writer.has_value());
  writer.value().Add(unknown);
  writer.value().Add(r);
  writer.value().Add(zero);
  REQUIRE(writer.value().Dump().has_value());
  CHECK(writer.value().stats().unknown_type == 2);
  CHECK(writer.value().stats().records == 1);
  const auto back = ReadAll(dir.File(kSchedFile));
  REQUIRE(back.size() == 1);
  StoredSched expected = Runstate(2, 1000, 1, 1, 0, kMaxStoredState);
  CHECK(back[0] == expected);
}

TEST_CASE("a million scheduling records round-trip across chunks, compactly", "[store][sched]") {
  TempDir dir;
  const auto records = Random(1'000'000, 21);
  Write(dir.path(), records, 300'000);
  SchedReadSummary summary;
  size_t i = 0, mismatches = 0;
  auto read = ReadSchedFile(dir.File(kSchedFile), kIdHex, [&](const StoredSched& r) {
    mismatches += i >= records.size() || !(r == records[i]);
    ++i;
  });
  REQUIRE(read.has_value());
  CHECK(read.value().problems.empty());
  CHECK(read.value().records == records.size());
  CHECK(i == records.size());
  CHECK(mismatches == 0);
  CHECK(read.value().chunks >= 1'000'000 / kMaxChunkRecords);
  // Even with every field drawn at random, far below the 64 bytes of a ring slot.
  CHECK(Bytes(dir.File(kSchedFile)).size() < records.size() * 20);
}

TEST_CASE("a scheduler's stream of switches takes a few bytes a record", "[store][sched]") {
  TempDir dir;
  // Two pCPUs switching among four vCPUs every millisecond, both at each slice boundary.
  std::vector<StoredSched> records;
  for (uint64_t slice = 0; slice < 20000; ++slice) {
    for (uint16_t cpu = 0; cpu < 2; ++cpu) {
      const auto vcpu = static_cast<uint16_t>((slice + cpu) % 4);
      records.push_back(Runstate(cpu, slice * 1'000'000 + cpu * 3, 1 + vcpu / 2, vcpu % 2, 0, 1));
      records.push_back(Runstate(cpu, slice * 1'000'000 + cpu * 3, 1 + (vcpu + 1) % 4 / 2, (vcpu + 1) % 2, 1, 0));
    }
  }
  Write(dir.path(), records, 0);
  CHECK(ReadAll(dir.File(kSchedFile)).size() == records.size());
  CHECK(Bytes(dir.File(kSchedFile)).size() < records.size() * 8);
}

TEST_CASE("a session without scheduling has no sched.hvs, and reading it is no error", "[store][sched]") {
  TempDir dir;
  CHECK_FALSE(HasSched(dir.path()));
  std::vector<StoredSched> none;
  auto read = ReadSchedFile(dir.File(kSchedFile), kIdHex, [&](const StoredSched& r) { none.push_back(r); });
  REQUIRE(read.has_value());
  CHECK_FALSE(read.value().present);
  CHECK(read.value().records == 0);
  CHECK(none.empty());
  Write(dir.path(), EveryKind(), 0);
  CHECK(HasSched(dir.path()));
  auto bad_id = ReadSchedFile(dir.File(kSchedFile), "not-hex", [](const StoredSched&) {});
  REQUIRE_FALSE(bad_id.has_value());
  CHECK(bad_id.error().message().find("is not a session id") != std::string::npos);
}

TEST_CASE("a torn tail loses its chunk only, continuing cuts it off and appends", "[store][sched][bad-input]") {
  TempDir dir;
  const auto records = Random(30000, 22);
  Write(dir.path(), {records.begin(), records.begin() + 20000}, 10000);  // two chunks
  const std::string path = dir.File(kSchedFile);
  const auto whole = Bytes(path);
  // A writer killed mid-chunk: half of a third chunk.
  {
    std::vector<uint8_t> torn = whole;
    const auto chunks = Chunks(whole);
    REQUIRE(chunks.size() == 2);
    const auto second = Slice(whole, chunks[1]);
    torn.insert(torn.end(), second.begin(), second.begin() + static_cast<ptrdiff_t>(second.size() / 2));
    Store(path, torn);
  }
  SchedReadSummary summary;
  CHECK(ReadAll(path, &summary).size() == 20000);
  CHECK(summary.torn_tail);
  CHECK(summary.torn_bytes == Bytes(path).size() - whole.size());
  CHECK(summary.damaged_chunks == 1);
  CHECK(AllProblems(summary).find("scheduling records are lost") != std::string::npos);

  auto writer = SchedWriter::Open(dir.path(), kId);
  REQUIRE(writer.has_value());
  CHECK(writer.value().stats().torn_bytes == summary.torn_bytes);
  CHECK(writer.value().stats().records == 20000);
  CHECK(writer.value().next_sequence() == 2);
  CHECK(Bytes(path).size() == whole.size());
  for (size_t i = 20000; i < records.size(); ++i) writer.value().Add(records[i]);
  REQUIRE(writer.value().Dump().has_value());
  SchedReadSummary after;
  const auto back = ReadAll(path, &after);
  CHECK(after.problems.empty());
  CHECK(back == records);
}

TEST_CASE("a damaged chunk in the middle is counted and skipped whole, the others are read",
          "[store][sched][bad-input]") {
  TempDir dir;
  const auto records = Random(30000, 23);
  Write(dir.path(), records, 10000);  // three chunks
  const std::string path = dir.File(kSchedFile);
  const auto good = Bytes(path);
  const auto chunks = Chunks(good);
  REQUIRE(chunks.size() == 3);
  const std::vector<StoredSched> outer = [&] {
    std::vector<StoredSched> kept(records.begin(), records.begin() + 10000);
    kept.insert(kept.end(), records.begin() + 20000, records.end());
    return kept;
  }();

  SECTION("a payload that fails its checksum") {
    auto bytes = good;
    bytes[chunks[1].offset + sizeof(ChunkHeader) + 100] ^= 0x10;
    Store(path, bytes);
    SchedReadSummary summary;
    CHECK(ReadAll(path, &summary) == outer);
    CHECK(summary.damaged_chunks == 1);
    CHECK(summary.chunks == 2);
    CHECK(AllProblems(summary).find("chunk 1 fails its checksum") != std::string::npos);
  }
  SECTION("a record of an unknown type, under a valid checksum (a newer hvprof's)") {
    auto bytes = good;
    // The chunk's first record starts the payload: its tag's type (bits 0-2) becomes 7.
    const size_t payload = chunks[1].offset + sizeof(ChunkHeader);
    bytes[payload] = static_cast<uint8_t>((bytes[payload] & ~0x07) | 0x07);
    Reseal(bytes, chunks[1].offset);
    Store(path, bytes);
    SchedReadSummary summary;
    CHECK(ReadAll(path, &summary) == outer);
    CHECK(summary.damaged_chunks == 1);
    CHECK(summary.chunks == 2);
    CHECK(AllProblems(summary).find("chunk 1 has a valid checksum but malformed records after 0 of 10000") !=
          std::string::npos);
  }
  SECTION("a record that runs past its payload, under a valid checksum") {
    auto bytes = good;
    const uint32_t more = chunks[1].records + 1;  // one more record than the payload holds
    std::memcpy(bytes.data() + chunks[1].offset + offsetof(ChunkHeader, records), &more, sizeof more);
    Reseal(bytes, chunks[1].offset);
    Store(path, bytes);
    SchedReadSummary summary;
    CHECK(ReadAll(path, &summary) == outer);
    CHECK(summary.damaged_chunks == 1);
    CHECK(AllProblems(summary).find("malformed records after 10000 of 10001; its scheduling records are skipped") !=
          std::string::npos);
  }
  SECTION("a damaged chunk header: the reader finds the next chunk") {
    auto bytes = good;
    bytes[chunks[1].offset + 12] ^= 0xFF;
    Store(path, bytes);
    SchedReadSummary summary;
    CHECK(ReadAll(path, &summary) == outer);
    CHECK(summary.damaged_chunks == 1);
    CHECK(summary.missing_chunks == 0);
  }
}

TEST_CASE("sched.hvs of another session is refused, whole", "[store][sched][bad-input]") {
  TempDir dir;
  Write(dir.path(), EveryKind(), 0, kOtherId);
  std::vector<StoredSched> delivered;
  auto read = ReadSchedFile(dir.File(kSchedFile), kIdHex, [&](const StoredSched& r) { delivered.push_back(r); });
  REQUIRE_FALSE(read.has_value());
  CHECK(read.error().message().find("holds the scheduling records of session 09090900") != std::string::npos);
  CHECK(delivered.empty());
  auto writer = SchedWriter::Open(dir.path(), kId);
  REQUIRE_FALSE(writer.has_value());
  CHECK(writer.error().message().find("holds the scheduling records of session 09090900") != std::string::npos);
  // Its own session reads it; no id given, the file header's.
  CHECK(ReadAll(dir.File(kSchedFile), nullptr, SessionIdHex(kOtherId)).size() == EveryKind().size());
  CHECK(ReadAll(dir.File(kSchedFile), nullptr, "").size() == EveryKind().size());
  // In memory, a foreign chunk among this session's is skipped and named.
  TempDir mine;
  Write(mine.path(), EveryKind(), 0);
  auto bytes = Bytes(mine.File(kSchedFile));
  const auto other = Bytes(dir.File(kSchedFile));
  bytes.insert(bytes.end(), other.begin() + sizeof(FileHeader), other.end());
  uint64_t count = 0;
  const SchedReadSummary summary = ReadSched(bytes, [&](const StoredSched&) { ++count; }, kId);
  CHECK(count == EveryKind().size());
  CHECK(summary.foreign_chunks == 1);
}

TEST_CASE("continuing a session's sched.hvs appends, numbering on", "[store][sched]") {
  TempDir dir;
  const auto records = Random(5000, 24);
  Write(dir.path(), {records.begin(), records.begin() + 2000}, 1000);
  auto writer = SchedWriter::Open(dir.path(), kId);
  REQUIRE(writer.has_value());
  CHECK(writer.value().stats().records == 2000);
  CHECK(writer.value().stats().chunks == 2);
  CHECK(writer.value().next_sequence() == 2);
  for (size_t i = 2000; i < records.size(); ++i) writer.value().Add(records[i]);
  REQUIRE(writer.value().Flush().has_value());
  CHECK(writer.value().stats().records == 5000);
  SchedReadSummary summary;
  CHECK(ReadAll(dir.File(kSchedFile), &summary) == records);
  CHECK(summary.problems.empty());
  CHECK(summary.next_sequence == 3);
}

TEST_CASE("a full disk: a chunk that cannot be written is cut off and counted, and writing resumes",
          "[store][sched][bad-input]") {
  TempDir dir;
  const auto records = Random(30000, 25);
  auto writer = SchedWriter::Open(dir.path(), kId);
  REQUIRE(writer.has_value());
  for (size_t i = 0; i < 10000; ++i) writer.value().Add(records[i]);
  REQUIRE(writer.value().Flush().has_value());
  const std::string path = dir.File(kSchedFile);
  const uint64_t size_before = Bytes(path).size();

  SECTION("the file cannot grow (the size limit fails the write as a full disk does)") {
    struct rlimit saved {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto previous_handler = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit tight = saved;
    tight.rlim_cur = size_before + 1000;  // room for part of the next chunk only
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &tight) == 0);
    for (size_t i = 10000; i < 20000; ++i) writer.value().Add(records[i]);
    auto failed = writer.value().Dump();
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
    ::signal(SIGXFSZ, previous_handler);
    REQUIRE_FALSE(failed.has_value());
    CHECK(writer.value().failure().has_value());
  }
  SECTION("less room than the session keeps free") {
    writer.value().set_keep_free(uint64_t{1} << 62);
    for (size_t i = 10000; i < 20000; ++i) writer.value().Add(records[i]);
    auto failed = writer.value().Flush();
    REQUIRE_FALSE(failed.has_value());
    CHECK(failed.error().kind() == ErrorKind::kNoSpace);
    CHECK(failed.error().message().find("less than a chunk of scheduling records") != std::string::npos);
    writer.value().set_keep_free(0);
  }
  CHECK(writer.value().stats().failed == 10000);
  CHECK(writer.value().stats().failed_chunks == 1);
  CHECK(Bytes(path).size() == size_before);  // the partial chunk was cut off
  for (size_t i = 20000; i < 30000; ++i) writer.value().Add(records[i]);
  REQUIRE(writer.value().Dump().has_value());
  CHECK_FALSE(writer.value().failure().has_value());
  CHECK(writer.value().stats().records == 20000);
  SchedReadSummary summary;
  const auto back = ReadAll(path, &summary);
  CHECK(summary.problems.empty());  // no gap: the failed chunk never took a number
  REQUIRE(back.size() == 20000);
  CHECK(back[9999] == records[9999]);
  CHECK(back[10000] == records[20000]);
}

TEST_CASE("session.json's sched object and scheduling rings round-trip, older files parse as before",
          "[store][sched]") {
  SessionMetadata m;
  m.session_id = kIdHex;
  m.platform = "sim";
  m.cpu_type = "i386/arch_perfmon";
  m.events.push_back({5, "CPU_CLK_UNHALTED", 0x3C, 0, "zero", 100000, true, true, ""});
  m.rings.push_back({0, 0, "vcpu", 64, 100, {5, 0, 0, 0, 0, 0, 0, 0}, 100, 0, 64});
  const std::string without = SerializeMetadata(m);
  CHECK(without.find("\"sched\"") == std::string::npos);  // written only when scheduling was recorded
  auto plain = ParseMetadata(without, "session.json");
  REQUIRE(plain.has_value());
  CHECK_FALSE(plain.value().sched.has_value());

  m.rings.push_back({0, 1, "sched", 256, 9000, {7, 1, 0, 0, 0, 0, 0, 0}, 8990, 2, 200});
  SchedSummary sched;
  sched.source = "engine";
  sched.records = 8990;
  sched.lost = {7, 1, 3, 2, 4};
  sched.file_chunks = 3;
  sched.file_bytes = 70000;
  m.sched = sched;
  const std::string with = SerializeMetadata(m);
  CHECK(with.find("\"version\": 1") != std::string::npos);
  auto parsed = ParseMetadata(with, "session.json");
  REQUIRE(parsed.has_value());
  REQUIRE(parsed.value().sched.has_value());
  const SchedSummary& back = *parsed.value().sched;
  CHECK(back.source == "engine");
  CHECK(back.records == 8990);
  CHECK(back.lost.ring_full == 7);
  CHECK(back.lost.corrupt_index == 1);
  CHECK(back.lost.store_failed == 3);
  CHECK(back.lost.malformed == 2);
  CHECK(back.lost.unknown_type == 4);
  CHECK(back.file_chunks == 3);
  CHECK(back.file_bytes == 70000);
  REQUIRE(parsed.value().rings.size() == 2);
  CHECK(parsed.value().rings[1].kind == "sched");
  CHECK(parsed.value().rings[1].written == 9000);
  CHECK(parsed.value().rings[1].lost[0] == 7);
  CHECK(SerializeMetadata(parsed.value()) == with);
  // The names session.json gives the losses.
  for (const char* name : {"\"ring_full\": 7", "\"corrupt_index\": 1", "\"store_failed\": 3", "\"malformed\": 2",
                           "\"unknown_type\": 4", "\"source\": \"engine\""}) {
    CHECK(with.find(name) != std::string::npos);
  }

  // A session.json of before scheduling (and before other optional keys), and one with a key
  // this hvprof does not know: both read, at the same version.
  const std::string old_file = R"({"format": "hvprof-session", "version": 1,
    "session_id": "01020300000000000000000000000000", "platform": "xen", "cpu_type": "i386/arch_perfmon",
    "events": [{"counter": 0, "name": "CPU_CLK_UNHALTED", "code": "0x3c", "count": 100000}],
    "domains": [{"id": 0, "role": "active"}],
    "rings": [{"owner": 0, "index": 0, "kind": "pcpu", "written": 5}],
    "losses": {"ring_full": 2}, "samples_stored": 5})";
  auto old = ParseMetadata(old_file, "old.json");
  REQUIRE(old.has_value());
  CHECK_FALSE(old.value().sched.has_value());
  CHECK(old.value().rings.at(0).kind == "pcpu");
  CHECK(old.value().losses.ring_full == 2);
  CHECK(old.value().samples_stored == 5);
  std::string future = with;
  future.replace(future.find("\"sched\": {"), 7, "\"a_key_of_later\": {\"x\": 1}, \"sched\"");
  auto later = ParseMetadata(future, "later.json");
  REQUIRE(later.has_value());
  CHECK(later.value().sched.has_value());

  // A wrong "sched" names the field.
  auto error = [](std::string text) {
    auto result = ParseMetadata(text, "s.json");
    return result ? std::string() : result.error().message();
  };
  std::string not_object = without;
  not_object.replace(not_object.rfind('}'), 1, ", \"sched\": 5}");
  CHECK(error(not_object).find("s.json: sched: expected an object") != std::string::npos);
  std::string bad_count = with;
  bad_count.replace(bad_count.find("\"records\": 8990"), 15, "\"records\": -1");
  CHECK(error(bad_count).find("s.json: sched.records: expected a whole number") != std::string::npos);
}
