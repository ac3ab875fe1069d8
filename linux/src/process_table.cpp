#include "hvprof/linux/process_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hvprof/base/files.h"
#include "hvprof/base/process.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/linux/image_reader.h"

namespace hvprof::linux_host {

using hvpmu::DomainId;
using hvpmu::kMaxVcpus;

namespace {

constexpr size_t kMaxAncestry = 4096;

bool ParseU64(std::string_view text, uint64_t* out, int base = 10) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out, base);
  return error == std::errc() && end == text.data() + text.size();
}

std::vector<uint32_t> ListPids(const std::string& proc_root) {
  std::vector<uint32_t> pids;
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return pids;
  while (const dirent* entry = ::readdir(dir)) {
    uint64_t pid = 0;
    if (ParseU64(entry->d_name, &pid) && pid > 0 && pid < kNoTask) {
      pids.push_back(static_cast<uint32_t>(pid));
    }
  }
  ::closedir(dir);
  std::sort(pids.begin(), pids.end());
  return pids;
}

std::string StripNewline(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

// The cgroup paths of a process, one per hierarchy line of /proc/PID/cgroup.
std::vector<std::string> ParseCgroups(const std::string& text) {
  std::vector<std::string> paths;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second != std::string_view::npos) {
      std::string path;
      if (NormalizeCgroupPath(line.substr(second + 1), &path)) paths.push_back(path);
    }
    pos = end + 1;
  }
  return paths;
}

std::optional<DomainId> MatchCgroups(const DomainMap& map, const std::vector<std::string>& paths) {
  std::optional<DomainId> best;
  size_t best_length = 0;
  for (const std::string& path : paths) {
    for (const DomainMapEntry& entry : map.entries) {
      if (entry.kind != DomainMapEntry::Kind::kCgroup) continue;
      if (CgroupWithin(path, entry.cgroup) && (!best || entry.cgroup.size() > best_length)) {
        best = entry.domain;
        best_length = entry.cgroup.size();
      }
    }
  }
  return best;
}

}  // namespace

struct ProcessTable::ProcEntry {
  uint32_t ppid = 0;
  uint64_t start_ticks = 0;
  std::string comm;
  std::vector<std::string> cgroups;
  bool cgroups_known = false;
  std::vector<Mapping> mappings;  // path, start, end, pgoff; key in build_id until filled
  std::vector<std::string> keys;
};

ProcessTable::ProcessTable(DomainRegistry& registry, Options options)
    : registry_(registry), options_(std::move(options)) {
  if (options_.read_elf) images_ = std::make_unique<ImageReader>();
}

ProcessTable::~ProcessTable() = default;

int32_t ProcessTable::ParseVcpuName(std::string_view comm) {
  for (size_t i = 0; i + 3 <= comm.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(comm[i])) != 'c' ||
        std::tolower(static_cast<unsigned char>(comm[i + 1])) != 'p' ||
        std::tolower(static_cast<unsigned char>(comm[i + 2])) != 'u') {
      continue;
    }
    size_t j = i + 3;
    while (j < comm.size() && j < i + 5 && (comm[j] == ' ' || comm[j] == '_' || comm[j] == '-')) ++j;
    size_t k = j;
    while (k < comm.size() && k < j + 5 && std::isdigit(static_cast<unsigned char>(comm[k]))) ++k;
    uint64_t value = 0;
    if (k > j && ParseU64(comm.substr(j, k - j), &value) && value < kMaxVcpus) {
      return static_cast<int32_t>(value);
    }
  }
  return -1;
}

