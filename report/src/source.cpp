#include "hvprof/report/source.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "hvprof/archive/reader.h"
#include "hvprof/store/session.h"

namespace hvprof::report {

namespace {

constexpr std::string_view kArchivePrefix = "archive:";

// A directory of our own (mkdtemp: mode 0700, a fresh name) that goes, with all in it, when the
// last copy of the returned pointer does.
Result<std::shared_ptr<std::string>> PrivateDirectory() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hvprof-archive-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return ErrnoError(errno, fmt::format("cannot create a temporary directory {} to unpack the archive in (set TMPDIR "
                                         "to a directory with room)",
                                         pattern));
  }
  return std::shared_ptr<std::string>(new std::string(pattern), [](std::string* path) {
    std::error_code ec;
    std::filesystem::remove_all(*path, ec);
    delete path;
  });
}

}  // namespace

Result<SessionSource> OpenSessionSource(const std::string& argument, const std::string& session_root) {
  store::SessionPaths paths{session_root};
  SessionSource source;
  source.argument = argument;
  if (argument.starts_with(kArchivePrefix)) {
    const std::string file = argument.substr(kArchivePrefix.size());
    if (file.empty()) return MakeError(ErrorKind::kInvalidArgument, "archive: name the file: archive:FILE.tar");
    HVPROF_TRY(directory, PrivateDirectory());
    HVPROF_TRY(unpacked, archive::Unpack(file, *directory));
    source.directory = unpacked.session_directory;
    source.shown_directory = unpacked.original_directory;
    source.build_id_roots = {unpacked.root};
    source.keep_alive = directory;
    return source;
  }
  source.directory = argument.empty() ? paths.current() : argument;
  if (!argument.empty() && argument.find('/') == std::string::npos && store::ValidateSessionName(argument)) {
    source.directory = paths.Saved(argument);
  }
  return source;
}

}  // namespace hvprof::report
