// The build-id cache (buildid-cache/): what it keeps, what it refuses, what it evicts, and end to
// end on the sim: a session whose image was rebuilt still reports its symbols, and archives.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "archive_support.h"
#include "host_harness.h"
#include "hvprof/buildid_cache/cache.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "programs.h"
#include "sim_harness.h"
#include "skip.h"
#include "temp_dir.h"

using namespace hvprof;
using hvprof::testing::Binary;
using hvprof::testing::CommandResult;
using hvprof::testing::RunProgram;
using hvprof::testing::TempDir;
namespace bc = hvprof::buildid_cache;

namespace {

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteContents(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  REQUIRE(out.good());
}

// A copy of `image` whose build-id's last byte is `variant`: a valid ELF file, as a rebuild of it
// would be, that the cache must tell apart. Returns its build-id.
std::string Variant(const std::string& image, const std::string& to, uint8_t variant) {
  const std::string id = testing::BuildIdOf(image);
  REQUIRE(id.size() >= 4);
  std::string bytes;
  for (size_t i = 0; i < id.size(); i += 2) bytes += static_cast<char>(std::stoi(id.substr(i, 2), nullptr, 16));
  std::string contents = Contents(image);
  const size_t at = contents.find(bytes);
  REQUIRE(at != std::string::npos);
  contents[at + bytes.size() - 1] = static_cast<char>(variant);
  WriteContents(to, contents);
  const std::string changed = testing::BuildIdOf(to);
  REQUIRE(changed != id);
  return changed;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// Sets the time a cached entry was last used, as its image file's modification time.
void SetUsed(const std::string& file, time_t seconds) {
  const struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  REQUIRE(::utimensat(AT_FDCWD, file.c_str(), times, 0) == 0);
}

bool NeedsLibz() {
  if (std::filesystem::exists(testing::kLibz)) return true;
  (void)testing::SkipTest(std::string("needs ") + testing::kLibz + " (scripts/install-deps.sh installs it)");
  return false;
}

// The report's lines without its notes: a note may say where symbols came from.
std::string WithoutNotes(const std::string& report) {
  std::istringstream in(report);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("Note: ")) out += line + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("the build-id cache keeps a checked copy of a sampled image, once", "[build-id-cache]") {
  if (!NeedsLibz()) return;
  TempDir dir;
  const std::string image = dir.File("lib/libz.so.1");
  testing::CopyFile(testing::kLibz, image);
  const std::string id = testing::BuildIdOf(image);
  auto cache = bc::Cache::Open(dir.File("cache"), 64 << 20);
  REQUIRE(cache.has_value());
  const std::vector<bc::Wanted> wanted{{image, id}};
  auto first = cache.value().Add(wanted);
  REQUIRE(first.has_value());
  CHECK(first.value().added == 1);
  CHECK(first.value().present == 0);
  CHECK(first.value().skipped.empty());
  const std::string cached = bc::ImageFile(dir.File("cache"), id);
  CHECK(cached == dir.File("cache") + "/.build-id/" + id.substr(0, 2) + "/" + id.substr(2));
  CHECK(Contents(cached) == Contents(image));
  CHECK(first.value().bytes_added == std::filesystem::file_size(image));
  CHECK(first.value().bytes == std::filesystem::file_size(image));
  CHECK(bc::FindImage({dir.File("elsewhere"), dir.File("cache")}, id) == cached);
  CHECK(bc::FindImage({dir.File("cache")}, id.substr(0, id.size() - 2) + "00") == "");

  // Sampled again: marked used, not copied again.
  SetUsed(cached, 1000000);
  auto second = cache.value().Add(wanted);
  REQUIRE(second.has_value());
  CHECK(second.value().added == 0);
  CHECK(second.value().present == 1);
  struct stat st {};
  REQUIRE(::stat(cached.c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_sec > 1000000);

  // The image rebuilt: the old session's copy is still there, and the new file is another entry.
  const std::string rebuilt = Variant(testing::kLibz, image, 0x5a);
  auto third = cache.value().Add(std::vector<bc::Wanted>{{image, rebuilt}});
  REQUIRE(third.has_value());
  CHECK(third.value().added == 1);
  CHECK(Contents(cached) == Contents(testing::kLibz));
  CHECK(testing::BuildIdOf(bc::ImageFile(dir.File("cache"), rebuilt)) == rebuilt);
}

TEST_CASE("the build-id cache keeps nothing but the file that was sampled", "[build-id-cache][safety]") {
  if (!NeedsLibz()) return;
  TempDir dir;
  const std::string image = dir.File("libz.so.1");
  const std::string id = Variant(testing::kLibz, image, 0x11);
  auto cache = bc::Cache::Open(dir.File("cache"), 64 << 20);
  REQUIRE(cache.has_value());

  SECTION("rebuilt since it was sampled") {
    testing::CopyFile(testing::kLibz, image);
    auto added = cache.value().Add(std::vector<bc::Wanted>{{image, id}});
    REQUIRE(added.has_value());
    CHECK(added.value().added == 0);
    REQUIRE(added.value().skipped.size() == 1);
    CHECK_THAT(added.value().skipped[0], Catch::Contains("is no longer the file that was sampled"));
    CHECK_THAT(added.value().skipped[0], Catch::Contains(id));
  }
  SECTION("gone") {
    std::filesystem::remove(image);
    auto added = cache.value().Add(std::vector<bc::Wanted>{{image, id}});
    REQUIRE(added.has_value());
    REQUIRE(added.value().skipped.size() == 1);
    CHECK_THAT(added.value().skipped[0], Catch::Contains(image));
  }
  SECTION("recorded without a build-id") {
    auto added = cache.value().Add(std::vector<bc::Wanted>{{image, ""}});
    REQUIRE(added.has_value());
    REQUIRE(added.value().skipped.size() == 1);
    CHECK_THAT(added.value().skipped[0], Catch::Contains("has no build-id"));
  }
  SECTION("a FIFO where the image was") {
    std::filesystem::remove(image);
    REQUIRE(::mkfifo(image.c_str(), 0644) == 0);
    auto added = cache.value().Add(std::vector<bc::Wanted>{{image, id}});
    REQUIRE(added.has_value());
    CHECK(added.value().skipped.size() == 1);
  }
  CHECK(!std::filesystem::exists(bc::ImageFile(dir.File("cache"), id)));
  CHECK(bc::FindImage({dir.File("cache")}, id).empty());
  // No temporary copy is left behind.
  size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.File("cache") + "/.build-id")) {
    files += entry.is_regular_file() ? 1 : 0;
  }
  CHECK(files == 0);
}

TEST_CASE("the build-id cache stays within its size, the least recently used going first", "[build-id-cache]") {
  if (!NeedsLibz()) return;
  TempDir dir;
  const uint64_t size = std::filesystem::file_size(testing::kLibz);
  // Room for five copies.
  auto cache = bc::Cache::Open(dir.File("cache"), 5 * size);
  REQUIRE(cache.has_value());
  std::vector<bc::Wanted> images;
  for (uint8_t v = 1; v <= 6; ++v) {
    const std::string path = dir.File("libz-" + std::to_string(v) + ".so");
    images.push_back({path, Variant(testing::kLibz, path, v)});
  }
  auto cached = [&](size_t i) { return bc::ImageFile(dir.File("cache"), images[i].build_id); };
  // Four sessions, one image each, an hour apart: the first is the oldest.
  for (size_t i = 0; i < 4; ++i) {
    auto added = cache.value().Add(std::span(&images[i], 1));
    REQUIRE(added.has_value());
    CHECK(added.value().evicted == 0);
    SetUsed(cached(i), 1000000 + static_cast<time_t>(i) * 3600);
  }
  SECTION("what the session being written uses is never evicted, however old the others look") {
    // The others were used "later" than now (a clock set back): only the session's own are
    // newer in fact, and they stay.
    const time_t later = ::time(nullptr) + 86400;
    for (size_t i = 1; i < 4; ++i) SetUsed(cached(i), later + static_cast<time_t>(i) * 60);
    std::vector<bc::Wanted> session{images[0], images[4], images[5]};
    auto kept = cache.value().Add(session);
    REQUIRE(kept.has_value());
    CHECK(kept.value().evicted == 1);
    for (size_t i : {0, 4, 5}) CHECK(std::filesystem::exists(cached(i)));
    CHECK(!std::filesystem::exists(cached(1)));  // the oldest of the others
    return;
  }
  // A fifth session samples the first image again and two new ones: six do not fit in five.
  std::vector<bc::Wanted> fifth{images[0], images[4], images[5]};
  auto added = cache.value().Add(fifth);
  REQUIRE(added.has_value());
  CHECK(added.value().added == 2);
  CHECK(added.value().present == 1);
  CHECK(added.value().evicted == 1);
  CHECK(added.value().bytes_evicted == size);
  CHECK(added.value().bytes == 5 * size);
  CHECK(std::filesystem::exists(cached(0)));   // used again just now
  CHECK(!std::filesystem::exists(cached(1)));  // the least recently used
  for (size_t i : {2, 3, 4, 5}) CHECK(std::filesystem::exists(cached(i)));

  SECTION("an image larger than a quarter of the cache is not kept") {
    auto small = bc::Cache::Open(dir.File("small"), 2 * size);
    REQUIRE(small.has_value());
    auto refused = small.value().Add(std::span(&images[0], 1));
    REQUIRE(refused.has_value());
    CHECK(refused.value().added == 0);
    REQUIRE(refused.value().skipped.size() == 1);
    CHECK_THAT(refused.value().skipped[0], Catch::Contains("more than a quarter of the cache"));
  }
}

TEST_CASE("the build-id cache shows others only what they could read, and lives only where nobody else can write",
          "[build-id-cache][safety]") {
  if (!NeedsLibz()) return;
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  std::filesystem::create_directories(dir.File("public"));
  std::filesystem::create_directories(dir.File("private"));
  REQUIRE(::chmod(dir.File("public").c_str(), 0755) == 0);
  REQUIRE(::chmod(dir.File("private").c_str(), 0700) == 0);
  const std::string open_image = dir.File("public/libz-1.so");
  const std::string closed_file = dir.File("public/libz-2.so");
  const std::string closed_directory = dir.File("private/libz-3.so");
  const std::vector<bc::Wanted> images{{open_image, Variant(testing::kLibz, open_image, 1)},
                                       {closed_file, Variant(testing::kLibz, closed_file, 2)},
                                       {closed_directory, Variant(testing::kLibz, closed_directory, 3)}};
  REQUIRE(::chmod(open_image.c_str(), 0644) == 0);
  REQUIRE(::chmod(closed_file.c_str(), 0600) == 0);
  REQUIRE(::chmod(closed_directory.c_str(), 0644) == 0);
  const mode_t umask = ::umask(077);  // as hvprofd's
  auto cache = bc::Cache::Open(dir.File("cache"), 64 << 20);
  REQUIRE(cache.has_value());
  auto added = cache.value().Add(images);
  ::umask(umask);
  REQUIRE(added.has_value());
  CHECK(added.value().added == 3);
  CHECK(ModeOf(dir.File("cache")) == 0755);
  CHECK(ModeOf(dir.File("cache") + "/.build-id") == 0755);
  CHECK(ModeOf(dir.File("cache") + "/.build-id/" + images[0].build_id.substr(0, 2)) == 0755);
  CHECK(ModeOf(bc::ImageFile(dir.File("cache"), images[0].build_id)) == 0644);
  CHECK(ModeOf(bc::ImageFile(dir.File("cache"), images[1].build_id)) == 0600);
  CHECK(ModeOf(bc::ImageFile(dir.File("cache"), images[2].build_id)) == 0600);

  // A cache anyone could change is refused, and is not read from either.
  std::filesystem::create_directories(dir.File("shared/.build-id"));
  REQUIRE(::chmod(dir.File("shared").c_str(), 0777) == 0);
  auto shared = bc::Cache::Open(dir.File("shared"), 64 << 20);
  REQUIRE(!shared.has_value());
  CHECK(shared.error().kind() == ErrorKind::kPermissionDenied);
  CHECK_THAT(shared.error().message(), Catch::Contains("--build-id-cache"));
  const std::string planted = bc::ImageFile(dir.File("shared"), images[0].build_id);
  testing::CopyFile(open_image, planted);
  CHECK(bc::FindImage({dir.File("shared")}, images[0].build_id).empty());
  CHECK(bc::FindImage({dir.File("shared"), dir.File("cache")}, images[0].build_id) ==
        bc::ImageFile(dir.File("cache"), images[0].build_id));

  auto relative = bc::Cache::Open("cache", 64 << 20);
  REQUIRE(!relative.has_value());
  CHECK_THAT(relative.error().message(), Catch::Contains("absolute path"));
}

TEST_CASE("the build-id cache keeps an image's separate debug file beside it", "[build-id-cache]") {
  constexpr const char* kObjcopy = "/usr/bin/objcopy";
  if (!std::filesystem::exists(kObjcopy)) {
    (void)testing::SkipTest("needs objcopy (binutils, which scripts/install-deps.sh installs)");
    return;
  }
  TempDir dir;
  const std::string image = dir.File("bin/inlined");
  testing::CopyFile(HVPROF_INLINED_FIXTURE, image);
  const std::string debug = dir.File("bin/inlined.debug");
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{kObjcopy, "--only-keep-debug", image, debug},
        std::vector<std::string>{kObjcopy, "--strip-debug", "--strip-unneeded", "--add-gnu-debuglink=" + debug,
                                 image}}) {
    const CommandResult ran = RunProgram(command);
    INFO(ran.err);
    REQUIRE(ran.status == 0);
  }
  const std::string id = testing::BuildIdOf(image);
  auto cache = bc::Cache::Open(dir.File("cache"), 64 << 20);
  REQUIRE(cache.has_value());
  auto added = cache.value().Add(std::vector<bc::Wanted>{{image, id}});
  REQUIRE(added.has_value());
  for (const std::string& skipped : added.value().skipped) UNSCOPED_INFO(skipped);
  CHECK(added.value().added == 1);
  CHECK(added.value().debug_added == 1);
  const std::string cached_debug = bc::DebugFile(dir.File("cache"), id);
  CHECK(Contents(cached_debug) == Contents(debug));
  // Both gone: the copy still has its line tables, from the cached debug file.
  std::filesystem::remove_all(dir.File("bin"));
  symbolizer::SymbolizerOptions options;
  options.debug_roots = {dir.File("cache")};
  symbolizer::Symbolizer symbolizer(options);
  auto info = symbolizer.Describe(symbolizer::ImageSpec::Elf(bc::ImageFile(dir.File("cache"), id)));
  REQUIRE(info.has_value());
  CHECK(info.value().debug_file == cached_debug);
  CHECK(info.value().has_dwarf);
}

