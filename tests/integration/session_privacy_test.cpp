// Sessions say which processes ran, what they mapped and their stacks: what hvprof and hvprofd
// make of them is their owner's alone, unless --session-group lets a group read it (issue 38:
// every local user could read them).
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/store/session.h"
#include "programs.h"
#include "sim_harness.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::testing::Binary;
using hvprof::testing::CommandResult;
using hvprof::testing::RunProgram;
using hvprof::testing::TempDir;

namespace {

// Every file and directory under `root` whose mode lets others than `allowed` (bits of 0077)
// read, write or search it, as "PATH MODE" lines; empty when none.
std::string OpenToOthers(const std::string& root, mode_t allowed_files, mode_t allowed_directories) {
  std::string found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    struct stat st {};
    REQUIRE(::lstat(entry.path().c_str(), &st) == 0);
    if (S_ISSOCK(st.st_mode)) continue;  // the control socket is 0600 by itself
    const mode_t allowed = S_ISDIR(st.st_mode) ? allowed_directories : allowed_files;
    if ((st.st_mode & 0077 & ~allowed) != 0) found += fmt::format("{} {:04o}\n", entry.path().string(), st.st_mode & 07777);
  }
  return found;
}

}  // namespace

TEST_CASE("sessions are their owner's alone, or a group's to read with --session-group", "[lifecycle][safety]") {
  TempDir dir;
  dir.Write("host.json", hvprof::testing::TestScenario("intel-arch-v4", 31).dump());
  const mode_t umask = ::umask(022);  // what a user usually has: files 0644 unless hvprof says otherwise
  const CommandResult run =
      RunProgram({Binary("hvprof"), "run", "--platform=sim", "--scenario=" + dir.File("host.json"),
                  "--session-dir=" + dir.File("private"), "--run-dir=" + dir.File("run"), "--duration=50ms"});
  ::umask(umask);
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  const auto saved = hvprof::store::NewestSavedSession({dir.File("private")});
  REQUIRE(saved.has_value());
  const std::string session = hvprof::store::SessionPaths{dir.File("private")}.Saved(*saved);
  CHECK(std::filesystem::exists(session + "/" + hvprof::store::kMetadataFile));
  CHECK(OpenToOthers(session, 0, 0) == "");
  CHECK(OpenToOthers(dir.File("private") + "/samples", 0, 0) == "");

  if (::geteuid() != 0) return;  // giving files to another group needs root (or membership)
  const std::vector<std::string> where = {"--session-dir=" + dir.File("shared"), "--run-dir=" + dir.File("run2")};
  auto hvprof = [&](std::vector<std::string> args) {
    args.insert(args.begin(), Binary("hvprof"));
    args.insert(args.end(), where.begin(), where.end());
    return RunProgram(args);
  };
  const CommandResult started = hvprof({"--start-daemon", "--platform=sim", "--scenario=" + dir.File("host.json"),
                                        "--session-group=65534"});
  INFO(started.out << started.err);
  REQUIRE(started.status == 0);
  CHECK(hvprof({"--start"}).status == 0);
  CHECK(hvprof({"--run-sim=50ms"}).status == 0);
  CHECK(hvprof({"--stop"}).status == 0);
  CHECK(hvprof({"--save=shared-run"}).status == 0);
  CHECK(hvprof({"--shutdown"}).status == 0);
  const std::string shared = hvprof::store::SessionPaths{dir.File("shared")}.Saved("shared-run");
  for (const std::string& directory : {dir.File("shared"), dir.File("shared") + "/samples", shared}) {
    struct stat st {};
    REQUIRE(::stat(directory.c_str(), &st) == 0);
    INFO(directory);
    CHECK(st.st_gid == 65534);
    CHECK((st.st_mode & 0777) == 0750);
  }
  // The group reads, never writes; others get nothing.
  CHECK(OpenToOthers(shared, 0040, 0050) == "");
  struct stat metadata {};
  REQUIRE(::stat((shared + "/" + hvprof::store::kMetadataFile).c_str(), &metadata) == 0);
  CHECK(metadata.st_gid == 65534);
  CHECK((metadata.st_mode & 0777) == 0640);
  // A group that is none is refused before anything starts.
  const CommandResult unknown = hvprof({"--start-daemon", "--platform=sim", "--scenario=" + dir.File("host.json"),
                                        "--session-group=no-such-group-hvprof"});
  if (unknown.status == 0) (void)hvprof({"--shutdown"});  // it started anyway: end it
  CHECK(unknown.status == 1);
  CHECK(unknown.err.find("--session-group=no-such-group-hvprof: no such group") != std::string::npos);
  // So is a number no group has.
  gid_t unused = 64000;
  while (::getgrgid(unused) != nullptr) ++unused;
  const std::string numbered = fmt::format("--session-group={}", unused);
  const CommandResult nobody = hvprof({"--start-daemon", "--platform=sim", "--scenario=" + dir.File("host.json"), numbered});
  if (nobody.status == 0) (void)hvprof({"--shutdown"});
  CHECK(nobody.status == 1);
  CHECK(nobody.err.find(numbered + ": no such group") != std::string::npos);
}
