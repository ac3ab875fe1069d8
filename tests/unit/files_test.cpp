// The one way hvprof writes output and session files, tried as an attacker or a careless user
// would: device nodes, FIFOs, planted links, a full device, files that never end.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include <fmt/format.h>

#include "hvprof/base/files.h"
#include "other_user.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::ErrorKind;
using hvprof::Links;
using hvprof::ReadFileToString;
using hvprof::WriteFileAtomically;
using hvprof::WriteOutput;
using hvprof::testing::TempDir;

namespace {

std::string Contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

mode_t TypeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & S_IFMT;
}

}  // namespace

TEST_CASE("output: regular files are replaced whole, keeping their mode", "[base][files][safety]") {
  TempDir dir;
  const std::string path = dir.File("report.txt");
  REQUIRE(WriteOutput(path, "first\n").has_value());
  CHECK(Contents(path) == "first\n");
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  REQUIRE(WriteOutput(path, "second\n").has_value());
  CHECK(Contents(path) == "second\n");
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  // No temporary file is left behind.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);
}

TEST_CASE("output in pieces: replaced only once committed, the old contents kept otherwise", "[base][files][safety]") {
  TempDir dir;
  const std::string path = dir.File("big.tar");
  dir.Write("big.tar", "old");
  auto piece = [](std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); };
  {
    auto out = hvprof::OutputFile::Open(path);
    REQUIRE(out.has_value());
    REQUIRE(out.value().Write(piece("new, ")).has_value());
    CHECK(Contents(path) == "old");
    // Dropped before Commit (a failure half-way): the old file stays, the temporary one goes.
  }
  CHECK(Contents(path) == "old");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
  auto out = hvprof::OutputFile::Open(path);
  REQUIRE(out.has_value());
  REQUIRE(out.value().Write(piece("new, ")).has_value());
  REQUIRE(out.value().Write(piece("whole")).has_value());
  REQUIRE(out.value().Commit().has_value());
  CHECK(Contents(path) == "new, whole");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
  // The same refusals as WriteOutput.
  std::filesystem::create_directory(dir.File("directory"));
  CHECK(!hvprof::OutputFile::Open(dir.File("directory")).has_value());
}

TEST_CASE("output: device nodes are written in place, never replaced", "[base][files][safety]") {
  if (::access("/dev/full", W_OK) != 0 || ::access("/dev/null", W_OK) != 0) {
    if (hvprof::testing::SkipTest("/dev/full or /dev/null is not writable here")) return;
  }
  REQUIRE(WriteOutput("/dev/null", "anything").has_value());
  CHECK(TypeOf("/dev/null") == S_IFCHR);
  auto full = WriteOutput("/dev/full", "anything");
  REQUIRE_FALSE(full.has_value());
  CHECK(full.error().kind() == ErrorKind::kNoSpace);
  CHECK(full.error().message().find("/dev/full") != std::string::npos);
  CHECK(TypeOf("/dev/full") == S_IFCHR);
}

