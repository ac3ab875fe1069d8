// Whole-file helpers with honest errors.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof {

// Files larger than this are refused by ReadFileToString unless the caller gives its own bound.
inline constexpr size_t kDefaultReadLimit = size_t{256} << 20;

enum class Links {
  kFollow,  // a path the user named: a symbolic link to a file is the file
  kRefuse,  // a file in a directory others may write (a session): a link is refused
};

// Reads a whole regular file of at most `max_bytes`. Anything else (a FIFO, a device, a
// directory, with kRefuse a symbolic link) is refused with a message that says what it is,
// without blocking and without reading it; a larger file is refused without reading past the
// bound.
Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes = kDefaultReadLimit,
                                     Links links = Links::kFollow);

// Writes a file hvprof owns (session files, state): `data` goes to a new temporary file
// beside `path` (a fresh name, created exclusively, so nothing planted there is followed), is
// fsynced, and is renamed over `path`, so a crash leaves either the old or the new contents.
// Refuses when `path` is anything but a regular file or absent (a link, a FIFO, a device).
// A full disk is reported as kNoSpace and the old file is kept.
Result<void> WriteFileAtomically(const std::string& path, std::string_view data);

// Writes output a user asked for (-o FILE, --json=FILE), the one way every command does:
//   "-"                      standard output;
//   absent or a regular file as WriteFileAtomically (the old contents survive a failure);
//   a character device or a FIFO (/dev/null, a pipe), or a link to one (/dev/stdout): written
//                            in place, never replaced;
//   any other symbolic link, a directory, a block device or a socket: refused, untouched.
Result<void> WriteOutput(const std::string& path, std::string_view data);

// WriteOutput for output written in pieces (an archive that may not fit in memory): the same
// rules and the same guarantees. A regular file (or an absent one) is written to a fresh
// temporary file beside it and renamed over it by Commit; an OutputFile dropped before Commit
// removes its temporary file and leaves the old contents. "-", a device or a FIFO is written
// in place.
class OutputFile {
 public:
  // Who may read it while it is written: kAsUsual, what the umask allows (or the old file's
  // mode); kPrivate, its owner alone until AllowSharing (output that may hold files others
  // could not read, as an archive made by root). A device or a FIFO is as it is either way.
  enum class Sharing { kAsUsual, kPrivate };
  static Result<OutputFile> Open(const std::string& path, Sharing sharing = Sharing::kAsUsual);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  // The descriptor to write to (for libraries that write through one themselves).
  int fd() const;
  const std::string& path() const { return path_; }
  Result<void> Write(std::span<const std::byte> data);
  // Syncs and renames the temporary file over the path (regular files); after this, the
  // OutputFile is closed.
  Result<void> Commit();
  // kPrivate: gives the file, before Commit, the mode it would have had with kAsUsual.
  Result<void> AllowSharing();

 private:
  OutputFile() = default;
  std::string path_;
  std::string temporary_;  // empty when written in place
  bool replace_ = false;   // a regular file was there: rename over it
  int shared_mode_ = -1;   // kPrivate: the mode AllowSharing gives
  ScopedFd fd_;
  bool standard_output_ = false;
};

// The last component of a path, and what is before it ("." when there is no slash, "/" for
// a file at the root).
std::string Basename(const std::string& path);
std::string Dirname(const std::string& path);
// The directory of the running program (/proc/self/exe), where hvprof's programs find each
// other; "." if it cannot be read.
std::string ExecutableDirectory();

// Opens a file in a directory others may write (a session): never through a symbolic link,
// never waiting on a FIFO, never opening a device (what is there is looked at through O_PATH
// first), and only if it is a regular file (a FIFO, a device or a link is refused with a
// message naming it). `flags` as open(2)'s; O_CREAT creates it.
Result<ScopedFd> OpenRegularFile(const std::string& path, int flags, int mode = 0644);

