#include "hvprof/agent/agent_status.h"

#include <fmt/format.h>

#include "hvprof/base/json_fields.h"

namespace hvprof::agent {

using Json = nlohmann::json;

namespace {

// Bounds on what one status may list; an hvprofd lists at most the engine's domains.
constexpr size_t kMaxDomains = 1u << 16;
constexpr size_t kMaxEvents = 64;
constexpr size_t kMaxNotes = 256;

template <typename T>
void PutOptional(Json& out, const char* key, const std::optional<T>& value) {
  if (value) out[key] = *value;
}

Json LossesJson(const Losses& lost) {
  Json out{{"ring_full", lost.ring_full}};
  PutOptional(out, "corrupt_index", lost.corrupt_index);
  PutOptional(out, "no_ring", lost.no_ring);
  PutOptional(out, "unprofiled_domain", lost.unprofiled_domain);
  return out;
}

Result<Losses> ParseLosses(const json::Node& node) {
  Losses lost;
  HVPROF_TRY(ring_full, node.Get<uint64_t>("ring_full"));
  HVPROF_TRY(corrupt_index, node.GetOptional<uint64_t>("corrupt_index"));
  HVPROF_TRY(no_ring, node.GetOptional<uint64_t>("no_ring"));
  HVPROF_TRY(unprofiled_domain, node.GetOptional<uint64_t>("unprofiled_domain"));
  lost.ring_full = ring_full;
  lost.corrupt_index = corrupt_index;
  lost.no_ring = no_ring;
  lost.unprofiled_domain = unprofiled_domain;
  return lost;
}

Json DomainJson(const DomainRingsStatus& d) {
  Json samples = Json::object();
  for (uint8_t mode = 0; mode < sample_mode::kCount; ++mode) samples[sample_mode::Name(mode)] = d.samples[mode];
  Json out{{"id", d.id},           {"label", d.label},       {"role", d.role},
           {"rings", d.rings},     {"capacity", d.capacity}, {"max_fill", d.max_fill},
           {"samples", samples},   {"lost", LossesJson(d.lost)}};
  PutOptional(out, "activated", d.activated);
  return out;
}

Result<DomainRingsStatus> ParseDomain(const json::Node& node) {
  DomainRingsStatus d;
  HVPROF_TRY(id, node.Get<uint16_t>("id"));
  HVPROF_TRY(label, node.Get<std::string>("label"));
  HVPROF_TRY(role, node.Get<std::string>("role"));
  HVPROF_TRY(activated, node.GetOptional<bool>("activated"));
  HVPROF_TRY(rings, node.Get<uint32_t>("rings"));
  HVPROF_TRY(capacity, node.Get<uint64_t>("capacity"));
  HVPROF_TRY(max_fill, node.Get<uint64_t>("max_fill"));
  HVPROF_TRY(samples, node.Member("samples"));
  for (uint8_t mode = 0; mode < sample_mode::kCount; ++mode) {
    HVPROF_TRY(count, samples.Get<uint64_t>(sample_mode::Name(mode)));
    d.samples[mode] = count;
  }
  HVPROF_TRY(lost_node, node.Member("lost"));
  HVPROF_TRY(lost, ParseLosses(lost_node));
  d.id = id;
  d.label = std::move(label);
  d.role = std::move(role);
  d.activated = activated;
  d.rings = rings;
  d.capacity = capacity;
  d.max_fill = max_fill;
  d.lost = lost;
  return d;
}

Json EventJson(const EventStatus& e) {
  return Json{{"counter", e.counter}, {"name", e.name},     {"count", e.count},
              {"unit_mask", e.unit_mask}, {"kernel", e.kernel}, {"user", e.user}};
}

Result<EventStatus> ParseEvent(const json::Node& node) {
  EventStatus e;
  HVPROF_TRY(counter, node.Get<uint32_t>("counter"));
  HVPROF_TRY(name, node.Get<std::string>("name"));
  HVPROF_TRY(count, node.Get<uint64_t>("count"));
  HVPROF_TRY(unit_mask, node.Get<uint32_t>("unit_mask"));
  HVPROF_TRY(kernel, node.Get<bool>("kernel"));
  HVPROF_TRY(user, node.Get<bool>("user"));
  e.counter = counter;
  e.name = std::move(name);
  e.count = count;
  e.unit_mask = unit_mask;
  e.kernel = kernel;
  e.user = user;
  return e;
}

Json SchedJson(const SchedStatus& sched) {
  return Json{{"source", sched.source},
              {"records", sched.records},
              {"lost", store::SchedLossesJson(sched.lost)},
              {"notes", sched.notes}};
}

Result<SchedStatus> ParseSched(const json::Node& node) {
  SchedStatus sched;
  HVPROF_TRY(source, node.Get<std::string>("source"));
  HVPROF_TRY(records, node.Get<uint64_t>("records"));
  HVPROF_TRY(lost_node, node.Member("lost"));
  HVPROF_TRY(lost, store::ParseSchedLosses(lost_node));
  HVPROF_TRY(notes, node.OptionalArray("notes", kMaxNotes));
  for (const json::Node& note : notes) {
    HVPROF_TRY(text, note.String());
    sched.notes.push_back(std::move(text));
  }
  sched.source = std::move(source);
  sched.records = records;
  sched.lost = lost;
  return sched;
}

Result<SimClockStatus> ParseSim(const json::Node& node) {
  SimClockStatus sim;
  HVPROF_TRY(time_ns, node.Get<uint64_t>("time_ns"));
  HVPROF_TRY(pmis, node.Get<uint64_t>("pmis"));
  HVPROF_TRY(halted, node.Get<bool>("halted"));
  sim.time_ns = time_ns;
  sim.pmis = pmis;
  sim.halted = halted;
  return sim;
}

Json ContinuousJson(const ContinuousStatus& c) {
  Json out{{"window_ns", c.window_ns}, {"index", c.index},     {"start_ns", c.start_ns},
           {"clock", c.clock},         {"windows", c.windows}, {"bytes", c.bytes},
           {"other_bytes", c.other_bytes}, {"keep_bytes", c.keep_bytes}, {"keep_age_ns", c.keep_age_ns},
           {"removed", c.removed},     {"thinned", c.thinned}};
  PutOptional(out, "last_problem", c.last_problem);
  return out;
}

Result<ContinuousStatus> ParseContinuous(const json::Node& node) {
  ContinuousStatus c;
  for (auto [key, field] : {std::pair{"window_ns", &c.window_ns}, std::pair{"index", &c.index},
                            std::pair{"start_ns", &c.start_ns}, std::pair{"windows", &c.windows},
                            std::pair{"bytes", &c.bytes}, std::pair{"other_bytes", &c.other_bytes},
                            std::pair{"keep_bytes", &c.keep_bytes}, std::pair{"keep_age_ns", &c.keep_age_ns},
                            std::pair{"removed", &c.removed}, std::pair{"thinned", &c.thinned}}) {
    HVPROF_TRY(value, node.Get<uint64_t>(key));
    *field = value;
  }
  HVPROF_TRY(clock, node.Get<std::string>("clock"));
  HVPROF_TRY(problem, node.GetOptional<std::string>("last_problem"));
  c.clock = std::move(clock);
  c.last_problem = std::move(problem);
  return c;
}

Result<StoreHealth> ParseStore(const json::Node& node) {
  StoreHealth store;
  HVPROF_TRY(failed, node.Get<uint64_t>("failed"));
  HVPROF_TRY(failed_chunks, node.Get<uint64_t>("failed_chunks"));
  HVPROF_TRY(error, node.GetOptional<std::string>("error"));
  store.failed = failed;
  store.failed_chunks = failed_chunks;
  store.error = std::move(error);
  return store;
}

// What every agent says: who it is, where it writes, what it counts, its rings.
Result<void> ParseCommon(const json::Node& root, AgentStatus& s) {
  HVPROF_TRY(role, root.Get<std::string>("role"));
  if (role == AgentRoleName(AgentRole::kDom0)) {
    s.role = AgentRole::kDom0;
  } else if (role == AgentRoleName(AgentRole::kGuest)) {
    s.role = AgentRole::kGuest;
  } else {
    return root.Checked("role").Fail("expected dom0 or guest, got {}", root.Checked("role").Describe());
  }
  HVPROF_TRY(profiling, root.Get<bool>("profiling"));
  HVPROF_TRY(platform, root.Get<std::string>("platform"));
  HVPROF_TRY(machine, root.Get<std::string>("machine"));
  HVPROF_TRY(state, root.Get<std::string>("state"));
  HVPROF_TRY(cpu_type, root.Get("cpu_type", ""));
  HVPROF_TRY(cpus, root.Get<uint32_t>("cpus"));
  HVPROF_TRY(session, root.Get<std::string>("session"));
  HVPROF_TRY(samples_stored, root.Get<uint64_t>("samples_stored"));
  HVPROF_TRY(store_node, root.Member("store"));
  HVPROF_TRY(store, ParseStore(store_node));
  HVPROF_TRY(events, root.Array("events", kMaxEvents));
  for (const json::Node& event : events) {
    HVPROF_TRY(parsed, ParseEvent(event));
    s.events.push_back(std::move(parsed));
  }
  HVPROF_TRY(buffers, root.Member("buffers"));
  HVPROF_TRY(capacity, buffers.Get<uint32_t>("capacity"));
  HVPROF_TRY(watermark, buffers.Get<uint32_t>("watermark"));
  HVPROF_TRY(poll_interval_ms, buffers.Get<uint32_t>("poll_interval_ms"));
  HVPROF_TRY(domains, root.Array("domains", kMaxDomains));
  for (const json::Node& domain : domains) {
    HVPROF_TRY(parsed, ParseDomain(domain));
    s.domains.push_back(std::move(parsed));
  }
  s.profiling = profiling;
  s.platform = std::move(platform);
  s.machine = std::move(machine);
  s.state = std::move(state);
  s.cpu_type = std::move(cpu_type);
  s.cpus = cpus;
  s.session = std::move(session);
  s.samples_stored = samples_stored;
  s.store = std::move(store);
  s.ring_capacity = capacity;
  s.watermark = watermark;
  s.poll_interval_ms = poll_interval_ms;
  return Ok();
}

Result<void> ParseGuest(const json::Node& root, AgentStatus& s) {
  HVPROF_TRY(domain, root.Get<uint16_t>("domain"));
  HVPROF_TRY(label, root.Get<std::string>("label"));
  HVPROF_TRY(joined, root.Get<bool>("joined"));
  HVPROF_TRY(primary, root.GetOptional<uint16_t>("primary"));
  s.domain = domain;
  s.label = std::move(label);
  s.joined = joined;
  s.primary = primary;
  return Ok();
}

Result<void> ParseDom0(const json::Node& root, AgentStatus& s) {
  HVPROF_TRY(lost_node, root.Member("lost"));
  HVPROF_TRY(lost, ParseLosses(lost_node));
  HVPROF_TRY(idle_samples, root.GetOptional<uint64_t>("idle_samples"));
  HVPROF_TRY(total_samples, root.GetOptional<uint64_t>("total_samples"));
  HVPROF_TRY(backtrace_depth, root.GetOptional<uint32_t>("backtrace_depth"));
  HVPROF_TRY(note, root.GetOptional<std::string>("note"));
  s.lost = lost;
  s.idle_samples = idle_samples;
  s.total_samples = total_samples;
  s.backtrace_depth = backtrace_depth;
  s.note = std::move(note);
  if (const std::optional<json::Node> sched = root.OptionalMember("sched")) {
    HVPROF_TRY(parsed, ParseSched(*sched));
    s.sched = std::move(parsed);
  }
  if (const std::optional<json::Node> sim = root.OptionalMember("sim")) {
    HVPROF_TRY(parsed, ParseSim(*sim));
    s.sim = parsed;
  }
  if (const std::optional<json::Node> continuous = root.OptionalMember("continuous")) {
    HVPROF_TRY(parsed, ParseContinuous(*continuous));
    s.continuous = std::move(parsed);
  }
  return Ok();
}

}  // namespace

const char* AgentRoleName(AgentRole role) {
  switch (role) {
    case AgentRole::kDom0: return "dom0";
    case AgentRole::kGuest: return "guest";
  }
  return "unknown";
}

Json ToJson(const AgentStatus& s) {
  Json events = Json::array();
  for (const EventStatus& event : s.events) events.push_back(EventJson(event));
  Json domains = Json::array();
  for (const DomainRingsStatus& domain : s.domains) domains.push_back(DomainJson(domain));
  Json store{{"failed", s.store.failed}, {"failed_chunks", s.store.failed_chunks}};
  PutOptional(store, "error", s.store.error);
  Json out{{"role", AgentRoleName(s.role)},
           {"profiling", s.profiling},
           {"platform", s.platform},
           {"machine", s.machine},
           {"state", s.state},
           {"cpu_type", s.cpu_type},
           {"cpus", s.cpus},
           {"session", s.session},
           {"samples_stored", s.samples_stored},
           {"store", std::move(store)},
           {"events", std::move(events)},
           {"buffers", {{"capacity", s.ring_capacity}, {"watermark", s.watermark},
                        {"poll_interval_ms", s.poll_interval_ms}}},
           {"domains", std::move(domains)}};
  if (s.role == AgentRole::kGuest) {
    out.update({{"domain", s.domain}, {"label", s.label}, {"joined", s.joined}});
    PutOptional(out, "primary", s.primary);
    return out;
  }
  out["lost"] = LossesJson(s.lost.value_or(Losses{}));
  PutOptional(out, "idle_samples", s.idle_samples);
  PutOptional(out, "total_samples", s.total_samples);
  PutOptional(out, "backtrace_depth", s.backtrace_depth);
  PutOptional(out, "note", s.note);
  if (s.sched) out["sched"] = SchedJson(*s.sched);
  if (s.sim) out["sim"] = {{"time_ns", s.sim->time_ns}, {"pmis", s.sim->pmis}, {"halted", s.sim->halted}};
  if (s.continuous) out["continuous"] = ContinuousJson(*s.continuous);
  return out;
}

Result<AgentStatus> ParseAgentStatus(const Json& message) {
  const json::Node root = json::Node::Root(message, "hvprofd's status", ErrorKind::kCorrupt);
  AgentStatus s;
  Result<void> parsed = ParseCommon(root, s);
  if (parsed) parsed = s.role == AgentRole::kGuest ? ParseGuest(root, s) : ParseDom0(root, s);
  if (!parsed) {
    return MakeError(ErrorKind::kCorrupt,
                     "{}; an hvprofd of another version than this hvprof answers like this: restart it "
                     "(`hvprof --shutdown`, then `hvprof --start-daemon` with its options)",
                     parsed.error().message());
  }
  return s;
}

}  // namespace hvprof::agent