bool ProcessTable::ReadProc(uint32_t pid, ProcEntry* entry) const {
  const std::string dir = fmt::format("{}/{}", options_.proc_root, pid);
  auto stat = hvprof::ReadFileToString(dir + "/stat");
  if (!stat) return false;
  // "pid (comm) S ppid ... starttime(22)": the comm may hold spaces and parentheses.
  const std::string& text = stat.value();
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  entry->comm = text.substr(open + 1, close - open - 1);
  const std::vector<std::string_view> fields = hvprof::ProcStatFields(text);
  uint64_t value = 0;
  if (fields.size() > 1 && ParseU64(fields[1], &value)) entry->ppid = static_cast<uint32_t>(value);
  if (fields.size() > 19 && ParseU64(fields[19], &value)) entry->start_ticks = value;
  if (auto comm = hvprof::ReadFileToString(dir + "/comm")) entry->comm = StripNewline(comm.value());
  if (auto cgroup = hvprof::ReadFileToString(dir + "/cgroup")) {
    entry->cgroups = ParseCgroups(cgroup.value());
    entry->cgroups_known = true;
  }
  if (auto maps = hvprof::ReadFileToString(dir + "/maps")) {
    // start-end perms offset major:minor inode path
    const std::string& lines = maps.value();
    size_t line_start = 0;
    while (line_start < lines.size()) {
      size_t line_end = lines.find('\n', line_start);
      if (line_end == std::string::npos) line_end = lines.size();
      const std::string_view line(lines.data() + line_start, line_end - line_start);
      line_start = line_end + 1;
      std::vector<std::string_view> parts;
      size_t p = 0;
      while (p < line.size() && parts.size() < 5) {
        while (p < line.size() && line[p] == ' ') ++p;
        const size_t e = std::min(line.find(' ', p), line.size());
        if (e > p) parts.push_back(line.substr(p, e - p));
        p = e;
      }
      while (p < line.size() && line[p] == ' ') ++p;
      std::string_view path = p < line.size() ? line.substr(p) : std::string_view();
      if (parts.size() < 5 || parts[1].size() < 3 || parts[1][2] != 'x' || path.empty() ||
          path.front() != '/') {
        continue;
      }
      constexpr std::string_view kDeleted = " (deleted)";
      if (path.size() > kDeleted.size() && path.substr(path.size() - kDeleted.size()) == kDeleted) {
        path.remove_suffix(kDeleted.size());
      }
      const size_t dash = parts[0].find('-');
      Mapping mapping;
      uint64_t inode = 0;
      if (dash == std::string_view::npos || !ParseU64(parts[0].substr(0, dash), &mapping.start, 16) ||
          !ParseU64(parts[0].substr(dash + 1), &mapping.end, 16) ||
          !ParseU64(parts[2], &mapping.pgoff, 16) || !ParseU64(parts[4], &inode) ||
          mapping.end <= mapping.start) {
        continue;
      }
      mapping.path = std::string(path);
      entry->mappings.push_back(std::move(mapping));
      entry->keys.push_back(inode != 0 ? fmt::format("dev:{}:ino:{}", parts[3], inode)
                                       : "path:" + std::string(path));
    }
  }
  return true;
}

void ProcessTable::AssignDomain(Process& process, const Process* parent,
                                const std::vector<std::string>* cgroups) {
  const DomainMap& map = registry_.map();
  if (auto rule = map.PidRule(process.pid)) {
    process.domain = *rule;
    process.origin = Process::Origin::kPidRule;
    return;
  }
  if (parent != nullptr && parent->origin == Process::Origin::kPidRule) {
    process.domain = parent->domain;
    process.origin = Process::Origin::kPidRule;
    return;
  }
  if (cgroups != nullptr) {
    if (auto rule = MatchCgroups(map, *cgroups)) {
      process.domain = *rule;
      process.origin = Process::Origin::kCgroup;
    } else {
      process.domain = 0;
      process.origin = Process::Origin::kDefault;
    }
    return;
  }
  // Gone before we could read its cgroup: a child starts in its parent's.
  if (parent != nullptr) {
    process.domain = parent->domain;
    process.origin = parent->origin;
  } else {
    process.domain = 0;
    process.origin = Process::Origin::kDefault;
  }
}

Process& ProcessTable::Create(uint32_t pid, uint32_t ppid, const std::vector<std::string>* cgroups,
                              uint64_t birth_ns, std::string comm) {
  auto it = live_.find(pid);
  if (it != live_.end()) {
    recent_.fill(nullptr);
    live_.erase(it);
  }
  Process process;
  process.pid = pid;
  process.ppid = ppid;
  process.birth_ns = birth_ns;
  process.comm = std::move(comm);
  const Process* parent = ppid != 0 && ppid != pid ? Find(ppid) : nullptr;
  AssignDomain(process, parent, cgroups);
  Process& created = live_.emplace(pid, std::move(process)).first->second;
  context::ContextEvent born;
  born.kind = context::ContextKind::kProcess;
  born.domain = created.domain;
  born.pid = pid;
  born.time_ns = birth_ns;
  born.comm = created.comm;
  Emit(std::move(born));
  return created;
}

