#include "hvprof/store/windows.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "hvprof/base/files.h"
#include "hvprof/store/context_file.h"
#include "hvprof/store/sched_file.h"

namespace hvprof::store {

namespace fs = std::filesystem;

std::string WindowName(uint64_t index, uint64_t start_ns) {
  const std::time_t seconds = static_cast<std::time_t>(start_ns / 1'000'000'000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  return fmt::format("{}{:08}-{}", kWindowPrefix, index, stamp);
}

uint64_t DiskBytes(const std::string& directory) {
  uint64_t bytes = 0;
  std::error_code ec;
  struct stat st {};
  if (::lstat(directory.c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  for (fs::recursive_directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    if (::lstat(it->path().c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

namespace {

// Samples taken but not stored: not the domains left unprofiled on purpose, nor the platform's
// estimate of what throttling kept from being taken.
uint64_t LostSamples(const LossRecord& l) {
  return l.ring_full + l.corrupt_index + l.no_ring + l.malformed_records + l.store_failed + l.platform_lost;
}

}  // namespace

WindowList ListWindows(const SessionPaths& paths) {
  WindowList list;
  std::error_code ec;
  for (fs::directory_iterator it(paths.samples_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(kWindowPrefix) || !it->is_directory(ec)) continue;
    auto opened = OpenSession(it->path().string());
    if (!opened || !opened.value().metadata.window) {
      list.problems.push_back(fmt::format("{} is named as a window of continuous profiling but is not one: {}",
                                          it->path().string(),
                                          opened ? std::string("its session.json has no window") : opened.error().message()));
      continue;
    }
    const SessionMetadata& m = opened.value().metadata;
    WindowEntry entry{.name = name, .directory = it->path().string(), .window = *m.window,
                      .samples = m.samples_stored, .lost = LostSamples(m.losses), .bytes = DiskBytes(it->path().string())};
    list.windows.push_back(std::move(entry));
  }
  std::sort(list.windows.begin(), list.windows.end(), [](const WindowEntry& a, const WindowEntry& b) {
    return std::tie(a.window.index, a.name) < std::tie(b.window.index, b.name);
  });
  return list;
}

Result<void> DropRawSamples(const std::string& directory) {
  HVPROF_TRY(opened, OpenSession(directory));
  SessionMetadata m = std::move(opened.metadata);
  if (!m.window) return MakeError(ErrorKind::kBadState, "{} is not a window of continuous profiling", directory);
  struct stat st {};
  if (::stat((directory + "/" + kAggregateFile).c_str(), &st) != 0) {
    return MakeError(ErrorKind::kBadState, "{} has no {}: its raw samples are all it has", directory, kAggregateFile);
  }
  if (!m.window->raw_dropped) {
    m.window->raw_dropped = true;
    HVPROF_TRYV(WriteFileAtomically(directory + "/" + kMetadataFile, SerializeMetadata(m)));
  }
  for (const char* file : {kSamplesFile, kContextFile, kSchedFile}) {
    const std::string path = directory + "/" + file;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return MakeError(ErrorKind::kIo, "cannot remove {}: {}", path, std::strerror(errno));
    }
  }
  return Ok();
}

namespace {

bool RemoveWindow(const WindowEntry& entry, PruneOutcome& outcome) {
  std::error_code ec;
  fs::remove_all(entry.directory, ec);
  if (ec) {
    outcome.problems.push_back(fmt::format("cannot remove {}: {}", entry.directory, ec.message()));
    return false;
  }
  ++outcome.removed;
  return true;
}

}  // namespace

PruneOutcome PruneWindows(const SessionPaths& paths, const WindowBudget& budget, uint64_t now_ns,
                          uint64_t other_bytes) {
  PruneOutcome outcome;
  WindowList list = ListWindows(paths);
  outcome.problems = std::move(list.problems);
  std::vector<WindowEntry>& windows = list.windows;
  // By age: whole windows, the newest kept.
  size_t first = 0;
  if (budget.age_ns != 0 && now_ns > budget.age_ns) {
    const uint64_t oldest_kept = now_ns - budget.age_ns;
    while (first + 1 < windows.size() && windows[first].window.end_ns != 0 &&
           windows[first].window.end_ns < oldest_kept) {
      if (!RemoveWindow(windows[first], outcome)) break;
      ++first;
    }
  }
  uint64_t total = 0;
  for (size_t i = first; i < windows.size(); ++i) total += windows[i].bytes;
  const auto over = [&] { return budget.bytes != 0 && total + other_bytes > budget.bytes; };
  // By bytes: first the raw samples of the oldest windows, then whole windows.
  for (size_t i = first; over() && i + 1 < windows.size(); ++i) {
    WindowEntry& entry = windows[i];
    if (entry.window.raw_dropped) continue;
    if (auto dropped = DropRawSamples(entry.directory); !dropped) {
      if (dropped.error().kind() != ErrorKind::kBadState) outcome.problems.push_back(dropped.error().message());
      continue;
    }
    ++outcome.thinned;
    const uint64_t after = DiskBytes(entry.directory);
    total -= entry.bytes - std::min(entry.bytes, after);
    entry.bytes = after;
  }
  while (over() && first + 1 < windows.size()) {
    if (!RemoveWindow(windows[first], outcome)) break;
    total -= windows[first].bytes;
    ++first;
  }
  outcome.kept = windows.size() - first;
  outcome.bytes = total;
  return outcome;
}

}  // namespace hvprof::store
