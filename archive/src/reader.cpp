#include "hvprof/archive/reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string_view>
#include <vector>

#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/base/json_fields.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/base/unique_resource.h"

namespace hvprof::archive {

namespace {

void FreeReader(struct archive* reader) { archive_read_free(reader); }
using Reader = UniqueResource<struct archive*, &FreeReader, nullptr>;

// The components of an entry's name, or an error saying why the name is refused.
Result<std::vector<std::string>> SplitName(const char* raw, bool directory, const std::string& where,
                                           const UnpackLimits& limits) {
  if (raw == nullptr || *raw == '\0') {
    return MakeError(ErrorKind::kCorrupt, "{}: an entry has no name; not unpacked", where);
  }
  std::string_view name(raw);
  const std::string shown = EscapeForTerminal(name.substr(0, 200));
  if (name.size() > limits.max_name_bytes) {
    return MakeError(ErrorKind::kCorrupt, "{}: the name of entry '{}...' is longer than {} bytes; not unpacked", where,
                     shown, limits.max_name_bytes);
  }
  if (name.front() == '/') {
    return MakeError(ErrorKind::kCorrupt,
                     "{}: entry '{}' is an absolute path; not unpacked (an archive hvprof wrote has only relative "
                     "names: this one was made or changed by something else)",
                     where, shown);
  }
  // A tar made again from an unpacked archive (`tar -cf FILE.tar .`) names its entries ./NAME,
  // and the top directory ".".
  while (name.starts_with("./")) name.remove_prefix(2);
  if (directory && (name == "." || name.empty())) return std::vector<std::string>();
  if (directory && name.back() == '/') name.remove_suffix(1);
  std::vector<std::string> parts;
  while (true) {
    const size_t slash = name.find('/');
    const std::string_view part = name.substr(0, slash);
    if (part.empty() || part == "." || part == "..") {
      return MakeError(ErrorKind::kCorrupt,
                       "{}: entry '{}' has an empty, '.' or '..' component and could leave the directory it is "
                       "unpacked in; not unpacked (an archive hvprof wrote has none: this one was made or changed by "
                       "something else)",
                       where, shown);
    }
    parts.emplace_back(part);
    if (slash == std::string_view::npos) break;
    name.remove_prefix(slash + 1);
  }
  return parts;
}

// Opens (creating) each directory of `parts` but the last under `root`, never through a link.
Result<ScopedFd> OpenParent(const std::string& root, const std::vector<std::string>& parts, size_t count) {
  HVPROF_TRY(dir, OpenFile(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  for (size_t i = 0; i < count; ++i) {
    if (::mkdirat(dir.get(), parts[i].c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoError(errno, fmt::format("cannot create {}/{}", root, EscapeForTerminal(parts[i])));
    }
    const int next = ::openat(dir.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return ErrnoError(errno, fmt::format("cannot open {}/{}", root, EscapeForTerminal(parts[i])));
    dir = ScopedFd(next);
  }
  return dir;
}

// The bytes free for us under `directory`, or nullopt when the file system does not say.
std::optional<uint64_t> FreeBytes(const std::string& directory) {
  struct statvfs fs {};
  if (::statvfs(directory.c_str(), &fs) != 0) return std::nullopt;
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

// What an unpacked archive is (its manifest), and where its session was.
Result<Unpacked> ReadManifest(const std::string& destination, const std::string& where) {
  const std::string manifest_path = destination + "/" + kManifestFile;
  auto manifest_text = ReadFileToString(manifest_path, size_t{64} << 20, Links::kRefuse);
  if (!manifest_text) {
    return MakeError(ErrorKind::kInvalidArgument, "{}: holds no {}: it is not an archive `hvprof archive` wrote", where,
                     kManifestFile);
  }
  HVPROF_TRY(manifest, json::Node::Parse(manifest_text.value(), where + ": " + kManifestFile, ErrorKind::kCorrupt));
  HVPROF_TRY(version, manifest.Get<int>("hvprof_archive"));
  if (version != kArchiveVersion) {
    return MakeError(ErrorKind::kUnsupported, "{}: archive format {} is not the {} this hvprof reads; use the hvprof "
                     "that wrote it",
                     where, version, kArchiveVersion);
  }
  Unpacked unpacked;
  unpacked.root = destination;
  unpacked.session_directory = destination + "/" + kSessionFolder;
  HVPROF_TRY(original, manifest.Get<std::string>("session_directory"));
  unpacked.original_directory = std::move(original);
  struct stat st {};
  if (::lstat(unpacked.session_directory.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return MakeError(ErrorKind::kCorrupt, "{}: holds no {}/ folder: no session to report", where, kSessionFolder);
  }
  return unpacked;
}

// `archive_bytes`: how much the tar holds. What it unpacks to cannot be more (a tar stores each
// file's bytes whole), unless an entry is sparse: those are refused, and the sum is checked.
Result<Unpacked> UnpackFrom(struct archive* reader, const std::string& where, const std::string& destination,
                            const UnpackLimits& limits, uint64_t archive_bytes) {
  auto library_error = [&](std::string_view doing) {
    const char* why = archive_error_string(reader);
    return MakeError(ErrorKind::kCorrupt, "{}: {}: {} (is it a tar that `hvprof archive` wrote?)", where, doing,
                     why != nullptr ? EscapeForTerminal(why) : std::string("unknown error"));
  };
  size_t entries = 0;
  uint64_t total = 0;     // what the headers say
  uint64_t written_total = 0;  // what was written
  std::vector<char> buffer(size_t{1} << 16);
  while (true) {
    struct archive_entry* entry = nullptr;
    const int status = archive_read_next_header(reader, &entry);
    if (status == ARCHIVE_EOF) break;
    if (status != ARCHIVE_OK) return library_error("cannot read the next entry");
    if (++entries > limits.max_entries) {
      return MakeError(ErrorKind::kCorrupt, "{}: more than {} entries; not unpacked further", where, limits.max_entries);
    }
    const mode_t type = archive_entry_filetype(entry);
    const char* raw_name = archive_entry_pathname(entry);
    const std::string shown = EscapeForTerminal(raw_name != nullptr ? raw_name : "");
    if (archive_entry_hardlink(entry) != nullptr || (type != AE_IFREG && type != AE_IFDIR)) {
      const char* kind = archive_entry_hardlink(entry) != nullptr ? "a hard link"
                         : type == AE_IFLNK                       ? "a symbolic link"
                         : type == AE_IFCHR || type == AE_IFBLK   ? "a device"
                         : type == AE_IFIFO                       ? "a FIFO"
                                                                  : "not a regular file";
      return MakeError(ErrorKind::kCorrupt,
                       "{}: entry '{}' is {}; an archive holds only regular files and directories, so it is not "
                       "unpacked (this archive was not written by `hvprof archive`, or was changed since)",
                       where, shown, kind);
    }
    const bool directory = type == AE_IFDIR;
    HVPROF_TRY(parts, SplitName(raw_name, directory, where, limits));
    if (directory) {
      if (!parts.empty()) HVPROF_TRYV(OpenParent(destination, parts, parts.size()));
      continue;
    }
    const int64_t size = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : -1;
    if (size < 0 || static_cast<uint64_t>(size) > limits.max_entry_bytes) {
      return MakeError(ErrorKind::kCorrupt, "{}: entry '{}' is {} bytes, more than the {} an archive's file may be; "
                       "not unpacked",
                       where, shown, size < 0 ? std::string("of unknown size") : std::to_string(size),
                       limits.max_entry_bytes);
    }
    if (archive_entry_sparse_count(entry) > 0) {
      return MakeError(ErrorKind::kCorrupt, "{}: entry '{}' is a sparse file, which would unpack to more than the "
                       "archive holds; not unpacked (`hvprof archive` writes none)",
                       where, shown);
    }
    if (__builtin_add_overflow(total, static_cast<uint64_t>(size), &total) || total > limits.max_total_bytes) {
      return MakeError(ErrorKind::kCorrupt, "{}: its files add up to more than {} bytes; not unpacked further", where,
                       limits.max_total_bytes);
    }
    if (total > archive_bytes) {
      return MakeError(ErrorKind::kCorrupt, "{}: its files add up to more than the {} bytes the archive holds: it is "
                       "not a plain tar; not unpacked further",
                       where, archive_bytes);
    }
    // Room for it, with some to spare for everyone else.
    if (const auto free = FreeBytes(destination); free && static_cast<uint64_t>(size) + limits.spare_bytes > *free) {
      return MakeError(ErrorKind::kNoSpace, "{}: entry '{}' needs {} bytes, and {} has {} free (keeping {}); set "
                       "TMPDIR to a directory with room",
                       where, shown, size, destination, *free, limits.spare_bytes);
    }
    HVPROF_TRY(parent, OpenParent(destination, parts, parts.size() - 1));
    const int raw = ::openat(parent.get(), parts.back().c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (raw < 0) {
      if (errno == EEXIST) {
        return MakeError(ErrorKind::kCorrupt, "{}: entry '{}' appears twice (or names a directory); not unpacked",
                         where, shown);
      }
      return ErrnoError(errno, fmt::format("cannot create {}/{}", destination, shown));
    }
    ScopedFd out(raw);
    uint64_t written = 0;
    while (true) {
      const la_ssize_t n = archive_read_data(reader, buffer.data(), buffer.size());
      if (n < 0) return library_error(fmt::format("cannot read entry '{}'", shown));
      if (n == 0) break;
      written += static_cast<uint64_t>(n);
      written_total += static_cast<uint64_t>(n);
      if (written > static_cast<uint64_t>(size) || written_total > archive_bytes) {
        return MakeError(ErrorKind::kCorrupt, "{}: entry '{}' holds more than the {} bytes its header says", where,
                         shown, size);
      }
      HVPROF_TRYV(WriteAll(out.get(), std::as_bytes(std::span(buffer.data(), static_cast<size_t>(n))),
                           destination + "/" + shown));
    }
    if (written != static_cast<uint64_t>(size)) {
      return MakeError(ErrorKind::kCorrupt, "{}: entry '{}' holds {} bytes where its header says {}: the archive was "
                       "cut short",
                       where, shown, written, size);
    }
  }
  return ReadManifest(destination, where);
}

Result<Reader> NewReader() {
  Reader reader(archive_read_new());
  if (!reader.valid()) return MakeError(ErrorKind::kNoSpace, "libarchive: cannot allocate a reader");
  // Tar only (ustar, pax, GNU), uncompressed: what `hvprof archive` writes.
  if (archive_read_support_format_tar(reader.get()) != ARCHIVE_OK ||
      archive_read_support_filter_none(reader.get()) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kInternal, "libarchive: no tar support: {}", archive_error_string(reader.get()));
  }
  return reader;
}

}  // namespace

Result<Unpacked> Unpack(const std::string& archive, const std::string& destination, const UnpackLimits& limits) {
  const std::string where = EscapeForTerminal(archive);
  HVPROF_TRY(fd, OpenFile(archive.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", where));
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorKind::kInvalidArgument, "{} is not a regular file; an archive is a tar file", where);
  }
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  HVPROF_TRY(reader, NewReader());
  if (archive_read_open_fd(reader.get(), fd.get(), 1 << 16) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kCorrupt, "{}: not a tar file: {}", where, EscapeForTerminal(archive_error_string(reader.get())));
  }
  return UnpackFrom(reader.get(), where, destination, limits, static_cast<uint64_t>(st.st_size));
}

Result<Unpacked> UnpackMemory(std::span<const uint8_t> bytes, const std::string& name, const std::string& destination,
                              const UnpackLimits& limits) {
  HVPROF_TRY(reader, NewReader());
  if (archive_read_open_memory(reader.get(), bytes.data(), bytes.size()) != ARCHIVE_OK) {
    return MakeError(ErrorKind::kCorrupt, "{}: not a tar file: {}", name, EscapeForTerminal(archive_error_string(reader.get())));
  }
  return UnpackFrom(reader.get(), name, destination, limits, bytes.size());
}

}  // namespace hvprof::archive
