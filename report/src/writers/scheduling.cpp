#include "hvprof/report/writers/scheduling.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "writers/common.h"

namespace hvprof::report {

using Json = nlohmann::json;

namespace {

constexpr size_t kRunning = static_cast<size_t>(SchedState::kRunning);

std::string Seconds(uint64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e9); }
std::string Millis(uint64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); }
// Exact decimals of integer nanoseconds, for CSV.
std::string ExactSeconds(uint64_t ns) { return fmt::format("{}.{:09}", ns / 1000000000, ns % 1000000000); }
std::string ExactMillis(uint64_t ns) { return fmt::format("{}.{:06}", ns / 1000000, ns % 1000000); }

// The share of each state in `whole` (per entity: the window; per domain: its entities' time).
std::string StateCells(const std::array<uint64_t, kSchedStates>& ns, uint64_t whole) {
  std::string out;
  for (uint32_t s = 0; s < kSchedStates; ++s) {
    out += fmt::format(" {:>11} {:>6.2f}", Seconds(ns[s]), Percent(ns[s], whole));
  }
  return out;
}

std::string StateHeading() {
  std::string out;
  for (uint32_t s = 0; s < kSchedStates; ++s) {
    out += fmt::format(" {:>11} {:>6}", std::string(SchedStateName(static_cast<SchedState>(s))) + " s", "%");
  }
  return out;
}

size_t LabelWidth(const SchedReport& report, size_t least) {
  size_t width = least;
  for (uint32_t e : report.shown) width = std::max(width, Safe(report.entities[e].label).size());
  for (const SchedDomainStats& d : report.domains) width = std::max(width, Safe(d.name).size());
  return width;
}

Json LatencyJson(const SchedLatency& l) {
  return {{"count", l.count}, {"total_ns", l.total_ns}, {"p50_ns", l.p50_ns}, {"p90_ns", l.p90_ns},
          {"p99_ns", l.p99_ns}, {"max_ns", l.max_ns}};
}

Json StatesJson(const std::array<uint64_t, kSchedStates>& ns, uint64_t whole) {
  Json out = Json::object();
  for (uint32_t s = 0; s < kSchedStates; ++s) {
    const std::string name = SchedStateName(static_cast<SchedState>(s));
    out[name + "_ns"] = ns[s];
    out[name + "_percent"] = Percent(ns[s], whole);
  }
  return out;
}

Json EntityJson(const SchedEntity& e) {
  Json out = {{"domain", e.domain}, {"vcpu", e.vcpu}, {"task", e.task}};
  out["pid"] = e.task ? Json(e.pid) : Json(nullptr);
  out["tid"] = e.task ? Json(e.tid) : Json(nullptr);
  return out;
}

std::string DomainLabel(const SchedReport& report, uint16_t domain) {
  return domain == kSchedNobodyDomain ? "(unknown)" : report.DomainName(domain);
}

const char* WaitBegan(const SchedWait& wait, uint64_t window_start) {
  if (wait.woken) return "wake-up";
  return wait.start_ns == window_start ? "window start" : "preempted";
}

std::string SharesText(const SchedShares& shares) {
  size_t width = 22;
  for (const SchedShareRow& row : shares.rows) width = std::max(width, Safe(row.name).size());
  std::string out = "CPU time (running, of all vCPUs' running time) beside the share of the samples\n";
  out += fmt::format("{:<{}} {:>12} {:>8} {:>10} {:>8}\n", "domain", width, "running s", "%", "samples", "%");
  for (const SchedShareRow& row : shares.rows) {
    out += fmt::format("{:<{}} {:>12} {:>8.2f} {:>10} {:>8.2f}\n", Safe(row.name), width, Seconds(row.running_ns),
                       row.running_percent, row.samples, row.sample_percent);
  }
  out += fmt::format("{:<{}} {:>12} {:>8} {:>10} {:>8}\n", "total", width, Seconds(shares.running_ns), "",
                     shares.samples, "");
  return out;
}

