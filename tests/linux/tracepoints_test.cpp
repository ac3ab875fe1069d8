// The scheduler tracepoints' formats (tracefs) and their raw records. fixtures/tracefs holds the
// format files of a 6.18 kernel as tracefs printed them; older layouts are written out below.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "hvprof/linux/tracepoints.h"
#include "temp_dir.h"

using namespace hvprof::linux_host;
using hvprof::testing::TempDir;

namespace {

const std::string kFixtures = std::string(HVPROF_LINUX_TRACEFS_FIXTURES);

std::string ReadFixture(const std::string& event) {
  std::ifstream in(kFixtures + "/" + event + "/format");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TracepointFormat Parsed(const std::string& text, const std::string& origin = "test") {
  auto format = ParseTracepointFormat(text, origin);
  INFO((format ? std::string() : format.error().message()));
  REQUIRE(format.has_value());
  return format.value();
}

// sched_migrate_task before comm became a __data_loc string (kernels before 6.x).
const char* kOldMigrate =
    "name: sched_migrate_task\n"
    "ID: 290\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:1;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:int orig_cpu;\toffset:32;\tsize:4;\tsigned:1;\n"
    "\tfield:int dest_cpu;\toffset:36;\tsize:4;\tsigned:1;\n"
    "\n"
    "print fmt: \"comm=%s pid=%d prio=%d orig_cpu=%d dest_cpu=%d\", REC->comm, REC->pid\n";

// A raw record of `bytes` bytes with the common header of event `id` and the given fields.
class Raw {
 public:
  Raw(size_t bytes, uint16_t id) : data_(bytes, 0) { Put(0, id); }
  template <typename T>
  Raw& Put(size_t offset, T value) {
    REQUIRE(offset + sizeof(T) <= data_.size());
    std::memcpy(data_.data() + offset, &value, sizeof(T));
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return data_; }

 private:
  std::vector<uint8_t> data_;
};

void WriteTree(const std::filesystem::path& tracefs, std::initializer_list<const char*> events) {
  for (const char* event : events) {
    std::filesystem::create_directories(tracefs / "events/sched" / event);
    std::ofstream(tracefs / "events/sched" / event / "format") << ReadFixture(event);
  }
}

}  // namespace

TEST_CASE("tracefs format files parse into ids and field layouts", "[linux][sched]") {
  const TracepointFormat sw = Parsed(ReadFixture("sched_switch"));
  CHECK(sw.name == "sched_switch");
  CHECK(sw.id == 372);
  REQUIRE(sw.Find("prev_state") != nullptr);
  CHECK(sw.Find("prev_state")->offset == 32);
  CHECK(sw.Find("prev_state")->size == 8);
  CHECK(sw.Find("prev_state")->is_signed);
  CHECK(sw.Find("prev_comm")->size == 16);
  CHECK(sw.Find("next_pid")->offset == 56);
  CHECK(sw.Find("common_type")->offset == 0);
  CHECK_FALSE(sw.Find("common_type")->is_signed);
  CHECK(sw.Find("nonexistent") == nullptr);

  const TracepointFormat migrate = Parsed(ReadFixture("sched_migrate_task"));
  REQUIRE(migrate.Find("comm") != nullptr);
  CHECK(migrate.Find("comm")->data_loc);
  CHECK(migrate.Find("pid")->offset == 12);
  CHECK(migrate.Find("dest_cpu")->offset == 24);
  const TracepointFormat old = Parsed(kOldMigrate);
  CHECK_FALSE(old.Find("comm")->data_loc);
  CHECK(old.Find("dest_cpu")->offset == 36);
}

TEST_CASE("broken format files are refused with the file and line", "[linux][sched]") {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"name: x\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n", "no ID line"},
      {"name: x\nID: twelve\n", ":2: the ID is not a number"},
      {"name: x\nID: 5\n", "no field lines"},
      {"name: x\nID: 5\n\tfield:int a;\toffset:zero;\tsize:4;\tsigned:1;\n", ":3: a field's offset"},
      {"name: x\nID: 5\n\tfield:int a;\toffset:0;\tsize:4;\n", "without its offset, size and signed"},
      {"name: x\nID: 5\n\tfield:int a;\tplace:0;\tsize:4;\tsigned:1;\n", "not a field:"},
      {"name: x\nID: 5\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:7;\n", "is not a number"},
      {"name: x\nID: 5\n\tfield:[];\toffset:0;\tsize:4;\tsigned:1;\n", "a field without a name"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto format = ParseTracepointFormat(c.text, "events/x/format");
    REQUIRE_FALSE(format.has_value());
    CHECK(format.error().message().find("events/x/format") != std::string::npos);
    CHECK(format.error().message().find(c.says) != std::string::npos);
  }
}

