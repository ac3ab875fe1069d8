// The scheduling view: one state machine per entity and one per pCPU, fed the records in time
// order. docs/sched.md is the specification of every rule here.
#include "hvprof/report/views/scheduling.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <tuple>

#include "hvprof/base/progress.h"
#include "hvprof/store/session.h"

namespace hvprof::report {

namespace {

constexpr uint8_t kRunning = 0;
constexpr uint8_t kRunnable = 1;
constexpr uint8_t kBlocked = 2;
constexpr uint8_t kOffline = 3;
constexpr uint8_t kUnknown = 4;
constexpr uint8_t kNotSeen = 0xFF;  // no record has said its state yet
// How often (in records) the switches no open wait needs are dropped.
constexpr uint64_t kTrimEvery = 65536;

// Latencies kept as counts per value rounded down to 10 significant bits: exact below 1024 ns,
// within 0.1% above; sparse, so an entity costs what its latencies spread over.
class LatencyHistogram {
 public:
  void Add(uint64_t ns) {
    ++count_;
    total_ += ns;
    max_ = std::max(max_, ns);
    const uint16_t bucket = Bucket(ns);
    auto it = std::lower_bound(buckets_.begin(), buckets_.end(), bucket,
                               [](const auto& entry, uint16_t b) { return entry.first < b; });
    if (it != buckets_.end() && it->first == bucket) {
      ++it->second;
    } else {
      buckets_.insert(it, {bucket, 1});
    }
  }

  void Merge(const LatencyHistogram& other) {
    for (const auto& [bucket, n] : other.buckets_) {
      auto it = std::lower_bound(buckets_.begin(), buckets_.end(), bucket,
                                 [](const auto& entry, uint16_t b) { return entry.first < b; });
      if (it != buckets_.end() && it->first == bucket) {
        it->second += n;
      } else {
        buckets_.insert(it, {bucket, n});
      }
    }
    count_ += other.count_;
    total_ += other.total_;
    max_ = std::max(max_, other.max_);
  }

  // Nearest rank: the value at rank ceil(p/100 * count) of the sorted values.
  SchedLatency Summary() const {
    SchedLatency s;
    s.count = count_;
    s.total_ns = total_;
    s.max_ns = max_;
    if (count_ == 0) return s;
    auto at_rank = [&](uint64_t percent) {
      const uint64_t rank = std::max<uint64_t>(1, (percent * count_ + 99) / 100);
      uint64_t seen = 0;
      for (const auto& [bucket, n] : buckets_) {
        seen += n;
        if (seen >= rank) return std::min(Floor(bucket), max_);
      }
      return max_;
    };
    s.p50_ns = at_rank(50);
    s.p90_ns = at_rank(90);
    s.p99_ns = at_rank(99);
    return s;
  }

 private:
  static uint16_t Bucket(uint64_t v) {
    if (v < 1024) return static_cast<uint16_t>(v);
    const int shift = std::bit_width(v) - 10;  // 1..54
    const uint64_t mantissa = v >> shift;      // 512..1023
    return static_cast<uint16_t>(1024 + (shift - 1) * 512 + (mantissa - 512));
  }
  static uint64_t Floor(uint16_t bucket) {
    if (bucket < 1024) return bucket;
    const uint32_t b = bucket - 1024u;
    return (uint64_t{b % 512} + 512) << (b / 512 + 1);
  }

  std::vector<std::pair<uint16_t, uint64_t>> buckets_;
  uint64_t count_ = 0;
  uint64_t total_ = 0;
  uint64_t max_ = 0;
};

// victim << 32 | preemptor -> ns: open addressing, as it is updated for every switch a wait
// spans. No key is kEmpty: victims are entity indexes, never kSchedNobody.
class PreemptionMap {
 public:
  void Add(uint64_t key, uint64_t ns) {
    if ((used_ + 1) * 4 > slots_.size() * 3) Grow();
    Slot& slot = Find(slots_, key);
    if (slot.key == kEmpty) {
      slot.key = key;
      ++used_;
    }
    slot.ns += ns;
  }
  template <typename F>
  void ForEach(F&& f) const {
    for (const Slot& slot : slots_) {
      if (slot.key != kEmpty) f(slot.key, slot.ns);
    }
  }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;
  struct Slot {
    uint64_t key = kEmpty;
    uint64_t ns = 0;
  };
  static Slot& Find(std::vector<Slot>& slots, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 29;
    const size_t mask = slots.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty || slots[i].key == key) return slots[i];
    }
  }
  void Grow() {
    std::vector<Slot> bigger(slots_.empty() ? 1024 : slots_.size() * 2);
    for (const Slot& slot : slots_) {
      if (slot.key != kEmpty) Find(bigger, slot.key) = slot;
    }
    slots_ = std::move(bigger);
  }
  std::vector<Slot> slots_;
  size_t used_ = 0;
};

