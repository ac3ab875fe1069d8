#include "hvprof/context/platform_stats.h"

#include <cfloat>

namespace hvprof::context {

using Json = nlohmann::json;

namespace {

constexpr size_t kMaxCpus = 1u << 16;
constexpr size_t kMaxCounters = 64;
constexpr size_t kMaxNotes = 1u << 16;  // linux says one per KVM guest
constexpr size_t kMaxNoteLength = 1u << 16;

// The whole-number members of a part, by name: written alike, read alike. `required`: a
// record without it is refused; else it reads as 0 (written only by later versions).
template <typename T>
struct CountField {
  const char* name;
  uint64_t T::*member;
  bool required;
};

constexpr CountField<CpuRate> kCpuCounts[] = {
    {"samples", &CpuRate::samples, true},
    {"throttles", &CpuRate::throttles, true},
    {"unthrottles", &CpuRate::unthrottles, false},
    {"lost_records", &CpuRate::lost_records, false},
    {"lost", &CpuRate::lost, true},
    {"lost_samples", &CpuRate::lost_samples, false},
    {"throttled_ns", &CpuRate::throttled_ns, false},
    {"idle_throttled_ns", &CpuRate::idle_throttled_ns, false},
    {"throttled", &CpuRate::throttled, false},
};
constexpr CountField<CpuCounterRate> kCpuCounterCounts[] = {
    {"samples", &CpuCounterRate::samples, true},
    {"time_enabled_ns", &CpuCounterRate::time_enabled_ns, false},
    {"time_running_ns", &CpuCounterRate::time_running_ns, false},
};
constexpr CountField<PlatformTotals> kTotals[] = {
    {"samples", &PlatformTotals::samples, true},
    {"throttles", &PlatformTotals::throttles, true},
    {"lost", &PlatformTotals::lost, true},
    {"lost_samples", &PlatformTotals::lost_samples, true},
    {"throttled", &PlatformTotals::throttled, false},
    {"unknown_sample_ids", &PlatformTotals::unknown_sample_ids, false},
    {"samples_without_engine", &PlatformTotals::samples_without_engine, false},
    {"sched_samples", &PlatformTotals::sched_samples, false},
    {"sched_undecodable", &PlatformTotals::sched_undecodable, false},
    {"malformed_records", &PlatformTotals::malformed_records, false},
    {"unknown_records", &PlatformTotals::unknown_records, false},
    {"corrupt_ring_reads", &PlatformTotals::corrupt_ring_reads, false},
};
constexpr CountField<SampleRouting> kRouting[] = {
    {"host_user", &SampleRouting::host_user, false},       {"host_kernel", &SampleRouting::host_kernel, false},
    {"idle", &SampleRouting::idle, false},                 {"guest_kernel", &SampleRouting::guest_kernel, false},
    {"guest_user", &SampleRouting::guest_user, false},     {"unmapped_guest", &SampleRouting::unmapped_guest, false},
};
constexpr CountField<ProcessTableCounts> kProcesses[] = {
    {"entries", &ProcessTableCounts::entries, false},
    {"mappings", &ProcessTableCounts::mappings, false},
    {"discovered_in_samples", &ProcessTableCounts::discovered_in_samples, false},
    {"unreadable_images", &ProcessTableCounts::unreadable_images, false},
    {"context_events", &ProcessTableCounts::context_events, false},
    {"context_dropped", &ProcessTableCounts::context_dropped, false},
};

template <typename T, size_t N>
void PutCounts(Json& out, const T& part, const CountField<T> (&fields)[N]) {
  for (const CountField<T>& field : fields) out[field.name] = part.*field.member;
}

template <typename T, size_t N>
Result<void> GetCounts(const json::Node& node, T& part, const CountField<T> (&fields)[N]) {
  if (!node.IsObject()) return node.Fail("expected an object, got {}", node.Describe());
  for (const CountField<T>& field : fields) {
    if (field.required) {
      HVPROF_TRY(count, node.Get<uint64_t>(field.name));
      part.*field.member = count;
    } else {
      HVPROF_TRY(count, node.Get<uint64_t>(field.name, 0));
      part.*field.member = count;
    }
  }
  return Ok();
}

// A rate: a non-negative number.
Result<double> GetRate(const json::Node& node, std::string_view key) {
  HVPROF_TRY(member, node.Member(key));
  return member.Number(0, DBL_MAX);
}

Result<CounterSetup> ParseCounterSetup(const json::Node& node) {
  CounterSetup c;
  HVPROF_TRY(counter, node.Get<uint32_t>("counter"));
  HVPROF_TRY(event, node.Get<uint32_t>("event", 0));
  HVPROF_TRY(unit_mask, node.Get<uint32_t>("unit_mask", 0));
  HVPROF_TRY(count, node.Get<uint64_t>("count", 0));
  HVPROF_TRY(perf_event, node.Get("perf_event", ""));
  HVPROF_TRY(perf_config, node.Get("perf_config", ""));
  HVPROF_TRY(period, node.Get<uint64_t>("period", 0));
  HVPROF_TRY(period_unit, node.Get("period_unit", ""));
  HVPROF_TRY(requested, GetRate(node, "requested_hz_per_cpu"));
  c.counter = counter;
  c.event = event;
  c.unit_mask = unit_mask;
  c.count = count;
  c.perf_event = std::move(perf_event);
  c.perf_config = std::move(perf_config);
  c.period = period;
  c.period_unit = std::move(period_unit);
  c.requested_hz_per_cpu = requested;
  return c;
}

Result<CpuRate> ParseCpu(const json::Node& node) {
  CpuRate cpu;
  HVPROF_TRY(id, node.Get<uint32_t>("cpu"));
  HVPROF_TRY(requested, GetRate(node, "requested_hz"));
  HVPROF_TRY(achieved, GetRate(node, "achieved_hz"));
  HVPROF_TRYV(GetCounts(node, cpu, kCpuCounts));
  HVPROF_TRY(counters, node.OptionalArray("counters", kMaxCounters));
  for (const json::Node& entry : counters) {
    CpuCounterRate c;
    HVPROF_TRY(counter, entry.Get<uint32_t>("counter"));
    HVPROF_TRY(counter_requested, GetRate(entry, "requested_hz"));
    HVPROF_TRY(counter_achieved, GetRate(entry, "achieved_hz"));
    HVPROF_TRYV(GetCounts(entry, c, kCpuCounterCounts));
    c.counter = counter;
    c.requested_hz = counter_requested;
    c.achieved_hz = counter_achieved;
    cpu.counters.push_back(c);
  }
  cpu.cpu = id;
  cpu.requested_hz = requested;
  cpu.achieved_hz = achieved;
  return cpu;
}

Json CpuJson(const CpuRate& cpu) {
  Json counters = Json::array();
  for (const CpuCounterRate& c : cpu.counters) {
    Json entry{{"counter", c.counter}, {"requested_hz", c.requested_hz}, {"achieved_hz", c.achieved_hz}};
    PutCounts(entry, c, kCpuCounterCounts);
    counters.push_back(std::move(entry));
  }
  Json out{{"cpu", cpu.cpu}, {"requested_hz", cpu.requested_hz}, {"achieved_hz", cpu.achieved_hz}};
  PutCounts(out, cpu, kCpuCounts);
  out["counters"] = std::move(counters);
  return out;
}

// The members every version wrote, then the optional parts.
Result<void> ParseHead(const json::Node& node, PlatformStats& s) {
  HVPROF_TRY(platform, node.Get<std::string>("platform"));
  HVPROF_TRY(source, node.Get<std::string>("source"));
  HVPROF_TRY(cpu_type, node.Get("cpu_type", ""));
  HVPROF_TRY(nominal_mhz_node, node.Member("nominal_mhz"));
  HVPROF_TRY(nominal_mhz, nominal_mhz_node.Number(0, DBL_MAX));
  HVPROF_TRY(mhz_source, node.Get("mhz_source", ""));
  HVPROF_TRY(max_sample_rate, node.Get<int64_t>("max_sample_rate", -1));
  HVPROF_TRY(max_sample_rate_at_setup, node.Get<int64_t>("max_sample_rate_at_setup", -1));
  HVPROF_TRY(cpu_time_max_percent, node.Get<int64_t>("cpu_time_max_percent", -1));
  HVPROF_TRY(profiling_ns, node.Get<uint64_t>("profiling_ns", 0));
  HVPROF_TRY(throttled, node.Get<bool>("throttled", false));
  s.platform = std::move(platform);
  s.source = std::move(source);
  s.cpu_type = std::move(cpu_type);
  s.nominal_mhz = nominal_mhz;
  s.mhz_source = std::move(mhz_source);
  s.max_sample_rate = max_sample_rate;
  s.max_sample_rate_at_setup = max_sample_rate_at_setup;
  s.cpu_time_max_percent = cpu_time_max_percent;
  s.profiling_ns = profiling_ns;
  s.throttled = throttled;
  return Ok();
}

}  // namespace

Json ToJson(const PlatformStats& s) {
  Json counters = Json::array();
  for (const CounterSetup& c : s.counters) {
    counters.push_back({{"counter", c.counter},
                        {"event", c.event},
                        {"unit_mask", c.unit_mask},
                        {"count", c.count},
                        {"perf_event", c.perf_event},
                        {"perf_config", c.perf_config},
                        {"period", c.period},
                        {"period_unit", c.period_unit},
                        {"requested_hz_per_cpu", c.requested_hz_per_cpu}});
  }
  Json cpus = Json::array();
  for (const CpuRate& cpu : s.cpus) cpus.push_back(CpuJson(cpu));
  Json totals = Json::object();
  PutCounts(totals, s.totals, kTotals);
  Json routing = Json::object();
  PutCounts(routing, s.routing, kRouting);
  Json processes = Json::object();
  PutCounts(processes, s.processes, kProcesses);
  return Json{{"platform", s.platform},
              {"source", s.source},
              {"cpu_type", s.cpu_type},
              {"nominal_mhz", s.nominal_mhz},
              {"mhz_source", s.mhz_source},
              {"max_sample_rate", s.max_sample_rate},
              {"max_sample_rate_at_setup", s.max_sample_rate_at_setup},
              {"cpu_time_max_percent", s.cpu_time_max_percent},
              {"profiling_ns", s.profiling_ns},
              {"counters", std::move(counters)},
              {"cpus", std::move(cpus)},
              {"totals", std::move(totals)},
              {"routing", std::move(routing)},
              {"processes", std::move(processes)},
              {"throttled", s.throttled},
              {"notes", s.notes}};
}

Result<PlatformStats> ParsePlatformStats(const json::Node& node) {
  if (!node.IsObject()) return node.Fail("expected an object, got {}", node.Describe());
  PlatformStats s;
  HVPROF_TRYV(ParseHead(node, s));
  HVPROF_TRY(counters, node.OptionalArray("counters", kMaxCounters));
  for (const json::Node& counter : counters) {
    HVPROF_TRY(parsed, ParseCounterSetup(counter));
    s.counters.push_back(std::move(parsed));
  }
  HVPROF_TRY(cpus, node.Array("cpus", kMaxCpus));
  for (const json::Node& cpu : cpus) {
    HVPROF_TRY(parsed, ParseCpu(cpu));
    s.cpus.push_back(std::move(parsed));
  }
  HVPROF_TRY(totals, node.Member("totals"));
  HVPROF_TRYV(GetCounts(totals, s.totals, kTotals));
  if (const std::optional<json::Node> routing = node.OptionalMember("routing")) {
    HVPROF_TRYV(GetCounts(*routing, s.routing, kRouting));
  }
  if (const std::optional<json::Node> processes = node.OptionalMember("processes")) {
    HVPROF_TRYV(GetCounts(*processes, s.processes, kProcesses));
  }
  HVPROF_TRY(notes, node.OptionalArray("notes", kMaxNotes));
  for (const json::Node& note : notes) {
    HVPROF_TRY(text, note.String(kMaxNoteLength));
    s.notes.push_back(std::move(text));
  }
  return s;
}

Json ToJson(const PlatformInfo& info) {
  Json out{{"notes", info.notes}, {"last_error", info.last_error}, {"nominal_mhz", info.nominal_mhz}};
  if (info.stats) out["stats"] = ToJson(*info.stats);
  return out;
}

Result<PlatformInfo> ParsePlatformInfo(const json::Node& node) {
  if (!node.IsObject()) return node.Fail("expected an object, got {}", node.Describe());
  PlatformInfo info;
  if (const std::optional<json::Node> stats = node.OptionalMember("stats")) {
    HVPROF_TRY(parsed, ParsePlatformStats(*stats));
    info.stats = std::move(parsed);
  }
  HVPROF_TRY(notes, node.Array("notes", kMaxNotes));
  for (const json::Node& note : notes) {
    HVPROF_TRY(text, note.String(kMaxNoteLength));
    info.notes.push_back(std::move(text));
  }
  if (const std::optional<json::Node> last_error = node.OptionalMember("last_error")) {
    HVPROF_TRY(text, last_error->String(kMaxNoteLength));
    info.last_error = std::move(text);
  }
  if (const std::optional<json::Node> mhz = node.OptionalMember("nominal_mhz")) {
    HVPROF_TRY(value, mhz->Number(0, DBL_MAX));
    info.nominal_mhz = value;
  } else if (info.stats) {
    info.nominal_mhz = info.stats->nominal_mhz;
  }
  return info;
}

}  // namespace hvprof::context
