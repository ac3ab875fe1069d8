// hvprof archive and hvprof-report archive:FILE: an archived session reports as it did, after
// the session and the images are gone; an image that is not the one profiled is refused; a
// hostile tar is refused without writing anything outside the directory it is unpacked in.
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "archive_support.h"
#include "host_harness.h"
#include "hvprof/base/files.h"
#include "programs.h"
#include "sim_harness.h"
#include "skip.h"
#include "temp_dir.h"

using namespace hvprof;
using hvprof::testing::Binary;
using hvprof::testing::CommandResult;
using hvprof::testing::RunProgram;
using hvprof::testing::TempDir;

namespace {

constexpr const char* kLibcDebugRoot = "/usr/lib/debug/.build-id";

bool IsEmptyDirectory(const std::string& path) {
  return std::filesystem::is_directory(path) && std::filesystem::is_empty(path);
}

// A session of copies of the inlined fixture (build-id, DWARF, no PIE), libc (build-id; its debug
// file from libc6-dbg) and a kallsyms text (no build-id), saved as ROOT/samples/run1.
struct ImageSession {
  TempDir dir;
  std::string images = dir.File("images");
  std::string root = dir.File("root");
  std::string fixture = images + "/bin/inlined";
  std::string libc = images + "/lib/libc.so.6";
  std::string kallsyms = images + "/kallsyms";
  std::string tmp = dir.File("tmp");  // TMPDIR of the reports: archives are unpacked there

  ImageSession() {
    testing::CopyFile(HVPROF_INLINED_FIXTURE, fixture);
    testing::CopyFile("/usr/lib/x86_64-linux-gnu/libc.so.6", libc);
    std::ofstream(kallsyms) << "ffffffff81000000 T _stext\nffffffff81000200 T archived_kernel_function\n"
                               "ffffffff81000400 T next_kernel_function\n";
    std::filesystem::create_directories(tmp);
    testing::SampledImage app{fixture, testing::BuildIdOf(fixture), 0x400000, 0,
                              {testing::FunctionAddress(fixture, "work"), testing::FunctionAddress(fixture, "main")}};
    const uint64_t base = 0x7f0000000000;
    testing::SampledImage lib{libc, testing::BuildIdOf(libc), base, base,
                              {base + testing::FunctionAddress(libc, "memcpy", true),
                               base + testing::FunctionAddress(libc, "qsort", true)}};
    REQUIRE(!app.build_id.empty());
    REQUIRE(!lib.build_id.empty());
    testing::WriteImageSession(root, "run1", {app, lib}, kallsyms, {0xffffffff81000210});
  }
  CommandResult Report(std::vector<std::string> args) const {
    std::vector<std::string> argv = {Binary("hvprof-report"), "--session-dir=" + root};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv, {"TMPDIR=" + tmp});
  }
  CommandResult Archive(std::vector<std::string> args) const {
    std::vector<std::string> argv = {Binary("hvprof"), "archive", "--session-dir=" + root};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv);
  }
};

const std::vector<std::vector<std::string>> kViews = {{"-l"}, {"-l", "-f"}, {"-g"}, {"--format=json", "-l"}};

}  // namespace