struct EntityRun {
  uint64_t since = 0;       // when it entered `state`
  uint64_t wait_start = 0;  // runnable: since when
  uint64_t wake_time = 0;   // wake_pending: when it was woken
  uint8_t state = kNotSeen;
  bool wait_woken = false;    // runnable because of a wake-up (not a preemption)
  bool wake_pending = false;  // woken inside the window, not yet run: its latency is open
  bool migrate_seen = false;  // a migration record since it last ran
  uint16_t pcpu = kUnknownPcpu;       // running: where
  uint16_t last_pcpu = kUnknownPcpu;  // where it ran last
};

struct Occupancy {
  uint64_t start;
  uint32_t entity;
};

struct PcpuRun {
  uint32_t occupant = kSchedNobody;
  uint64_t since = 0;
  uint64_t last_event = 0;  // the time of its latest record
  bool lost = false;        // occupant unknown because records were lost (since `since`)
  std::deque<Occupancy> history;  // who ran since when, for the preemptors of open waits
};

class Analyzer {
 public:
  Analyzer(const SchedRecords& records, const SchedOptions& options, uint64_t start, uint64_t end, uint32_t pcpus,
           const std::function<void(const SchedInterval&)>& sink)
      : entities_(records.entities()), options_(options), start_(start), end_(end), sink_(sink),
        runs_(entities_.size()), latencies_(entities_.size()), pcpus_(pcpus),
        progress_("hvprof-report: analysing scheduling records", records.counts().kept) {
    report_.start_ns = start;
    report_.end_ns = end;
    report_.pcpus = pcpus;
    report_.entities.resize(entities_.size());
    report_.pcpu_stats.resize(pcpus);
    for (uint32_t c = 0; c < pcpus; ++c) {
      report_.pcpu_stats[c].pcpu = static_cast<uint16_t>(c);
      pcpus_[c].since = start;
      pcpus_[c].last_event = start;
      pcpus_[c].history.push_back({start, kSchedNobody});
    }
    report_.counters.input = records.counts();
  }

  void Step(const SchedStep& step) {
    if (step.time_ns > end_) {
      ++report_.counters.outside_window;
      return;
    }
    counting_ = step.time_ns >= start_;
    if (!counting_) ++report_.counters.outside_window;
    const uint64_t t = std::max(step.time_ns, start_);
    switch (step.type) {
      case sched::kTypeLost: OnLost(step.pcpu, t, step.lost, step.lost_first_ns); break;
      case sched::kTypeRunstate: OnRunstate(step.entity, step.pcpu, step.old_state, step.new_state, t); break;
      case sched::kTypeWakeup: OnWakeup(step.entity, step.pcpu, t); break;
      case sched::kTypeMigrate: OnMigrate(step.entity); break;
      default: break;  // SchedRecords kept none
    }
    pcpus_[step.pcpu].last_event = t;
    if (++steps_ % kTrimEvery == 0) {
      TrimHistories();
      progress_.Set(steps_);
    }
  }

  SchedReport Finish() {
    progress_.Done();
    counting_ = true;
    for (uint32_t e = 0; e < runs_.size(); ++e) {
      EntityRun& r = runs_[e];
      SchedEntityStats& st = report_.entities[e];
      if (r.state == kNotSeen) {
        st.ns[kUnknown] = end_ - start_;
        continue;
      }
      st.ns[r.state] += end_ - r.since;
      if (r.state == kRunnable) EndWait(e, end_, kUnknownPcpu);
    }
    for (uint32_t c = 0; c < pcpus_.size(); ++c) SetOccupant(static_cast<uint16_t>(c), kSchedNobody, end_);
    Summarize();
    return std::move(report_);
  }

 private:
  bool Idle(uint32_t e) const { return entities_[e].idle; }

