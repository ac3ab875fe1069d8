// A report of hvprofd's aggregate needs nothing of context.hvc (issue 42): the aggregate names
// the images of its image words and the regions (mappings of no file: a JIT's memfd code) of its
// per-process addresses, and session.json counts the processes. After a day of a host that starts
// processes all day context.hvc is hundreds of megabytes, and `hvprof run` prints this report as
// its run ends. The session here is written by the agent's own writer, as hvprofd writes it.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <catch2/catch.hpp>

#include "hvprof/agent/session_writer.h"
#include "hvprof/base/files.h"
#include "hvprof/report/load.h"
#include "hvprof/store/session.h"
#include "temp_dir.h"

using namespace hvprof;
namespace ring = hvpmu::ring;

namespace {

constexpr const char* kLibz = "/usr/lib/x86_64-linux-gnu/libz.so.1";
constexpr uint64_t kLib = 0x7f0000000000;   // libz's text
constexpr uint64_t kJit = 0x7e0000000000;   // a memfd of generated code
constexpr uint64_t kHeap = 0x5000000;       // in no mapping the platform told
constexpr uint32_t kShortLived = 300;       // processes that ran only libz's code

void Add(agent::SessionWriter& session, uint32_t pid, uint64_t time, uint64_t ip, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    ring::SampleRecord sample{};
    sample.kind = static_cast<uint8_t>(ring::RecordKind::kSample);
    sample.time_ns = time + i;
    sample.ip = ip;
    sample.pid = sample.tid = pid;
    sample.mode = 0;  // user
    session.Add(sample, {});
  }
}

// The session: a JIT's process (libz, its memfd code, a heap), the pid then reused by a process
// whose memfd code has another name, and many short processes that ran libz only.
std::string WriteSession(const std::string& directory) {
  store::SessionMetadata metadata;
  metadata.platform = "sim";
  metadata.cpu_type = "i386/arch_perfmon";
  metadata.events.push_back({0, "CPU_CLK_UNHALTED", 0x3C, 0, "", 100000, true, true, ""});
  metadata.domains.push_back({0, "Domain-0", "active", 1, {}, {}});
  auto opened = agent::SessionWriter::Open(directory, metadata);
  REQUIRE(opened.has_value());
  agent::SessionWriter& session = opened.value();
  auto born = [&session](uint32_t pid, uint64_t time) {
    context::ContextEvent e;
    e.kind = context::ContextKind::kProcess;
    e.pid = pid;
    e.time_ns = time;
    e.comm = "p" + std::to_string(pid);
    session.AddContext(e);
  };
  auto mapped = [&session](uint32_t pid, uint64_t time, uint64_t start, const std::string& path) {
    context::ContextEvent e;
    e.kind = context::ContextKind::kMapping;
    e.pid = pid;
    e.time_ns = time;
    e.start = start;
    e.end = start + 0x20000;
    e.bias = start;
    e.path = path;
    session.AddContext(e);
  };
  auto exited = [&session](uint32_t pid, uint64_t time) {
    context::ContextEvent e;
    e.kind = context::ContextKind::kExit;
    e.pid = pid;
    e.time_ns = time;
    session.AddContext(e);
  };
  born(10, 100);
  mapped(10, 100, kLib, kLibz);
  mapped(10, 101, kJit, "/memfd:jit (deleted)");
  Add(session, 10, 1000, kJit + 0x100, 30);
  Add(session, 10, 2000, kLib + 0x1000, 20);
  Add(session, 10, 3000, kHeap, 5);
  exited(10, 4000);
  for (uint32_t i = 0; i < kShortLived; ++i) {
    const uint32_t pid = 1000 + i;
    born(pid, 5000 + i * 10);
    mapped(pid, 5000 + i * 10, kLib, kLibz);
    Add(session, pid, 5001 + i * 10, kLib + 0x1000, 1);
    exited(pid, 5009 + i * 10);
  }
  born(10, 9000);  // the pid reused
  mapped(10, 9000, kJit, "/memfd:other-jit");
  Add(session, 10, 9100, kJit + 0x200, 7);
  REQUIRE(session.Dump().has_value());
  return directory;
}

// Samples per image name, and the warnings.
std::map<std::string, uint64_t> ByImage(const report::Profile& profile) {
  std::map<std::string, uint64_t> counts;
  for (const report::Entry& entry : profile.entries()) counts[profile.images()[entry.image].name] += entry.count;
  return counts;
}

}  // namespace

TEST_CASE("a report of hvprofd's aggregate reads no context.hvc, and says what a whole read says",
          "[report][aggregate][regions]") {
  testing::TempDir dir;
  const std::string session = WriteSession(dir.File("session"));
  const auto metadata = store::OpenSession(session);
  REQUIRE(metadata.has_value());
  REQUIRE(metadata.value().metadata.context.has_value());
  CHECK(metadata.value().metadata.context->processes == kShortLived + 2);
  CHECK(metadata.value().metadata.context->images == 1);
  CHECK(metadata.value().metadata.context->domains == std::vector<uint16_t>{0});

  report::LoadOptions options;
  options.debuginfod = false;
  auto aggregate = report::LoadProfile(session, options);
  REQUIRE(aggregate.has_value());
  CHECK(aggregate.value().timings().from_aggregate);
  const auto counted = ByImage(aggregate.value());
  // The memfd codes by their names (the pid's latest: the regions of both its processes are at
  // one address, as a lookup of the pid finds), the heap by its process, libz across processes.
  CHECK(counted.at("memfd:other-jit") == 37);
  CHECK(counted.at("anon (pid 10)") == 5);
  CHECK(counted.at("libz.so.1") == 20 + kShortLived);
  CHECK(aggregate.value().context_summary().processes == kShortLived + 2);
  CHECK(aggregate.value().Warnings().empty());

  // The same from the whole file: a session.json without the summary makes the report read it.
  const std::string whole = dir.File("whole");
  std::filesystem::copy(session, whole, std::filesystem::copy_options::recursive);
  store::SessionMetadata without = metadata.value().metadata;
  without.context.reset();
  REQUIRE(WriteFileAtomically(whole + "/" + store::kMetadataFile, store::SerializeMetadata(without)).has_value());
  auto read = report::LoadProfile(whole, options);
  REQUIRE(read.has_value());
  CHECK(ByImage(read.value()) == counted);
  CHECK(read.value().context_summary().processes == kShortLived + 2);
  CHECK(read.value().context().processes() == kShortLived + 2);

  // Damage to context.hvc does not touch a report of the aggregate; a view that asks for the
  // processes reads the file then, and says what is wrong with it.
  {
    const std::string path = session + "/" + store::kContextFile;
    const auto size = std::filesystem::file_size(path);
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 2));
    file.write("damage!!", 8);
  }
  auto damaged = report::LoadProfile(session, options);
  REQUIRE(damaged.has_value());
  CHECK(ByImage(damaged.value()) == counted);
  CHECK(damaged.value().Warnings().empty());
  (void)damaged.value().context().Processes(0);
  const auto warnings = damaged.value().Warnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find(store::kContextFile) != std::string::npos);

  // A view by process reads the whole file as it loads.
  options.processes = true;
  auto by_process = report::LoadProfile(whole, options);
  REQUIRE(by_process.has_value());
  CHECK(by_process.value().context().Comm(0, 1000, 5005) != nullptr);
}
