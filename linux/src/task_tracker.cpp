#include "hvprof/linux/task_tracker.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "hvprof/linux/perf_records.h"

namespace hvprof::linux_host {

namespace {

// The records' layout: every record's sample_id trailer says which task, when and on which CPU.
constexpr uint64_t kSampleType = kSampleTid | kSampleTime | kSampleCpu | kSampleIdentifier;

}  // namespace

// Applies one record, in time order, to the tracker.
class TaskTracker::Visitor final : public RecordVisitor {
 public:
  Visitor(TaskTracker& tracker, uint32_t ring_cpu) : tracker_(tracker), ring_cpu_(ring_cpu) {}
  void OnMmap2(const PerfMmap2& r) override { tracker_.processes_->OnMmap2(r); }
  void OnComm(const PerfComm& r) override { tracker_.processes_->OnComm(r); }
  void OnTask(const PerfTask& r) override { tracker_.processes_->OnTask(r); }
  void OnSwitch(const PerfSwitch& r) override {
    if (!r.sid.has_time) return;
    const uint32_t cpu = r.sid.cpu != kNoTask ? r.sid.cpu : ring_cpu_;
    // In: the record's task now runs. Out: the task it names runs next.
    if (r.out) {
      tracker_.NoteSwitch(cpu, r.sid.time, r.other_pid, r.other_tid);
    } else {
      tracker_.NoteSwitch(cpu, r.sid.time, r.sid.pid, r.sid.tid);
    }
  }
  void OnLost(const PerfLost& r) override {
    tracker_.stats_.lost_records += r.lost;
    // This CPU's switches before now are incomplete: nothing before is answered, nor anything
    // after until its next switch (which task the lost ones left running is unknown).
    const uint32_t cpu = r.sid.cpu != kNoTask ? r.sid.cpu : ring_cpu_;
    if (cpu < tracker_.history_.size() && r.sid.has_time) {
      tracker_.history_[cpu].lost_until = std::max(tracker_.history_[cpu].lost_until, r.sid.time);
      tracker_.NoteSwitch(cpu, r.sid.time, kNoTask, kNoTask);
    }
  }