  // The first record that says an entity's state: it was in `implied` since the window
  // started (running: on `pcpu`, from when that pCPU was last free).
  void Begin(uint32_t e, uint8_t implied, uint16_t pcpu) {
    EntityRun& r = runs_[e];
    report_.entities[e].seen = true;
    r.since = start_;
    r.state = implied;
    if (implied == kRunnable) {
      r.wait_start = start_;
      r.wait_woken = false;
    }
    if (implied != kRunning) return;
    PcpuRun& p = pcpus_[pcpu];
    if (p.occupant != kSchedNobody || p.lost) {
      // Someone else is known to have run there, or records were lost: no claim on the past.
      if (p.occupant != kSchedNobody) ++report_.counters.inconsistent;
      r.state = kUnknown;
      return;
    }
    report_.entities[e].ns[kUnknown] += p.since - start_;
    r.since = p.since;
    r.pcpu = pcpu;
    r.last_pcpu = pcpu;
    p.occupant = e;  // the pCPU's time since it was free was this entity's
    p.history.back().entity = e;
  }

  void OnRunstate(uint32_t e, uint16_t pcpu, uint8_t old_state, uint8_t new_state, uint64_t t) {
    EntityRun& r = runs_[e];
    if (r.state == kNotSeen) Begin(e, old_state, pcpu);
    bool from_sleep = old_state == kBlocked || old_state == kOffline;
    if (from_sleep && r.state == kRunnable && r.wait_woken) {
      // A wake-up record made it runnable already: this is the same wake-up's runstate change.
      if (new_state == kRunnable) return;
      old_state = kRunnable;
      from_sleep = false;
    }
    if (r.state != kUnknown && (r.state != old_state || (old_state == kRunning && r.pcpu != pcpu))) {
      ++report_.counters.inconsistent;
      if (r.state != kRunning) {
        // It leaves a state it was not known to be in: its arrival on a pCPU, or its wake-up,
        // went unrecorded (perf's events miss a tracepoint now and then, without a loss record).
        // When in the stretch since its last known change the missing change came, the records
        // do not tell: not even after that pCPU's last recorded change, as the pCPU's own records
        // around it may be missing too (seen on linux, against the tracepoints read by BPF: a
        // thread's running or runnable time fell outside what the report claimed). The whole
        // stretch is unknown for it, not its tracked state.
        if (r.since < t) Move(e, kUnknown, r.since, kUnknownPcpu, false);
      }
    }
    if (new_state == r.state && (new_state != kRunning || r.pcpu == pcpu)) return;
    Move(e, new_state, t, pcpu, from_sleep && (new_state == kRunnable || new_state == kRunning));
  }

  void OnWakeup(uint32_t e, uint16_t pcpu, uint64_t t) {
    EntityRun& r = runs_[e];
    if (r.state == kNotSeen) Begin(e, kBlocked, pcpu);
    if (r.state == kRunnable || r.state == kRunning) {
      // Either the wake-up record of a runstate change already taken, or a wake-up of an entity
      // that was not asleep (Linux wakes running tasks).
      if (!(r.state == kRunnable && r.wait_woken && r.wait_start == t)) ++report_.counters.redundant_wakeups;
      return;
    }
    Move(e, kRunnable, t, kUnknownPcpu, true);
  }

  void OnMigrate(uint32_t e) {
    if (counting_) ++report_.entities[e].migrations_recorded;
    runs_[e].migrate_seen = true;
  }

  // Records were lost on `pcpu` from `first` (when known) until t: whoever ran there is
  // unknown from then on, and so is the pCPU until its next record says who runs.
  void OnLost(uint16_t pcpu, uint64_t t, uint64_t count, uint64_t first) {
    ++report_.counters.lost_gaps;
    report_.counters.lost_records += count;
    report_.pcpu_stats[pcpu].lost_records += count;
    PcpuRun& p = pcpus_[pcpu];
    if (first == 0 || first > t || first < p.last_event) first = p.last_event;
    const uint64_t gap = std::max(first, p.since);
    if (p.occupant != kSchedNobody) {
      Move(p.occupant, kUnknown, gap, kUnknownPcpu, false);
    } else {
      SetOccupant(pcpu, kSchedNobody, gap);
    }
    p.lost = true;
  }

