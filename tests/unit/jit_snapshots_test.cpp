// hvprofd's copies of JIT runtimes' files (JitSnapshots), with a real child process playing the
// runtime: files that grow, files written as the process exits, and the files a hostile
// process could plant instead (links, FIFOs, files of another user, files that never end).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/agent/jit_snapshots.h"
#include "hvprof/base/files.h"
#include "other_user.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::agent::JitSnapshots;
using hvprof::testing::TempDir;

namespace {

// A child that waits until told to exit, with files at /tmp/perf-PID.map and in `dir`.
class Runtime {
 public:
  // `uid`: the user the child runs as (root only), else the test's.
  explicit Runtime(std::optional<uid_t> uid = std::nullopt) {
    REQUIRE(::pipe(pipe_) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(pipe_[1]);
      if (uid) hvprof::testing::BecomeUser(*uid);
      char byte;
      // 'm': map a jitdump in the working directory, as a runtime does when it starts; 'x': write
      // the "at exit" line first, as -XX:+DumpPerfMapAtExit does, and exit; 'q': exit.
      while (::read(pipe_[0], &byte, 1) == 1 && byte == 'm') {
        const std::string dump = fmt::format("jit-{}.dump", ::getpid());
        std::ofstream(dump) << "not a real dump, but mapped like one";
        const int fd = ::open(dump.c_str(), O_RDONLY);
        if (fd < 0 || ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) ::_exit(1);
      }
      if (byte == 'x') {
        std::ofstream(fmt::format("/tmp/perf-{}.map", ::getpid()), std::ios::app) << "3000 10 written_at_exit\n";
      }
      ::_exit(0);
    }
    ::close(pipe_[0]);
    pid_saved_ = pid_;
    // The child is someone else only once it has changed its user.
    for (int i = 0; uid && i < 1000; ++i) {
      auto status = hvprof::ReadFileToString(fmt::format("/proc/{}/status", pid_));
      if (status && status.value().find(fmt::format("\nUid:\t{}\t", *uid)) != std::string::npos) break;
      ::usleep(1000);
    }
    map_ = fmt::format("/tmp/perf-{}.map", pid_);
  }
  ~Runtime() {
    Exit(false);
    std::error_code ec;
    std::filesystem::remove(map_, ec);
  }
  void Exit(bool write_at_exit) {
    if (pid_ <= 0) return;
    const char byte = write_at_exit ? 'x' : 'q';
    (void)!::write(pipe_[1], &byte, 1);
    ::close(pipe_[1]);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  uint32_t pid() const { return static_cast<uint32_t>(pid_saved_); }
  // Asks the child to map a jitdump (in its working directory).
  void MapJitDump() const { (void)!::write(pipe_[1], "m", 1); }
  const std::string& map() const { return map_; }
  void Append(const std::string& text) const { std::ofstream(map_, std::ios::app) << text; }

 private:
  int pipe_[2] = {-1, -1};
  pid_t pid_ = -1;
  pid_t pid_saved_ = -1;
  std::string map_;
};

std::string Copy(const TempDir& session, const JitSnapshots& jit, size_t index = 0) {
  REQUIRE(jit.records().size() > index);
  auto text = hvprof::ReadFileToString(session.path() + "/" + jit.records()[index].file);
  return text ? text.value() : std::string("(unreadable)");
}

}  // namespace

TEST_CASE("jit snapshots: a perf map is copied as it grows, and its last lines when the process ends", "[jit][agent]") {
  TempDir session;
  Runtime runtime;
  const uint32_t pid = runtime.pid();
  runtime.Append("1000 10 first\n");
  JitSnapshots jit(session.path(), {});
  jit.Watch(0, pid);
  jit.Poll();
  REQUIRE(jit.records().size() == 1);
  const auto& record = jit.records()[0];
  CHECK(record.kind == "perf-map");
  CHECK(record.pid == pid);
  CHECK(record.start_ticks != 0);
  CHECK(record.file == fmt::format("jit/0-{}-{}.map", pid, record.start_ticks));
  CHECK(record.source == fmt::format("/tmp/perf-{}.map", pid));
  CHECK(Copy(session, jit) == "1000 10 first\n");

  runtime.Append("2000 10 second\n");
  jit.Poll(true);
  CHECK(Copy(session, jit) == "1000 10 first\n2000 10 second\n");
  CHECK(jit.records()[0].bytes == std::string("1000 10 first\n2000 10 second\n").size());

  // The process writes as it exits, and its map is removed right after: the copy has it all.
  runtime.Exit(true);
  jit.Poll(true);
  std::filesystem::remove(runtime.map());
  CHECK(Copy(session, jit) == "1000 10 first\n2000 10 second\n3000 10 written_at_exit\n");
  // Once ended, nothing more is read (the pid may be another process's now).
  jit.CopyAll();
  CHECK(jit.records()[0].problem.empty());
}

TEST_CASE("jit snapshots: a map rewritten in place is copied anew, and one past the bound is cut", "[jit][agent]") {
  TempDir session;
  Runtime runtime;
  runtime.Append("1000 10 first\n2000 10 second\n");
  JitSnapshots::Options options;
  options.max_perf_map_bytes = 20;
  JitSnapshots jit(session.path(), options);
  jit.Watch(0, runtime.pid());
  jit.Poll();
  CHECK(Copy(session, jit) == "1000 10 first\n2000 1");
  CHECK(jit.records()[0].cut);
  // Rewritten (a new file at the same name): copied from its start.
  std::filesystem::remove(runtime.map());
  std::ofstream(runtime.map()) << "5000 10 new\n";
  jit.Poll(true);
  CHECK(Copy(session, jit) == "5000 10 new\n");
  CHECK_FALSE(jit.records()[0].cut);
}

TEST_CASE("jit snapshots: links, FIFOs and other users' files are not read", "[jit][agent]") {
  TempDir session;
  TempDir elsewhere;
  Runtime runtime;
  SECTION("a symbolic link to a file the process could not read itself") {
    const std::string secret = elsewhere.File("secret");
    std::ofstream(secret) << "1000 10 secret\n";
    std::filesystem::create_symlink(secret, runtime.map());
    JitSnapshots jit(session.path(), {});
    jit.Watch(0, runtime.pid());
    jit.Poll();
    CHECK(jit.records().empty());
  }
  SECTION("a FIFO that would block a reader forever") {
    REQUIRE(::mkfifo(runtime.map().c_str(), 0644) == 0);
    JitSnapshots jit(session.path(), {});
    jit.Watch(0, runtime.pid());
    jit.Poll();  // returns: the FIFO is never opened for reading
    CHECK(jit.records().empty());
  }
  SECTION("a hard link to a file the process could not show") {
    const std::string secret = elsewhere.File("secret");
    std::ofstream(secret) << "1000 10 secret\n";
    std::filesystem::create_hard_link(secret, runtime.map());
    JitSnapshots jit(session.path(), {});
    jit.Watch(0, runtime.pid());
    jit.Poll();
    REQUIRE(jit.records().size() == 1);
    CHECK(jit.records()[0].bytes == 0);
    CHECK_THAT(jit.records()[0].problem, Catch::Contains("2 names"));
  }
}

TEST_CASE("jit snapshots: a file of another user is not read", "[jit][agent]") {
  if (::geteuid() != 0 && hvprof::testing::SkipTest("needs root to give a file to another user")) return;
  TempDir session;
  Runtime runtime;
  runtime.Append("1000 10 planted\n");
  REQUIRE(::chown(runtime.map().c_str(), 4321, 4321) == 0);
  JitSnapshots jit(session.path(), {});
  jit.Watch(0, runtime.pid());
  jit.Poll();
  REQUIRE(jit.records().size() == 1);
  CHECK(jit.records()[0].bytes == 0);
  CHECK_THAT(jit.records()[0].problem, Catch::Contains("owned by uid 4321"));
  CHECK_FALSE(std::filesystem::exists(session.path() + "/" + jit.records()[0].file));
}

TEST_CASE("jit snapshots: a file of root is not read for a process of another user", "[jit][agent]") {
  if (::geteuid() != 0 && hvprof::testing::SkipTest("needs root to run a process as another user")) return;
  TempDir session;
  Runtime other(4321);
  std::ofstream(other.map()) << "1000 10 root's\n";
  JitSnapshots jit(session.path(), {});
  jit.Watch(0, other.pid());
  jit.Poll();
  REQUIRE(jit.records().size() == 1);
  CHECK_THAT(jit.records()[0].problem, Catch::Contains("owned by uid 0, not by the process's user (4321)"));
}

TEST_CASE("jit snapshots: sparse files are not copied, and a poll copies a bounded amount", "[jit][agent]") {
  TempDir session;
  Runtime runtime;
  SECTION("sparse") {
    runtime.Append("1000 10 first\n");
    std::filesystem::resize_file(runtime.map(), 64 << 20);
    JitSnapshots jit(session.path(), {});
    jit.Watch(0, runtime.pid());
    jit.Poll();
    REQUIRE(jit.records().size() == 1);
    CHECK(jit.records()[0].bytes == 0);
    CHECK_THAT(jit.records()[0].problem, Catch::Contains("sparse"));
  }
  SECTION("a bounded amount per poll, the rest later") {
    runtime.Append("1000 10 first\n2000 10 second\n");
    JitSnapshots::Options options;
    options.max_bytes_per_poll = 10;
    JitSnapshots jit(session.path(), options);
    jit.Watch(0, runtime.pid());
    jit.Poll();
    CHECK(Copy(session, jit) == "1000 10 fi");
    jit.CopyAll();
    CHECK(Copy(session, jit) == "1000 10 first\n2000 10 second\n");
  }
  SECTION("a bound for the session's copies") {
    runtime.Append("1000 10 first\n2000 10 second\n");
    JitSnapshots::Options options;
    options.max_session_bytes = 16;
    JitSnapshots jit(session.path(), options);
    jit.Watch(0, runtime.pid());
    jit.Poll();
    jit.CopyAll();
    CHECK(Copy(session, jit) == "1000 10 first\n20");
    CHECK_THAT(jit.records()[0].problem, Catch::Contains("bound of 16 bytes"));
  }
}

TEST_CASE("jit snapshots: a jitdump mapped after the first sample is found while the process is young",
          "[jit][agent]") {
  TempDir session;
  TempDir work;
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(work.path());  // the child maps its dump here
  Runtime runtime;
  std::filesystem::current_path(cwd);
  JitSnapshots jit(session.path(), {});
  jit.Watch(0, runtime.pid());
  jit.Poll();
  CHECK(jit.records().empty());  // no perf map, no jitdump yet (a shell before it exec'd node)
  runtime.MapJitDump();
  bool found = false;
  for (int i = 0; i < 50 && !found; ++i) {
    ::usleep(50'000);
    jit.Poll();
    found = !jit.records().empty();
  }
  REQUIRE(found);
  CHECK(jit.records()[0].kind == "jitdump");
  CHECK(jit.records()[0].source == fmt::format("{}/jit-{}.dump", work.path(), runtime.pid()));
  CHECK(Copy(session, jit) == "not a real dump, but mapped like one");
}

TEST_CASE("jit snapshots: a continued session keeps its earlier copies", "[jit][agent]") {
  TempDir session;
  Runtime runtime;
  runtime.Append("1000 10 first\n");
  hvprof::store::JitRecord earlier;
  earlier.pid = runtime.pid();
  earlier.kind = "perf-map";
  earlier.file = "jit/0-1-2.map";
  earlier.bytes = 5;
  JitSnapshots jit(session.path(), {}, {earlier});
  jit.Watch(0, runtime.pid());
  jit.Poll();
  REQUIRE(jit.records().size() == 2);
  CHECK(jit.records()[0].file == "jit/0-1-2.map");
  CHECK(jit.records()[1].bytes == 14);
}

TEST_CASE("jit snapshots: processes that are gone, pids that are none, and a bound on processes", "[jit][agent]") {
  TempDir session;
  JitSnapshots::Options options;
  options.max_processes = 2;
  JitSnapshots jit(session.path(), options);
  jit.Watch(0, 0);           // the idle task
  jit.Watch(0, 0xFFFFFFFF);  // no pid
  jit.Poll();
  Runtime a, b, c;
  jit.Watch(0, a.pid());
  jit.Poll();
  jit.Watch(1, b.pid());
  jit.Poll();
  jit.Watch(2, c.pid());
  jit.Poll();
  CHECK(jit.unwatched() == 1);
  Runtime gone;
  const uint32_t gone_pid = gone.pid();
  gone.Exit(false);
  JitSnapshots later(session.path(), {});
  later.Watch(0, gone_pid);
  later.Poll();
  CHECK(later.records().empty());
}

TEST_CASE("jit snapshots: processes of hvprof's own programs are not followed", "[jit][agent]") {
  TempDir session;
  Runtime runtime;  // a fork of this test: its program is this test's
  runtime.Append("1000 10 own\n");
  JitSnapshots::Options options;
  options.skip_programs = {"/nonexistent/hvprofd", std::filesystem::read_symlink("/proc/self/exe").string()};
  JitSnapshots skipping(session.path(), options);
  skipping.Watch(0, runtime.pid());
  skipping.Poll();
  CHECK(skipping.records().empty());
  // The same process, when its program is not one to skip, is followed.
  options.skip_programs = {"/nonexistent/hvprofd"};
  JitSnapshots following(session.path(), options);
  following.Watch(0, runtime.pid());
  following.Poll();
  REQUIRE(following.records().size() == 1);
  CHECK(Copy(session, following) == "1000 10 own\n");
}
