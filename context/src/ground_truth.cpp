#include "hvprof/context/ground_truth.h"

#include <fmt/format.h>

namespace hvprof::context {

using Json = nlohmann::json;

namespace {

constexpr size_t kMaxCounters = 64;
constexpr size_t kMaxRows = 1u << 24;  // functions x vCPUs x modes of a scenario within its bounds
constexpr size_t kMaxVcpus = 1u << 20;
constexpr size_t kMaxCpus = 1u << 16;
constexpr size_t kMaxCallers = 256;
constexpr size_t kMaxName = 1u << 16;

// A row's counts: one whole number per counter.
Result<std::vector<uint64_t>> Counts(const json::Node& row, std::string_view key, size_t counters) {
  HVPROF_TRY(elements, row.Array(key, kMaxCounters));
  if (elements.size() != counters) {
    return row.Fail("{} has {} counts for {} counters", key, elements.size(), counters);
  }
  std::vector<uint64_t> counts;
  counts.reserve(elements.size());
  for (const json::Node& element : elements) {
    HVPROF_TRY(count, element.Unsigned());
    counts.push_back(count);
  }
  return counts;
}

Result<TruthCounter> ParseCounter(const json::Node& node) {
  TruthCounter counter;
  HVPROF_TRY(index, node.Get<uint32_t>("index"));
  HVPROF_TRY(enabled, node.Get<bool>("enabled"));
  HVPROF_TRY(event, node.Member("event"));
  HVPROF_TRY(event_code, event.Hex());
  HVPROF_TRY(unit_mask, node.Member("unit_mask"));
  HVPROF_TRY(mask, unit_mask.Hex());
  if (event_code > UINT32_MAX) return event.Fail("expected an event code of 32 bits");
  if (mask > UINT8_MAX) return unit_mask.Fail("expected a unit mask of 8 bits");
  HVPROF_TRY(os, node.Get<bool>("os"));
  HVPROF_TRY(usr, node.Get<bool>("usr"));
  HVPROF_TRY(fixed, node.Get<bool>("fixed"));
  HVPROF_TRY(counts, node.Get<std::string>("counts"));
  counter.index = index;
  counter.enabled = enabled;
  counter.event = static_cast<uint32_t>(event_code);
  counter.unit_mask = static_cast<uint8_t>(mask);
  counter.os = os;
  counter.usr = usr;
  counter.fixed = fixed;
  counter.counts = std::move(counts);
  return counter;
}

Result<TruthRow> ParseRow(const json::Node& node, size_t counters) {
  TruthRow row;
  HVPROF_TRY(domain, node.Get<uint16_t>("domain"));
  HVPROF_TRY(vcpu, node.Get<uint16_t>("vcpu"));
  HVPROF_TRY(mode_node, node.Member("mode"));
  HVPROF_TRY(mode_name, mode_node.String());
  const std::optional<Mode> mode = sample_mode::FromName(mode_name);
  if (!mode) return mode_node.Fail("expected user, kernel or hypervisor, got \"{}\"", mode_name);
  HVPROF_TRY(image, node.Member("image"));
  HVPROF_TRY(image_name, image.String(kMaxName));
  HVPROF_TRY(function, node.Member("function"));
  HVPROF_TRY(function_name, function.String(kMaxName));
  HVPROF_TRY(start, node.Member("start"));
  HVPROF_TRY(start_address, start.Hex());
  HVPROF_TRY(image_address, node.Member("image_address"));
  HVPROF_TRY(address_in_image, image_address.Hex());
  HVPROF_TRY(events, Counts(node, "events", counters));
  HVPROF_TRY(overflows, Counts(node, "overflows", counters));
  HVPROF_TRY(callers, node.OptionalArray("callers", kMaxCallers));
  row.domain = domain;
  row.vcpu = vcpu;
  row.mode = *mode;
  row.image = std::move(image_name);
  row.function = std::move(function_name);
  row.start = start_address;
  row.image_address = address_in_image;
  row.events = std::move(events);
  row.overflows = std::move(overflows);
  for (const json::Node& caller : callers) {
    HVPROF_TRY(name, caller.String(kMaxName));
    row.callers.push_back(std::move(name));
  }
  return row;
}

Result<TruthVcpu> ParseVcpu(const json::Node& node) {
  TruthVcpu vcpu;
  HVPROF_TRY(domain, node.Get<uint16_t>("domain"));
  HVPROF_TRY(id, node.Get<uint16_t>("vcpu"));
  vcpu.domain = domain;
  vcpu.vcpu = id;
  for (auto [key, member] : {std::pair{"running_ns", &TruthVcpu::running_ns}, std::pair{"runnable_ns", &TruthVcpu::runnable_ns},
                             std::pair{"blocked_ns", &TruthVcpu::blocked_ns}, std::pair{"offline_ns", &TruthVcpu::offline_ns},
                             std::pair{"wakeups", &TruthVcpu::wakeups}, std::pair{"migrations", &TruthVcpu::migrations}}) {
    HVPROF_TRY(value, node.Get<uint64_t>(key));
    vcpu.*member = value;
  }
  return vcpu;
}

Result<SchedTruth> ParseSched(const json::Node& node) {
  SchedTruth sched;
  HVPROF_TRY(since, node.Get<uint64_t>("since_ns"));
  HVPROF_TRY(now, node.Get<uint64_t>("now_ns"));
  if (now < since) return node.Fail("now_ns {} is before since_ns {}", now, since);
  sched.since_ns = since;
  sched.now_ns = now;
  HVPROF_TRY(vcpus, node.Array("vcpus", kMaxVcpus));
  for (const json::Node& entry : vcpus) {
    HVPROF_TRY(vcpu, ParseVcpu(entry));
    sched.vcpus.push_back(vcpu);
  }
  HVPROF_TRY(cpus, node.Array("cpus", kMaxCpus));
  for (const json::Node& entry : cpus) {
    TruthCpu cpu;
    HVPROF_TRY(id, entry.Get<uint16_t>("cpu"));
    HVPROF_TRY(idle, entry.Get<uint64_t>("idle_ns"));
    HVPROF_TRY(busy, entry.Get<uint64_t>("busy_ns"));
    cpu.cpu = id;
    cpu.idle_ns = idle;
    cpu.busy_ns = busy;
    sched.cpus.push_back(cpu);
  }
  return sched;
}

}  // namespace

Json ToJson(const GroundTruth& truth) {
  Json out;
  out["scenario"] = truth.scenario;
  out["seed"] = truth.seed;
  out["run_seed"] = truth.run_seed;
  out["sim_time_ns"] = truth.sim_time_ns;
  out["cpus"] = truth.cpus;
  out["pmu"] = truth.pmu;
  out["pmis"] = truth.pmis;
  out["ticks"] = truth.ticks;
  out["source"] = truth.timer ? "timer" : "pmu";
  Json counters = Json::array();
  for (const TruthCounter& c : truth.counters) {
    counters.push_back({{"index", c.index},
                        {"enabled", c.enabled},
                        {"event", fmt::format("{:#x}", c.event)},
                        {"unit_mask", fmt::format("{:#04x}", c.unit_mask)},
                        {"os", c.os},
                        {"usr", c.usr},
                        {"fixed", c.fixed},
                        {"counts", c.counts}});
  }
  out["counters"] = std::move(counters);
  Json rows = Json::array();
  for (const TruthRow& row : truth.rows) {
    Json entry{{"domain", row.domain},
               {"vcpu", row.vcpu},
               {"mode", std::string(sample_mode::Name(row.mode))},
               {"image", row.image},
               {"function", row.function},
               {"start", fmt::format("{:#x}", row.start)},
               {"image_address", fmt::format("{:#x}", row.image_address)},
               {"events", row.events},
               {"overflows", row.overflows}};
    if (!row.callers.empty()) entry["callers"] = row.callers;
    rows.push_back(std::move(entry));
  }
  out["rows"] = std::move(rows);
  Json vcpus = Json::array();
  for (const TruthVcpu& v : truth.sched.vcpus) {
    vcpus.push_back({{"domain", v.domain},
                     {"vcpu", v.vcpu},
                     {"running_ns", v.running_ns},
                     {"runnable_ns", v.runnable_ns},
                     {"blocked_ns", v.blocked_ns},
                     {"offline_ns", v.offline_ns},
                     {"wakeups", v.wakeups},
                     {"migrations", v.migrations}});
  }
  Json cpus = Json::array();
  for (const TruthCpu& c : truth.sched.cpus) cpus.push_back({{"cpu", c.cpu}, {"idle_ns", c.idle_ns}, {"busy_ns", c.busy_ns}});
  out["sched"] = {{"since_ns", truth.sched.since_ns}, {"now_ns", truth.sched.now_ns}, {"vcpus", std::move(vcpus)}, {"cpus", std::move(cpus)}};
  return out;
}

Result<GroundTruth> ParseGroundTruth(const json::Node& node) {
  if (!node.IsObject()) return node.Fail("expected an object, got {}", node.Describe());
  GroundTruth truth;
  HVPROF_TRY(scenario, node.Get<std::string>("scenario"));
  HVPROF_TRY(seed, node.Get<uint64_t>("seed"));
  HVPROF_TRY(run_seed, node.Get<uint64_t>("run_seed"));
  HVPROF_TRY(sim_time, node.Get<uint64_t>("sim_time_ns"));
  HVPROF_TRY(cpus, node.Get<uint32_t>("cpus"));
  HVPROF_TRY(pmu, node.Get<std::string>("pmu"));
  HVPROF_TRY(pmis, node.Get<uint64_t>("pmis"));
  HVPROF_TRY(ticks, node.Get<uint64_t>("ticks"));
  HVPROF_TRY(source_node, node.Member("source"));
  HVPROF_TRY(source, source_node.String());
  if (source != "timer" && source != "pmu") return source_node.Fail("expected \"timer\" or \"pmu\", got \"{}\"", source);
  truth.scenario = std::move(scenario);
  truth.seed = seed;
  truth.run_seed = run_seed;
  truth.sim_time_ns = sim_time;
  truth.cpus = cpus;
  truth.pmu = std::move(pmu);
  truth.pmis = pmis;
  truth.ticks = ticks;
  truth.timer = source == "timer";
  HVPROF_TRY(counters, node.Array("counters", kMaxCounters));
  for (const json::Node& entry : counters) {
    HVPROF_TRY(counter, ParseCounter(entry));
    truth.counters.push_back(std::move(counter));
  }
  HVPROF_TRY(rows, node.Array("rows", kMaxRows));
  truth.rows.reserve(rows.size());
  for (const json::Node& entry : rows) {
    HVPROF_TRY(row, ParseRow(entry, truth.counters.size()));
    truth.rows.push_back(std::move(row));
  }
  HVPROF_TRY(sched, node.Member("sched"));
  HVPROF_TRY(sched_truth, ParseSched(sched));
  truth.sched = std::move(sched_truth);
  return truth;
}

}  // namespace hvprof::context
