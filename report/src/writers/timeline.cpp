#include "hvprof/report/writers/timeline.h"

#include <map>

#include <nlohmann/json.hpp>

#include "writers/common.h"

namespace hvprof::report {

extern const std::string_view kTimelinePage;

using Json = nlohmann::json;

namespace {

constexpr std::string_view kLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

// The character of each domain in the legend.
std::map<uint16_t, char> Characters(const Timeline& timeline) {
  std::map<uint16_t, char> chars;
  size_t next = 0;
  for (uint16_t domain : timeline.legend) {
    if (domain == hvprof::kIdleDomain) chars[domain] = '.';
    else if (domain == kTimelineUnknown) chars[domain] = '?';
    else chars[domain] = next < kLetters.size() ? kLetters[next++] : '#';
  }
  return chars;
}

std::string LegendName(const Timeline& timeline, uint16_t domain) {
  return domain == kTimelineUnknown ? "unknown: no record says who ran" : timeline.report.DomainName(domain);
}

// Nanoseconds as microseconds with three decimals: exact, as the trace format counts in µs.
std::string Micros(uint64_t ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); }

}  // namespace

std::string FormatTimelineText(const Timeline& timeline) {
  const SchedReport& report = timeline.report;
  std::string out = fmt::format(
      "Time line: {:.3f} s in {} buckets of {:.3f} ms; each character is the domain that ran most of its bucket\n",
      static_cast<double>(report.window_ns()) / 1e9, timeline.buckets,
      static_cast<double>(report.window_ns()) / 1e6 / timeline.buckets);
  const auto chars = Characters(timeline);
  for (size_t pcpu = 0; pcpu < timeline.cells.size(); ++pcpu) {
    std::string row;
    for (uint16_t domain : timeline.cells[pcpu]) row += chars.at(domain);
    out += fmt::format("pCPU {:>3} |{}|\n", pcpu, row);
  }
  out += "Legend:\n";
  bool overflow = false;
  for (uint16_t domain : timeline.legend) {
    const char c = chars.at(domain);
    if (c == '#') {
      overflow = true;
      continue;
    }
    out += fmt::format("  {} {}\n", c, Safe(LegendName(timeline, domain)));
  }
  if (overflow) out += "  # another domain (more than 62 ran)\n";
  return out;
}

std::string FormatTimelineCsv(const Timeline& timeline) {
  std::string out = "pcpu,bucket,start_ns,end_ns,domain_id,domain\n";
  for (size_t pcpu = 0; pcpu < timeline.cells.size(); ++pcpu) {
    for (uint32_t b = 0; b < timeline.buckets; ++b) {
      const uint16_t domain = timeline.cells[pcpu][b];
      out += fmt::format("{},{},{},{},{},{}\n", pcpu, b, timeline.BucketStart(b), timeline.BucketStart(b + 1),
                         domain == kTimelineUnknown ? std::string() : std::to_string(domain),
                         CsvField(LegendName(timeline, domain)));
    }
  }
  return out;
}

std::string FormatChromeTrace(const Timeline& timeline) {
  const SchedReport& report = timeline.report;
  auto quoted = [](const std::string& text) { return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace); };
  std::string out = "{\"traceEvents\":[\n";
  out += R"({"ph":"M","name":"process_name","pid":1,"args":{"name":"pCPUs"}},)" "\n";
  out += R"({"ph":"M","name":"process_sort_index","pid":1,"args":{"sort_index":0}})";
  for (uint32_t pcpu = 0; pcpu < report.pcpus; ++pcpu) {
    out += fmt::format(",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"pCPU {}\"}}}}",
                       pcpu + 1, pcpu);
    out += fmt::format(",\n{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":{},\"args\":{{\"sort_index\":{}}}}}",
                       pcpu + 1, pcpu);
  }
  // Each entity's name and arguments, quoted once.
  std::vector<std::string> names(report.entities.size());
  std::vector<std::string> args(report.entities.size());
  for (const TimelineSlice& slice : timeline.slices) {
    if (!names[slice.entity].empty()) continue;
    const SchedEntity& e = report.entities[slice.entity].entity;
    names[slice.entity] = quoted(report.entities[slice.entity].label);
    args[slice.entity] = e.task ? fmt::format(R"({{"domain":{},"vcpu":{},"pid":{},"tid":{}}})", e.domain, e.vcpu, e.pid, e.tid)
                                : fmt::format(R"({{"domain":{},"vcpu":{}}})", e.domain, e.vcpu);
  }
  for (const TimelineSlice& slice : timeline.slices) {
    out += fmt::format(",\n{{\"ph\":\"X\",\"cat\":\"sched\",\"name\":{},\"pid\":1,\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{}}}",
                       names[slice.entity], slice.pcpu + 1, Micros(slice.start_ns - report.start_ns),
                       Micros(slice.end_ns - slice.start_ns), args[slice.entity]);
  }
  out += fmt::format("\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"schema\":\"hvprof-sched-trace\",\"version\":1,"
                     "\"window_start_ns\":{},\"window_end_ns\":{},\"pcpus\":{}}}}}\n",
                     report.start_ns, report.end_ns, report.pcpus);
  return out;
}

std::string FormatTimelineHtml(const Timeline& timeline, const std::string& session) {
  const SchedReport& report = timeline.report;
  const double seconds = static_cast<double>(report.window_ns()) / 1e9;
  Json data;
  data["title"] = fmt::format("hvprof time line: {} pCPUs over {:.3f} s", report.pcpus, seconds);
  Json facts = Json::array();
  facts.push_back({"Session", session, false});
  facts.push_back({"Window", fmt::format("{:.6f} s of the platform's clock, from {} ns", seconds, report.start_ns), false});
  uint64_t busy = 0, idle = 0, unknown = 0;
  for (const SchedPcpuStats& p : report.pcpu_stats) {
    busy += p.busy_ns;
    idle += p.idle_ns;
    unknown += p.unknown_ns;
  }
  const uint64_t whole = busy + idle + unknown;
  facts.push_back({"pCPU time", fmt::format("{:.3f} s: busy {:.2f}%, idle {:.2f}% (left blank), unknown {:.2f}%",
                                            static_cast<double>(whole) / 1e9, Percent(busy, whole), Percent(idle, whole),
                                            Percent(unknown, whole)),
                   unknown != 0});
  facts.push_back({"Records", fmt::format("{} read, {} kept", report.counters.input.records, report.counters.input.kept),
                   false});
  for (const std::string& problem : SchedProblems(report.counters)) facts.push_back({"Problem", problem, true});
  data["facts"] = std::move(facts);
  data["window_ns"] = report.window_ns();
  data["pcpus"] = report.pcpus;
  // [label, domain, vCPU, process, task, pid, tid]: a task's colour is its process's, a vCPU's
  // its domain's (the process of a vCPU is its domain).
  Json entities = Json::array();
  for (const SchedEntityStats& e : report.entities) {
    entities.push_back({e.label, e.entity.domain, e.entity.vcpu, e.process, e.entity.task,
                        e.entity.task ? Json(e.entity.pid) : Json(nullptr), e.entity.task ? Json(e.entity.tid) : Json(nullptr)});
  }
  data["entities"] = std::move(entities);
  std::vector<uint64_t> slices;
  slices.reserve(timeline.slices.size() * 4);
  for (const TimelineSlice& slice : timeline.slices) {
    slices.insert(slices.end(), {slice.pcpu, slice.entity, slice.start_ns - report.start_ns, slice.end_ns - report.start_ns});
  }
  data["slices"] = std::move(slices);
  return FillPage(kTimelinePage, data);
}

}  // namespace hvprof::report
