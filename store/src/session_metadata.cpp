// session.json: the session's metadata, its one codec (SerializeMetadata, ParseMetadata).
#include "hvprof/store/session.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <type_traits>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "hvprof/base/json_fields.h"

#include "address_counter.h"
#include "samples_decode.h"
#include "hvprof/base/files.h"
#include "hvprof/base/process.h"

namespace hvprof::store {

using Json = nlohmann::json;

namespace {

std::string Hex(uint64_t value) { return fmt::format("{:#x}", value); }

Json MappingJson(const MappingRecord& mapping) {
  return {{"path", mapping.path}, {"start", Hex(mapping.start)}, {"end", Hex(mapping.end)},
          {"bias", Hex(mapping.bias)}, {"build_id", mapping.build_id}};
}

}  // namespace

std::string SerializeMetadata(const SessionMetadata& m) {
  Json out;
  out["format"] = "hvprof-session";
  out["version"] = m.version;
  out["session_id"] = m.session_id;
  out["hvprof_version"] = m.hvprof_version;
  out["platform"] = m.platform;
  out["machine"] = m.machine;
  out["cpu_type"] = m.cpu_type;
  out["num_cpus"] = m.num_cpus;
  out["num_counters"] = m.num_counters;
  out["role"] = m.role;
  out["agent_domain"] = m.agent_domain;
  out["created_ns"] = m.created_ns;
  if (!m.build_id_cache.empty()) out["build_id_cache"] = m.build_id_cache;
  Json intervals = Json::array();
  for (const auto& interval : m.profiling) {
    intervals.push_back({{"start_ns", interval.start_ns}, {"stop_ns", interval.stop_ns}});
  }
  out["profiling"] = intervals;
  Json events = Json::array();
  for (const auto& e : m.events) {
    Json event = {{"counter", e.counter}, {"name", e.name}, {"code", Hex(e.code)},
                  {"unit_mask", Hex(e.unit_mask)}, {"unit_mask_name", e.unit_mask_name},
                  {"count", e.count}, {"kernel", e.kernel}, {"user", e.user}};
    if (!e.sampled_by.empty()) event["sampled_by"] = e.sampled_by;
    events.push_back(std::move(event));
  }
  out["events"] = events;
  Json domains = Json::array();
  for (const auto& d : m.domains) {
    Json processes = Json::array();
    for (const auto& p : d.processes) {
      Json mappings = Json::array();
      for (const auto& mapping : p.mappings) mappings.push_back(MappingJson(mapping));
      processes.push_back({{"pid", p.pid}, {"comm", p.comm}, {"mappings", mappings}});
    }
    Json domain = {{"id", d.id}, {"name", d.name}, {"role", d.role}, {"vcpus", d.vcpus}, {"processes", processes}};
    if (!d.tasks.empty()) {
      Json tasks = Json::array();
      for (const auto& t : d.tasks) tasks.push_back({{"pid", t.pid}, {"tid", t.tid}, {"comm", t.comm}});
      domain["tasks"] = std::move(tasks);
    }
    domains.push_back(std::move(domain));
  }
  out["domains"] = domains;
  Json images = Json::array();
  for (const auto& image : m.images) {
    Json entry = {{"role", image.role}, {"path", image.path}, {"format", image.format},
                  {"build_id", image.build_id}, {"bias", Hex(image.bias)}};
    if (image.domain) entry["domain"] = *image.domain;
    images.push_back(entry);
  }
  out["images"] = images;
  if (!m.jit.empty()) {
    Json jit = Json::array();
    for (const JitRecord& j : m.jit) {
      Json entry = {{"domain", j.domain}, {"pid", j.pid}, {"start_ticks", j.start_ticks}, {"kind", j.kind},
                    {"source", j.source}, {"file", j.file}, {"bytes", j.bytes}, {"cut", j.cut}};
      if (!j.problem.empty()) entry["problem"] = j.problem;
      jit.push_back(entry);
    }
    out["jit"] = jit;
  }
  out["buffers"] = {{"format", m.ring_format}, {"capacity", m.ring_capacity},
                    {"watermark", m.ring_watermark}, {"poll_interval_ms", m.poll_interval_ms}};
  out["backtrace_depth"] = m.backtrace_depth;
  Json rings = Json::array();
  for (const auto& r : m.rings) {
    rings.push_back({{"owner", r.owner}, {"index", r.index}, {"kind", r.kind},
                     {"capacity", r.capacity}, {"written", r.written},
                     {"lost", std::vector<uint64_t>(std::begin(r.lost), std::end(r.lost))},
                     {"drained", r.drained}, {"malformed", r.malformed}, {"max_fill", r.max_fill}});
  }
  out["rings"] = rings;
  Json losses = Json::object();
  for (const LossField& field : kLossFields) losses[field.name] = m.losses.*field.member;
  out["losses"] = std::move(losses);
  out["samples_stored"] = m.samples_stored;
  out["idle_samples"] = m.idle_samples;
  out["first_sample_ns"] = m.first_sample_ns;
  out["last_sample_ns"] = m.last_sample_ns;
  out["samples_by_domain_mode"] = m.samples_by_domain_mode;
  out["notes"] = m.notes;
  if (!m.incomplete.empty()) out["incomplete"] = m.incomplete;
  out["samples_file"] = {{"chunks", m.samples_file_chunks}, {"bytes", m.samples_file_bytes}};
  if (m.platform_stats) out["platform_stats"] = context::ToJson(*m.platform_stats);
  if (m.sched) {
    out["sched"] = {{"source", m.sched->source},
                    {"records", m.sched->records},
                    {"lost", SchedLossesJson(m.sched->lost)},
                    {"file", {{"chunks", m.sched->file_chunks}, {"bytes", m.sched->file_bytes}}}};
  }
  if (m.context) {
    out["context"] = {{"processes", m.context->processes}, {"images", m.context->images},
                      {"domains", m.context->domains}};
  }
  if (m.window) {
    out["window"] = {{"series", m.window->series},   {"index", m.window->index},
                     {"start_ns", m.window->start_ns}, {"end_ns", m.window->end_ns},
                     {"clock", m.window->clock},     {"raw_dropped", m.window->raw_dropped}};
  }
  return out.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";  // names from outside need not be UTF-8
}

namespace {

// Bounds on lists: far above any real host, low enough that a damaged file cannot make the
// reader allocate without end.
constexpr size_t kMaxList = 1u << 20;

// What was profiled, where, by which hvprof.
Result<void> ParseIdentity(const json::Node& root, std::string_view origin, SessionMetadata& m) {
  HVPROF_TRY(format, root.Get<std::string>("format"));
  if (format != "hvprof-session") {
    return MakeError(ErrorKind::kCorrupt, "{}: not an hvprof session (format '{}')", origin, format);
  }
  HVPROF_TRY(version, root.Get<int>("version"));
  if (version != kSessionFormatVersion) {
    return MakeError(ErrorKind::kUnsupported,
                     "{}: session format version {}; this hvprof reads version {}", origin, version,
                     kSessionFormatVersion);
  }
  m.version = version;
  HVPROF_TRY(session_id, root.Get<std::string>("session_id"));
  m.session_id = session_id;
  HVPROF_TRY(hvprof_version, root.Get("hvprof_version", ""));
  m.hvprof_version = hvprof_version;
  HVPROF_TRY(platform, root.Get<std::string>("platform"));
  m.platform = platform;
  HVPROF_TRY(machine, root.Get("machine", ""));
  m.machine = machine;
  HVPROF_TRY(cpu_type, root.Get<std::string>("cpu_type"));
  m.cpu_type = cpu_type;
  HVPROF_TRY(build_id_cache, root.Get("build_id_cache", ""));
  m.build_id_cache = build_id_cache;
  HVPROF_TRY(num_cpus, root.Get<uint32_t>("num_cpus", 0));
  m.num_cpus = num_cpus;
  HVPROF_TRY(num_counters, root.Get<uint32_t>("num_counters", 0));
  m.num_counters = num_counters;
  HVPROF_TRY(role, root.Get("role", "dom0"));
  m.role = role;
  HVPROF_TRY(agent_domain, root.Get<uint16_t>("agent_domain", 0));
  m.agent_domain = agent_domain;
  HVPROF_TRY(created, root.Get<uint64_t>("created_ns", 0));
  m.created_ns = created;
  return Ok();
}

// The profiling intervals and the events counted.
Result<void> ParseEvents(const json::Node& root, SessionMetadata& m) {
  HVPROF_TRY(intervals, root.OptionalArray("profiling", kMaxList));
  for (const json::Node& interval : intervals) {
    HVPROF_TRY(start, interval.Get<uint64_t>("start_ns"));
    HVPROF_TRY(stop, interval.Get<uint64_t>("stop_ns", 0));
    m.profiling.push_back({start, stop});
  }
  HVPROF_TRY(events, root.Array("events", 64));
  for (const json::Node& e : events) {
    EventRecord event;
    HVPROF_TRY(counter_node, e.Member("counter"));
    HVPROF_TRY(counter, counter_node.Unsigned(0, 31));
    HVPROF_TRY(name, e.Get<std::string>("name"));
    HVPROF_TRY(code, e.GetAddress("code", 0));
    HVPROF_TRY(unit_mask, e.GetAddress("unit_mask", 0));
    HVPROF_TRY(unit_mask_name, e.Get("unit_mask_name", ""));
    HVPROF_TRY(count, e.Get<uint64_t>("count"));
    HVPROF_TRY(kernel, e.Get<bool>("kernel", true));
    HVPROF_TRY(user, e.Get<bool>("user", true));
    HVPROF_TRY(sampled_by, e.Get("sampled_by", ""));
    if (code > 0xFFFF) return e.Checked("code").Fail("expected an event code up to 0xffff, got {:#x}", code);
    if (unit_mask > 0xFF) return e.Checked("unit_mask").Fail("expected a unit mask up to 0xff, got {:#x}", unit_mask);
    event.counter = counter;
    event.name = name;
    event.code = static_cast<uint16_t>(code);
    event.unit_mask = static_cast<uint8_t>(unit_mask);
    event.unit_mask_name = unit_mask_name;
    event.count = count;
    event.kernel = kernel;
    event.user = user;
    event.sampled_by = sampled_by;
    m.events.push_back(event);
  }
  return Ok();
}

// The domains, with the processes, mappings and tasks older sessions list.
Result<void> ParseDomains(const json::Node& root, SessionMetadata& m) {
  HVPROF_TRY(domains, root.Array("domains", kMaxList));
  for (const json::Node& d : domains) {
    DomainRecord domain;
    HVPROF_TRY(id, d.Get<uint16_t>("id"));
    HVPROF_TRY(name, d.Get("name", ""));
    HVPROF_TRY(domain_role, d.Get<std::string>("role"));
    HVPROF_TRY(vcpus, d.Get<uint16_t>("vcpus", 0));
    domain.id = id;
    domain.name = name;
    domain.role = domain_role;
    domain.vcpus = vcpus;
    HVPROF_TRY(processes, d.OptionalArray("processes", kMaxList));
    for (const json::Node& pf : processes) {
      ProcessRecord process;
      HVPROF_TRY(pid, pf.Get<uint32_t>("pid"));
      HVPROF_TRY(comm, pf.Get("comm", ""));
      process.pid = pid;
      process.comm = comm;
      HVPROF_TRY(mappings, pf.OptionalArray("mappings", kMaxList));
      for (const json::Node& mf : mappings) {
        MappingRecord mapping;
        HVPROF_TRY(path, mf.Get<std::string>("path"));
        HVPROF_TRY(start_address, mf.GetAddress("start", 0));
        HVPROF_TRY(end_address, mf.GetAddress("end", 0));
        HVPROF_TRY(bias_address, mf.GetAddress("bias", 0));
        HVPROF_TRY(build_id, mf.Get("build_id", ""));
        mapping.path = path;
        mapping.start = start_address;
        mapping.end = end_address;
        mapping.bias = bias_address;
        mapping.build_id = build_id;
        process.mappings.push_back(mapping);
      }
      domain.processes.push_back(std::move(process));
    }
    HVPROF_TRY(tasks, d.OptionalArray("tasks", kMaxList));
    for (const json::Node& tf : tasks) {
      TaskRecord task;
      HVPROF_TRY(task_pid, tf.Get<uint32_t>("pid"));
      HVPROF_TRY(task_tid, tf.Get<uint32_t>("tid"));
      HVPROF_TRY(task_comm, tf.Get("comm", ""));
      task.pid = task_pid;
      task.tid = task_tid;
      task.comm = task_comm;
      domain.tasks.push_back(std::move(task));
    }
    m.domains.push_back(std::move(domain));
  }
  return Ok();
}

// The images to symbolize with, and the JIT files copied into the session.
Result<void> ParseImages(const json::Node& root, std::string_view origin, SessionMetadata& m) {
  HVPROF_TRY(images, root.OptionalArray("images", kMaxList));
  for (const json::Node& im : images) {
    ImageRecord image;
    HVPROF_TRY(image_role, im.Get<std::string>("role"));
    HVPROF_TRY(path, im.Get<std::string>("path"));
    HVPROF_TRY(image_format, im.Get("format", "elf"));
    HVPROF_TRY(build_id, im.Get("build_id", ""));
    HVPROF_TRY(bias, im.GetAddress("bias", 0));
    image.role = image_role;
    image.path = path;
    image.format = image_format;
    image.build_id = build_id;
    image.bias = bias;
    if (im.Has("domain")) {
      HVPROF_TRY(domain, im.Get<uint16_t>("domain"));
      image.domain = domain;
    }
    m.images.push_back(image);
  }
  HVPROF_TRY(jits, root.OptionalArray("jit", kMaxList));
  for (const json::Node& j : jits) {
    JitRecord jit;
    HVPROF_TRY(jit_domain, j.Get<uint16_t>("domain"));
    HVPROF_TRY(jit_pid, j.Get<uint32_t>("pid"));
    HVPROF_TRY(start_ticks, j.Get<uint64_t>("start_ticks", 0));
    HVPROF_TRY(kind, j.Get<std::string>("kind"));
    HVPROF_TRY(source, j.Get("source", ""));
    HVPROF_TRY(jit_file, j.Get("file", ""));
    HVPROF_TRY(bytes, j.Get<uint64_t>("bytes", 0));
    HVPROF_TRY(cut, j.Get("cut", false));
    HVPROF_TRY(problem, j.Get("problem", ""));
    // The copy must stay inside the session directory, whoever wrote session.json.
    if (!jit_file.empty() && (!jit_file.starts_with(std::string(kJitDirectory) + "/") ||
                              jit_file.find("..") != std::string::npos || jit_file.find('/', 4) != std::string::npos)) {
      return MakeError(ErrorKind::kCorrupt, "{}: jit file '{}' is not a file of the session's {}/ directory", origin,
                       jit_file, kJitDirectory);
    }
    jit.domain = jit_domain;
    jit.pid = jit_pid;
    jit.start_ticks = start_ticks;
    jit.kind = kind;
    jit.source = source;
    jit.file = jit_file;
    jit.bytes = bytes;
    jit.cut = cut;
    jit.problem = problem;
    m.jit.push_back(std::move(jit));
  }
  return Ok();
}

// The rings and their buffers.
Result<void> ParseRings(const json::Node& root, SessionMetadata& m) {
  if (const auto b = root.OptionalMember("buffers")) {
    HVPROF_TRY(ring_format, b->Get("format", ""));
    HVPROF_TRY(capacity, b->Get<uint32_t>("capacity", 0));
    HVPROF_TRY(watermark, b->Get<uint32_t>("watermark", 0));
    HVPROF_TRY(poll, b->Get<uint32_t>("poll_interval_ms", 0));
    m.ring_format = ring_format;
    m.ring_capacity = capacity;
    m.ring_watermark = watermark;
    m.poll_interval_ms = poll;
  }
  HVPROF_TRY(depth, root.Get<uint32_t>("backtrace_depth", 0));
  m.backtrace_depth = depth;
  HVPROF_TRY(rings, root.OptionalArray("rings", kMaxList));
  for (const json::Node& r : rings) {
    RingRecord ring;
    HVPROF_TRY(owner, r.Get<uint16_t>("owner"));
    HVPROF_TRY(index, r.Get<uint32_t>("index"));
    HVPROF_TRY(kind, r.Get("kind", "vcpu"));
    HVPROF_TRY(capacity, r.Get<uint64_t>("capacity", 0));
    HVPROF_TRY(written, r.Get<uint64_t>("written", 0));
    HVPROF_TRY(lost, r.OptionalArray("lost", 8));
    HVPROF_TRY(drained, r.Get<uint64_t>("drained", 0));
    HVPROF_TRY(malformed, r.Get<uint64_t>("malformed", 0));
    HVPROF_TRY(max_fill, r.Get<uint64_t>("max_fill", 0));
    ring.owner = owner;
    ring.index = index;
    ring.kind = kind;
    ring.capacity = capacity;
    ring.written = written;
    for (size_t k = 0; k < lost.size(); ++k) {
      HVPROF_TRY(count, lost[k].As<uint64_t>());
      ring.lost[k] = count;
    }
    ring.drained = drained;
    ring.malformed = malformed;
    ring.max_fill = max_fill;
    m.rings.push_back(ring);
  }
  return Ok();
}

// What was stored and lost, and the notes.
Result<void> ParseCounts(const json::Node& root, SessionMetadata& m) {
  if (const auto l = root.OptionalMember("losses")) {
    if (!l->IsObject()) return l->Fail("expected an object of loss counts, got {}", l->Describe());
    for (const LossField& field : kLossFields) {
      HVPROF_TRY(count, l->Get<uint64_t>(field.name, 0));
      m.losses.*field.member = count;
    }
  }
  HVPROF_TRY(stored, root.Get<uint64_t>("samples_stored", 0));
  m.samples_stored = stored;
  HVPROF_TRY(idle, root.Get<uint64_t>("idle_samples", 0));
  m.idle_samples = idle;
  HVPROF_TRY(first_sample, root.Get<uint64_t>("first_sample_ns", 0));
  HVPROF_TRY(last_sample, root.Get<uint64_t>("last_sample_ns", 0));
  m.first_sample_ns = first_sample;
  m.last_sample_ns = last_sample;
  if (const auto by = root.OptionalMember("samples_by_domain_mode")) {
    if (!by->IsObject()) return by->Fail("expected an object of sample counts, got {}", by->Describe());
    for (const auto& item : by->value().items()) {
      HVPROF_TRY(count, by->Checked(item.key()).As<uint64_t>());
      m.samples_by_domain_mode[item.key()] = count;
    }
  }
  HVPROF_TRY(notes, root.OptionalArray("notes", kMaxList));
  for (const json::Node& note : notes) {
    HVPROF_TRY(text_value, note.String());
    m.notes.push_back(text_value);
  }
  HVPROF_TRY(incomplete, root.OptionalArray("incomplete", kMaxList));
  for (const json::Node& reason : incomplete) {
    HVPROF_TRY(text_value, reason.String());
    m.incomplete.push_back(text_value);
  }
  if (const auto file = root.OptionalMember("samples_file")) {
    HVPROF_TRY(chunks, file->Get<uint64_t>("chunks"));
    HVPROF_TRY(bytes, file->Get<uint64_t>("bytes"));
    m.samples_file_chunks = chunks;
    m.samples_file_bytes = bytes;
  }
  return Ok();
}

}  // namespace

Json SchedLossesJson(const SchedLosses& lost) {
  Json out = Json::object();
  for (const SchedLossField& field : kSchedLossFields) out[field.name] = lost.*field.member;
  return out;
}

Result<SchedLosses> ParseSchedLosses(const json::Node& lost) {
  if (!lost.IsObject()) return lost.Fail("expected an object of loss counts, got {}", lost.Describe());
  SchedLosses counts;
  for (const SchedLossField& field : kSchedLossFields) {
    HVPROF_TRY(count, lost.Get<uint64_t>(field.name, 0));
    counts.*field.member = count;
  }
  return counts;
}

namespace {

// The platform's statistics and the scheduling and context summaries.
Result<void> ParseSummaries(const json::Node& root, SessionMetadata& m) {
  if (const auto stats = root.OptionalMember("platform_stats")) {
    // An account of the sampling, not what was sampled: one that cannot be read costs the
    // report its rates line, said in a note, not the session.
    auto parsed = context::ParsePlatformStats(*stats);
    if (parsed) {
      m.platform_stats = std::move(parsed).value();
    } else {
      m.notes.push_back(fmt::format("the platform's account of its sampling is left out: {}", parsed.error().message()));
    }
  }
  if (const auto sched = root.OptionalMember("sched")) {
    if (!sched->IsObject()) return sched->Fail("expected an object, got {}", sched->Describe());
    SchedSummary summary;
    HVPROF_TRY(source, sched->Get("source", ""));
    HVPROF_TRY(records, sched->Get<uint64_t>("records", 0));
    summary.source = source;
    summary.records = records;
    if (const auto lost = sched->OptionalMember("lost")) {
      HVPROF_TRY(counts, ParseSchedLosses(*lost));
      summary.lost = counts;
    }
    if (const auto file = sched->OptionalMember("file")) {
      HVPROF_TRY(chunks, file->Get<uint64_t>("chunks"));
      HVPROF_TRY(bytes, file->Get<uint64_t>("bytes"));
      summary.file_chunks = chunks;
      summary.file_bytes = bytes;
    }
    m.sched = std::move(summary);
  }
  if (const auto context = root.OptionalMember("context")) {
    if (!context->IsObject()) return context->Fail("expected an object, got {}", context->Describe());
    ContextSummary summary;
    HVPROF_TRY(told_processes, context->Get<uint64_t>("processes"));
    HVPROF_TRY(told_images, context->Get<uint64_t>("images"));
    HVPROF_TRY(told_domains, context->Array("domains", kMaxList));
    summary.processes = told_processes;
    summary.images = told_images;
    for (const auto& domain : told_domains) {
      HVPROF_TRY(id, domain.As<uint16_t>());
      summary.domains.push_back(id);
    }
    std::sort(summary.domains.begin(), summary.domains.end());
    summary.domains.erase(std::unique(summary.domains.begin(), summary.domains.end()), summary.domains.end());
    m.context = std::move(summary);
  }
  if (const auto window = root.OptionalMember("window")) {
    if (!window->IsObject()) return window->Fail("expected an object, got {}", window->Describe());
    WindowRecord record;
    HVPROF_TRY(series, window->Get<std::string>("series"));
    HVPROF_TRY(index, window->Get<uint64_t>("index"));
    HVPROF_TRY(start, window->Get<uint64_t>("start_ns"));
    HVPROF_TRY(end, window->Get<uint64_t>("end_ns"));
    HVPROF_TRY(clock, window->Get<std::string>("clock"));
    HVPROF_TRY(raw_dropped, window->Get("raw_dropped", false));
    if (end != 0 && end < start) return window->Fail("ends at {} before it starts at {}", end, start);
    record.series = series;
    record.index = index;
    record.start_ns = start;
    record.end_ns = end;
    record.clock = clock;
    record.raw_dropped = raw_dropped;
    m.window = std::move(record);
  }
  return Ok();
}

}  // namespace

Result<SessionMetadata> ParseMetadata(std::string_view text, std::string_view origin) {
  HVPROF_TRY(root, json::Node::Parse(text, std::string(origin), ErrorKind::kCorrupt));
  if (!root.IsObject()) return root.Fail("not an hvprof session (expected a JSON object)");
  SessionMetadata m;
  HVPROF_TRYV(ParseIdentity(root, origin, m));
  HVPROF_TRYV(ParseEvents(root, m));
  HVPROF_TRYV(ParseDomains(root, m));
  HVPROF_TRYV(ParseImages(root, origin, m));
  HVPROF_TRYV(ParseRings(root, m));
  HVPROF_TRYV(ParseCounts(root, m));
  HVPROF_TRYV(ParseSummaries(root, m));
  return m;
}

// ---- aggregate

bool MappingNamesAFile(std::string_view path) {
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.empty() || path[0] != '/') return false;
  if (path.starts_with("/memfd:") || path.starts_with("/SYSV") || path.starts_with("/dev/")) return false;
  return !(path.size() > kDeleted.size() && path.ends_with(kDeleted));
}

}  // namespace hvprof::store