  // Entity e leaves its state for `state` at t (on `pcpu` when that is running).
  void Move(uint32_t e, uint8_t state, uint64_t t, uint16_t pcpu, bool wake) {
    EntityRun& r = runs_[e];
    SchedEntityStats& st = report_.entities[e];
    st.ns[r.state] += t - r.since;
    if (r.state == kRunning) {
      if (pcpus_[r.pcpu].occupant == e) SetOccupant(r.pcpu, kSchedNobody, t);
      r.pcpu = kUnknownPcpu;
    }
    if (r.state == kRunnable) EndWait(e, t, state == kRunning ? pcpu : kUnknownPcpu);
    r.state = state;
    r.since = t;
    if (state == kRunning) {
      const uint32_t there = pcpus_[pcpu].occupant;
      if (there != kSchedNobody && there != e) {
        // Its record of leaving is missing: it is no longer known to run anywhere.
        ++report_.counters.inconsistent;
        ++report_.counters.displaced;
        Move(there, kUnknown, t, kUnknownPcpu, false);
      }
      SetOccupant(pcpu, e, t);
      r.pcpu = pcpu;
      if (counting_) {
        ++st.switches_in;
        if (r.last_pcpu != kUnknownPcpu && r.last_pcpu != pcpu && !r.migrate_seen) ++st.migrations_derived;
        if (wake) {
          ++st.wakeups;
          latencies_[e].Add(0);
        } else if (r.wake_pending) {
          latencies_[e].Add(t - r.wake_time);
        }
      }
      r.last_pcpu = pcpu;
      r.migrate_seen = false;
      r.wake_pending = false;
    } else if (state == kRunnable) {
      r.wait_start = t;
      r.wait_woken = wake;
      r.wake_pending = wake && counting_;
      r.wake_time = t;
      if (wake && counting_) ++st.wakeups;
    } else {
      r.wake_pending = false;
    }
  }

  // The pCPU's occupant changes at t: its time since the last change goes to busy, idle or
  // unknown, and to the interval sink.
  void SetOccupant(uint16_t pcpu, uint32_t e, uint64_t t) {
    PcpuRun& p = pcpus_[pcpu];
    SchedPcpuStats& ps = report_.pcpu_stats[pcpu];
    if (t > p.since) {
      const uint64_t length = t - p.since;
      if (p.occupant == kSchedNobody) {
        ps.unknown_ns += length;
        if (p.lost) ps.lost_ns += length;
      } else if (Idle(p.occupant)) {
        ps.idle_ns += length;
      } else {
        ps.busy_ns += length;
      }
      if (sink_) sink_(SchedInterval{pcpu, p.occupant, p.since, t, p.lost && p.occupant == kSchedNobody});
    }
    if (e != kSchedNobody && e != p.occupant && counting_) ++ps.switches;
    p.occupant = e;
    p.since = t;
    p.lost = false;
    if (p.history.back().start == t) {
      p.history.back().entity = e;
    } else {
      p.history.push_back({t, e});
      if (p.history.size() > kSchedHistory) p.history.pop_front();
    }
  }

  // A runnable interval ends at t; with `pcpu`, the entity then ran there.
  void EndWait(uint32_t e, uint64_t t, uint16_t pcpu) {
    const EntityRun& r = runs_[e];
    if (Idle(e) || t <= r.wait_start) return;
    SchedEntityStats& st = report_.entities[e];
    const SchedWait wait{e, r.wait_start, t - r.wait_start, pcpu, r.wait_woken};
    ++st.waits;
    st.longest_wait_ns = std::max(st.longest_wait_ns, wait.ns);
    KeepLongest(wait);
    if (pcpu != kUnknownPcpu) Blame(e, pcpu, r.wait_start, t);
  }

  static bool Longer(const SchedWait& a, const SchedWait& b) {
    return std::tie(a.ns, b.start_ns, b.entity) > std::tie(b.ns, a.start_ns, a.entity);
  }

