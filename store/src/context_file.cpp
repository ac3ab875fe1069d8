#include "hvprof/store/context_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "hvprof/store/session.h"

namespace hvprof::store {

namespace {

constexpr ChunkFormat kContextFormat{kContextFileMagic, kContextFileVersion, 0,        kContextChunkMagic,
                                     kContextFile,      "context file",      "events"};

}  // namespace

// ---- ContextIndex

uint32_t ContextIndex::Intern(const std::string& path, const std::string& build_id, bool* added) {
  const auto [it, inserted] = image_ids_.try_emplace({path, build_id}, static_cast<uint32_t>(images_.size() + 1));
  if (inserted) images_.push_back({it->second, path, build_id});
  *added = inserted;
  return it->second;
}

ContextIndex::Process* ContextIndex::Current(uint16_t domain, uint32_t pid) {
  auto d = domains_.find(domain);
  if (d == domains_.end()) return nullptr;
  auto p = d->second.by_pid.find(pid);
  if (p == d->second.by_pid.end() || p->second.empty()) return nullptr;
  return &p->second.back();
}

ContextIndex::Process* ContextIndex::At(uint16_t domain, uint32_t pid, uint64_t time_ns) {
  return const_cast<Process*>(std::as_const(*this).Find(domain, pid, time_ns));
}

ContextIndex::Applied ContextIndex::Apply(const ContextEvent& event) {
  Applied applied;
  switch (event.kind) {
    case ContextKind::kImage: {
      // The file's numbering: images come in order, each before its first mapping.
      if (event.image == images_.size() + 1) {
        images_.push_back({event.image, event.path, event.build_id});
        image_ids_.try_emplace({event.path, event.build_id}, event.image);
      }
      break;
    }
    case ContextKind::kProcess: {
      auto& list = domains_[event.domain].by_pid[event.pid];
      // A process the platform tells again (a new agent asked for what is alive) is the same one.
      if (!list.empty() && list.back().birth_ns == event.time_ns) break;
      if (!list.empty() && list.back().exit_ns == UINT64_MAX) list.back().exit_ns = event.time_ns;
      Process process;
      process.birth_ns = event.time_ns;
      process.comms.push_back({event.time_ns, event.comm});
      // Births come in time order; one out of it (a late record) is put in its place.
      auto at = std::upper_bound(list.begin(), list.end(), event.time_ns,
                                 [](uint64_t t, const Process& p) { return t < p.birth_ns; });
      list.insert(at, std::move(process));
      ++domains_[event.domain].told;
      break;
    }
    case ContextKind::kMapping: {
      // The process of the pid alive at the mapping's time: a file's answer told late (the
      // platform read it off its drain thread) may come after a new process took the pid.
      Process* process = At(event.domain, event.pid, event.time_ns);
      if (process == nullptr) {
        // A mapping of a process the stream did not announce: it has been alive since before.
        ContextEvent born;
        born.kind = ContextKind::kProcess;
        born.domain = event.domain;
        born.pid = event.pid;
        Apply(born);
        process = At(event.domain, event.pid, event.time_ns);
      }
      Mapping mapping;
      mapping.start = event.start;
      mapping.end = event.end;
      mapping.bias = event.bias;
      mapping.time_ns = event.time_ns;
      if (event.image != 0) {
        mapping.image = image(event.image) != nullptr ? event.image : 0;
      } else if (!event.path.empty() && event.path[0] == '/' && event.path.rfind("/memfd:", 0) != 0 &&
                 event.path.rfind("/SYSV", 0) != 0 && event.path.rfind("/dev/", 0) != 0 &&
                 event.path.find(" (deleted)") == std::string::npos) {
        mapping.image = Intern(event.path, event.build_id, &applied.new_image);
        applied.image = mapping.image;
      }
      if (mapping.image == 0) {
        const auto [it, added] = other_path_ids_.try_emplace(event.path, static_cast<uint32_t>(other_paths_.size()));
        if (added) other_paths_.push_back(event.path);
        mapping.other_path = it->second;
      }
      // An identical mapping told again (a new agent asked for what is alive) is not added twice.
      for (const Mapping& m : process->mappings) {
        if (m.start == mapping.start && m.end == mapping.end && m.bias == mapping.bias && m.image == mapping.image &&
            m.other_path == mapping.other_path) {
          return applied;
        }
      }
      process->mappings.push_back(mapping);
      break;
    }
    case ContextKind::kComm: {
      Process* process = Current(event.domain, event.pid);
      if (process != nullptr) process->comms.push_back({event.time_ns, event.comm});
      break;
    }
    case ContextKind::kExit: {
      Process* process = Current(event.domain, event.pid);
      if (process != nullptr && process->exit_ns == UINT64_MAX) process->exit_ns = event.time_ns;
      break;
    }
    case ContextKind::kTask:
      domains_[event.domain].tasks[{event.pid, event.tid}] = event.comm;
      break;
  }
  return applied;
}

const ContextIndex::Process* ContextIndex::Find(uint16_t domain, uint32_t pid, uint64_t time_ns) const {
  auto d = domains_.find(domain);
  if (d == domains_.end()) return nullptr;
  auto p = d->second.by_pid.find(pid);
  if (p == d->second.by_pid.end() || p->second.empty()) return nullptr;
  const auto& list = p->second;
  // The last process born at or before the time; a sample before the first birth (an earlier
  // process of the pid the stream never told) is the first's.
  auto it = std::upper_bound(list.begin(), list.end(), time_ns,
                             [](uint64_t t, const Process& process) { return t < process.birth_ns; });
  return it == list.begin() ? &list.front() : &*(it - 1);
}

const ContextIndex::Mapping* ContextIndex::FindMapping(const Process& process, uint64_t time_ns, uint64_t ip) const {
  // The latest mapping over the address made at or before the time; else the earliest over it
  // (a sample stamped before its mapping's record: perf's clocks of two CPUs). Of two with one
  // time, the one told last: the platform's answer in place of its first guess.
  const Mapping* best = nullptr;
  const Mapping* earliest = nullptr;
  for (const Mapping& m : process.mappings) {
    if (ip < m.start || ip >= m.end) continue;
    if (m.time_ns <= time_ns && (best == nullptr || m.time_ns >= best->time_ns)) best = &m;
    if (earliest == nullptr || m.time_ns <= earliest->time_ns) earliest = &m;
  }
  return best != nullptr ? best : earliest;
}

std::optional<ContextIndex::Located> ContextIndex::Locate(uint16_t domain, uint32_t pid, uint64_t time_ns,
                                                         uint64_t ip) const {
  const Process* process = Find(domain, pid, time_ns);
  if (process == nullptr) return std::nullopt;
  const Mapping* mapping = FindMapping(*process, time_ns, ip);
  if (mapping == nullptr) return std::nullopt;
  return Located{mapping->image,
                 ip - mapping->bias,
                 mapping->start,
                 mapping->end,
                 mapping->time_ns,
                 mapping->image != 0 ? &images_[mapping->image - 1].path : &other_paths_[mapping->other_path]};
}

std::optional<ResolvedAddress> ContextIndex::Resolve(uint16_t domain, uint32_t pid, uint64_t time_ns,
                                                     uint64_t ip) const {
  const auto located = Locate(domain, pid, time_ns, ip);
  if (!located || located->image == 0) return std::nullopt;
  return ResolvedAddress{located->image, located->address};
}

const std::string* ContextIndex::MappingPath(uint16_t domain, uint32_t pid, uint64_t time_ns, uint64_t ip) const {
  const auto located = Locate(domain, pid, time_ns, ip);
  return located ? located->path : nullptr;
}

const std::string* ContextIndex::Comm(uint16_t domain, uint32_t pid, uint64_t time_ns) const {
  const Process* process = Find(domain, pid, time_ns);
  if (process == nullptr || process->comms.empty()) return nullptr;
  const std::string* name = &process->comms.front().second;
  for (const auto& [from, comm] : process->comms) {
    if (from <= time_ns) name = &comm;
  }
  return name;
}

bool ContextIndex::HasDomain(uint16_t domain) const {
  auto d = domains_.find(domain);
  return d != domains_.end() && d->second.told != 0;
}

std::vector<uint16_t> ContextIndex::Domains() const {
  std::vector<uint16_t> out;
  for (const auto& [id, domain] : domains_) {
    if (domain.told != 0) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<uint32_t, std::string>> ContextIndex::Processes(uint16_t domain) const {
  std::vector<std::pair<uint32_t, std::string>> out;
  auto d = domains_.find(domain);
  if (d == domains_.end()) return out;
  for (const auto& [pid, list] : d->second.by_pid) {
    if (!list.empty() && !list.back().comms.empty()) out.push_back({pid, list.back().comms.back().second});
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::set<std::string> ContextIndex::MainImages(uint16_t domain) const {
  std::set<std::string> out;
  auto d = domains_.find(domain);
  if (d == domains_.end()) return out;
  for (const auto& [pid, list] : d->second.by_pid) {
    for (const Process& process : list) {
      for (const Mapping& mapping : process.mappings) {
        if (mapping.image == 0) continue;
        out.insert(images_[mapping.image - 1].path);
        break;
      }
    }
  }
  return out;
}

const std::map<std::pair<uint32_t, uint32_t>, std::string>* ContextIndex::Tasks(uint16_t domain) const {
  auto d = domains_.find(domain);
  return d == domains_.end() || d->second.tasks.empty() ? nullptr : &d->second.tasks;
}

void ContextIndex::Prune(uint64_t before) {
  for (auto& [id, domain] : domains_) {
    for (auto it = domain.by_pid.begin(); it != domain.by_pid.end();) {
      auto& list = it->second;
      list.erase(std::remove_if(list.begin(), list.end(), [before](const Process& p) { return p.exit_ns < before; }),
                 list.end());
      it = list.empty() ? domain.by_pid.erase(it) : std::next(it);
    }
  }
}

size_t ContextIndex::processes() const {
  size_t n = 0;
  for (const auto& [id, domain] : domains_) n += domain.told;
  return n;
}

size_t ContextIndex::mappings() const {
  size_t n = 0;
  for (const auto& [id, domain] : domains_) {
    for (const auto& [pid, list] : domain.by_pid) {
      for (const Process& p : list) n += p.mappings.size();
    }
  }
  return n;
}

// ---- the file

namespace {

// Delivers each chunk's events in the file's form; a chunk is delivered whole or not at all (its
// events are checked first).
ChunkDecoder ContextDecoder(std::function<void(const ContextEvent&)> deliver) {
  return [deliver = std::move(deliver)](std::span<const uint8_t> payload, uint32_t records) {
    ChunkDecode result;
    std::vector<ContextEvent> events;
    uint64_t decoded = 0;
    const bool ok = context::DecodeContextEvents(payload, [&](ContextEvent&& e) { events.push_back(std::move(e)); }, &decoded);
    result.well_formed = decoded;
    if (!ok || decoded != records) {
      result.ok = false;
      return result;
    }
    for (const ContextEvent& event : events) deliver(event);
    result.delivered = events.size();
    return result;
  };
}

ChunkDecoder ContextDecoder(ContextIndex& index) {
  return ContextDecoder([&index](const ContextEvent& event) { index.Apply(event); });
}

Result<ContextReadSummary> ReadContextChunks(const std::string& path, std::string_view session_id,
                                             ChunkDecoder decoder) {
  HVPROF_TRY(id, SessionIdToCheck(path, session_id));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return ContextReadSummary{};
  HVPROF_TRY(read, ReadChunkFile(path, kContextFormat, std::move(decoder),
                                 id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt,
                                 /*refuse_foreign=*/true));
  ContextReadSummary summary;
  static_cast<ChunkReadSummary&>(summary) = std::move(read);
  summary.present = true;
  return summary;
}

}  // namespace

Result<ContextWriter> ContextWriter::Open(const std::string& directory, std::span<const uint8_t, 16> session_id,
                                          ContextIndex& index) {
  HVPROF_TRY(chunks, ChunkWriter::Open(directory + "/" + kContextFile, kContextFormat, session_id,
                                       ContextDecoder(index)));
  return ContextWriter(std::move(chunks));
}

void ContextWriter::Write(const ContextEvent& event) {
  scratch_.clear();
  context::EncodeContextEvent(event, scratch_);
  uint8_t* out = chunks_.Reserve(scratch_.size());
  std::copy(scratch_.begin(), scratch_.end(), out);
  chunks_.Commit(out + scratch_.size(), event.time_ns);
}

void ContextWriter::Add(const ContextEvent& event, ContextIndex& index) {
  const ContextIndex::Applied applied = index.Apply(event);
  if (event.kind != ContextKind::kMapping || event.image != 0) {
    Write(event);
    return;
  }
  if (applied.new_image) {
    const ContextImage* image = index.image(applied.image);
    ContextEvent record;
    record.kind = ContextKind::kImage;
    record.image = image->id;
    record.path = image->path;
    record.build_id = image->build_id;
    record.time_ns = event.time_ns;
    Write(record);
  }
  if (applied.image == 0) {
    Write(event);  // not a file: its path stays in the event
    return;
  }
  ContextEvent mapping = event;
  mapping.image = applied.image;
  mapping.path.clear();
  mapping.build_id.clear();
  Write(mapping);
}

ContextReadSummary ReadContext(std::span<const uint8_t> bytes, ContextIndex& index) {
  ContextReadSummary summary;
  static_cast<ChunkReadSummary&>(summary) = ReadChunks(bytes, kContextFormat, ContextDecoder(index), std::nullopt);
  summary.present = true;
  return summary;
}

Result<ContextReadSummary> ReadContextFile(const std::string& path, std::string_view session_id, ContextIndex& index) {
  return ReadContextChunks(path, session_id, ContextDecoder(index));
}

Result<ContextReadSummary> ReadContextEvents(const std::string& path, std::string_view session_id,
                                             const std::function<void(ContextEvent&&)>& on_event) {
  // The images are numbered as the file numbers them; an index of the events read so far names them.
  ContextIndex images;
  return ReadContextChunks(path, session_id, ContextDecoder([&](const ContextEvent& event) {
    images.Apply(event);
    if (event.kind == ContextKind::kImage) return;
    ContextEvent out = event;
    if (event.kind == ContextKind::kMapping && event.image != 0) {
      // A mapping of an image the file never named is of no known file (an empty path), as the
      // index takes it.
      const ContextImage* image = images.image(event.image);
      out.image = 0;
      out.path = image != nullptr ? image->path : std::string();
      out.build_id = image != nullptr ? image->build_id : std::string();
    }
    on_event(std::move(out));
  }));
}

void ContextFromMetadata(const SessionMetadata& metadata, ContextIndex& index) {
  for (const DomainRecord& domain : metadata.domains) {
    for (const ProcessRecord& process : domain.processes) {
      ContextEvent born;
      born.kind = ContextKind::kProcess;
      born.domain = domain.id;
      born.pid = process.pid;
      born.comm = process.comm;
      index.Apply(born);
      for (const MappingRecord& mapping : process.mappings) {
        ContextEvent mapped;
        mapped.kind = ContextKind::kMapping;
        mapped.domain = domain.id;
        mapped.pid = process.pid;
        mapped.start = mapping.start;
        mapped.end = mapping.end;
        mapped.bias = mapping.bias;
        mapped.path = mapping.path;
        mapped.build_id = mapping.build_id;
        index.Apply(mapped);
      }
    }
    for (const TaskRecord& task : domain.tasks) {
      ContextEvent named;
      named.kind = ContextKind::kTask;
      named.domain = domain.id;
      named.pid = task.pid;
      named.tid = task.tid;
      named.comm = task.comm;
      index.Apply(named);
    }
  }
}

}  // namespace hvprof::store