TEST_CASE("an archived session reports identically after the session and its images are gone", "[archive]") {
  ImageSession s;
  std::vector<CommandResult> before;
  for (const auto& view : kViews) {
    std::vector<std::string> args = {"run1"};
    args.insert(args.end(), view.begin(), view.end());
    before.push_back(s.Report(args));
    INFO(before.back().err);
    REQUIRE(before.back().status == 0);
  }
  // The report resolves every image: each kind of file is needed.
  CHECK(before[0].out.find("work") != std::string::npos);
  CHECK(before[0].out.find("qsort") != std::string::npos);
  CHECK(before[0].out.find("archived_kernel_function") != std::string::npos);
  CHECK(before[1].out.find(s.libc) != std::string::npos);

  const std::string tar = s.dir.File("run1.tar");
  const CommandResult archived = s.Archive({"run1", "-o", tar});
  INFO(archived.err);
  REQUIRE(archived.status == 0);
  // kallsyms has no build-id: stored by path, and said so.
  CHECK(archived.err.find("has no build-id") != std::string::npos);
  CHECK(archived.err.find("by-path" + s.kallsyms) != std::string::npos);

  // The tar holds the layout gdb and debuginfod use.
  const CommandResult listing = RunProgram({"/usr/bin/tar", "-tf", tar});
  REQUIRE(listing.status == 0);
  const std::string fixture_id = testing::BuildIdOf(s.fixture), libc_id = testing::BuildIdOf(s.libc);
  CHECK(listing.out.find("hvprof-archive.json\n") != std::string::npos);
  CHECK(listing.out.find("session/session.json\n") != std::string::npos);
  CHECK(listing.out.find("session/samples.hvs\n") != std::string::npos);
  CHECK(listing.out.find(".build-id/" + fixture_id.substr(0, 2) + "/" + fixture_id.substr(2) + "\n") != std::string::npos);
  CHECK(listing.out.find(".build-id/" + libc_id.substr(0, 2) + "/" + libc_id.substr(2) + "\n") != std::string::npos);
  const std::string libc_debug = std::string(kLibcDebugRoot) + "/" + libc_id.substr(0, 2) + "/" + libc_id.substr(2) + ".debug";
  if (std::filesystem::exists(libc_debug)) {
    CHECK(listing.out.find(".build-id/" + libc_id.substr(0, 2) + "/" + libc_id.substr(2) + ".debug\n") !=
          std::string::npos);
  }

  std::filesystem::remove_all(s.root);
  std::filesystem::remove_all(s.images);
  for (size_t v = 0; v < kViews.size(); ++v) {
    std::vector<std::string> args = {"archive:" + tar};
    args.insert(args.end(), kViews[v].begin(), kViews[v].end());
    const CommandResult after = s.Report(args);
    INFO(after.err);
    CHECK(after.status == before[v].status);
    CHECK(after.out == before[v].out);
  }
  // The unpacked copy is gone with the report.
  CHECK(IsEmptyDirectory(s.tmp));
  // Unpacked and packed again by tar (./NAME entries), it still reports the same.
  const std::string unpacked = s.dir.File("unpacked"), repacked = s.dir.File("repacked.tar");
  std::filesystem::create_directories(unpacked);
  REQUIRE(RunProgram({"/usr/bin/tar", "-xf", tar, "-C", unpacked}).status == 0);
  REQUIRE(RunProgram({"/usr/bin/tar", "-cf", repacked, "-C", unpacked, "."}).status == 0);
  CHECK(s.Report({"archive:" + repacked, "-l"}).out == before[0].out);
  // Without the archive the images are gone for good: the archive is what made the difference.
  CHECK(s.Report({"archive:" + s.dir.File("missing.tar"), "-l"}).status == 1);
}

TEST_CASE("hvprof archive refuses an image whose build-id is not the one recorded", "[archive]") {
  ImageSession s;
  // The fixture is rebuilt since: another file where the profiled one was.
  const std::string recorded = testing::BuildIdOf(s.fixture);
  testing::CopyFile("/usr/bin/true", s.fixture);
  const std::string found = testing::BuildIdOf(s.fixture);
  REQUIRE(found != recorded);
  const std::string tar = s.dir.File("run1.tar");
  const CommandResult refused = s.Archive({"run1", "-o", tar});
  INFO(refused.err);
  CHECK(refused.status == 1);
  CHECK(refused.err.find(s.fixture + " is not the file that was profiled") != std::string::npos);
  CHECK(refused.err.find("its build-id is " + found + " where the session recorded " + recorded) != std::string::npos);
  CHECK(refused.err.find("--partial") != std::string::npos);
  CHECK(!std::filesystem::exists(tar));

  // --partial writes it without that image, and says so; its samples have no symbols then.
  const CommandResult partial = s.Archive({"run1", "-o", tar, "--partial"});
  INFO(partial.err);
  REQUIRE(partial.status == 0);
  CHECK(partial.err.find("left out: " + s.fixture) != std::string::npos);
  const CommandResult report = s.Report({"archive:" + tar, "-l"});
  CHECK(report.out.find("qsort") != std::string::npos);
  CHECK(report.out.find("work") == std::string::npos);
}

TEST_CASE("hvprof-report refuses hostile archives and writes nothing outside its directory", "[archive][safety]") {
  TempDir dir;
  const std::string tmp = dir.File("tmp");
  std::filesystem::create_directories(tmp);
  const std::string outside = dir.File("outside");  // where a hostile entry aims
  // Made with Python's tarfile: each is a valid archive plus one hostile entry.
  const std::string script = R"PY(
import io, json, sys, tarfile
path, case, outside = sys.argv[1], sys.argv[2], sys.argv[3]
def member(name, data=b"", kind=tarfile.REGTYPE, link="", size=None):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if size is None else size
    return info, (io.BytesIO(data) if size is None else None)
manifest = json.dumps({"hvprof_archive": 1, "session_directory": "/x", "files": []}).encode()
members = [member("hvprof-archive.json", manifest), member("session/session.json", b"{}")]
depth = "../" * 8
hostile = {
  "dotdot": [member("session/" + depth + outside.lstrip("/"), b"x")],
  "absolute": [member(outside, b"x")],
  "symlink": [member("link", kind=tarfile.SYMTYPE, link=outside), member("link/x", b"x")],
  "hardlink": [member("hard", kind=tarfile.LNKTYPE, link=outside)],
  "device": [member("dev", kind=tarfile.CHRTYPE)],
  "huge": [member("session/samples.hvs", size=1 << 40)],
}[case]
with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
    for info, data in members[:1] + hostile + members[1:]:
        t.addfile(info, data)
)PY";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dotdot", "'..' component"}, {"absolute", "is an absolute path"}, {"symlink", "is a symbolic link"},
      {"hardlink", "is a hard link"}, {"device", "is a device"}, {"huge", "bytes, more than the"}};
  for (const auto& [name, message] : cases) {
    SECTION(name) {
      const std::string tar = dir.File(name + ".tar");
      const CommandResult made = RunProgram({"/usr/bin/python3", "-c", script, tar, name, outside});
      INFO(made.err);
      REQUIRE(made.status == 0);
      const CommandResult report =
          RunProgram({Binary("hvprof-report"), "archive:" + tar, "-l"}, {"TMPDIR=" + tmp});
      INFO(report.err);
      CHECK(report.status == 1);
      CHECK(report.err.find(message) != std::string::npos);
      CHECK(report.out.empty());
      CHECK(!std::filesystem::exists(outside));
      CHECK(IsEmptyDirectory(tmp));
    }
  }
}