  void KeepLongest(const SchedWait& wait) {
    auto& heap = report_.longest_waits;  // a min-heap by Longer while analysing
    if (options_.top == 0) return;
    if (heap.size() < options_.top) {
      heap.push_back(wait);
      std::push_heap(heap.begin(), heap.end(), Longer);
    } else if (Longer(wait, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), Longer);
      heap.back() = wait;
      std::push_heap(heap.begin(), heap.end(), Longer);
    }
  }

  // Who ran on `pcpu` while e waited there from a to b.
  void Blame(uint32_t e, uint16_t pcpu, uint64_t a, uint64_t b) {
    const auto& history = pcpus_[pcpu].history;
    uint64_t end = b;
    for (size_t i = history.size(); i-- > 0;) {
      const Occupancy& o = history[i];
      const uint64_t from = std::max(o.start, a);
      if (end > from) preempted_.Add(uint64_t{e} << 32 | Preemptor(e, o.entity), end - from);
      if (o.start <= a) return;
      end = o.start;
    }
    if (end > a) preempted_.Add(uint64_t{e} << 32 | kSchedNotKept, end - a);
  }

  // Who `victim` waited for: idle vCPUs are one, and itself (its records disagreed) is nobody.
  uint32_t Preemptor(uint32_t victim, uint32_t who) const {
    if (who == victim) return kSchedNobody;
    return who != kSchedNobody && Idle(who) ? kSchedIdle : who;
  }

  // Drops the switches before the oldest open wait: no preemptor needs them.
  void TrimHistories() {
    uint64_t oldest = UINT64_MAX;
    for (uint32_t e = 0; e < runs_.size(); ++e) {
      if (runs_[e].state == kRunnable && !Idle(e)) oldest = std::min(oldest, runs_[e].wait_start);
    }
    for (PcpuRun& p : pcpus_) {
      while (p.history.size() >= 2 && p.history[1].start <= oldest) p.history.pop_front();
    }
  }

  std::string PreemptorLabel(uint32_t who) const {
    if (who == kSchedNobody) return "(unknown)";
    if (who == kSchedIdle) return "idle";
    if (who == kSchedNotKept) return "(earlier, not kept)";
    return report_.entities[who].label;
  }

  void Summarize() {
    SchedReport& out = report_;
    for (uint32_t e = 0; e < entities_.size(); ++e) {
      out.entities[e].entity = entities_[e];
      out.entities[e].label = SchedEntityLabel(entities_[e], options_);
      out.entities[e].process = SchedProcessLabel(entities_[e], options_);
      out.entities[e].latency = latencies_[e].Summary();
      if (!Idle(e)) out.shown.push_back(e);
    }
    std::sort(out.shown.begin(), out.shown.end(), [&](uint32_t a, uint32_t b) {
      const SchedEntity& x = entities_[a];
      const SchedEntity& y = entities_[b];
      return std::tie(x.domain, x.task, x.vcpu, x.pid, x.tid) < std::tie(y.domain, y.task, y.vcpu, y.pid, y.tid);
    });
    // Domains, and every latency together.
    std::map<uint16_t, std::pair<SchedDomainStats, LatencyHistogram>> domains;
    LatencyHistogram all;
    for (uint32_t e : out.shown) {
      const SchedEntityStats& st = out.entities[e];
      auto& [d, histogram] = domains[st.entity.domain];
      d.domain = st.entity.domain;
      ++d.entities;
      for (uint32_t s = 0; s < kSchedStates; ++s) d.ns[s] += st.ns[s];
      d.wakeups += st.wakeups;
      d.switches_in += st.switches_in;
      d.migrations_recorded += st.migrations_recorded;
      d.migrations_derived += st.migrations_derived;
      histogram.Merge(latencies_[e]);
      all.Merge(latencies_[e]);
    }
    for (auto& [id, entry] : domains) {
      auto& [d, histogram] = entry;
      d.name = options_.DomainName(id);
      d.latency = histogram.Summary();
      out.domains.push_back(std::move(d));
    }
    out.latency = all.Summary();
    // Preemptors: per entity the top ones; per pair of domains, the sums.
    std::vector<std::vector<SchedPreemptor>> per_entity(entities_.size());
    std::map<std::pair<uint16_t, uint16_t>, uint64_t> by_domains;
    preempted_.ForEach([&](uint64_t key, uint64_t ns) {
      const uint32_t victim = static_cast<uint32_t>(key >> 32);
      const uint32_t who = static_cast<uint32_t>(key);
      per_entity[victim].push_back({who, PreemptorLabel(who), ns});
      const uint16_t domain = who == kSchedIdle      ? hvprof::kIdleDomain
                              : who >= kSchedNotKept ? kSchedNobodyDomain
                                                     : entities_[who].domain;
      by_domains[{entities_[victim].domain, domain}] += ns;
    });
    auto most_first = [](const SchedPreemptor& a, const SchedPreemptor& b) {
      return std::tie(a.ns, b.label) > std::tie(b.ns, a.label);
    };
    for (uint32_t e = 0; e < entities_.size(); ++e) {
      auto& list = per_entity[e];
      std::sort(list.begin(), list.end(), most_first);
      if (list.size() > options_.top) list.resize(options_.top);
      out.entities[e].preemptors = std::move(list);
    }
    for (const auto& [pair, ns] : by_domains) out.domain_preemptions.push_back({pair.first, pair.second, ns});
    std::sort(out.domain_preemptions.begin(), out.domain_preemptions.end(), [](const auto& a, const auto& b) {
      return std::tie(a.ns, b.victim, b.preemptor) > std::tie(b.ns, a.victim, a.preemptor);
    });
    if (out.domain_preemptions.size() > options_.top) out.domain_preemptions.resize(options_.top);
    std::sort(out.longest_waits.begin(), out.longest_waits.end(), Longer);
  }

  const std::vector<SchedEntity>& entities_;
  const SchedOptions& options_;
  const uint64_t start_;
  const uint64_t end_;
  const std::function<void(const SchedInterval&)>& sink_;
  std::vector<EntityRun> runs_;
  std::vector<LatencyHistogram> latencies_;
  std::vector<PcpuRun> pcpus_;
  PreemptionMap preempted_;
  Progress progress_;
  SchedReport report_;
  bool counting_ = true;
  uint64_t steps_ = 0;
};

}  // namespace