void ProcessTable::Emit(context::ContextEvent event) {
  ++events_made_;
  if (events_.size() >= kMaxPendingEvents) {
    // Nobody takes them (no agent): the oldest go, counted.
    events_.pop_front();
    ++events_first_;
    ++events_dropped_;
  }
  events_.push_back(std::move(event));
}

void ProcessTable::EmitMapping(const Process& process, const Mapping& mapping, uint64_t time_ns) {
  context::ContextEvent event;
  event.kind = context::ContextKind::kMapping;
  event.domain = process.domain;
  event.pid = process.pid;
  event.time_ns = time_ns;
  event.start = mapping.start;
  event.end = mapping.end;
  event.bias = mapping.bias;
  event.path = mapping.path;
  event.build_id = mapping.build_id;
  Emit(std::move(event));
}

ProcessTable::Events ProcessTable::TakeEvents(uint64_t from, size_t max) const {
  Events out;
  if (from == 0) {
    // What is alive now, then what came since the oldest kept event: a new agent's start.
    for (const auto& [pid, process] : live_) {
      if (process.exited) continue;
      context::ContextEvent born;
      born.kind = context::ContextKind::kProcess;
      born.domain = process.domain;
      born.pid = pid;
      born.time_ns = process.birth_ns;
      born.comm = process.comm;
      out.events.push_back(std::move(born));
      for (const Mapping& mapping : process.mappings) {
        context::ContextEvent event;
        event.kind = context::ContextKind::kMapping;
        event.domain = process.domain;
        event.pid = pid;
        event.time_ns = process.birth_ns;
        event.start = mapping.start;
        event.end = mapping.end;
        event.bias = mapping.bias;
        event.path = mapping.path;
        event.build_id = mapping.build_id;
        out.events.push_back(std::move(event));
      }
    }
    for (const auto& [key, task] : named_tasks_) {
      context::ContextEvent named;
      named.kind = context::ContextKind::kTask;
      named.domain = task.domain;
      named.pid = task.pid;
      named.tid = static_cast<uint32_t>(key);
      named.comm = task.comm;
      out.events.push_back(std::move(named));
    }
  }
  out.first = std::max(from, events_first_);
  const uint64_t end = events_first_ + events_.size();
  out.next = out.first;
  for (uint64_t seq = out.first; seq < end && out.events.size() < max; ++seq, ++out.next) {
    out.events.push_back(events_[seq - events_first_]);
  }
  out.more = out.next < end;
  return out;
}

void ProcessTable::Acknowledge(uint64_t sequence) {
  while (!events_.empty() && events_first_ < sequence) {
    events_.pop_front();
    ++events_first_;
  }
}

const Process* ProcessTable::Find(uint32_t pid) const {
  auto it = live_.find(pid);
  return it == live_.end() ? nullptr : &it->second;
}

Process& ProcessTable::Lookup(uint32_t pid) {
  // Consecutive samples are mostly of one process: it is kept as the recent one of its pid.
  Process*& recent = recent_[pid % recent_.size()];
  auto it = live_.find(pid);
  if (it != live_.end()) {
    recent = &it->second;
    return it->second;
  }
  ++proc_discoveries_;
  ProcEntry entry;
  if (!ReadProc(pid, &entry)) {
    Process& stub = Create(pid, 0, nullptr, last_time_, std::string());
    return stub;
  }
  // Parents first, so a pid: rule on an ancestor reaches it.
  if (entry.ppid != 0 && entry.ppid != pid && live_.count(entry.ppid) == 0) {
    uint32_t ancestor = entry.ppid;
    std::vector<uint32_t> chain;
    while (ancestor != 0 && live_.count(ancestor) == 0 && chain.size() < kMaxAncestry) {
      chain.push_back(ancestor);
      ProcEntry up;
      if (!ReadProc(ancestor, &up)) break;
      ancestor = up.ppid;
    }
    for (auto a = chain.rbegin(); a != chain.rend(); ++a) {
      if (live_.count(*a) == 0) Get(*a);
    }
  }
  // Found now (at setup, or in a sample of a process perf told nothing of): born at the latest
  // record's time, so that earlier samples of the pid stay with the process that had it before.
  Process& process = Create(pid, entry.ppid, entry.cgroups_known ? &entry.cgroups : nullptr, last_time_,
                            entry.comm);
  process.start_ticks = entry.start_ticks;
  for (size_t i = 0; i < entry.mappings.size(); ++i) {
    Mapping mapping = std::move(entry.mappings[i]);
    FillMapping(pid, &mapping, entry.keys[i]);
    AddMapping(process, std::move(mapping), last_time_);
  }
  return process;
}

