#include "hvprof/report/source.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <optional>

#include "hvprof/archive/reader.h"
#include "hvprof/base/files.h"
#include "hvprof/store/session.h"

namespace hvprof::report {

namespace {

constexpr std::string_view kArchivePrefix = "archive:";
constexpr std::string_view kUnpackPrefix = "hvprof-archive-";
constexpr const char* kUnpackLock = "lock";  // held while the report that made it lives
constexpr const char* kUnpackFolder = "tar";  // what the archive unpacks to

// A directory of our own (mkdtemp: mode 0700, a fresh name) that goes, with all in it, when the
// last copy of the pointer to it does; `lock` is held until then, so that another report can
// tell it from one left by a report that was killed.
struct UnpackDirectory {
  std::string path;
  ScopedFd lock;
  ~UnpackDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Removes the unpack directories of this user's earlier reports that were killed (or
// interrupted) while they unpacked or reported: theirs whose lock nobody holds. One without a
// lock yet is taken only after a day (it may be a report just starting).
void RemoveStaleUnpacks(const std::string& tmp) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kUnpackPrefix)) continue;
    const std::string path = entry.path().string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    auto lock = OpenRegularFile(path + "/" + kUnpackLock, O_RDONLY);
    if (lock) {
      if (::flock(lock.value().get(), LOCK_EX | LOCK_NB) != 0) continue;  // its report lives
    } else if (::time(nullptr) - st.st_mtime < 24 * 3600) {
      continue;
    }
    std::filesystem::remove_all(path, ec);
  }
}

Result<std::shared_ptr<UnpackDirectory>> PrivateDirectory() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  RemoveStaleUnpacks(parent);
  std::string pattern = parent + "/" + std::string(kUnpackPrefix) + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return ErrnoError(errno, fmt::format("cannot create a temporary directory {} to unpack the archive in (set TMPDIR "
                                         "to a directory with room)",
                                         pattern));
  }
  auto directory = std::make_shared<UnpackDirectory>();
  directory->path = pattern;
  // The lock is taken under another name and then given its own: another report that sees the
  // lock file sees it held (without one, the directory is taken only after a day).
  const std::string taking = pattern + "/" + kUnpackLock + ".new";
  HVPROF_TRY(lock, OpenRegularFile(taking, O_RDWR | O_CREAT | O_EXCL, 0600));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return ErrnoError(errno, fmt::format("cannot lock {}", pattern));
  if (::rename(taking.c_str(), (pattern + "/" + kUnpackLock).c_str()) != 0) {
    return ErrnoError(errno, fmt::format("cannot lock {}", pattern));
  }
  directory->lock = std::move(lock);
  if (::mkdir((pattern + "/" + kUnpackFolder).c_str(), 0700) != 0) {
    return ErrnoError(errno, fmt::format("cannot create {}/{}", pattern, kUnpackFolder));
  }
  return directory;
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
    HVPROF_TRY(unpacked, archive::Unpack(file, directory->path + "/" + kUnpackFolder));
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

namespace {

SessionSummary Summarize(const std::string& name, const std::string& directory, bool current) {
  SessionSummary summary;
  summary.name = name;
  summary.directory = directory;
  summary.current = current;
  auto opened = store::OpenSession(directory);
  if (!opened) {
    summary.state = "damaged";
    summary.problem = opened.error().message();
    return summary;
  }
  const store::SessionMetadata& m = opened.value().metadata;
  summary.created_ns = m.created_ns;
  summary.platform = m.platform;
  summary.machine = m.machine;
  summary.sampled_ns = m.last_sample_ns > m.first_sample_ns ? m.last_sample_ns - m.first_sample_ns : 0;
  summary.samples = m.samples_stored;
  summary.window = m.window;
  for (size_t i = 1; i < m.profiling.size(); ++i) {
    const uint64_t stop = m.profiling[i - 1].stop_ns, start = m.profiling[i].start_ns;
    if (stop != 0 && start > stop) summary.stopped_ns += start - stop;
  }
  for (const store::LossField& field : store::kLossFields) {
    if (field.member != &store::LossRecord::unprofiled_domain) summary.lost += m.losses.*field.member;
  }
  const bool running = !m.profiling.empty() && m.profiling.back().stop_ns == 0;
  if (!m.incomplete.empty()) {
    summary.state = "incomplete";
    summary.problem = m.incomplete.front();
  } else if (running && store::SessionWriterAlive(opened.value().directory)) {
    summary.state = "running";
  } else if (running) {
    summary.state = "incomplete";
    summary.problem = "profiling was never stopped, and no hvprofd is writing it";
  } else {
    summary.state = "complete";
  }
  return summary;
}

}  // namespace

std::vector<SessionSummary> ListSessions(const std::string& session_root) {
  const store::SessionPaths paths{session_root};
  std::vector<SessionSummary> sessions;
  std::error_code error;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(paths.samples_dir(), error)) {
    const std::string name = entry.path().filename().string();
    if (name != "current" && store::ValidateSessionName(name) && entry.is_directory(error)) names.push_back(name);
  }
  for (const std::string& name : names) sessions.push_back(Summarize(name, paths.Saved(name), false));
  if (std::filesystem::exists(paths.current() + "/" + store::kMetadataFile, error)) {
    sessions.push_back(Summarize("current", paths.current(), true));
  }
  std::stable_sort(sessions.begin(), sessions.end(), [](const SessionSummary& a, const SessionSummary& b) {
    if (a.created_ns != b.created_ns) return a.created_ns < b.created_ns;
    if (a.current != b.current) return b.current;
    return a.name < b.name;
  });
  // What a report takes when no session is named (ChooseSession): the current session if it has
  // samples, else the newest saved one with samples, else the current one.
  std::optional<size_t> current, newest_saved;
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (sessions[i].current) current = i;
    else if (sessions[i].samples > 0) newest_saved = i;  // oldest first: the last one is the newest
  }
  const std::optional<size_t> chosen =
      current && sessions[*current].samples > 0 ? current : newest_saved ? newest_saved : current;
  if (chosen) sessions[*chosen].chosen = true;
  return sessions;
}

Result<ChosenSession> ChooseSession(const std::string& session_root) {
  ChosenSession chosen;
  chosen.name = "current";
  for (const SessionSummary& session : ListSessions(session_root)) {
    if (session.chosen && !session.current) {
      chosen.name = session.name;
      chosen.note = fmt::format(
          "the current session has no samples: reporting '{0}', the newest saved session with samples "
          "(`hvprof-report SESSION` names another; `hvprof-report --list` lists them)",
          session.name);
      HVPROF_TRY(source, OpenSessionSource(session.directory, session_root));
      source.argument = session.name;
      chosen.source = std::move(source);
      return chosen;
    }
  }
  HVPROF_TRY(source, OpenSessionSource("", session_root));
  chosen.source = std::move(source);
  return chosen;
}

}  // namespace hvprof::report
