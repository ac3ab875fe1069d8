// Whole-file helpers with honest errors.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "hvprof/base/error.h"
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
  static Result<OutputFile> Open(const std::string& path);
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

 private:
  OutputFile() = default;
  std::string path_;
  std::string temporary_;  // empty when written in place
  bool replace_ = false;   // a regular file was there: rename over it
  ScopedFd fd_;
  bool standard_output_ = false;
};

// Opens a file in a directory others may write (a session): never through a symbolic link,
// never waiting on a FIFO, and only if what is there is a regular file (a FIFO, a device or a
// link is refused with a message naming it). `flags` as open(2)'s; O_CREAT creates it.
// The last component of a path, and what is before it ("." when there is no slash, "/" for
// a file at the root).
std::string Basename(const std::string& path);
std::string Dirname(const std::string& path);
// The directory of the running program (/proc/self/exe), where hvprof's programs find each
// other; "." if it cannot be read.
std::string ExecutableDirectory();

Result<ScopedFd> OpenRegularFile(const std::string& path, int flags, int mode = 0644);

// Writes all of `data` to fd, retrying on EINTR and short writes.
Result<void> WriteAll(int fd, std::span<const std::byte> data, std::string_view what);

// Creates `path` and its parents (mode 0755). Succeeds if it already exists as a directory.
Result<void> MakeDirectories(const std::string& path);

// Checks a directory a root daemon will write in (a session root): the directory itself is no
// symbolic link, and neither it nor any directory above it can be changed by anyone but root
// and this process's user. Each must be owned by one of them and not writable by others or by
// a group other than root's or the user's; above the directory itself, a sticky directory such
// as /tmp is fine, since others cannot rename what is ours in it. kPermissionDenied names the
// directory at fault, its owner and mode, and what to do.
Result<void> CheckTrustedDirectory(const std::string& path);

// Creates `path` if need be (a regular file, never through a link), locks it for as long as the
// descriptor lives and writes this process's pid into it, then `note` on a line of its own (what
// the holder works on, for the message a second one gets). nullopt when another process holds
// the lock (the file names its pid).
Result<std::optional<ScopedFd>> LockPidFile(const std::string& path, std::string_view note = {});

}  // namespace hvprof