// Whom a program trusts with a file it opens on someone else's behalf (OpenUserFile).
struct FileTrust {
  // A symbolic link as the last component: kRefuse for a path the kernel reported (a mapping's
  // file: a link there now is not what was mapped), kFollow for a path a user or a scenario
  // named. Links on the way are followed either way; who owns them counts as below.
  Links links = Links::kRefuse;
  // Who besides root and this process's effective user may own the file, the directories on
  // its path and the links it passes (the profiled process's user).
  std::vector<uid_t> users;
  // Someone else could have replaced the file (they own it, a directory on its path or a link
  // on the way, or can write one of those): refuse it (kPermissionDenied), or, false, open it
  // and say who in UserFile::replaceable, for a caller that checks what it reads (by build-id)
  // or leaves the file out with a note.
  bool refuse_replaceable = true;
  // False for a /proc magic link (/proc/PID/map_files/...): the kernel names the file, so it is
  // followed and no one's ownership is checked. The file must still be a regular one.
  bool check_path = true;
};

// A file OpenUserFile opened: for reading, with blocking reads.
struct UserFile {
  ScopedFd fd;
  struct stat st {};
  // Empty, or who else could have replaced the file and how ("/home/eve is owned by uid 1000,
  // who could replace what is in it").
  std::string replaceable;
};

// The one way a privileged process opens a file on someone else's behalf: images a process
// mapped, kallsyms, debug files, archive members. The path is walked a component at a time
// with O_PATH (no component is opened for reading, no FIFO waited on, no device opened), links
// resolved here so that each link's owner is known; the file is opened for reading only once
// it is known to be a regular file, through its O_PATH descriptor (what was checked is what is
// read). kPermissionDenied for a link where `trust` refuses one, a FIFO, a device, a socket or
// a directory, and (with refuse_replaceable) a file someone else could have replaced.
Result<UserFile> OpenUserFile(const std::string& path, const FileTrust& trust = {});

// Reads `fd` from where it is to its end, at most `max_bytes` (a /proc file's size is 0 to
// stat: it is read all the same). `what` names it in messages.
Result<std::string> ReadToEnd(int fd, const std::string& what, size_t max_bytes, size_t size_hint = 0);

// Writes all of `data` to fd, retrying on EINTR and short writes.
Result<void> WriteAll(int fd, std::span<const std::byte> data, std::string_view what);

// Creates `path` and its parents (mode 0755). Succeeds if it already exists as a directory.
Result<void> MakeDirectories(const std::string& path);

// A directory a daemon serves or writes in (a run directory): `path` is created if need be
// (mode 0700; its parents as MakeDirectories), then checked as CheckTrustedDirectory checks,
// so that one another user made first, or can write, is refused. `what` names it in messages
// ("the run directory") and `advice` says what to do instead ("give another --run-dir").
Result<void> MakePrivateDirectory(const std::string& path, std::string_view what, std::string_view advice);

// Checks a directory a root daemon will write in (a session root): the directory itself is no
// symbolic link, and neither it nor any directory above it can be changed by anyone but root
// and this process's user. Each must be owned by one of them and not writable by others or by
// a group other than root's or the user's; above the directory itself, a sticky directory such
// as /tmp is fine, since others cannot rename what is ours in it. kPermissionDenied names the
// directory at fault, its owner and mode, and what to do.
Result<void> CheckTrustedDirectory(const std::string& path);
// The same for a directory that is not a session root: `what` names it ("the run directory"),
// `advice` says what else to give ("or give another --run-dir").
Result<void> CheckTrustedDirectory(const std::string& path, std::string_view what, std::string_view advice);

// Creates `path` if need be (a regular file, never through a link), locks it for as long as the
// descriptor lives and writes this process's pid into it, then `note` on a line of its own (what
// the holder works on, for the message a second one gets). nullopt when another process holds
// the lock (the file names its pid).
Result<std::optional<ScopedFd>> LockPidFile(const std::string& path, std::string_view note = {});

// What a file of LockPidFile's says, read without taking its lock: whether a process holds the
// lock now, the pid and the note written by the last holder (empty when it wrote none). nullopt
// when there is no such file, or it is not a regular file.
struct PidFileHolder {
  bool held = false;
  std::string pid;
  std::string note;
};
std::optional<PidFileHolder> ReadPidFile(const std::string& path);

}  // namespace hvprof