TEST_CASE("the build-id cache's size and place as typed", "[build-id-cache][cli]") {
  CHECK(bc::ParseSize("2G").value() == uint64_t{2} << 30);
  CHECK(bc::ParseSize("512M").value() == uint64_t{512} << 20);
  CHECK(bc::ParseSize("100k").value() == 102400);
  CHECK(bc::ParseSize("4096").value() == 4096);
  for (const char* bad : {"", "G", "2X", "-1", "1.5G", "99999999999T"}) {
    INFO(bad);
    CHECK(!bc::ParseSize(bad).has_value());
  }
  // The tests' main sets HVPROF_BUILD_ID_CACHE=none: only the session's own cache is looked in.
  CHECK(bc::SearchDirectories("/srv/cache") == std::vector<std::string>{"/srv/cache"});
  CHECK(bc::SearchDirectories("").empty());
  const char* set = std::getenv(bc::kEnvironment);
  REQUIRE(set != nullptr);
  const std::string saved = set;
  ::unsetenv(bc::kEnvironment);
  const std::vector<std::string> searched = bc::SearchDirectories("/srv/cache");
  ::setenv(bc::kEnvironment, saved.c_str(), 1);
  REQUIRE(searched.size() >= 2);
  CHECK(searched.front() == "/srv/cache");
  CHECK(searched.back() == bc::kSystemDirectory);
}

