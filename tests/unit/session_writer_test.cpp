// The agent's session writer and scheduling records (issue 21): sched.hvs only when there are
// some, flushed and dumped with the samples, continued with the session, removed with its other
// files, and every record that could not be written counted in session.json's "sched".
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/agent/session_writer.h"
#include "hvprof/base/files.h"
#include "hvprof/store/sched_file.h"
#include "hvprof/store/session.h"
#include "temp_dir.h"

using hvprof::agent::SessionWriter;
using hvprof::testing::TempDir;
namespace ring = hvpmu::ring;
namespace store = hvprof::store;

namespace {

store::SessionMetadata Metadata(uint64_t count = 100000) {
  store::SessionMetadata m;
  m.platform = "sim";
  m.cpu_type = "i386/arch_perfmon";
  m.events.push_back({0, "CPU_CLK_UNHALTED", 0x3C, 0, "", count, true, true, ""});
  return m;
}

ring::SchedRecord Sched(uint8_t type, uint16_t pcpu, uint64_t time_ns, uint16_t domain, uint16_t vcpu) {
  ring::SchedRecord r;
  std::memset(&r, 0, sizeof r);
  r.kind = static_cast<uint8_t>(ring::RecordKind::kSched);
  r.slots = 1;
  r.type = type;
  r.pcpu = pcpu;
  r.time_ns = time_ns;
  r.domain = domain;
  r.vcpu = vcpu;
  r.pid = r.tid = r.other_pid = r.other_tid = ring::kNoPid;
  r.from_pcpu = r.to_pcpu = ring::kUnknownPcpu;
  r.old_state = static_cast<uint8_t>(ring::Runstate::kRunnable);
  r.new_state = static_cast<uint8_t>(ring::Runstate::kRunning);
  return r;
}

ring::SchedRecord Nth(uint64_t i) {
  return Sched(static_cast<uint8_t>(ring::SchedType::kRunstate), static_cast<uint16_t>(i % 2), 1000 + i * 10,
               static_cast<uint16_t>(i % 3), static_cast<uint16_t>(i % 4));
}

store::SessionMetadata Written(const std::string& directory) {
  auto session = store::OpenSession(directory);
  REQUIRE(session.has_value());
  return session.value().metadata;
}

std::vector<store::StoredSched> ReadBack(const std::string& directory, const std::string& session_id) {
  std::vector<store::StoredSched> out;
  auto read = store::ReadSchedFile(directory + "/" + store::kSchedFile, session_id,
                                   [&](const store::StoredSched& r) { out.push_back(r); });
  REQUIRE(read.has_value());
  CHECK(read.value().problems.empty());
  return out;
}

bool Mentions(const std::vector<std::string>& lines, const std::string& text) {
  for (const std::string& line : lines) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a session without scheduling records has no sched.hvs and no sched object", "[agent][sched]") {
  TempDir dir;
  auto session = SessionWriter::Open(dir.path(), Metadata());
  REQUIRE(session.has_value());
  ring::SampleRecord sample{};
  sample.kind = static_cast<uint8_t>(ring::RecordKind::kSample);
  sample.time_ns = 5;
  session.value().Add(sample, {});
  REQUIRE(session.value().Flush().has_value());
  REQUIRE(session.value().Dump().has_value());
  CHECK_FALSE(store::HasSched(dir.path()));
  CHECK_FALSE(Written(dir.path()).sched.has_value());
  CHECK(session.value().sched_stats().records == 0);
}

TEST_CASE("scheduling records go to sched.hvs, made at the first, written at each flush and dump",
          "[agent][sched]") {
  TempDir dir;
  auto opened = SessionWriter::Open(dir.path(), Metadata());
  REQUIRE(opened.has_value());
  SessionWriter& session = opened.value();
  CHECK_FALSE(store::HasSched(dir.path()));
  session.metadata().sched = store::SchedSummary{"engine", 0, {2, 1, 0, 3, 4}, 0, 0};

  ring::SchedRecord wakeup = Sched(static_cast<uint8_t>(ring::SchedType::kWakeup), 1, 2000, 3, 1);
  wakeup.flags = ring::kSchedPidValid | ring::kSchedOtherValid;
  wakeup.pid = 10;
  wakeup.tid = 11;
  wakeup.other_domain = 4;
  wakeup.other_vcpu = 2;
  wakeup.other_pid = 12;
  wakeup.other_tid = 13;
  wakeup.to_pcpu = 0;
  wakeup.old_state = static_cast<uint8_t>(ring::Runstate::kBlocked);
  wakeup.new_state = static_cast<uint8_t>(ring::Runstate::kRunnable);
  ring::SchedRecord lost = Sched(static_cast<uint8_t>(ring::SchedType::kLost), 0, 1900, hvpmu::kDomainInvalid, 0);
  lost.count = 17;
  lost.aux = 1500;
  ring::SchedRecord unflagged = Sched(static_cast<uint8_t>(ring::SchedType::kRunstate), 0, 2100, 1, 0);
  unflagged.pid = 99;  // without kSchedPidValid: not kept
  session.AddSched(wakeup);
  session.AddSched(lost);
  session.AddSched(unflagged);
  CHECK(store::HasSched(dir.path()));
  REQUIRE(session.Flush().has_value());
  const std::string id = session.metadata().session_id;
  const auto back = ReadBack(dir.path(), id);  // written, before any dump
  REQUIRE(back.size() == 3);
  CHECK(back[0].type == store::kSchedWakeup);
  CHECK(back[0].pid == 10);
  CHECK(back[0].tid == 11);
  CHECK(back[0].other_domain == 4);
  CHECK(back[0].other_vcpu == 2);
  CHECK(back[0].other_pid == 12);
  CHECK(back[0].other_tid == 13);
  CHECK(back[0].to_pcpu == 0);
  CHECK(back[0].from_pcpu == hvprof::kUnknownPcpu);
  CHECK(back[0].old_state == 2);
  CHECK(back[0].new_state == 1);
  CHECK(back[0].pcpu == 1);
  CHECK(back[1].type == store::kSchedLost);
  CHECK(back[1].count == 17);
  CHECK(back[1].aux == 1500);
  CHECK(back[1].domain == hvpmu::kDomainInvalid);
  CHECK(back[2].pid == hvprof::kNoPid);
  CHECK(back[2].time_ns == 2100);

  for (uint64_t i = 0; i < 1000; ++i) session.AddSched(Nth(i));
  REQUIRE(session.Dump().has_value());
  const auto m = Written(dir.path());
  REQUIRE(m.sched.has_value());
  CHECK(m.sched->source == "engine");
  CHECK(m.sched->records == 1003);
  CHECK(m.sched->lost.ring_full == 2);
  CHECK(m.sched->lost.corrupt_index == 1);
  CHECK(m.sched->lost.store_failed == 0);
  CHECK(m.sched->lost.malformed == 3);
  CHECK(m.sched->lost.unknown_type == 4);
  CHECK(m.sched->file_chunks == 2);
  CHECK(m.sched->file_bytes == std::filesystem::file_size(dir.File(store::kSchedFile)));
  CHECK(m.incomplete.empty());
  CHECK(ReadBack(dir.path(), id).size() == 1003);
}

TEST_CASE("a continued session appends to its sched.hvs and carries its losses", "[agent][sched]") {
  TempDir dir;
  std::string id;
  {
    auto first = SessionWriter::Open(dir.path(), Metadata());
    REQUIRE(first.has_value());
    id = first.value().metadata().session_id;
    first.value().metadata().sched = store::SchedSummary{"engine", 0, {2, 0, 0, 0, 0}, 0, 0};
    for (uint64_t i = 0; i < 100; ++i) first.value().AddSched(Nth(i));
    REQUIRE(first.value().Dump().has_value());
  }
  SECTION("by an agent that records scheduling") {
    auto second = SessionWriter::Open(dir.path(), Metadata());
    REQUIRE(second.has_value());
    CHECK(second.value().metadata().session_id == id);
    CHECK(second.value().sched_stats().records == 100);
    second.value().metadata().sched = store::SchedSummary{"engine", 0, {3, 0, 0, 1, 0}, 0, 0};
    for (uint64_t i = 100; i < 150; ++i) second.value().AddSched(Nth(i));
    REQUIRE(second.value().Dump().has_value());
    const auto back = ReadBack(dir.path(), id);
    REQUIRE(back.size() == 150);
    for (uint64_t i = 0; i < 150; ++i) CHECK(back[i].time_ns == Nth(i).time_ns);
    const auto m = Written(dir.path());
    REQUIRE(m.sched.has_value());
    CHECK(m.sched->records == 150);
    CHECK(m.sched->lost.ring_full == 5);
    CHECK(m.sched->lost.malformed == 1);
    CHECK(m.sched->file_chunks == 2);
  }
  SECTION("by an agent that does not: what was recorded stays described") {
    auto second = SessionWriter::Open(dir.path(), Metadata());
    REQUIRE(second.has_value());
    REQUIRE(second.value().Dump().has_value());
    const auto m = Written(dir.path());
    REQUIRE(m.sched.has_value());
    CHECK(m.sched->source == "engine");
    CHECK(m.sched->records == 100);
    CHECK(m.sched->lost.ring_full == 2);
    CHECK(ReadBack(dir.path(), id).size() == 100);
  }
  SECTION("whose sched.hvs was lost: said so, and the gap stays visible") {
    std::filesystem::remove(dir.File(store::kSchedFile));
    auto second = SessionWriter::Open(dir.path(), Metadata());
    REQUIRE(second.has_value());
    for (uint64_t i = 100; i < 110; ++i) second.value().AddSched(Nth(i));
    REQUIRE(second.value().Dump().has_value());
    const auto m = Written(dir.path());
    CHECK(Mentions(m.incomplete, "sched.hvs held 1 chunks"));
    REQUIRE(m.sched.has_value());
    CHECK(m.sched->records == 10);
    CHECK(m.sched->file_chunks == 2);
    auto read = store::ReadSchedFile(dir.File(store::kSchedFile), id, [](const store::StoredSched&) {});
    REQUIRE(read.has_value());
    CHECK(read.value().records == 10);
    CHECK(read.value().missing_chunks == 1);
  }
  SECTION("by an agent with other events: refused, the records kept") {
    auto other = SessionWriter::Open(dir.path(), Metadata(5000));
    REQUIRE_FALSE(other.has_value());
    CHECK(other.error().message().find("holds a session with other events") != std::string::npos);
    CHECK(ReadBack(dir.path(), id).size() == 100);
  }
}

TEST_CASE("a session that recorded nothing starts again with new events, its sched.hvs removed",
          "[agent][sched]") {
  TempDir dir;
  std::string id;
  {
    auto first = SessionWriter::Open(dir.path(), Metadata());
    REQUIRE(first.has_value());
    id = first.value().metadata().session_id;
    first.value().AddSched(Nth(0));  // the file is made; its record never written (the agent died)
  }
  REQUIRE(store::HasSched(dir.path()));
  auto second = SessionWriter::Open(dir.path(), Metadata(5000));
  REQUIRE(second.has_value());
  CHECK(second.value().metadata().session_id != id);
  CHECK_FALSE(store::HasSched(dir.path()));
}

TEST_CASE("scheduling records that cannot be written are counted as store_failed, and the session says so",
          "[agent][sched][bad-input]") {
  TempDir dir;
  auto opened = SessionWriter::Open(dir.path(), Metadata());
  REQUIRE(opened.has_value());
  SessionWriter& session = opened.value();
  session.metadata().sched = store::SchedSummary{"engine", 0, {}, 0, 0};
  const std::string id = session.metadata().session_id;

  SECTION("sched.hvs cannot be made: tried again after the next flush") {
    std::filesystem::create_directory(dir.File(store::kSchedFile));  // in the way
    for (uint64_t i = 0; i < 10; ++i) session.AddSched(Nth(i));
    CHECK(session.sched_failure().has_value());
    REQUIRE(session.Dump().has_value());
    auto m = Written(dir.path());
    REQUIRE(m.sched.has_value());
    CHECK(m.sched->lost.store_failed == 10);
    CHECK(m.sched->records == 0);
    CHECK(Mentions(m.incomplete, "10 scheduling records could not be written to sched.hvs"));
    std::filesystem::remove(dir.File(store::kSchedFile));
    for (uint64_t i = 10; i < 15; ++i) session.AddSched(Nth(i));
    REQUIRE(session.Dump().has_value());
    m = Written(dir.path());
    CHECK(m.sched->records == 5);
    CHECK(m.sched->lost.store_failed == 10);
    CHECK(ReadBack(dir.path(), id).size() == 5);
  }
  SECTION("the disk fills up: the chunk is cut off, and writing resumes") {
    for (uint64_t i = 0; i < 10; ++i) session.AddSched(Nth(i));
    REQUIRE(session.Flush().has_value());
    struct rlimit saved {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto previous_handler = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit tight = saved;
    tight.rlim_cur = 64 << 10;  // session.json fits; a chunk of 20000 records does not
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &tight) == 0);
    for (uint64_t i = 10; i < 20010; ++i) session.AddSched(Nth(i));
    const auto dumped = session.Dump();
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
    ::signal(SIGXFSZ, previous_handler);
    REQUIRE(dumped.has_value());  // the metadata was written, recording the loss
    CHECK(session.sched_failure().has_value());
    auto m = Written(dir.path());
    REQUIRE(m.sched.has_value());
    CHECK(m.sched->lost.store_failed == 20000);
    CHECK(m.sched->records == 10);
    CHECK(Mentions(m.incomplete, "20000 scheduling records could not be written to sched.hvs"));
    for (uint64_t i = 0; i < 5; ++i) session.AddSched(Nth(i));
    REQUIRE(session.Dump().has_value());
    CHECK_FALSE(session.sched_failure().has_value());
    m = Written(dir.path());
    CHECK(m.sched->records == 15);
    CHECK(m.sched->lost.store_failed == 20000);
    CHECK(ReadBack(dir.path(), id).size() == 15);
  }
}
