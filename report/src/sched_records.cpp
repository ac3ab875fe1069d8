// The scheduling records, kept per pCPU in 16 bytes each, and read back merged in time order.
#include "hvprof/report/sched_records.h"

#include "hvprof/store/context_file.h"

#include <algorithm>
#include <tuple>

#include "hvprof/store/session.h"

namespace hvprof::report {

const char* SchedStateName(SchedState state) {
  switch (state) {
    case SchedState::kRunning: return "running";
    case SchedState::kRunnable: return "runnable";
    case SchedState::kBlocked: return "blocked";
    case SchedState::kOffline: return "offline";
    case SchedState::kUnknown: break;
  }
  return "unknown";
}

size_t SchedRecords::KeyHash::operator()(const Key& key) const {
  uint64_t h = key.high * 0x9E3779B97F4A7C15ULL;
  h ^= key.low * 0xC2B2AE3D27D4EB4FULL + (h << 6) + (h >> 2);
  return static_cast<size_t>(h);
}

uint32_t SchedRecords::Intern(const SchedEvent& event) {
  SchedEntity entity;
  entity.domain = event.domain;
  entity.vcpu = event.vcpu;
  entity.idle = event.domain == hvprof::kIdleDomain;
  entity.task = !entity.idle && (event.flags & sched::kFlagPidValid) != 0;
  Key key{uint64_t{event.domain} | uint64_t{entity.task} << 16, 0};
  if (entity.task) {
    entity.pid = event.pid;
    entity.tid = event.tid;
    key.low = uint64_t{event.pid} << 32 | event.tid;
  } else {
    key.high |= uint64_t{event.vcpu} << 32;
  }
  auto [it, added] = index_.try_emplace(key, static_cast<uint32_t>(entities_.size()));
  if (added) entities_.push_back(entity);
  return it->second;
}

void SchedRecords::Add(const SchedEvent& event) {
  ++counts_.records;
  if (event.type < sched::kTypeRunstate || event.type > sched::kTypeLost) {
    ++counts_.unknown_types;
    return;
  }
  const bool bad_state = event.type == sched::kTypeRunstate && (event.old_state > 3 || event.new_state > 3);
  const bool bad_migration = event.type == sched::kTypeMigrate && event.to_pcpu >= sched::kMaxPcpus;
  if (event.pcpu >= sched::kMaxPcpus || bad_state || bad_migration) {
    ++counts_.invalid;
    return;
  }
  if (event.type == sched::kTypeMigrate && event.from_pcpu == event.to_pcpu) {
    ++counts_.noop_migrations;
    return;
  }
  if (event.pcpu >= pcpus_.size()) pcpus_.resize(event.pcpu + 1);
  Pcpu& pcpu = pcpus_[event.pcpu];
  if (event.time_ns < pcpu.last_ns) {
    ++counts_.backwards;
    return;
  }
  pcpu.last_ns = event.time_ns;
  Event stored{event.time_ns, 0, event.type, static_cast<uint8_t>(event.old_state | event.new_state << 4), 0};
  if (event.type == sched::kTypeLost) {
    stored.entity = static_cast<uint32_t>(lost_.size());
    lost_.push_back({event.count, event.aux});
  } else {
    stored.entity = Intern(event);
    if (event.type == sched::kTypeMigrate) stored.extra = event.to_pcpu;
  }
  pcpu.events.push_back(stored);
  ++counts_.kept;
  first_ns_ = std::min(first_ns_, event.time_ns);
  last_ns_ = std::max(last_ns_, event.time_ns);
}

namespace {

// At equal times: a state as it stands first (a runstate record that changes nothing, such as
// the snapshot when recording starts), then an entity leaving a pCPU, the rest, and one
// arriving on a pCPU last (docs/sched.md).
uint8_t TieClass(uint8_t type, uint8_t states) {
  if (type != sched::kTypeRunstate) return 2;
  const uint8_t old_state = states & 0xF;
  const uint8_t new_state = states >> 4;
  if (old_state == new_state) return 0;
  const bool leaves = old_state == 0;
  const bool arrives = new_state == 0;
  return leaves ? 1 : arrives ? 3 : 2;
}

}  // namespace

void SchedRecords::ForEachInTimeOrder(const std::function<void(const SchedStep&)>& on_step) const {
  // A binary heap of the pCPUs by their next record; the one taken is replaced by its own next
  // and sifted down once.
  struct Head {
    uint64_t time;
    uint8_t tie;
    uint16_t pcpu;
    bool operator<(const Head& other) const {
      return std::tie(time, tie, pcpu) < std::tie(other.time, other.tie, other.pcpu);
    }
  };
  std::vector<Head> heap;
  std::vector<size_t> next(pcpus_.size(), 0);
  auto head_of = [&](uint16_t pcpu) {
    const Event& e = pcpus_[pcpu].events[next[pcpu]];
    return Head{e.time, TieClass(e.type, e.states), pcpu};
  };
  auto sift_down = [&](size_t i) {
    const Head moving = heap[i];
    for (;;) {
      size_t child = 2 * i + 1;
      if (child >= heap.size()) break;
      if (child + 1 < heap.size() && heap[child + 1] < heap[child]) ++child;
      if (!(heap[child] < moving)) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = moving;
  };
  for (size_t pcpu = 0; pcpu < pcpus_.size(); ++pcpu) {
    if (!pcpus_[pcpu].events.empty()) heap.push_back(head_of(static_cast<uint16_t>(pcpu)));
  }
  for (size_t i = heap.size() / 2; i-- > 0;) sift_down(i);
  while (!heap.empty()) {
    const uint16_t pcpu = heap.front().pcpu;
    const Event& e = pcpus_[pcpu].events[next[pcpu]++];
    SchedStep step;
    step.time_ns = e.time;
    step.pcpu = pcpu;
    step.type = e.type;
    step.old_state = e.states & 0xF;
    step.new_state = e.states >> 4;
    if (e.type == sched::kTypeLost) {
      step.lost = lost_[e.entity].count;
      step.lost_first_ns = lost_[e.entity].first_ns;
    } else {
      step.entity = e.entity;
      if (e.type == sched::kTypeMigrate) step.to_pcpu = e.extra;
    }
    on_step(step);
    if (next[pcpu] < pcpus_[pcpu].events.size()) {
      heap.front() = head_of(pcpu);
    } else {
      heap.front() = heap.back();
      heap.pop_back();
    }
    if (!heap.empty()) sift_down(0);
  }
}

std::string SchedOptions::DomainName(uint16_t domain) const {
  const auto name = domain_names.find(domain);
  return store::DomainName(domain, name == domain_names.end() ? "" : name->second);
}

std::string SchedEntityLabel(const SchedEntity& entity, const SchedOptions& options) {
  if (entity.idle) return "idle";
  const std::string domain = options.DomainName(entity.domain);
  if (!entity.task) return fmt::format("{} v{}", domain, entity.vcpu);
  const auto comm = options.thread_names.find({entity.domain, entity.pid, entity.tid});
  const std::string thread = comm == options.thread_names.end() ? "" : comm->second;
  if (entity.tid == entity.pid) return fmt::format("{} {}[{}]", domain, thread, entity.tid);
  return fmt::format("{} {}[{}/{}]", domain, thread, entity.tid, entity.pid);
}

std::string SchedProcessLabel(const SchedEntity& entity, const SchedOptions& options) {
  if (entity.idle) return "idle";
  const std::string domain = options.DomainName(entity.domain);
  if (!entity.task) return domain;
  // Named by its main thread, or not at all: every thread of it must give the same label.
  const auto comm = options.thread_names.find({entity.domain, entity.pid, entity.pid});
  return fmt::format("{} {}[{}]", domain, comm == options.thread_names.end() ? "" : comm->second, entity.pid);
}

Result<SchedSession> LoadSchedRecords(const std::string& session_dir) {
  HVPROF_TRY(session, store::OpenSession(session_dir));
  if (!store::HasSched(session.directory)) {
    return MakeError(ErrorKind::kNotFound, "{}: this session recorded no scheduling (run with --sched)",
                     session.directory);
  }
  const std::string path = session.directory + "/" + store::kSchedFile;
  SchedSession loaded;
  loaded.options.pcpus = session.metadata.num_cpus;
  // Tasks are named in context.hvc (kTask), or in session.json by sessions from before it.
  store::ContextIndex context;
  auto context_read =
      store::ReadContextFile(session.directory + "/" + store::kContextFile, session.metadata.session_id, context);
  for (const store::DomainRecord& domain : session.metadata.domains) {
    loaded.options.domain_names[domain.id] = domain.name;
    for (const store::TaskRecord& task : domain.tasks) {
      loaded.options.thread_names[{domain.id, task.pid, task.tid}] = task.comm;
    }
    if (const auto* tasks = context.Tasks(domain.id)) {
      for (const auto& [key, comm] : *tasks) loaded.options.thread_names[{domain.id, key.first, key.second}] = comm;
    }
  }
  loaded.problems = session.problems;
  if (!context_read) loaded.problems.push_back(context_read.error().message() + "; tasks are named by number");
  HVPROF_TRY(read, store::ReadSchedFile(path, session.metadata.session_id, [&](const store::StoredSched& record) {
    loaded.records.Add(ToSchedEvent(record));
  }));
  for (const store::FileProblem& problem : read.problems) {
    loaded.problems.push_back(fmt::format("{}: {}", path, problem.description));
  }
  if (read.damaged_chunks != 0 || read.torn_tail) {
    loaded.problems.push_back(fmt::format("{}: {} damaged chunk{}{}: their scheduling records are missing", path,
                                          read.damaged_chunks, read.damaged_chunks == 1 ? "" : "s",
                                          read.torn_tail ? ", and the file ends inside a chunk" : ""));
  }
  // The window: from the first record (the snapshot taken when recording started) to the end of
  // profiling, which the last sample marks when it is later than the last record. Xen's trace
  // buffers stamp records with the TSC, not the samples' clock: their records alone say.
  const bool own_clock = session.metadata.sched && session.metadata.sched->source == "xentrace";
  if (session.metadata.last_sample_ns != 0 && !own_clock) {
    loaded.options.end_ns = std::max(session.metadata.last_sample_ns, loaded.records.last_ns());
  }
  return loaded;
}

}  // namespace hvprof::report