TEST_CASE("hvprof archive documents itself and refuses bad usage", "[archive][cli]") {
  const CommandResult help = RunProgram({Binary("hvprof"), "archive", "--help"});
  CHECK(help.status == 0);
  CHECK(help.out.find("Usage: hvprof archive [--session-dir=DIR] [SESSION] -o FILE.tar") != std::string::npos);
  for (const char* option : {"--partial", "--no-debuginfod", "--output", ".build-id/xx/rest.debug", "by-path/"}) {
    CHECK(help.out.find(option) != std::string::npos);
  }
  CHECK(RunProgram({Binary("hvprof"), "--help"}).out.find("hvprof archive") != std::string::npos);
  const CommandResult report_help = RunProgram({Binary("hvprof-report"), "--help"});
  CHECK(report_help.out.find("archive:FILE") != std::string::npos);
  CHECK(report_help.out.find("--no-debuginfod") != std::string::npos);
  const CommandResult no_output = RunProgram({Binary("hvprof"), "archive", "run1"});
  CHECK(no_output.status == 2);
  CHECK(no_output.err.find("-o FILE.tar") != std::string::npos);
  TempDir dir;
  const CommandResult no_session =
      RunProgram({Binary("hvprof"), "archive", "--session-dir=" + dir.path(), "nothing", "-o", dir.File("x.tar")});
  CHECK(no_session.status == 1);
  CHECK(!std::filesystem::exists(dir.File("x.tar")));
}

TEST_CASE("an archived sim session reports identically without its session and images", "[archive][sim]") {
  // The scenario's images, copied: the archive must stand in for them once they are deleted.
  TempDir images;
  std::map<std::string, std::string> copies;
  for (const char* image : {testing::kXenSyms, testing::kXenMap, testing::kLibc, testing::kLibz}) {
    if (!std::filesystem::exists(image)) {
      (void)testing::SkipTest(std::string("needs ") + image + " (scripts/install-deps.sh installs it)");
      return;
    }
    copies[image] = images.File(std::filesystem::path(image).filename().string());
    testing::CopyFile(image, copies[image]);
  }
  nlohmann::json scenario = testing::TestScenario("intel-arch-v4", 11);
  scenario["hypervisor"]["image"] = copies[testing::kXenSyms];
  for (auto& domain : scenario["domains"]) {
    domain["kernel"]["system_map"] = copies[testing::kXenMap];
    for (auto& process : domain["processes"]) {
      for (auto& mapping : process["mappings"]) mapping["path"] = copies[mapping["path"].get<std::string>()];
    }
    auto& user = domain["workload"]["user"]["auto"];
    user["image"] = copies[user["image"].get<std::string>()];
  }
  const std::string tar = images.File("sim.tar");
  std::string before;
  {
    testing::Host host(scenario);
    REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest1,guest2,guest3",
                         "--event=CPU_CLK_UNHALTED:20000"}).status == 0);
    REQUIRE(host.Hvprof({"--start"}).status == 0);
    REQUIRE(host.Hvprof({"--run-sim=50ms"}).status == 0);
    REQUIRE(host.Hvprof({"--stop"}).status == 0);
    REQUIRE(host.Hvprof({"--save=run1"}).status == 0);
    const CommandResult report = host.Report({"run1", "-l", "--by-domain"});
    INFO(report.err);
    REQUIRE(report.status == 0);
    before = report.out;
    CHECK(before.find("do_mmu_update") != std::string::npos);
    const CommandResult archived =
        RunProgram({Binary("hvprof"), "archive", "--session-dir=" + host.session_root(), "run1", "-o", tar});
    INFO(archived.err);
    REQUIRE(archived.status == 0);
    REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
    std::filesystem::remove_all(host.session_root() + "/samples/run1");
  }
  for (const auto& [original, copy] : copies) std::filesystem::remove(copy);
  const CommandResult after = RunProgram({Binary("hvprof-report"), "archive:" + tar, "-l", "--by-domain"});
  INFO(after.err);
  CHECK(after.status == 0);
  CHECK(after.out == before);
}