void ProcessTable::ScanProc() {
  const uint64_t discoveries = proc_discoveries_;  // a scan is not a discovery
  for (uint32_t pid : ListPids(options_.proc_root)) {
    auto it = live_.find(pid);
    if (it == live_.end()) {
      Get(pid);
      continue;
    }
    ProcEntry entry;
    if (!ReadProc(pid, &entry)) continue;
    Process* process = &it->second;
    if (process->start_ticks != 0 && entry.start_ticks != 0 &&
        process->start_ticks != entry.start_ticks) {
      // The pid was reused while nobody watched: a new process.
      recent_.fill(nullptr);
      live_.erase(it);
      Get(pid);
      continue;
    }
    process->start_ticks = entry.start_ticks;
    process->comm = entry.comm;
    process->exited = false;
    for (size_t i = 0; i < entry.mappings.size(); ++i) {
      Mapping mapping = std::move(entry.mappings[i]);
      FillMapping(pid, &mapping, entry.keys[i]);
      AddMapping(*process, std::move(mapping), last_time_);
    }
  }
  proc_discoveries_ = discoveries;
}

std::vector<uint32_t> ProcessTable::FindVmmProcesses() const {
  std::vector<uint32_t> vmms;
  for (uint32_t pid : ListPids(options_.proc_root)) {
    const std::string fd_dir = fmt::format("{}/{}/fd", options_.proc_root, pid);
    DIR* dir = ::opendir(fd_dir.c_str());
    if (dir == nullptr) continue;
    bool found = false;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      char target[64] = {};
      const std::string link = fd_dir + "/" + entry->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n > 0 && std::string_view(target, static_cast<size_t>(n)) == "anon_inode:kvm-vm") {
        found = true;
        break;
      }
    }
    ::closedir(dir);
    if (found) vmms.push_back(pid);
  }
  return vmms;
}

const ProcessTable::ElfCacheEntry* ProcessTable::ElfFor(uint32_t pid, const std::string& path,
                                                        uint64_t start, uint64_t end,
                                                        const std::string& key) {
  if (!options_.read_elf) return nullptr;
  auto cached = elf_cache_.find(key);
  if (cached != elf_cache_.end()) return &cached->second;
  // Read off this thread (image_reader.h): through /proc/PID/map_files while the mapping is
  // there, else by the path only as base's OpenUserFile allows.
  if (!images_->Submit(ImageReader::Request{key, options_.proc_root, pid, start, end, path})) return nullptr;
  if (elf_cache_.size() > 4096) elf_cache_.clear();
  ElfCacheEntry entry;
  entry.pending = true;
  return &elf_cache_.emplace(key, std::move(entry)).first->second;
}

void ProcessTable::FillMapping(uint32_t pid, Mapping* mapping, const std::string& key) {
  const ElfCacheEntry* elf = ElfFor(pid, mapping->path, mapping->start, mapping->end, key);
  if (elf != nullptr && elf->pending) {
    mapping->bias = mapping->start - mapping->pgoff;
    mapping->awaiting = key;
    return;
  }
  if (elf == nullptr || !elf->ok) {
    if (options_.read_elf) ++elf_failures_;
    mapping->bias = mapping->start - mapping->pgoff;
    return;
  }
  mapping->bias = LoadBias(elf->info, mapping->start, mapping->pgoff);
  if (mapping->build_id.empty()) mapping->build_id = elf->info.build_id;
}