Json SharesJson(const SchedShares& shares) {
  Json rows = Json::array();
  for (const SchedShareRow& row : shares.rows) {
    rows.push_back({{"id", row.domain}, {"name", row.name}, {"running_ns", row.running_ns},
                    {"running_percent", row.running_percent}, {"samples", row.samples},
                    {"sample_percent", row.sample_percent}});
  }
  return {{"running_ns", shares.running_ns}, {"samples", shares.samples}, {"domains", rows}};
}

}  // namespace

std::vector<std::string> SchedProblems(const SchedCounters& c) {
  std::vector<std::string> lines;
  if (c.input.backwards != 0) {
    lines.push_back(fmt::format("{} records earlier than the one before them on their pCPU: dropped", c.input.backwards));
  }
  if (c.input.unknown_types != 0) {
    lines.push_back(fmt::format("{} records of a type this hvprof does not know: skipped (a newer hypervisor?)",
                                c.input.unknown_types));
  }
  if (c.input.invalid != 0) {
    lines.push_back(fmt::format("{} records with a state or pCPU that cannot be: dropped", c.input.invalid));
  }
  if (c.inconsistent != 0) {
    lines.push_back(fmt::format("{} records whose old state disagreed with what the records before said ({} of them "
                                "found another entity still running there): taken from then on",
                                c.inconsistent, c.displaced));
  }
  if (c.lost_records != 0 || c.lost_gaps != 0) {
    lines.push_back(fmt::format("{} records lost in {} gaps (the agent did not drain the scheduling rings in time: a "
                                "larger --buffer-size or a shorter --poll-interval); a pCPU's time in a gap is unknown",
                                c.lost_records, c.lost_gaps));
  }
  if (c.outside_window != 0) {
    lines.push_back(fmt::format("{} records outside the session's window: states taken, nothing counted",
                                c.outside_window));
  }
  return lines;
}