TEST_CASE("prev_state says whether a task left the CPU runnable, blocked or exiting", "[linux][sched]") {
  CHECK(ClassifyPrevState(0) == SwitchedOut::kRunnable);
  CHECK(ClassifyPrevState(0x100) == SwitchedOut::kRunnable);  // preempted ("R+")
  CHECK(ClassifyPrevState(0x1) == SwitchedOut::kBlocked);     // S
  CHECK(ClassifyPrevState(0x2) == SwitchedOut::kBlocked);     // D
  CHECK(ClassifyPrevState(0x4) == SwitchedOut::kBlocked);     // T
  CHECK(ClassifyPrevState(0x80) == SwitchedOut::kBlocked);    // I
  CHECK(ClassifyPrevState(0x10) == SwitchedOut::kOffline);    // X
  CHECK(ClassifyPrevState(0x20) == SwitchedOut::kOffline);    // Z
  CHECK(ClassifyPrevState(-1) == SwitchedOut::kOffline);
}

TEST_CASE("raw scheduler records decode by the offsets their formats give", "[linux][sched]") {
  auto points = SchedTracepoints::FromFormats(Parsed(ReadFixture("sched_switch")), Parsed(ReadFixture("sched_waking")),
                                              Parsed(ReadFixture("sched_wakeup_new")),
                                              Parsed(ReadFixture("sched_migrate_task")));
  REQUIRE(points.has_value());
  const SchedTracepoints& p = points.value();
  CHECK(p.id(SchedTracepoint::kSwitch) == 372);
  CHECK(p.name(SchedTracepoint::kWaking) == "sched_waking");

  Raw sw(64, 372);
  sw.Put<int32_t>(24, 1234).Put<int64_t>(32, 0x1).Put<int32_t>(56, 99);
  auto decoded = p.Decode(SchedTracepoint::kSwitch, sw.bytes());
  REQUIRE(decoded.has_value());
  CHECK(decoded->tid == 1234);
  CHECK(decoded->prev_state == 1);
  CHECK(decoded->next_tid == 99);

  Raw wake(36, static_cast<uint16_t>(p.id(SchedTracepoint::kWaking)));
  wake.Put<int32_t>(24, 77).Put<int32_t>(32, 1);
  decoded = p.Decode(SchedTracepoint::kWaking, wake.bytes());
  REQUIRE(decoded.has_value());
  CHECK(decoded->tid == 77);
  CHECK(decoded->target_cpu == 1);

  Raw move(40, static_cast<uint16_t>(p.id(SchedTracepoint::kMigrate)));
  move.Put<int32_t>(12, 5).Put<int32_t>(20, 0).Put<int32_t>(24, 1);
  decoded = p.Decode(SchedTracepoint::kMigrate, move.bytes());
  REQUIRE(decoded.has_value());
  CHECK(decoded->tid == 5);
  CHECK(decoded->orig_cpu == 0);
  CHECK(decoded->dest_cpu == 1);

  // Another event's record, a record cut short, nothing at all.
  CHECK_FALSE(p.Decode(SchedTracepoint::kWaking, sw.bytes()).has_value());
  CHECK_FALSE(p.Decode(SchedTracepoint::kSwitch, std::span(sw.bytes()).first(40)).has_value());
  CHECK_FALSE(p.Decode(SchedTracepoint::kSwitch, {}).has_value());

  SECTION("an older kernel's layout decodes by its own offsets") {
    auto old = SchedTracepoints::FromFormats(Parsed(ReadFixture("sched_switch")), Parsed(ReadFixture("sched_wakeup")),
                                             std::nullopt, Parsed(kOldMigrate));
    REQUIRE(old.has_value());
    CHECK(old.value().id(SchedTracepoint::kWakeupNew) == 0);
    CHECK_FALSE(old.value().Decode(SchedTracepoint::kWakeupNew, wake.bytes()).has_value());
    Raw moved(40, 290);
    moved.Put<int32_t>(24, 6).Put<int32_t>(32, 1).Put<int32_t>(36, 0);
    decoded = old.value().Decode(SchedTracepoint::kMigrate, moved.bytes());
    REQUIRE(decoded.has_value());
    CHECK(decoded->tid == 6);
    CHECK(decoded->orig_cpu == 1);
    CHECK(decoded->dest_cpu == 0);
  }
  SECTION("a sched_switch without a field hvprof reads is refused, naming it") {
    TracepointFormat broken = Parsed(ReadFixture("sched_switch"));
    broken.fields.erase(broken.fields.begin() + 7);  // prev_state
    REQUIRE(broken.Find("prev_state") == nullptr);
    auto refused = SchedTracepoints::FromFormats(broken, Parsed(ReadFixture("sched_waking")), std::nullopt, std::nullopt);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().message().find("sched_switch tracepoint has no integer field 'prev_state'") !=
          std::string::npos);
  }
}