TEST_CASE("a sim session whose image was rebuilt since reports its symbols from the build-id cache, and archives",
          "[build-id-cache][sim]") {
  TempDir images;
  std::map<std::string, std::string> copies;
  const std::optional<nlohmann::json> scenario = testing::ScenarioOfCopies(images.path(), &copies);
  if (!scenario) return;
  const std::string cache = images.File("build-id-cache");
  const std::string libc_id = testing::BuildIdOf(copies[testing::kLibc]);
  testing::Host host(*scenario);
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest1,guest2,guest3",
                       "--event=CPU_CLK_UNHALTED:20000", "--build-id-cache=" + cache}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=50ms"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  REQUIRE(host.Hvprof({"--save=before-rebuild"}).status == 0);
  const CommandResult before = host.Report({"before-rebuild", "-l", "--image=libc.so.6", "-n"});
  INFO(before.err);
  REQUIRE(before.status == 0);
  REQUIRE(before.out.find("(no symbols)") == std::string::npos);
  // hvprofd kept the sampled images: libc and xen-syms (System.map has no build-id).
  CHECK(std::filesystem::exists(bc::ImageFile(cache, libc_id)));
  CHECK(std::filesystem::exists(bc::ImageFile(cache, testing::BuildIdOf(copies[testing::kXenSyms]))));
  auto metadata = nlohmann::json::parse(
      Contents(host.session_root() + "/samples/before-rebuild/session.json"));
  CHECK(metadata["build_id_cache"] == cache);

  // libc rebuilt (another build-id at its path): the session still reports it as it was.
  Variant(testing::kLibc, copies[testing::kLibc], 0x77);
  const CommandResult after = host.Report({"before-rebuild", "-l", "--image=libc.so.6", "-n"});
  INFO(after.err);
  CHECK(after.status == 0);
  CHECK(after.out == before.out);
  const CommandResult noted = host.Report({"before-rebuild", "-l", "--image=libc.so.6"});
  CHECK_THAT(noted.out, Catch::Contains("its symbols are those of the copy in the build-id cache"));
  CHECK(WithoutNotes(noted.out).find("(no symbols)") == std::string::npos);

  // The archive takes the cached copy, with no --partial.
  const std::string tar = images.File("rebuilt.tar");
  const CommandResult archived = RunProgram(
      {Binary("hvprof"), "archive", "--session-dir=" + host.session_root(), "before-rebuild", "-o", tar});
  INFO(archived.err);
  CHECK(archived.status == 0);
  CHECK_THAT(archived.err, Catch::Contains("came from the build-id cache"));

  // Without the cache the rebuild shows: the report says the image is not the one profiled.
  std::filesystem::remove_all(cache);
  const CommandResult orphaned = host.Report({"before-rebuild", "-l", "--image=libc.so.6", "-n"});
  CHECK(orphaned.out != before.out);
  CHECK(orphaned.out.find("(no symbols)") != std::string::npos);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
}