std::string FormatSchedText(const SchedReport& report, bool no_header, const SchedShares* shares) {
  std::string out;
  const SchedCounters& c = report.counters;
  const uint64_t window = report.window_ns();
  if (!no_header) {
    out += fmt::format("Scheduling: {} pCPUs over {} s of the platform's clock ({} s of pCPU time); {} records\n",
                       report.pcpus, Seconds(window), Seconds(window * report.pcpus), c.input.kept);
    const auto problems = SchedProblems(c);
    if (problems.empty()) out += "Record problems: none\n";
    for (const std::string& line : problems) out += "Record problems: " + line + "\n";
    if (c.redundant_wakeups != 0) {
      out += fmt::format("Note: {} wake-ups of vCPUs or tasks already runnable or running changed nothing\n",
                         c.redundant_wakeups);
    }
    out += "\n";
  }
  if (report.pcpus != 0) {
    out += "pCPU time (busy: a vCPU or task ran; idle: the idle vCPU ran; unknown: no record says)\n";
    out += fmt::format("{:>5} {:>11} {:>6} {:>11} {:>6} {:>11} {:>6} {:>9} {:>12}\n", "pCPU", "busy s", "%", "idle s", "%",
                       "unknown s", "%", "switches", "lost records");
    for (const SchedPcpuStats& p : report.pcpu_stats) {
      out += fmt::format("{:>5} {:>11} {:>6.2f} {:>11} {:>6.2f} {:>11} {:>6.2f} {:>9} {:>12}\n", p.pcpu, Seconds(p.busy_ns),
                         Percent(p.busy_ns, window), Seconds(p.idle_ns), Percent(p.idle_ns, window), Seconds(p.unknown_ns),
                         Percent(p.unknown_ns, window), p.switches, p.lost_records);
    }
    out += "\n";
  }
  if (report.shown.empty()) {
    out += "No vCPU or task has a scheduling record in this window.\n";
    return shares == nullptr ? out : out + "\n" + SharesText(*shares);
  }
  const size_t width = LabelWidth(report, 22);
  out += "Per domain (share of its vCPUs' time in the window)\n";
  out += fmt::format("{:<{}} {:>6}{} {:>9} {:>10}\n", "domain", width, "vCPUs", StateHeading(), "wake-ups", "migrations");
  for (const SchedDomainStats& d : report.domains) {
    out += fmt::format("{:<{}} {:>6}{} {:>9} {:>10}\n", Safe(d.name), width, d.entities,
                       StateCells(d.ns, window * d.entities), d.wakeups, d.migrations_recorded + d.migrations_derived);
  }
  out += "\nPer vCPU or task (share of the window)\n";
  out += fmt::format("{:<{}}{} {:>9} {:>9} {:>10} {:>16}\n", "vCPU", width, StateHeading(), "wake-ups", "switches",
                     "migrations", "longest wait ms");
  for (uint32_t e : report.shown) {
    const SchedEntityStats& st = report.entities[e];
    out += fmt::format("{:<{}}{} {:>9} {:>9} {:>10} {:>16}\n", Safe(st.label), width, StateCells(st.ns, window),
                       st.wakeups, st.switches_in, st.migrations_recorded + st.migrations_derived,
                       Millis(st.longest_wait_ns));
  }

  out += "\nWake-up latency, from a wake-up to running (ms; nearest-rank percentiles)\n";
  out += fmt::format("{:<{}} {:>9} {:>10} {:>10} {:>10} {:>10}\n", "", width, "wake-ups", "p50", "p90", "p99", "max");
  auto latency_row = [&](const std::string& name, const SchedLatency& l) {
    if (l.count == 0) return fmt::format("{:<{}} {:>9} {:>10} {:>10} {:>10} {:>10}\n", name, width, 0, "-", "-", "-", "-");
    return fmt::format("{:<{}} {:>9} {:>10} {:>10} {:>10} {:>10}\n", name, width, l.count, Millis(l.p50_ns),
                       Millis(l.p90_ns), Millis(l.p99_ns), Millis(l.max_ns));
  };
  out += latency_row("all", report.latency);
  for (const SchedDomainStats& d : report.domains) out += latency_row(Safe(d.name), d.latency);
  for (uint32_t e : report.shown) {
    if (report.entities[e].latency.count != 0) out += latency_row(Safe(report.entities[e].label), report.entities[e].latency);
  }

  out += "\nLongest waits (runnable, waiting for a pCPU)\n";
  if (report.longest_waits.empty()) out += "  none\n";
  else {
    out += fmt::format("{:>12} {:>12}  {:<{}} {:<13} {}\n", "wait ms", "at s", "vCPU", width, "then ran on", "began with");
    for (const SchedWait& w : report.longest_waits) {
      out += fmt::format("{:>12} {:>12}  {:<{}} {:<13} {}\n", Millis(w.ns), Seconds(w.start_ns - report.start_ns),
                         Safe(report.entities[w.entity].label), width,
                         w.pcpu == kUnknownPcpu ? std::string("-") : fmt::format("pCPU {}", w.pcpu),
                         WaitBegan(w, report.start_ns));
    }
  }

  out += "\nMigrations (recorded: a migration record said so; derived: it ran on another pCPU than the last, with no "
         "record of the move)\n";
  bool any_migration = false;
  for (uint32_t e : report.shown) {
    const SchedEntityStats& st = report.entities[e];
    if (st.migrations_recorded + st.migrations_derived == 0) continue;
    if (!any_migration) out += fmt::format("{:<{}} {:>10} {:>9} {:>8}\n", "vCPU", width, "migrations", "recorded", "derived");
    any_migration = true;
    out += fmt::format("{:<{}} {:>10} {:>9} {:>8}\n", Safe(st.label), width, st.migrations_recorded + st.migrations_derived,
                       st.migrations_recorded, st.migrations_derived);
  }
  if (!any_migration) out += "  none\n";

  out += "\nTop preemptors: who ran on the pCPU a vCPU next ran on while it waited\n";
  bool any_preemptor = false;
  for (uint32_t e : report.shown) {
    const SchedEntityStats& st = report.entities[e];
    if (st.preemptors.empty()) continue;
    if (!any_preemptor) {
      out += fmt::format("{:<{}} {:>12}  {:<{}} {:>12} {:>7}\n", "vCPU", width, "waited ms", "ran meanwhile", width,
                         "ms", "%");
    }
    any_preemptor = true;
    uint64_t waited = 0;
    for (const SchedPreemptor& p : st.preemptors) waited += p.ns;
    bool first = true;
    for (const SchedPreemptor& p : st.preemptors) {
      out += fmt::format("{:<{}} {:>12}  {:<{}} {:>12} {:>7.2f}\n", first ? Safe(st.label) : "", width,
                         first ? Millis(st.ns[static_cast<size_t>(SchedState::kRunnable)]) : "", Safe(p.label), width,
                         Millis(p.ns), Percent(p.ns, waited));
      first = false;
    }
  }
  if (!any_preemptor) out += "  none\n";
  if (!report.domain_preemptions.empty()) {
    out += "\nDomains kept waiting, by whom\n";
    for (const SchedDomainPreemption& p : report.domain_preemptions) {
      out += fmt::format("  {} waited {} ms while {} ran\n", Safe(DomainLabel(report, p.victim)), Millis(p.ns),
                         Safe(DomainLabel(report, p.preemptor)));
    }
  }
  if (shares != nullptr) out += "\n" + SharesText(*shares);
  return out;
}