TEST_CASE("the tracepoints are found in tracefs, old mounts and kernels included", "[linux][sched]") {
  TempDir dir;
  const HostPaths paths{dir.File("proc"), dir.File("sys")};
  SECTION("no tracefs: say how to mount it") {
    auto points = SchedTracepoints::Read(paths);
    REQUIRE_FALSE(points.has_value());
    CHECK(points.error().message().find("tracefs is not mounted") != std::string::npos);
    CHECK(points.error().message().find("mount -t tracefs") != std::string::npos);
  }
  SECTION("tracefs at /sys/kernel/tracing, sched_waking preferred") {
    WriteTree(dir.File("sys/kernel/tracing"),
              {"sched_switch", "sched_waking", "sched_wakeup", "sched_wakeup_new", "sched_migrate_task"});
    auto points = SchedTracepoints::Read(paths);
    REQUIRE(points.has_value());
    CHECK(points.value().name(SchedTracepoint::kWaking) == "sched_waking");
    CHECK(points.value().id(SchedTracepoint::kMigrate) == 371);
    CHECK(points.value().id(SchedTracepoint::kWakeupNew) == 373);
  }
  SECTION("under debugfs, on a kernel without sched_waking or sched_migrate_task") {
    WriteTree(dir.File("sys/kernel/debug/tracing"), {"sched_switch", "sched_wakeup"});
    auto points = SchedTracepoints::Read(paths);
    REQUIRE(points.has_value());
    CHECK(points.value().name(SchedTracepoint::kWaking) == "sched_wakeup");
    CHECK(points.value().id(SchedTracepoint::kWaking) == 374);
    CHECK(points.value().id(SchedTracepoint::kMigrate) == 0);
  }
  SECTION("no sched_switch: the file that is missing") {
    WriteTree(dir.File("sys/kernel/tracing"), {"sched_waking"});
    auto points = SchedTracepoints::Read(paths);
    REQUIRE_FALSE(points.has_value());
    CHECK(points.error().message().find("sched_switch/format") != std::string::npos);
  }
}
