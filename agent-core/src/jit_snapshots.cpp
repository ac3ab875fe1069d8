#include "hvprof/agent/jit_snapshots.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/base/process.h"
#include "hvprof/base/probes.h"

HVPROF_PROBE_SEMAPHORE(jit__copied);

namespace hvprof::agent {
namespace {

constexpr auto kPollPeriod = std::chrono::seconds(1);
// How often a watched process's mappings are read again for a jitdump it mapped later: often
// while it is young (it may not have exec'd its runtime yet when first sampled: `sh -c 'exec
// node ...'`), then seldom. While young, each wait is as long as the process has been followed
// (at least kYoungMapsPeriod): 100, 200, 400, 800 and 1600 ms after it was first seen, six reads
// in all where a fixed period read fifteen. Reading /proc/PID/maps walks every mapping: a
// process with a few hundred costs a millisecond of kernel time each time, in hvprofd's share.
constexpr auto kMapsPeriod = std::chrono::seconds(10);
constexpr auto kYoungMapsPeriod = std::chrono::milliseconds(100);
constexpr auto kYoung = std::chrono::seconds(3);
constexpr size_t kCopyBlock = 1 << 20;

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Opens `path` inside `root` (the process's own root: its symlinks resolve inside it, and the
// last component is never a symlink) for reading, but only once it is seen to be a regular
// file: opening a device can act on it. Kernels without openat2 get openat with O_NOFOLLOW.
ScopedFd OpenRegularInRoot(int root, const std::string& path, struct stat* st) {
  open_how how{};
  how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  long fd = ::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how);
  if (fd < 0 && errno == ENOSYS) fd = ::openat(root, path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  ScopedFd located(static_cast<int>(fd));
  if (!located.valid() || ::fstat(located.get(), st) != 0 || !S_ISREG(st->st_mode)) return ScopedFd();
  // Reopened through the descriptor: the very file that was checked.
  return ScopedFd(::open(fmt::format("/proc/self/fd/{}", located.get()).c_str(),
                         O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
}

// A field of /proc/PID/status ("Uid", "NSpid"): its values.
std::vector<uint64_t> StatusField(const std::string& status, std::string_view name) {
  std::vector<uint64_t> values;
  std::istringstream lines(status);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with(name) || line.size() <= name.size() || line[name.size()] != ':') continue;
    std::istringstream fields(line.substr(name.size() + 1));
    uint64_t value = 0;
    while (fields >> value) values.push_back(value);
    break;
  }
  return values;
}

// /proc/PID/stat's start time (field 22).
uint64_t StartTicks(const std::string& stat) {
  const auto fields = ProcStatFields(stat);
  return fields.size() > 19 ? std::strtoull(std::string(fields[19]).c_str(), nullptr, 10) : 0;
}

bool Ended(const ScopedFd& pidfd) {
  if (!pidfd.valid()) return true;
  pollfd pfd{pidfd.get(), POLLIN, 0};
  return ::poll(&pfd, 1, 0) > 0;
}

}  // namespace

JitSnapshots::JitSnapshots(std::string session_directory, Options options, std::vector<store::JitRecord> existing)
    : directory_(std::move(session_directory)), options_(std::move(options)), records_(std::move(existing)) {
  // Two descriptors per followed process, and room for everything else hvprofd opens.
  const size_t by_limit = RaiseDescriptorLimit() > 512 ? (RaiseDescriptorLimit() - 256) / 2 : 128;
  if (options_.max_processes == 0) options_.max_processes = std::min<size_t>(4096, by_limit);
  for (const store::JitRecord& record : records_) session_bytes_ += record.bytes;
  for (const std::string& program : options_.skip_programs) {
    struct stat st {};
    if (::stat(program.c_str(), &st) == 0) skipped_programs_.emplace_back(st.st_dev, st.st_ino);
  }
}

bool JitSnapshots::Skipped(const Process& process) const {
  if (skipped_programs_.empty()) return false;
  struct stat st {};  // the program file itself (the link is followed)
  if (::stat(fmt::format("{}/{}/exe", options_.proc_root, process.pid).c_str(), &st) != 0) return false;
  return std::find(skipped_programs_.begin(), skipped_programs_.end(), std::make_pair(st.st_dev, st.st_ino)) !=
         skipped_programs_.end();
}

JitSnapshots::~JitSnapshots() = default;

void JitSnapshots::WatchNew(uint64_t key, uint16_t domain, uint32_t pid) {
  last_key_ = key;
  auto it = processes_.find(key);
  if (it != processes_.end()) {
    // A pid seen again after its process ended may be another process now: looked up again, at
    // most once a poll period.
    if (!it->second.ended || std::chrono::steady_clock::now() - it->second.maps_read < kPollPeriod) return;
    processes_.erase(it);
  }
  if (pid == 0 || pid > 0x3fffffff) return;  // the idle task, or no pid at all
  Process& process = processes_[key];
  process.domain = domain;
  process.pid = pid;
  process.maps_read = std::chrono::steady_clock::now();
  queued_.push_back(key);
}

void JitSnapshots::Start(Process& process) {
  process.started = true;
  process.maps_read = process.started_at = std::chrono::steady_clock::now();
  if (Skipped(process)) {
    process.ended = true;  // looked at again if sampled a second later: the pid may be reused
    return;
  }
  if (live_ >= options_.max_processes) {
    ++unwatched_;
    process.ended = true;
    return;
  }
  process.pidfd = ScopedFd(PidfdOpen(static_cast<pid_t>(process.pid)));
  if (!process.pidfd.valid()) {
    process.ended = true;  // gone already (or no pidfd: a kernel before 5.3)
    return;
  }
  ++live_;
  const std::string proc = fmt::format("{}/{}", options_.proc_root, process.pid);
  auto status = ReadFileToString(proc + "/status");
  auto stat = ReadFileToString(proc + "/stat");
  process.root = ScopedFd(::open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  // All read while the pidfd says the process it pinned still runs: they are that process's.
  const auto uids = status ? StatusField(status.value(), "Uid") : std::vector<uint64_t>();
  if (!stat || !process.root.valid() || uids.size() < 2 || Ended(process.pidfd)) {
    End(process);
    return;
  }
  const auto ns_pids = StatusField(status.value(), "NSpid");
  process.uid = static_cast<uid_t>(uids[0]);
  process.euid = static_cast<uid_t>(uids[1]);
  process.ns_pid = ns_pids.empty() ? process.pid : static_cast<uint32_t>(ns_pids.back());
  process.start_ticks = StartTicks(stat.value());
  AddFile(process, "perf-map", fmt::format("tmp/perf-{}.map", process.ns_pid), options_.max_perf_map_bytes);
  FindJitDumps(process);
}

void JitSnapshots::End(Process& process) {
  if (process.pidfd.valid()) --live_;
  process.ended = true;
  process.maps_read = std::chrono::steady_clock::now();
  process.root.Reset();
  process.pidfd.Reset();
}

void JitSnapshots::FindJitDumps(Process& process) {
  process.maps_read = std::chrono::steady_clock::now();
  auto maps = ReadFileToString(fmt::format("{}/{}/maps", options_.proc_root, process.pid));
  // Read while the process still ran: the pid may be another process's now.
  if (!maps || Ended(process.pidfd)) return;
  const std::string wanted = fmt::format("/jit-{}.dump", process.ns_pid);
  std::istringstream lines(maps.value());
  std::string line;
  while (std::getline(lines, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos || !line.ends_with(wanted)) continue;
    std::string path = line.substr(slash + 1);  // inside the process's root
    const bool known = std::any_of(process.files.begin(), process.files.end(),
                                   [&](const File& file) { return file.path == path; });
    const auto dumps = std::count_if(process.files.begin(), process.files.end(),
                                     [](const File& file) { return file.kind == "jitdump"; });
    if (!known && size_t(dumps) < options_.max_jitdumps_per_process) {
      AddFile(process, "jitdump", std::move(path), options_.max_jitdump_bytes);
    }
  }
}

void JitSnapshots::AddFile(Process& process, std::string kind, std::string path, uint64_t max_bytes) {
  File file;
  file.kind = std::move(kind);
  file.path = std::move(path);
  file.max_bytes = max_bytes;
  file.record = SIZE_MAX;  // a record once something was found
  process.files.push_back(std::move(file));
}

void JitSnapshots::SetProblem(File& file, std::string problem) {
  if (file.record != SIZE_MAX) records_[file.record].problem = std::move(problem);
}

void JitSnapshots::Copy(Process& process, File& file, uint64_t* budget) {
  if (file.failed || !process.root.valid()) return;
  struct stat st {};
  ScopedFd in = OpenRegularInRoot(process.root.get(), file.path, &st);
  if (!in.valid()) return;  // not written (yet), removed (the last copy stands), or not a file
  if (file.record == SIZE_MAX) {
    store::JitRecord record;
    record.domain = process.domain;
    record.pid = process.pid;
    record.start_ticks = process.start_ticks;
    record.kind = file.kind;
    record.source = "/" + file.path;
    record.file = fmt::format("{}/{}-{}-{}.{}", store::kJitDirectory, process.domain, process.pid,
                              process.start_ticks, file.kind == "jitdump" ? "dump" : "map");
    // Two jitdumps of one process (a runtime that restarted its agent), or a continued session's
    // copy of the same name, get their own copies.
    for (const store::JitRecord& other : records_) {
      if (other.file == record.file) record.file += fmt::format(".{}", records_.size());
    }
    file.record = records_.size();
    records_.push_back(std::move(record));
  }
  store::JitRecord& record = records_[file.record];
  // The runtime writes its files as itself: a file of anyone else (root included: a process
  // cannot make one, short of a link or a bind mount) was planted. A second name for the file is
  // a hard link to something that may not be the runtime's to show.
  if (st.st_uid != process.uid && st.st_uid != process.euid) {
    SetProblem(file, fmt::format("owned by uid {}, not by the process's user ({}): not read", st.st_uid, process.euid));
    file.failed = true;
    return;
  }
  if (st.st_nlink != 1) {
    SetProblem(file, fmt::format("has {} names (hard links), where a runtime's file has one: not read", st.st_nlink));
    file.failed = true;
    return;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // A sparse file costs its writer nothing and a copy its full size.
  if (size > (1u << 20) && uint64_t(st.st_blocks) * 512 < size / 2) {
    SetProblem(file, fmt::format("sparse ({} bytes, {} of them written): not read", size, uint64_t(st.st_blocks) * 512));
    file.failed = true;
    return;
  }
  const int64_t mtime_ns = int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  const bool same_file = st.st_dev == file.device && st.st_ino == file.inode;
  uint64_t from = 0;
  if (same_file && size >= file.copied && (size > file.copied || mtime_ns == file.mtime_ns)) {
    from = file.copied;  // it grew (runtimes append): copy the new tail only
    if (size == file.copied) return;
  }
  const uint64_t session_left = options_.max_session_bytes - std::min(options_.max_session_bytes, session_bytes_);
  uint64_t until = std::min(size, file.max_bytes);
  until = std::min(until, from + std::min(session_left, *budget));
  record.cut = size > file.max_bytes;
  if (until <= from && from != 0) return;  // no budget left now: the next poll goes on
  const std::string out_path = directory_ + "/" + record.file;
  if (auto made = MakeDirectories(directory_ + "/" + store::kJitDirectory); !made) {
    file.failed = true;
    SetProblem(file, made.error().message());
    return;
  }
  const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (from == 0 ? O_TRUNC : O_APPEND);
  // Readable in the session by whom the runtime let read it.
  auto out = OpenRegularFile(out_path, flags, static_cast<int>(st.st_mode & 0644));
  if (!out) {
    file.failed = true;
    SetProblem(file, out.error().message());
    return;
  }
  if (from == 0) (void)::fchmod(out.value().get(), st.st_mode & 0644);
  std::vector<char> block(kCopyBlock);
  uint64_t offset = from;
  while (offset < until) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(block.size(), until - offset));
    const ssize_t got = ::pread(in.get(), block.data(), want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // shrank under us: what was read stands
    auto written = WriteAll(out.value().get(), std::as_bytes(std::span(block.data(), static_cast<size_t>(got))),
                            out_path);
    if (!written) {
      // A full disk: the samples matter more than names. Keep what was copied, stop copying.
      file.failed = true;
      SetProblem(file, fmt::format("copy stopped at {} bytes: {}", offset, written.error().message()));
      break;
    }
    offset += static_cast<uint64_t>(got);
  }
  if (session_bytes_ + (offset - from) >= options_.max_session_bytes && offset < std::min(size, file.max_bytes)) {
    SetProblem(file, fmt::format("copy stopped at {} bytes: the session's copies reached their bound of {} bytes",
                                 offset, options_.max_session_bytes));
  }
  session_bytes_ += offset - from;
  *budget -= std::min(*budget, offset - from);
  file.device = st.st_dev;
  file.inode = st.st_ino;
  file.copied = offset;
  file.mtime_ns = mtime_ns;
  record.bytes = offset;
  if (offset != from) {
    HVPROF_PROBE(jit__copied, process.domain, process.pid, record.kind.c_str(), offset - from, offset);
  }
}

void JitSnapshots::Poll(bool now) {
  uint64_t budget = now ? UINT64_MAX : options_.max_bytes_per_poll;
  // Processes first seen since the last call: looked up while they still run.
  std::vector<uint64_t> queued;
  queued.swap(queued_);
  for (uint64_t key : queued) {
    auto it = processes_.find(key);
    if (it == processes_.end() || it->second.started) continue;
    Start(it->second);
    young_.push_back(key);
    for (File& file : it->second.files) Copy(it->second, file, &budget);
  }
  const auto time = std::chrono::steady_clock::now();
  // Young processes without a jitdump yet: their mappings again, soon.
  std::erase_if(young_, [&](uint64_t key) {
    auto it = processes_.find(key);
    if (it == processes_.end() || it->second.ended || time - it->second.started_at > kYoung) return true;
    Process& process = it->second;
    const bool has_dump = std::any_of(process.files.begin(), process.files.end(),
                                      [](const File& file) { return file.kind == "jitdump"; });
    if (has_dump) return true;
    const auto wait = std::max<std::chrono::steady_clock::duration>(kYoungMapsPeriod,
                                                                     process.maps_read - process.started_at);
    if (time - process.maps_read >= wait) {
      FindJitDumps(process);
      for (File& file : process.files) {
        if (file.kind == "jitdump" && file.record == SIZE_MAX) Copy(process, file, &budget);
      }
    }
    return false;
  });
  if (!now && time - last_poll_ < kPollPeriod) return;
  last_poll_ = time;
  for (auto& [key, process] : processes_) {
    if (process.ended || !process.started) continue;
    const bool ended = Ended(process.pidfd);
    if (!ended && time - process.maps_read >= kMapsPeriod) FindJitDumps(process);
    // A process that ended has written its last (DumpPerfMapAtExit writes on the way out): one
    // last copy, through the root it had.
    uint64_t unlimited = UINT64_MAX;
    for (File& file : process.files) Copy(process, file, ended ? &unlimited : &budget);
    if (ended) End(process);
  }
}

void JitSnapshots::CopyAll() {
  last_poll_ = {};
  Poll(true);
}

}  // namespace hvprof::agent