std::string FormatSchedCsv(const SchedReport& report, const SchedShares* shares) {
  std::vector<std::string> heading = {"level", "domain_id", "domain", "vcpu", "pid", "tid", "name"};
  for (uint32_t s = 0; s < kSchedStates; ++s) heading.push_back(std::string(SchedStateName(static_cast<SchedState>(s))) + "_s");
  heading.push_back("idle_s");
  for (uint32_t s = 0; s < kSchedStates; ++s) heading.push_back(std::string(SchedStateName(static_cast<SchedState>(s))) + "_%");
  for (const char* column : {"wakeups", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_max_ms", "switches",
                             "migrations", "migrations_recorded", "migrations_derived", "waits", "longest_wait_ms",
                             "top_preemptor", "top_preemptor_ms"}) {
    heading.push_back(column);
  }
  if (shares != nullptr) {
    for (const char* column : {"cpu_%", "samples", "samples_%"}) heading.push_back(column);
  }
  std::string out = fmt::format("{}\n", fmt::join(heading, ","));
  const uint64_t window = report.window_ns();
  // One row: the fields named, the others empty.
  auto row = [&](const std::map<std::string, std::string>& fields) {
    std::vector<std::string> line;
    for (const std::string& column : heading) {
      auto it = fields.find(column);
      line.push_back(it == fields.end() ? std::string() : it->second);
    }
    out += fmt::format("{}\n", fmt::join(line, ","));
  };
  auto states = [&](std::map<std::string, std::string>& fields, const std::array<uint64_t, kSchedStates>& ns,
                    uint64_t whole) {
    for (uint32_t s = 0; s < kSchedStates; ++s) {
      const std::string name = SchedStateName(static_cast<SchedState>(s));
      fields[name + "_s"] = ExactSeconds(ns[s]);
      fields[name + "_%"] = fmt::format("{:.4f}", Percent(ns[s], whole));
    }
  };
  auto counts = [](std::map<std::string, std::string>& fields, uint64_t wakeups, const SchedLatency& l, uint64_t switches,
                   uint64_t recorded, uint64_t derived) {
    fields["wakeups"] = std::to_string(wakeups);
    if (l.count != 0) {
      fields["latency_p50_ms"] = ExactMillis(l.p50_ns);
      fields["latency_p90_ms"] = ExactMillis(l.p90_ns);
      fields["latency_p99_ms"] = ExactMillis(l.p99_ns);
      fields["latency_max_ms"] = ExactMillis(l.max_ns);
    }
    fields["switches"] = std::to_string(switches);
    fields["migrations"] = std::to_string(recorded + derived);
    fields["migrations_recorded"] = std::to_string(recorded);
    fields["migrations_derived"] = std::to_string(derived);
  };
  for (const SchedPcpuStats& p : report.pcpu_stats) {
    std::array<uint64_t, kSchedStates> ns{};
    ns[kRunning] = p.busy_ns;
    ns[static_cast<size_t>(SchedState::kUnknown)] = p.unknown_ns;
    std::map<std::string, std::string> fields = {{"level", "pcpu"}, {"name", CsvField(fmt::format("pCPU {}", p.pcpu))}};
    states(fields, ns, window);
    fields["idle_s"] = ExactSeconds(p.idle_ns);
    fields["switches"] = std::to_string(p.switches);
    row(fields);
  }
  for (const SchedDomainStats& d : report.domains) {
    std::map<std::string, std::string> fields = {
        {"level", "domain"}, {"domain_id", std::to_string(d.domain)}, {"domain", CsvField(d.name)}, {"name", CsvField(d.name)}};
    states(fields, d.ns, window * d.entities);
    counts(fields, d.wakeups, d.latency, d.switches_in, d.migrations_recorded, d.migrations_derived);
    if (shares != nullptr) {
      for (const SchedShareRow& share : shares->rows) {
        if (share.domain != d.domain) continue;
        fields["cpu_%"] = fmt::format("{:.4f}", share.running_percent);
        fields["samples"] = std::to_string(share.samples);
        fields["samples_%"] = fmt::format("{:.4f}", share.sample_percent);
      }
    }
    row(fields);
  }
  // Domains with samples and no scheduling record.
  for (const SchedShareRow& share : shares == nullptr ? std::vector<SchedShareRow>{} : shares->rows) {
    const bool scheduled = std::any_of(report.domains.begin(), report.domains.end(),
                                       [&](const SchedDomainStats& d) { return d.domain == share.domain; });
    if (scheduled) continue;
    row({{"level", "domain"}, {"domain_id", std::to_string(share.domain)}, {"domain", CsvField(share.name)},
         {"name", CsvField(share.name)}, {"cpu_%", fmt::format("{:.4f}", share.running_percent)},
         {"samples", std::to_string(share.samples)}, {"samples_%", fmt::format("{:.4f}", share.sample_percent)}});
  }
  for (uint32_t e : report.shown) {
    const SchedEntityStats& st = report.entities[e];
    const SchedEntity& en = st.entity;
    std::map<std::string, std::string> fields = {{"level", en.task ? "task" : "vcpu"},
                                                 {"domain_id", std::to_string(en.domain)},
                                                 {"domain", CsvField(DomainLabel(report, en.domain))},
                                                 {"vcpu", std::to_string(en.vcpu)},
                                                 {"name", CsvField(st.label)}};
    if (en.task) {
      fields["pid"] = std::to_string(en.pid);
      fields["tid"] = std::to_string(en.tid);
    }
    states(fields, st.ns, window);
    counts(fields, st.wakeups, st.latency, st.switches_in, st.migrations_recorded, st.migrations_derived);
    fields["waits"] = std::to_string(st.waits);
    fields["longest_wait_ms"] = ExactMillis(st.longest_wait_ns);
    if (!st.preemptors.empty()) {
      fields["top_preemptor"] = CsvField(st.preemptors[0].label);
      fields["top_preemptor_ms"] = ExactMillis(st.preemptors[0].ns);
    }
    row(fields);
  }
  return out;
}