void ProcessTable::TakeImages() {
  if (images_ == nullptr || !images_->HasAnswers()) return;
  std::set<std::string> answered;
  for (ImageReader::Answer& answer : images_->Take()) {
    ElfCacheEntry& entry = elf_cache_[answer.key];
    entry.pending = false;
    entry.ok = answer.ok;
    entry.info = std::move(answer.info);
    answered.insert(std::move(answer.key));
  }
  // The mappings that wait for these files, forked copies and pieces included: matched by the
  // file's key (build-id, or device and inode), never by path, which two files can share (a
  // non-PIE program at the same address in two containers).
  for (auto& [pid, process] : live_) {
    for (Mapping& mapping : process.mappings) {
      if (mapping.awaiting.empty() || !answered.contains(mapping.awaiting)) continue;
      auto entry = elf_cache_.find(mapping.awaiting);
      mapping.awaiting.clear();
      if (entry == elf_cache_.end() || !entry->second.ok) {
        ++elf_failures_;
        continue;
      }
      const uint64_t bias = LoadBias(entry->second.info, mapping.start, mapping.pgoff);
      const bool changed = bias != mapping.bias || (mapping.build_id.empty() && !entry->second.info.build_id.empty());
      mapping.bias = bias;
      if (mapping.build_id.empty()) mapping.build_id = entry->second.info.build_id;
      // The agent was told the guess: it is told the file's answer as of the same time, which
      // takes the guess's place (store/context_file.h).
      if (changed) EmitMapping(process, mapping, mapping.time_ns);
    }
  }
}

bool ProcessTable::WaitForImages(std::chrono::milliseconds timeout) const {
  return images_ == nullptr || images_->WaitIdle(timeout);
}

bool ProcessTable::SettleImages(std::chrono::milliseconds timeout) {
  const bool settled = WaitForImages(timeout);
  TakeImages();
  return settled;
}

void ProcessTable::AddMapping(Process& process, Mapping mapping, uint64_t time_ns) {
  mapping.time_ns = time_ns;
  // Told unless it is what the process has there already (a /proc scan of a known process),
  // which keeps its time.
  const auto known = std::find_if(process.mappings.begin(), process.mappings.end(), [&](const Mapping& m) {
    return m.start == mapping.start && m.end == mapping.end && m.bias == mapping.bias && m.path == mapping.path;
  });
  if (known == process.mappings.end()) {
    EmitMapping(process, mapping, time_ns);
  } else {
    mapping.time_ns = known->time_ns;
  }
  // A new mapping replaces whatever it overlaps (munmap + mmap, or a fresh dlopen).
  std::vector<Mapping> kept;
  kept.reserve(process.mappings.size() + 2);
  for (Mapping& old : process.mappings) {
    if (old.end <= mapping.start || old.start >= mapping.end) {
      kept.push_back(std::move(old));
      continue;
    }
    if (old.start < mapping.start) {
      Mapping left = old;
      left.end = mapping.start;
      kept.push_back(std::move(left));
    }
    if (old.end > mapping.end) {
      Mapping right = old;
      right.pgoff += mapping.end - old.start;
      right.start = mapping.end;
      kept.push_back(std::move(right));
    }
  }
  kept.push_back(std::move(mapping));
  std::sort(kept.begin(), kept.end(),
            [](const Mapping& a, const Mapping& b) { return a.start < b.start; });
  process.mappings = std::move(kept);
}

void ProcessTable::OnTask(const PerfTask& record) {
  if (record.pid == kNoTask || record.pid == 0) return;
  last_time_ = std::max(last_time_, record.time);
  if (record.fork) {
    tgid_of_[record.tid] = record.pid;
    if (record.pid == record.ppid) {  // a new thread
      Get(record.pid).threads[record.tid];
      return;
    }
    // A new process: a copy of its parent's address space, in its domain unless a rule says
    // otherwise.
    const Process* parent = record.ppid != 0 ? &Get(record.ppid) : nullptr;
    std::vector<Mapping> inherited = parent != nullptr ? parent->mappings : std::vector<Mapping>{};
    const std::string parent_comm = parent != nullptr ? parent->comm : std::string();
    auto text = hvprof::ReadFileToString(fmt::format("{}/{}/cgroup", options_.proc_root, record.pid));
    const std::vector<std::string> cgroups = text ? ParseCgroups(text.value()) : std::vector<std::string>{};
    Process& child = Create(record.pid, record.ppid, text ? &cgroups : nullptr, record.time, parent_comm);
    for (Mapping& mapping : inherited) {
      mapping.time_ns = record.time;
      EmitMapping(child, mapping, record.time);
    }
    child.mappings = std::move(inherited);
    return;
  }
  if (auto known = tgid_of_.find(record.tid); known != tgid_of_.end()) {
    exited_threads_.push_back({record.time, record.tid, known->second});
  }
  auto it = live_.find(record.pid);
  if (it == live_.end()) return;  // never seen alive: nothing to keep
  if (record.pid == record.tid) {
    it->second.exited = true;
    it->second.exit_time = record.time;
    context::ContextEvent exited;
    exited.kind = context::ContextKind::kExit;
    exited.domain = it->second.domain;
    exited.pid = record.pid;
    exited.time_ns = record.time;
    Emit(std::move(exited));
  } else {
    auto thread = it->second.threads.find(record.tid);
    if (thread != it->second.threads.end() && thread->second.vcpu < 0) {
      it->second.threads.erase(thread);
    }
  }
}