TEST_CASE("output: a FIFO gets the data in place", "[base][files][safety]") {
  TempDir dir;
  const std::string fifo = dir.File("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto reader = std::async(std::launch::async, [&] { return Contents(fifo); });
  REQUIRE(WriteOutput(fifo, "through the pipe\n").has_value());
  REQUIRE(reader.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(reader.get() == "through the pipe\n");
  CHECK(TypeOf(fifo) == S_IFIFO);
}

TEST_CASE("output: a link to a pipe or device (like /dev/stdout) is written through", "[base][files][safety]") {
  TempDir dir;
  const std::string fifo = dir.File("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(::symlink(fifo.c_str(), dir.File("stdout").c_str()) == 0);
  auto reader = std::async(std::launch::async, [&] { return Contents(fifo); });
  REQUIRE(WriteOutput(dir.File("stdout"), "through the link\n").has_value());
  REQUIRE(reader.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(reader.get() == "through the link\n");
  CHECK(TypeOf(dir.File("stdout")) == S_IFLNK);
}

TEST_CASE("output: new files follow the umask, replaced ones lose set-id bits", "[base][files][safety]") {
  TempDir dir;
  const mode_t old_mask = ::umask(027);
  REQUIRE(WriteOutput(dir.File("new"), "x").has_value());
  ::umask(old_mask);
  struct stat st {};
  REQUIRE(::stat(dir.File("new").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  REQUIRE(::chmod(dir.File("new").c_str(), 04755) == 0);
  REQUIRE(WriteOutput(dir.File("new"), "y").has_value());
  REQUIRE(::stat(dir.File("new").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0755);
}

TEST_CASE("output: links, directories and sockets are refused and left as they are", "[base][files][safety]") {
  TempDir dir;
  dir.Write("victim", "precious\n");
  const std::string link = dir.File("link");
  REQUIRE(::symlink(dir.File("victim").c_str(), link.c_str()) == 0);
  auto through_link = WriteOutput(link, "overwritten");
  REQUIRE_FALSE(through_link.has_value());
  CHECK(through_link.error().message().find("is a symbolic link") != std::string::npos);
  CHECK(TypeOf(link) == S_IFLNK);
  CHECK(Contents(dir.File("victim")) == "precious\n");

  auto directory = WriteOutput(dir.path(), "x");
  REQUIRE_FALSE(directory.has_value());
  CHECK(directory.error().message().find("is a directory") != std::string::npos);
  CHECK(TypeOf(dir.path()) == S_IFDIR);
}

TEST_CASE("session files: a planted link or FIFO is never written through", "[base][files][safety]") {
  TempDir dir;
  dir.Write("victim", "precious\n");
  // The name the old writer used for its temporary file, planted as a link to the victim.
  REQUIRE(::symlink(dir.File("victim").c_str(), dir.File("session.json.tmp").c_str()) == 0);
  REQUIRE(WriteFileAtomically(dir.File("session.json"), "{}\n").has_value());
  CHECK(Contents(dir.File("victim")) == "precious\n");
  CHECK(Contents(dir.File("session.json")) == "{}\n");

  // The file itself is a link or a FIFO: refused, left as it is.
  REQUIRE(::symlink(dir.File("victim").c_str(), dir.File("lock").c_str()) == 0);
  auto link = WriteFileAtomically(dir.File("lock"), "123\n");
  REQUIRE_FALSE(link.has_value());
  CHECK(link.error().kind() == ErrorKind::kPermissionDenied);
  CHECK(Contents(dir.File("victim")) == "precious\n");
  REQUIRE(::mkfifo(dir.File("fifo").c_str(), 0600) == 0);
  CHECK_FALSE(WriteFileAtomically(dir.File("fifo"), "x").has_value());
  CHECK(TypeOf(dir.File("fifo")) == S_IFIFO);

  // Opening for append or lock: links and FIFOs refused, without blocking.
  auto append = hvprof::OpenRegularFile(dir.File("lock"), O_WRONLY | O_CREAT | O_APPEND);
  REQUIRE_FALSE(append.has_value());
  CHECK(append.error().message().find("symbolic link") != std::string::npos);
  auto fifo = hvprof::OpenRegularFile(dir.File("fifo"), O_RDONLY);
  REQUIRE_FALSE(fifo.has_value());
  CHECK(fifo.error().message().find("is a FIFO") != std::string::npos);
  auto locked = hvprof::LockPidFile(dir.File("lock"));
  CHECK_FALSE(locked.has_value());
  CHECK(Contents(dir.File("victim")) == "precious\n");
  CHECK(hvprof::OpenRegularFile(dir.File("samples"), O_WRONLY | O_CREAT | O_APPEND).has_value());
  // A hard link to the victim, planted under a session file's name: not written through.
  REQUIRE(::link(dir.File("victim").c_str(), dir.File("samples.hvs").c_str()) == 0);
  auto hard = hvprof::OpenRegularFile(dir.File("samples.hvs"), O_WRONLY | O_APPEND);
  REQUIRE_FALSE(hard.has_value());
  CHECK(hard.error().message().find("has 2 hard links") != std::string::npos);
  CHECK(hvprof::OpenRegularFile(dir.File("samples.hvs"), O_RDONLY).has_value());
}

TEST_CASE("reading: only regular files, within a bound", "[base][files][safety]") {
  TempDir dir;
  dir.Write("small", "12345");
  CHECK(ReadFileToString(dir.File("small")).value() == "12345");
  auto big = ReadFileToString(dir.File("small"), 4);
  REQUIRE_FALSE(big.has_value());
  CHECK(big.error().message() == dir.File("small") + " is 5 bytes; at most 4 are read from it");

  // A FIFO would block a reader forever: refused at once.
  REQUIRE(::mkfifo(dir.File("fifo").c_str(), 0600) == 0);
  auto fifo = std::async(std::launch::async, [&] { return ReadFileToString(dir.File("fifo")); });
  REQUIRE(fifo.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  auto fifo_result = fifo.get();
  REQUIRE_FALSE(fifo_result.has_value());
  CHECK(fifo_result.error().message().find("is a FIFO, not a regular file") != std::string::npos);

  // A file that never ends (/dev/zero) is not regular; a /proc file with no size stops at the bound.
  CHECK_FALSE(ReadFileToString("/dev/zero").has_value());
  auto status = ReadFileToString("/proc/self/status", 64);
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().message().find("holds more than 64 bytes") != std::string::npos);

  // Links: followed for paths the user named, refused in a session directory.
  REQUIRE(::symlink(dir.File("small").c_str(), dir.File("link").c_str()) == 0);
  CHECK(ReadFileToString(dir.File("link")).value() == "12345");
  auto refused = ReadFileToString(dir.File("link"), hvprof::kDefaultReadLimit, Links::kRefuse);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message().find("is a symbolic link") != std::string::npos);
}

TEST_CASE("session roots: a directory others could change is refused, naming it", "[base][files][safety]") {
  TempDir dir;  // under /tmp: sticky and world-writable above, which is fine
  const std::string root = dir.File("sessions");
  REQUIRE(::mkdir(root.c_str(), 0755) == 0);
  CHECK(hvprof::CheckTrustedDirectory(root).has_value());

  SECTION("writable by every user") {
    REQUIRE(::chmod(root.c_str(), 0777) == 0);
    auto checked = hvprof::CheckTrustedDirectory(root);
    REQUIRE_FALSE(checked.has_value());
    CHECK(checked.error().kind() == ErrorKind::kPermissionDenied);
    CHECK(checked.error().message().find("is writable by every user (mode 0777)") != std::string::npos);
    // Sticky helps above the directory (nobody can rename it), not for it: files in it are planted.
    REQUIRE(::chmod(root.c_str(), 01777) == 0);
    CHECK_FALSE(hvprof::CheckTrustedDirectory(root).has_value());
  }
  SECTION("a directory above it writable by every user") {
    const std::string inner = root + "/inner";
    REQUIRE(::mkdir(inner.c_str(), 0755) == 0);
    REQUIRE(::chmod(root.c_str(), 0777) == 0);
    auto checked = hvprof::CheckTrustedDirectory(inner);
    REQUIRE_FALSE(checked.has_value());
    CHECK(checked.error().message().find(root + " is writable by every user") != std::string::npos);
  }
  SECTION("a symbolic link as the session root") {
    const std::string link = dir.File("link");
    REQUIRE(::symlink(root.c_str(), link.c_str()) == 0);
    auto checked = hvprof::CheckTrustedDirectory(link);
    REQUIRE_FALSE(checked.has_value());
    CHECK(checked.error().message().find("is a symbolic link") != std::string::npos);
  }
}

TEST_CASE("session roots: what another user owns or can write is refused, naming it", "[base][files][safety]") {
  if (::geteuid() != 0 && hvprof::testing::SkipTest("giving a directory to another user needs root")) return;
  TempDir dir;
  const std::string root = dir.File("sessions");
  REQUIRE(::mkdir(root.c_str(), 0755) == 0);
  // A link on the way that another user owns: they could point it elsewhere later.
  const std::string inner = root + "/inner";
  REQUIRE(::mkdir(inner.c_str(), 0755) == 0);
  const std::string link = dir.File("their-link");
  REQUIRE(::symlink(root.c_str(), link.c_str()) == 0);
  REQUIRE(::lchown(link.c_str(), 65534, 65534) == 0);
  auto through = hvprof::CheckTrustedDirectory(link + "/inner");
  REQUIRE_FALSE(through.has_value());
  CHECK(through.error().message().find(link + " is a symbolic link owned by uid 65534") != std::string::npos);
  // A directory writable by a group that is neither root's nor ours.
  REQUIRE(::chown(root.c_str(), 0, 65534) == 0);
  REQUIRE(::chmod(root.c_str(), 0775) == 0);
  auto group = hvprof::CheckTrustedDirectory(inner);
  REQUIRE_FALSE(group.has_value());
  CHECK(group.error().message().find("is writable by group 65534") != std::string::npos);
  REQUIRE(::chmod(root.c_str(), 0755) == 0);
  // And a directory another user owns.
  REQUIRE(::chown(root.c_str(), 65534, 65534) == 0);
  auto checked = hvprof::CheckTrustedDirectory(root);
  REQUIRE_FALSE(checked.has_value());
  CHECK(checked.error().message().find("is owned by uid 65534") != std::string::npos);
}

TEST_CASE("files opened for others: nothing but a regular file is opened, and never waited on",
          "[base][files][safety]") {
  // Issue 38: root's hvprof-hv opened what a process had mapped by its path, following links and
  // waiting on a FIFO; a symbolic link to a device made it open the device.
  if (::geteuid() != 0 && hvprof::testing::SkipTest("making a device node (mknod) needs root")) return;
  TempDir dir;
  const std::string fifo = dir.File("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const std::string device = dir.File("zero");
  REQUIRE(::mknod(device.c_str(), S_IFCHR | 0644, ::makedev(1, 5)) == 0);
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(watch >= 0);
  REQUIRE(::inotify_add_watch(watch, device.c_str(), IN_OPEN | IN_ACCESS) >= 0);
  REQUIRE(::symlink(device.c_str(), dir.File("to-device").c_str()) == 0);
  dir.Write("file", "contents");
  REQUIRE(::symlink(dir.File("file").c_str(), dir.File("to-file").c_str()) == 0);

  // Where a hang cannot take the test down with it.
  auto open = [](const std::string& path, hvprof::FileTrust trust) {
    auto done = std::async(std::launch::async, [=] { return hvprof::OpenUserFile(path, trust); });
    REQUIRE(done.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    return done.get();
  };
  const hvprof::FileTrust follow{.links = Links::kFollow, .users = {}, .refuse_replaceable = true, .check_path = true};
  const hvprof::FileTrust kernel{.links = Links::kFollow, .users = {}, .refuse_replaceable = true, .check_path = false};
  for (const hvprof::FileTrust& trust : {hvprof::FileTrust{}, follow, kernel}) {
    auto from_fifo = open(fifo, trust);
    REQUIRE_FALSE(from_fifo.has_value());
    CHECK(from_fifo.error().message().find("is a FIFO, not a regular file") != std::string::npos);
    for (const std::string& path : {device, dir.File("to-device")}) {
      auto from_device = open(path, trust);
      REQUIRE_FALSE(from_device.has_value());
      INFO(from_device.error().message());
      CHECK(from_device.error().kind() == ErrorKind::kPermissionDenied);
    }
  }
  char events[4096];
  CHECK(::read(watch, events, sizeof events) < 0);  // the device was never opened
  ::close(watch);

  // A link as the last component: refused where the kernel gave the path, followed where a user
  // named it.
  auto refused = open(dir.File("to-file"), hvprof::FileTrust{});
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message().find("is a symbolic link") != std::string::npos);
  auto followed = open(dir.File("to-file"), follow);
  REQUIRE(followed.has_value());
  CHECK(followed.value().replaceable.empty());
  CHECK(hvprof::ReadToEnd(followed.value().fd.get(), "file", 100).value() == "contents");
  // Through /proc's links (map_files, fd): the file the kernel names.
  auto through_proc = open(fmt::format("/proc/self/fd/{}", followed.value().fd.get()), kernel);
  REQUIRE(through_proc.has_value());
  CHECK(through_proc.value().st.st_ino == followed.value().st.st_ino);
  // /proc files have no size to stat, and are read to their end.
  auto status = open("/proc/self/status", hvprof::FileTrust{});
  REQUIRE(status.has_value());
  CHECK(status.value().st.st_size == 0);
  CHECK(hvprof::ReadToEnd(status.value().fd.get(), "status", 1 << 20).value().find("\nUid:") != std::string::npos);
}

TEST_CASE("files opened for others: one another user could have replaced is named, or refused",
          "[base][files][safety]") {
  // Issue 38: root archived, by path, a file a user had replaced with a link to /etc/shadow.
  if (::geteuid() != 0 && hvprof::testing::SkipTest("giving files to another user needs root")) return;
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  const std::string secret = dir.File("shadow");
  dir.Write("shadow", "root:$6$secret");
  REQUIRE(::chmod(secret.c_str(), 0600) == 0);
  const std::string home = dir.File("eve");
  REQUIRE(::mkdir(home.c_str(), 0755) == 0);
  REQUIRE(::chown(home.c_str(), 65534, 65534) == 0);
  const hvprof::FileTrust reported{.links = Links::kFollow, .users = {}, .refuse_replaceable = false,
                                   .check_path = true};

  SECTION("her link to root's file") {
    REQUIRE(hvprof::testing::RunAsUser(hvprof::testing::kNobody,
                                       [&] { return ::symlink(secret.c_str(), (home + "/app").c_str()) == 0; }) == 0);
    auto refused = hvprof::OpenUserFile(home + "/app", hvprof::FileTrust{});
    REQUIRE_FALSE(refused.has_value());
    auto named = hvprof::OpenUserFile(home + "/app", reported);
    REQUIRE(named.has_value());
    CHECK(named.value().replaceable.find("uid 65534") != std::string::npos);
    auto strict = hvprof::OpenUserFile(home + "/app", hvprof::FileTrust{.links = Links::kFollow, .users = {},
                                                                          .refuse_replaceable = true,
                                                                          .check_path = true});
    REQUIRE_FALSE(strict.has_value());
    CHECK(strict.error().kind() == ErrorKind::kPermissionDenied);
    CHECK(strict.error().message().find("could have replaced it") != std::string::npos);
  }
  SECTION("root's file, hard-linked into her directory") {
    if (::link(secret.c_str(), (home + "/app").c_str()) != 0) {
      FAIL_CHECK("link: " << std::strerror(errno));
      return;
    }
    auto named = hvprof::OpenUserFile(home + "/app", reported);
    REQUIRE(named.has_value());
    CHECK(named.value().replaceable == home + " is owned by uid 65534, who could replace what is in it");
  }
  SECTION("her own file, and her process's: trusted only when she is") {
    REQUIRE(hvprof::testing::RunAsUser(hvprof::testing::kNobody, [&] {
              return ::close(::open((home + "/app").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0755)) == 0;
            }) == 0);
    CHECK_FALSE(hvprof::OpenUserFile(home + "/app", hvprof::FileTrust{}).has_value());
    auto hers = hvprof::OpenUserFile(home + "/app", hvprof::FileTrust{.links = Links::kRefuse, .users = {65534},
                                                                        .refuse_replaceable = true,
                                                                        .check_path = true});
    REQUIRE(hers.has_value());
    CHECK(hers.value().replaceable.empty());
  }
  SECTION("a directory every user can write, unless it is sticky") {
    const std::string shared = dir.File("shared");
    REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
    REQUIRE(::chmod(shared.c_str(), 0777) == 0);
    dir.Write("shared/file", "x");
    auto named = hvprof::OpenUserFile(shared + "/file", reported);
    REQUIRE(named.has_value());
    CHECK(named.value().replaceable == shared + " is writable by every user");
    REQUIRE(::chmod(shared.c_str(), 01777) == 0);  // as /tmp: others cannot rename what is ours
    auto sticky = hvprof::OpenUserFile(shared + "/file", reported);
    REQUIRE(sticky.has_value());
    CHECK(sticky.value().replaceable.empty());
    // But a name there may be her hard link to root's file (where fs.protected_hardlinks is 0):
    // such a file is named, whoever owns it.
    REQUIRE(::link(secret.c_str(), (shared + "/app").c_str()) == 0);
    auto linked = hvprof::OpenUserFile(shared + "/app", reported);
    REQUIRE(linked.has_value());
    CHECK(linked.value().replaceable.find("has 2 hard links") != std::string::npos);
    CHECK_FALSE(hvprof::OpenUserFile(shared + "/app", hvprof::FileTrust{.links = Links::kFollow, .users = {},
                                                                        .refuse_replaceable = true,
                                                                        .check_path = true})
                    .has_value());
  }
}

TEST_CASE("output kept private: its owner's alone until it may be shared", "[base][files][safety]") {
  TempDir dir;
  const std::string path = dir.File("archive.tar");
  auto private_file = hvprof::OutputFile::Open(path, hvprof::OutputFile::Sharing::kPrivate);
  REQUIRE(private_file.has_value());
  struct stat st {};
  REQUIRE(::fstat(private_file.value().fd(), &st) == 0);
  CHECK((st.st_mode & 0077) == 0);
  REQUIRE(private_file.value().Commit().has_value());
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  const mode_t old_umask = ::umask(022);
  auto shared = hvprof::OutputFile::Open(path + ".2", hvprof::OutputFile::Sharing::kPrivate);
  ::umask(old_umask);
  REQUIRE(shared.has_value());
  REQUIRE(shared.value().AllowSharing().has_value());
  REQUIRE(shared.value().Commit().has_value());
  REQUIRE(::stat((path + ".2").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
}

TEST_CASE("run directories: made private, and refused when another user made them first", "[base][files][safety]") {
  TempDir dir;
  const std::string run = dir.File("run/hvprof");
  REQUIRE(hvprof::MakePrivateDirectory(run, "the run directory", "or give another --run-dir").has_value());
  struct stat st {};
  REQUIRE(::stat(run.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::chmod(run.c_str(), 0777) == 0);
  auto open_to_all = hvprof::MakePrivateDirectory(run, "the run directory", "or give another --run-dir");
  REQUIRE_FALSE(open_to_all.has_value());
  CHECK(open_to_all.error().message().find("is writable by every user") != std::string::npos);
  CHECK(open_to_all.error().message().find("or give another --run-dir") != std::string::npos);
  if (::geteuid() == 0) {
    REQUIRE(::chmod(run.c_str(), 0700) == 0);
    REQUIRE(::chown(run.c_str(), 65534, 65534) == 0);
    auto squatted = hvprof::MakePrivateDirectory(run, "the run directory", "or give another --run-dir");
    REQUIRE_FALSE(squatted.has_value());
    CHECK(squatted.error().message().find("is owned by uid 65534") != std::string::npos);
  }
}

TEST_CASE("a pid file's holder: held while its lock lives, with the pid and note it wrote", "[base][files]") {
  TempDir dir;
  CHECK_FALSE(hvprof::ReadPidFile(dir.File("none.lock")).has_value());
  {
    auto locked = hvprof::LockPidFile(dir.File("agent.lock"), "/var/lib/hvprof");
    REQUIRE(locked.has_value());
    REQUIRE(locked.value().has_value());
    const auto holder = hvprof::ReadPidFile(dir.File("agent.lock"));
    REQUIRE(holder.has_value());
    CHECK(holder->held);
    CHECK(holder->pid == std::to_string(::getpid()));
    CHECK(holder->note == "/var/lib/hvprof");
  }
  // Its holder gone, the file still says who it was, and that nobody holds it now.
  const auto after = hvprof::ReadPidFile(dir.File("agent.lock"));
  REQUIRE(after.has_value());
  CHECK_FALSE(after->held);
  CHECK(after->pid == std::to_string(::getpid()));
  dir.Write("bare.lock", "42\n");
  CHECK(hvprof::ReadPidFile(dir.File("bare.lock"))->note.empty());
  CHECK(hvprof::ReadPidFile(dir.File("bare.lock"))->pid == "42");
}