std::string FormatSchedJson(const SchedReport& report, const SchedShares* shares) {
  const uint64_t window = report.window_ns();
  const SchedCounters& c = report.counters;
  Json out;
  out["schema"] = "hvprof-sched";
  out["version"] = kSchedJsonVersion;
  out["window"] = {{"start_ns", report.start_ns}, {"end_ns", report.end_ns}, {"ns", window}};
  out["records"] = {{"read", c.input.records},
                    {"kept", c.input.kept},
                    {"backwards", c.input.backwards},
                    {"unknown_types", c.input.unknown_types},
                    {"invalid", c.input.invalid},
                    {"noop_migrations", c.input.noop_migrations},
                    {"inconsistent", c.inconsistent},
                    {"displaced", c.displaced},
                    {"redundant_wakeups", c.redundant_wakeups},
                    {"outside_window", c.outside_window},
                    {"lost_records", c.lost_records},
                    {"lost_gaps", c.lost_gaps}};
  Json pcpus = Json::array();
  for (const SchedPcpuStats& p : report.pcpu_stats) {
    pcpus.push_back({{"pcpu", p.pcpu}, {"busy_ns", p.busy_ns}, {"idle_ns", p.idle_ns}, {"unknown_ns", p.unknown_ns},
                     {"lost_ns", p.lost_ns}, {"busy_percent", Percent(p.busy_ns, window)},
                     {"idle_percent", Percent(p.idle_ns, window)}, {"unknown_percent", Percent(p.unknown_ns, window)},
                     {"switches", p.switches}, {"lost_records", p.lost_records}});
  }
  out["pcpus"] = pcpus;
  Json domains = Json::array();
  for (const SchedDomainStats& d : report.domains) {
    Json row = {{"id", d.domain}, {"name", d.name}, {"entities", d.entities}};
    row.update(StatesJson(d.ns, window * d.entities));
    row.update({{"wakeups", d.wakeups},
                {"switches", d.switches_in},
                {"migrations", {{"recorded", d.migrations_recorded}, {"derived", d.migrations_derived}}},
                {"latency", LatencyJson(d.latency)}});
    domains.push_back(std::move(row));
  }
  out["domains"] = domains;
  Json entities = Json::array();
  for (uint32_t e : report.shown) {
    const SchedEntityStats& st = report.entities[e];
    Json row = EntityJson(st.entity);
    row["label"] = st.label;
    row["seen"] = st.seen;
    row.update(StatesJson(st.ns, window));
    Json preemptors = Json::array();
    for (const SchedPreemptor& p : st.preemptors) {
      Json who = p.entity >= kSchedIdle ? Json::object() : EntityJson(report.entities[p.entity].entity);
      who["idle"] = p.entity == kSchedIdle;
      who["label"] = p.label;
      who["known"] = p.entity < kSchedNotKept;  // an entity, or idle
      who["ns"] = p.ns;
      preemptors.push_back(std::move(who));
    }
    row.update({{"wakeups", st.wakeups},
                {"switches", st.switches_in},
                {"migrations", {{"recorded", st.migrations_recorded}, {"derived", st.migrations_derived}}},
                {"waits", st.waits},
                {"longest_wait_ns", st.longest_wait_ns},
                {"latency", LatencyJson(st.latency)},
                {"preemptors", preemptors}});
    entities.push_back(std::move(row));
  }
  out["entities"] = entities;
  Json waits = Json::array();
  for (const SchedWait& w : report.longest_waits) {
    Json row = EntityJson(report.entities[w.entity].entity);
    row.update({{"label", report.entities[w.entity].label}, {"start_ns", w.start_ns}, {"ns", w.ns},
                {"pcpu", w.pcpu == kUnknownPcpu ? Json(nullptr) : Json(w.pcpu)},
                {"began_with", WaitBegan(w, report.start_ns)}});
    waits.push_back(std::move(row));
  }
  out["longest_waits"] = waits;
  Json by_domain = Json::array();
  for (const SchedDomainPreemption& p : report.domain_preemptions) {
    by_domain.push_back({{"victim", p.victim}, {"victim_name", DomainLabel(report, p.victim)},
                         {"preemptor", p.preemptor == kSchedNobodyDomain ? Json(nullptr) : Json(p.preemptor)},
                         {"preemptor_name", DomainLabel(report, p.preemptor)}, {"ns", p.ns}});
  }
  out["domain_preemptions"] = by_domain;
  out["latency"] = LatencyJson(report.latency);
  if (shares != nullptr) out["samples"] = SharesJson(*shares);
  return out.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace hvprof::report