 private:
  TaskTracker& tracker_;
  uint32_t ring_cpu_;
};

TaskTracker::TaskTracker(const Options& options)
    : options_(options), registry_(DomainMap{}, 1, false) {}

TaskTracker::~TaskTracker() = default;

Result<std::unique_ptr<TaskTracker>> TaskTracker::Open(const Options& options) {
  std::unique_ptr<TaskTracker> tracker(new TaskTracker(options));
  tracker->processes_ = std::make_unique<ProcessTable>(
      tracker->registry_, ProcessTable::Options{options.paths.proc, options.read_elf});
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t data_bytes = page;
  while (data_bytes < options.ring_bytes) data_bytes *= 2;
  const std::vector<uint32_t> cpus = OnlineCpus(options.paths);
  if (cpus.empty()) return MakeError(ErrorKind::kUnsupported, "no online CPU is listed in {}/devices/system/cpu/online", options.paths.sys);
  tracker->history_.resize(*std::max_element(cpus.begin(), cpus.end()) + 1);
  for (uint32_t cpu : cpus) {
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_DUMMY;
    attr.sample_period = 1;
    attr.sample_type = kSampleType;
    attr.sample_id_all = 1;
    attr.task = 1;
    attr.comm = 1;
    attr.comm_exec = 1;
    attr.mmap = 1;
    attr.mmap2 = 1;
    attr.build_id = 1;
    attr.context_switch = 1;
    attr.use_clockid = 1;
    attr.clockid = options.clock;
    attr.watermark = 1;
    attr.wakeup_watermark = static_cast<uint32_t>(data_bytes / 4);
    attr.disabled = 1;
    HVPROF_TRY(fd, OpenPerfEvent(attr, static_cast<int>(cpu), "the task tracker", options.paths));
    const uint64_t bytes = page + data_bytes;
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) return PerfMmapError(errno, data_bytes, static_cast<int>(cpu), options.paths);
    Ring ring;
    ring.cpu = cpu;
    ring.mapping = ScopedMmap(base, bytes);
    HVPROF_TRY(attached, PerfRing::Attach(base, bytes, page));
    ring.ring = attached;
    ring.fd = std::move(fd);
    tracker->rings_.push_back(std::move(ring));
  }
  // Enabled together, then /proc for what was there before: a process that forks between the
  // two is told by both, which the table allows.
  for (Ring& ring : tracker->rings_) {
    if (::ioctl(ring.fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0) return ErrnoError(errno, "enabling the task tracker");
  }
  if (options.scan_proc) tracker->processes_->ScanProc();
  return tracker;
}

uint64_t TaskTracker::Now() const {
  timespec now{};
  ::clock_gettime(options_.clock, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(now.tv_nsec);
}

void TaskTracker::NoteSwitch(uint32_t cpu, uint64_t time, uint32_t pid, uint32_t tid) {
  if (cpu >= history_.size()) return;
  if (pid != kNoTask) ++stats_.switches;
  CpuHistory& history = history_[cpu];
  if (!history.switches.empty() && history.switches.back().pid == pid && history.switches.back().tid == tid) return;
  history.switches.push_back(Switch{time, pid, tid});
}

void TaskTracker::Drain() {
  RecordLayout layout;
  layout.sample_type = kSampleType;
  layout.sample_id_all = true;
  // Whatever ran before now is in the rings by the time they are read.
  const uint64_t now = Now();
  // Every ring's records, in time order: a fork on one CPU before its child's exec on another.
  // Their volume is the side band's and the scheduler's, not samples': held and sorted whole.
  std::vector<std::vector<uint8_t>> copies(rings_.size());
  std::vector<std::pair<HeldRecord, uint32_t>> held;  // (record, its ring's CPU)
  for (size_t i = 0; i < rings_.size(); ++i) {
    const PerfRing::View view = rings_[i].ring.Peek();
    copies[i].assign(view.first.begin(), view.first.end());
    copies[i].insert(copies[i].end(), view.second.begin(), view.second.end());
    rings_[i].ring.Release(view);
    RecordReader reader(copies[i], layout);
    HeldRecord record;
    while (record.Advance(reader)) held.emplace_back(record, rings_[i].cpu);
    stats_.malformed += reader.stats().malformed;
  }
  std::stable_sort(held.begin(), held.end(),
                   [](const auto& a, const auto& b) { return a.first.time < b.first.time; });
  for (const auto& [record, cpu] : held) {
    Visitor visitor(*this, cpu);
    record.Replay(visitor);
    if (cpu < history_.size()) history_[cpu].drained_to = std::max(history_[cpu].drained_to, record.time);
  }
  // A CPU that recorded nothing since has run what it last switched to, up to now.
  for (CpuHistory& history : history_) history.drained_to = std::max(history.drained_to, now);
  processes_->TakeImages();
  // The window TaskAt answers for; the table forgets processes that exited before it too.
  if (now > options_.keep_switches_ns) {
    const uint64_t before = now - options_.keep_switches_ns;
    for (CpuHistory& history : history_) {
      // Keep the switch in force at `before`.
      while (history.switches.size() > 1 && history.switches[1].time <= before) history.switches.pop_front();
    }
    processes_->Prune(before);
  }
}

std::optional<TaskTracker::Task> TaskTracker::TaskAt(uint32_t cpu, uint64_t time) const {
  if (cpu >= history_.size()) return std::nullopt;
  const CpuHistory& history = history_[cpu];
  if (time <= history.lost_until || time > history.drained_to) return std::nullopt;
  // The latest switch at or before `time`.
  auto after = std::upper_bound(history.switches.begin(), history.switches.end(), time,
                                [](uint64_t t, const Switch& s) { return t < s.time; });
  if (after == history.switches.begin()) return std::nullopt;
  const Switch& in_force = *(after - 1);
  if (in_force.pid == kNoTask) return std::nullopt;  // after a loss, before the next switch
  return Task{in_force.pid, in_force.tid};
}

ProcessTable::Events TaskTracker::TakeEvents(uint64_t from, size_t max) const {
  ProcessTable::Events events = processes_->TakeEvents(from, max);
  for (context::ContextEvent& event : events.events) event.domain = options_.domain;
  return events;
}

}  // namespace hvprof::linux_host