void ProcessTable::OnComm(const PerfComm& record) {
  if (record.pid == kNoTask || record.pid == 0) return;
  last_time_ = std::max(last_time_, record.sid.time);
  Process& process = Get(record.pid);
  if (record.exec) {
    // A new image under the same pid: a new process from now on (earlier samples keep the old one,
    // as the events told it).
    process.mappings.clear();
    process.threads.clear();
    process.comm = std::string(record.comm);
    process.exited = false;
    process.birth_ns = record.sid.time;
    context::ContextEvent born;
    born.kind = context::ContextKind::kProcess;
    born.domain = process.domain;
    born.pid = record.pid;
    born.time_ns = record.sid.time;
    born.comm = process.comm;
    Emit(std::move(born));
    return;
  }
  if (record.tid == record.pid && process.comm != record.comm) {
    process.comm = std::string(record.comm);
    context::ContextEvent renamed;
    renamed.kind = context::ContextKind::kComm;
    renamed.domain = process.domain;
    renamed.pid = record.pid;
    renamed.time_ns = record.sid.time;
    renamed.comm = process.comm;
    Emit(std::move(renamed));
  }
  process.threads[record.tid].comm = std::string(record.comm);
  if (auto named = named_tasks_.find(TaskKey(record.pid, record.tid)); named != named_tasks_.end()) {
    const bool was_unnamed = named->second.comm.empty();
    named->second.comm = record.comm;
    if (was_unnamed && !named->second.comm.empty()) {
      // Named in scheduling records before its name was known: told again, now with it.
      context::ContextEvent event;
      event.kind = context::ContextKind::kTask;
      event.domain = named->second.domain;
      event.pid = record.pid;
      event.tid = record.tid;
      event.comm = named->second.comm;
      Emit(std::move(event));
    }
  }
}

void ProcessTable::NoteTask(uint32_t pid, uint32_t tid) {
  if (named_tasks_.contains(TaskKey(pid, tid))) return;
  Process& process = Get(pid);
  NamedTask task;
  task.pid = pid;
  task.domain = process.domain;
  auto thread = process.threads.find(tid);
  task.comm = thread != process.threads.end() ? thread->second.comm : std::string();
  if (task.comm.empty()) task.comm = ReadThreadComm(pid, tid);
  if (task.comm.empty() && tid == pid) task.comm = process.comm;
  context::ContextEvent named;
  named.kind = context::ContextKind::kTask;
  named.domain = task.domain;
  named.pid = pid;
  named.tid = tid;
  named.comm = task.comm;
  Emit(std::move(named));
  named_tasks_.emplace(TaskKey(pid, tid), std::move(task));
}

void ProcessTable::OnMmap2(const PerfMmap2& record) {
  if (record.pid == kNoTask || record.pid == 0) return;
  last_time_ = std::max(last_time_, record.sid.time);
  // Files only: not "[vdso]", nor perf's "//anon" for anonymous executable memory (JITs).
  if (record.filename.empty() || record.filename.front() != '/' ||
      record.filename.starts_with("//") || record.len == 0) {
    return;
  }
  if (record.prot != 0 && (record.prot & PROT_EXEC) == 0) return;
  Process& process = Get(record.pid);
  Mapping mapping;
  mapping.start = record.addr;
  mapping.end = record.addr + record.len;
  mapping.pgoff = record.pgoff;
  mapping.path = std::string(record.filename);
  mapping.build_id = record.build_id;
  const std::string key =
      !record.build_id.empty()
          ? "bid:" + record.build_id + ":" + mapping.path
          : (record.ino != 0 ? fmt::format("dev:{:02x}:{:02x}:ino:{}:{}", record.maj, record.min,
                                           record.ino, record.ino_generation)
                             : "path:" + mapping.path);
  FillMapping(record.pid, &mapping, key);
  AddMapping(process, std::move(mapping), record.sid.time);
}

