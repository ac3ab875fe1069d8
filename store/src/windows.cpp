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
    // A window is a directory hvprofd made: a symbolic link by that name is not followed.
    if (!name.starts_with(kWindowPrefix) || it->symlink_status(ec).type() != fs::file_type::directory) continue;
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
  if (!m.window->raw_dropped) {
    // Only an aggregate that stands for every sample, and names the regions its per-process
    // addresses fell in (context.hvc goes too), may stay alone.
    const std::string aggregate_path = directory + "/" + kAggregateFile;
    auto aggregate = ReadAggregate(aggregate_path);
    if (!aggregate) {
      return MakeError(ErrorKind::kBadState, "{} has no readable {} ({}): its raw samples are all it has", directory,
                       kAggregateFile, aggregate.error().message());
    }
    if (aggregate.value().source_bytes != m.samples_file_bytes ||
        (m.context.has_value() && !aggregate.value().has_regions)) {
      return MakeError(ErrorKind::kBadState, "{}'s {} does not stand for all its samples: its raw samples stay",
                       directory, kAggregateFile);
    }
    m.window->raw_dropped = true;
    HVPROF_TRYV(WriteFileAtomically(directory + "/" + kMetadataFile, SerializeMetadata(m)));
  }
  // Again after a crash between the two steps: the files go whichever step it reached.
  for (const char* file : {kSamplesFile, kContextFile, kSchedFile}) {
    const std::string path = directory + "/" + file;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return MakeError(ErrorKind::kIo, "cannot remove {}: {}", path, std::strerror(errno));
    }
  }
  return Ok();
}

namespace {

constexpr std::string_view kRemovingPrefix = ".removing-";

// Renamed first, so that a window half removed (a crash, a report reading it) is never listed as
// one; the rest of it goes at the next prune if this one fails.
bool RemoveWindow(const WindowEntry& entry, PruneOutcome& outcome) {
  const fs::path from(entry.directory);
  const fs::path to = from.parent_path() / (std::string(kRemovingPrefix) + from.filename().string());
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) {
    outcome.problems.push_back(fmt::format("cannot remove {}: {}", entry.directory, ec.message()));
    return false;
  }
  // Renamed, it is no window any more; what remove_all leaves goes at the next prune.
  ++outcome.removed;
  fs::remove_all(to, ec);
  if (ec) outcome.problems.push_back(fmt::format("cannot remove {} yet: {}", to.string(), ec.message()));
  return true;
}

// What a crash left of windows being removed.
void FinishRemovals(const std::string& samples_dir, PruneOutcome& outcome) {
  std::error_code ec;
  for (fs::directory_iterator it(samples_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->path().filename().string().starts_with(kRemovingPrefix)) continue;
    std::error_code removed;
    fs::remove_all(it->path(), removed);
    if (removed) outcome.problems.push_back(fmt::format("cannot remove {}: {}", it->path().string(), removed.message()));
  }
}

bool HasRawSamples(const WindowEntry& entry) {
  std::error_code ec;
  return !entry.window.raw_dropped || fs::exists(entry.directory + "/" + kSamplesFile, ec);
}

}  // namespace

PruneOutcome PruneWindows(std::vector<WindowEntry>& windows, const WindowBudget& budget, uint64_t now_ns,
                          uint64_t other_bytes) {
  PruneOutcome outcome;
  if (!windows.empty()) FinishRemovals(fs::path(windows.front().directory).parent_path().string(), outcome);
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
    if (!HasRawSamples(entry)) continue;
    if (auto dropped = DropRawSamples(entry.directory); !dropped) {
      if (dropped.error().kind() != ErrorKind::kBadState) outcome.problems.push_back(dropped.error().message());
      continue;
    }
    if (!entry.window.raw_dropped) ++outcome.thinned;
    entry.window.raw_dropped = true;
    const uint64_t after = DiskBytes(entry.directory);
    total -= entry.bytes - std::min(entry.bytes, after);
    entry.bytes = after;
  }
  while (over() && first + 1 < windows.size()) {
    if (!RemoveWindow(windows[first], outcome)) break;
    total -= windows[first].bytes;
    ++first;
  }
  windows.erase(windows.begin(), windows.begin() + static_cast<std::ptrdiff_t>(first));
  outcome.kept = windows.size();
  outcome.bytes = total;
  return outcome;
}

}  // namespace hvprof::store