std::string SchedReport::DomainName(uint16_t domain) const {
  for (const SchedDomainStats& d : domains) {
    if (d.domain == domain) return d.name;
  }
  return store::DomainName(domain, "");
}

SchedWindow WindowOf(const SchedRecords& records, const SchedOptions& options) {
  const uint64_t start = options.start_ns.value_or(records.first_ns());
  return {start, options.end_ns.value_or(std::max(records.last_ns(), start))};
}

Result<SchedReport> AnalyzeSched(const SchedRecords& records, const SchedOptions& options,
                                 const std::function<void(const SchedInterval&)>& on_interval) {
  const auto [start, end] = WindowOf(records, options);
  if (end < start) {
    return MakeError(ErrorKind::kInvalidArgument, "the scheduling window ends ({} ns) before it starts ({} ns)", end,
                     start);
  }
  const uint32_t pcpus = std::max(options.pcpus, records.pcpus());
  if (pcpus > sched::kMaxPcpus) {
    return MakeError(ErrorKind::kInvalidArgument, "{} pCPUs: hvprof takes at most {}", pcpus, sched::kMaxPcpus);
  }
  Analyzer analyzer(records, options, start, end, pcpus, on_interval);
  records.ForEachInTimeOrder([&](const SchedStep& step) { analyzer.Step(step); });
  return analyzer.Finish();
}


SchedShares SharesBesideSamples(const SchedReport& report, const std::map<uint16_t, uint64_t>& samples,
                                const SchedOptions& options) {
  SchedShares shares;
  std::map<uint16_t, SchedShareRow> rows;
  for (const SchedDomainStats& d : report.domains) {
    rows[d.domain].running_ns = d.ns[static_cast<size_t>(SchedState::kRunning)];
    shares.running_ns += d.ns[static_cast<size_t>(SchedState::kRunning)];
  }
  for (const auto& [domain, count] : samples) {
    if (domain == hvprof::kIdleDomain || count == 0) continue;
    rows[domain].samples = count;
    shares.samples += count;
  }
  for (auto& [domain, row] : rows) {
    row.domain = domain;
    row.name = options.DomainName(domain);
    row.running_percent =
        shares.running_ns == 0 ? 0.0 : 100.0 * static_cast<double>(row.running_ns) / static_cast<double>(shares.running_ns);
    row.sample_percent =
        shares.samples == 0 ? 0.0 : 100.0 * static_cast<double>(row.samples) / static_cast<double>(shares.samples);
    shares.rows.push_back(std::move(row));
  }
  std::stable_sort(shares.rows.begin(), shares.rows.end(), [](const SchedShareRow& a, const SchedShareRow& b) {
    return std::tie(a.running_ns, a.samples) > std::tie(b.running_ns, b.samples);
  });
  return shares;
}

}  // namespace hvprof::report