std::string ProcessTable::ReadThreadComm(uint32_t pid, uint32_t tid) const {
  auto comm = hvprof::ReadFileToString(fmt::format("{}/{}/task/{}/comm", options_.proc_root, pid, tid));
  return comm ? StripNewline(comm.value()) : std::string();
}

uint16_t ProcessTable::VcpuOf(uint32_t pid, uint32_t tid) {
  Process& process = Get(pid);
  auto [it, inserted] = process.threads.try_emplace(tid);
  Thread& thread = it->second;
  if (thread.vcpu >= 0) return static_cast<uint16_t>(thread.vcpu);
  if (thread.comm.empty()) thread.comm = ReadThreadComm(pid, tid);
  thread.vcpu = ParseVcpuName(thread.comm);
  if (thread.vcpu < 0) {
    std::set<int32_t> used;
    for (const auto& [other_tid, other] : process.threads) used.insert(other.vcpu);
    while (used.count(process.next_vcpu) != 0) ++process.next_vcpu;
    thread.vcpu = process.next_vcpu++;
  }
  return static_cast<uint16_t>(thread.vcpu);
}

uint32_t ProcessTable::TgidOf(uint32_t tid) {
  if (tid == 0) return 0;
  auto known = tgid_of_.find(tid);
  if (known != tgid_of_.end()) return known->second;
  uint32_t tgid = tid;
  // /proc/TID exists for every thread, though only processes are listed.
  if (auto status = hvprof::ReadFileToString(fmt::format("{}/{}/status", options_.proc_root, tid))) {
    std::string_view text = status.value();
    const size_t at = text.find("\nTgid:");
    if (at != std::string_view::npos) {
      text.remove_prefix(at + 6);
      while (!text.empty() && (text.front() == '\t' || text.front() == ' ')) text.remove_prefix(1);
      uint32_t value = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec == std::errc() && end != text.data()) tgid = value;
    }
  }
  tgid_of_[tid] = tgid;
  return tgid;
}

bool ProcessTable::IsVcpuThread(uint32_t pid, uint32_t tid) {
  Process& process = Get(pid);
  auto it = process.threads.find(tid);
  if (it != process.threads.end() && it->second.vcpu >= 0) return true;
  std::string comm = it != process.threads.end() ? it->second.comm : std::string();
  if (comm.empty()) {
    comm = ReadThreadComm(pid, tid);
    if (!comm.empty()) process.threads[tid].comm = comm;
  }
  return ParseVcpuName(comm) >= 0;
}

void ProcessTable::Prune(uint64_t before) {
  bool erased = false;
  for (auto it = live_.begin(); it != live_.end();) {
    Process& process = it->second;
    if (!process.exited || process.exit_time >= before) {
      ++it;
    } else {
      it = live_.erase(it);
      erased = true;
    }
  }
  if (erased) recent_.fill(nullptr);
  // Exit records come in time order but for the rare ones the merge sorts: the front is enough.
  while (!exited_threads_.empty() && exited_threads_.front().time < before) {
    const ExitedThread& gone = exited_threads_.front();
    // A tid reused since by a thread of another process keeps its new entry.
    if (auto known = tgid_of_.find(gone.tid); known != tgid_of_.end() && known->second == gone.tgid) {
      tgid_of_.erase(known);
    }
    exited_threads_.pop_front();
  }
}

ProcessTableStats ProcessTable::stats() const {
  ProcessTableStats stats;
  stats.processes = live_.size();
  stats.proc_discoveries = proc_discoveries_;
  stats.elf_failures = elf_failures_;
  for (const auto& [pid, process] : live_) stats.mappings += process.mappings.size();
  stats.threads = tgid_of_.size();
  stats.context_events = events_made_;
  stats.context_pending = events_.size();
  stats.context_dropped = events_dropped_;
  return stats;
}

}  // namespace hvprof::linux_host
