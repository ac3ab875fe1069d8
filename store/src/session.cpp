#include "hvprof/store/session.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>
#include <map>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "address_counter.h"
#include "hvprof/base/files.h"

namespace hvprof::store {

using Json = nlohmann::json;

namespace {

std::string Hex(uint64_t value) { return fmt::format("{:#x}", value); }

// Reads JSON fields with errors that name the field.
class Fields {
 public:
  Fields(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  template <typename T>
  Result<T> Get(const char* key) const {
    if (!object_.is_object() || !object_.contains(key)) {
      return MakeError(ErrorKind::kCorrupt, "{}: missing '{}'", path_, key);
    }
    const Json& value = object_.at(key);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // get<T>() on a float or an out-of-range integer is undefined behaviour in nlohmann.
      if (!value.is_number_integer() || (std::is_unsigned_v<T> && !value.is_number_unsigned())) {
        return MakeError(ErrorKind::kCorrupt, "{}.{}: not a whole number", path_, key);
      }
      if (value.is_number_unsigned()) {
        if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
          return MakeError(ErrorKind::kCorrupt, "{}.{}: {} is out of range", path_, key, value.dump());
        }
      } else {
        const int64_t number = value.get<int64_t>();
        if (number < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            (number > 0 && static_cast<uint64_t>(number) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
          return MakeError(ErrorKind::kCorrupt, "{}.{}: {} is out of range", path_, key, value.dump());
        }
      }
    }
    try {
      return value.get<T>();
    } catch (const Json::exception&) {
      return MakeError(ErrorKind::kCorrupt, "{}.{}: wrong type", path_, key);
    }
  }
  template <typename T>
  Result<T> Get(const char* key, T fallback) const {
    if (!object_.is_object() || !object_.contains(key)) return fallback;
    return Get<T>(key);
  }
  Result<uint64_t> Address(const char* key) const {
    HVPROF_TRY(text, Get<std::string>(key, "0x0"));
    char* end = nullptr;
    const uint64_t value = std::strtoull(text.c_str(), &end, 16);
    if (end == text.c_str() || *end != '\0') {
      return MakeError(ErrorKind::kCorrupt, "{}.{}: '{}' is not a hex number", path_, key, text);
    }
    return value;
  }
  Result<Fields> Child(const char* key) const {
    if (!object_.is_object() || !object_.contains(key)) {
      return MakeError(ErrorKind::kCorrupt, "{}: missing '{}'", path_, key);
    }
    return Fields(object_.at(key), path_ + "." + key);
  }
  const Json& json() const { return object_; }
  const std::string& path() const { return path_; }

 private:
  const Json& object_;
  std::string path_;
};

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
  Json intervals = Json::array();
  for (const auto& interval : m.profiling) {
    intervals.push_back({{"start_ns", interval.start_ns}, {"stop_ns", interval.stop_ns}});
  }
  out["profiling"] = intervals;
  Json events = Json::array();
  for (const auto& e : m.events) {
    events.push_back({{"counter", e.counter}, {"name", e.name}, {"code", Hex(e.code)},
                      {"unit_mask", Hex(e.unit_mask)}, {"unit_mask_name", e.unit_mask_name},
                      {"count", e.count}, {"kernel", e.kernel}, {"user", e.user}});
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
    domains.push_back({{"id", d.id}, {"name", d.name}, {"role", d.role}, {"vcpus", d.vcpus},
                       {"processes", processes}});
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
  if (!m.platform_stats.empty()) {
    Json stats = Json::parse(m.platform_stats, nullptr, false);
    if (stats.is_object()) out["platform_stats"] = std::move(stats);
  }
  return out.dump(1) + "\n";
}

Result<SessionMetadata> ParseMetadata(std::string_view text, std::string_view origin) {
  Json root = Json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded()) {
    return MakeError(ErrorKind::kCorrupt, "{}: not valid JSON (the file is damaged)", origin);
  }
  const std::string top(origin);
  Fields f(root, top);
  SessionMetadata m;
  HVPROF_TRY(format, f.Get<std::string>("format"));
  if (format != "hvprof-session") {
    return MakeError(ErrorKind::kCorrupt, "{}: not an hvprof session (format '{}')", origin, format);
  }
  HVPROF_TRY(version, f.Get<int>("version"));
  if (version != kSessionFormatVersion) {
    return MakeError(ErrorKind::kUnsupported,
                     "{}: session format version {}; this hvprof reads version {}", origin, version,
                     kSessionFormatVersion);
  }
  m.version = version;
  HVPROF_TRY(session_id, f.Get<std::string>("session_id"));
  m.session_id = session_id;
  HVPROF_TRY(hvprof_version, f.Get<std::string>("hvprof_version", ""));
  m.hvprof_version = hvprof_version;
  HVPROF_TRY(platform, f.Get<std::string>("platform"));
  m.platform = platform;
  HVPROF_TRY(machine, f.Get<std::string>("machine", ""));
  m.machine = machine;
  HVPROF_TRY(cpu_type, f.Get<std::string>("cpu_type"));
  m.cpu_type = cpu_type;
  HVPROF_TRY(num_cpus, f.Get<uint32_t>("num_cpus", 0));
  m.num_cpus = num_cpus;
  HVPROF_TRY(num_counters, f.Get<uint32_t>("num_counters", 0));
  m.num_counters = num_counters;
  HVPROF_TRY(role, f.Get<std::string>("role", "dom0"));
  m.role = role;
  HVPROF_TRY(agent_domain, f.Get<uint16_t>("agent_domain", 0));
  m.agent_domain = agent_domain;
  HVPROF_TRY(created, f.Get<uint64_t>("created_ns", 0));
  m.created_ns = created;
  if (root.contains("profiling")) {
    for (size_t i = 0; i < root["profiling"].size(); ++i) {
      Fields interval(root["profiling"][i], fmt::format("{}.profiling[{}]", top, i));
      HVPROF_TRY(start, interval.Get<uint64_t>("start_ns"));
      HVPROF_TRY(stop, interval.Get<uint64_t>("stop_ns", 0));
      m.profiling.push_back({start, stop});
    }
  }
  HVPROF_TRY(events, f.Get<Json>("events"));
  for (size_t i = 0; i < events.size(); ++i) {
    Fields e(events[i], fmt::format("{}.events[{}]", top, i));
    EventRecord event;
    HVPROF_TRY(counter, e.Get<uint32_t>("counter"));
    HVPROF_TRY(name, e.Get<std::string>("name"));
    HVPROF_TRY(code, e.Address("code"));
    HVPROF_TRY(unit_mask, e.Address("unit_mask"));
    HVPROF_TRY(unit_mask_name, e.Get<std::string>("unit_mask_name", ""));
    HVPROF_TRY(count, e.Get<uint64_t>("count"));
    HVPROF_TRY(kernel, e.Get<bool>("kernel", true));
    HVPROF_TRY(user, e.Get<bool>("user", true));
    if (code > 0xFFFF || unit_mask > 0xFF || counter > 31) {
      return MakeError(ErrorKind::kCorrupt, "{}: event code, unit mask or counter out of range", e.path());
    }
    event.counter = counter;
    event.name = name;
    event.code = static_cast<uint16_t>(code);
    event.unit_mask = static_cast<uint8_t>(unit_mask);
    event.unit_mask_name = unit_mask_name;
    event.count = count;
    event.kernel = kernel;
    event.user = user;
    m.events.push_back(event);
  }
  HVPROF_TRY(domains, f.Get<Json>("domains"));
  for (size_t i = 0; i < domains.size(); ++i) {
    Fields d(domains[i], fmt::format("{}.domains[{}]", top, i));
    DomainRecord domain;
    HVPROF_TRY(id, d.Get<uint16_t>("id"));
    HVPROF_TRY(name, d.Get<std::string>("name", ""));
    HVPROF_TRY(domain_role, d.Get<std::string>("role"));
    HVPROF_TRY(vcpus, d.Get<uint16_t>("vcpus", 0));
    domain.id = id;
    domain.name = name;
    domain.role = domain_role;
    domain.vcpus = vcpus;
    if (domains[i].contains("processes")) {
      const Json& processes = domains[i]["processes"];
      for (size_t p = 0; p < processes.size(); ++p) {
        Fields pf(processes[p], fmt::format("{}.processes[{}]", d.path(), p));
        ProcessRecord process;
        HVPROF_TRY(pid, pf.Get<uint32_t>("pid"));
        HVPROF_TRY(comm, pf.Get<std::string>("comm", ""));
        process.pid = pid;
        process.comm = comm;
        HVPROF_TRY(mappings, pf.Get<Json>("mappings", Json::array()));
        for (size_t k = 0; k < mappings.size(); ++k) {
          Fields mf(mappings[k], fmt::format("{}.mappings[{}]", pf.path(), k));
          MappingRecord mapping;
          HVPROF_TRY(path, mf.Get<std::string>("path"));
          HVPROF_TRY(start, mf.Address("start"));
          HVPROF_TRY(end, mf.Address("end"));
          HVPROF_TRY(bias, mf.Address("bias"));
          HVPROF_TRY(build_id, mf.Get<std::string>("build_id", ""));
          mapping.path = path;
          mapping.start = start;
          mapping.end = end;
          mapping.bias = bias;
          mapping.build_id = build_id;
          process.mappings.push_back(mapping);
        }
        domain.processes.push_back(std::move(process));
      }
    }
    m.domains.push_back(std::move(domain));
  }
  HVPROF_TRY(images, f.Get<Json>("images", Json::array()));
  for (size_t i = 0; i < images.size(); ++i) {
    Fields im(images[i], fmt::format("{}.images[{}]", top, i));
    ImageRecord image;
    HVPROF_TRY(image_role, im.Get<std::string>("role"));
    HVPROF_TRY(path, im.Get<std::string>("path"));
    HVPROF_TRY(image_format, im.Get<std::string>("format", "elf"));
    HVPROF_TRY(build_id, im.Get<std::string>("build_id", ""));
    HVPROF_TRY(bias, im.Address("bias"));
    image.role = image_role;
    image.path = path;
    image.format = image_format;
    image.build_id = build_id;
    image.bias = bias;
    if (images[i].contains("domain")) {
      HVPROF_TRY(domain, im.Get<uint16_t>("domain"));
      image.domain = domain;
    }
    m.images.push_back(image);
  }
  if (root.contains("buffers")) {
    Fields b(root["buffers"], top + ".buffers");
    HVPROF_TRY(ring_format, b.Get<std::string>("format", ""));
    HVPROF_TRY(capacity, b.Get<uint32_t>("capacity", 0));
    HVPROF_TRY(watermark, b.Get<uint32_t>("watermark", 0));
    HVPROF_TRY(poll, b.Get<uint32_t>("poll_interval_ms", 0));
    m.ring_format = ring_format;
    m.ring_capacity = capacity;
    m.ring_watermark = watermark;
    m.poll_interval_ms = poll;
  }
  HVPROF_TRY(depth, f.Get<uint32_t>("backtrace_depth", 0));
  m.backtrace_depth = depth;
  HVPROF_TRY(rings, f.Get<Json>("rings", Json::array()));
  for (size_t i = 0; i < rings.size(); ++i) {
    Fields r(rings[i], fmt::format("{}.rings[{}]", top, i));
    RingRecord ring;
    HVPROF_TRY(owner, r.Get<uint16_t>("owner"));
    HVPROF_TRY(index, r.Get<uint32_t>("index"));
    HVPROF_TRY(kind, r.Get<std::string>("kind", "vcpu"));
    HVPROF_TRY(capacity, r.Get<uint64_t>("capacity", 0));
    HVPROF_TRY(written, r.Get<uint64_t>("written", 0));
    HVPROF_TRY(lost, r.Get<std::vector<uint64_t>>("lost", {}));
    HVPROF_TRY(drained, r.Get<uint64_t>("drained", 0));
    HVPROF_TRY(malformed, r.Get<uint64_t>("malformed", 0));
    HVPROF_TRY(max_fill, r.Get<uint64_t>("max_fill", 0));
    ring.owner = owner;
    ring.index = index;
    ring.kind = kind;
    ring.capacity = capacity;
    ring.written = written;
    for (size_t k = 0; k < lost.size() && k < 8; ++k) ring.lost[k] = lost[k];
    ring.drained = drained;
    ring.malformed = malformed;
    ring.max_fill = max_fill;
    m.rings.push_back(ring);
  }
  if (root.contains("losses")) {
    Fields l(root["losses"], top + ".losses");
    for (const LossField& field : kLossFields) {
      HVPROF_TRY(count, l.Get<uint64_t>(field.name, 0));
      m.losses.*field.member = count;
    }
  }
  HVPROF_TRY(stored, f.Get<uint64_t>("samples_stored", 0));
  m.samples_stored = stored;
  HVPROF_TRY(idle, f.Get<uint64_t>("idle_samples", 0));
  m.idle_samples = idle;
  HVPROF_TRY(first_sample, f.Get<uint64_t>("first_sample_ns", 0));
  HVPROF_TRY(last_sample, f.Get<uint64_t>("last_sample_ns", 0));
  m.first_sample_ns = first_sample;
  m.last_sample_ns = last_sample;
  HVPROF_TRY(by_domain_mode, (f.Get<std::map<std::string, uint64_t>>("samples_by_domain_mode", {})));
  m.samples_by_domain_mode = by_domain_mode;
  HVPROF_TRY(notes, f.Get<std::vector<std::string>>("notes", {}));
  m.notes = notes;
  if (root.contains("platform_stats")) {
    if (!root["platform_stats"].is_object()) {
      return MakeError(ErrorKind::kCorrupt, "{}.platform_stats: wrong type", top);
    }
    m.platform_stats = root["platform_stats"].dump();
  }
  return m;
}

// ---- aggregate

bool AggregateKey::operator<(const AggregateKey& other) const {
  return std::tie(domain, mode, event, pid, ip) <
         std::tie(other.domain, other.mode, other.event, other.pid, other.ip);
}

namespace {

constexpr char kAggregateMagic[8] = {'H', 'V', 'P', 'R', 'O', 'F', 'A', '1'};

struct AggregateHeader {
  char magic[8];
  uint32_t version;
  uint32_t entry_bytes;
  uint64_t entries;
  uint64_t samples;
  uint64_t source_bytes;
  uint32_t crc;  // of the entries
  uint32_t reserved;
};
static_assert(sizeof(AggregateHeader) == 48);

struct PackedEntry {
  uint64_t ip;
  uint32_t pid;
  uint16_t domain;
  uint8_t mode;
  uint8_t event;
  uint64_t count;
};
static_assert(sizeof(PackedEntry) == 24);


}  // namespace

Result<Aggregate> AggregateSamplesFile(const std::string& path, ReadSummary* summary_out) {
  detail::AddressCounter counter;
  uint64_t samples = 0;
  HVPROF_TRY(summary, ReadSamplesFile(path, [&](const StoredSample& s) {
    counter.Add(AggregateKey{s.ip, s.pid, s.domain, s.mode, s.event});
    ++samples;
  }));
  Aggregate aggregate;
  aggregate.entries = counter.TakeSorted();
  aggregate.samples = samples;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) aggregate.source_bytes = static_cast<uint64_t>(st.st_size);
  if (summary_out != nullptr) *summary_out = std::move(summary);
  return aggregate;
}

Result<void> WriteAggregate(const std::string& path, const Aggregate& aggregate) {
  std::vector<PackedEntry> packed;
  packed.reserve(aggregate.entries.size());
  for (const auto& entry : aggregate.entries) {
    packed.push_back({entry.key.ip, entry.key.pid, entry.key.domain, entry.key.mode,
                      entry.key.event, entry.count});
  }
  AggregateHeader header{};
  std::memcpy(header.magic, kAggregateMagic, 8);
  header.version = 1;
  header.entry_bytes = sizeof(PackedEntry);
  header.entries = packed.size();
  header.samples = aggregate.samples;
  header.source_bytes = aggregate.source_bytes;
  header.crc = static_cast<uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(packed.data()), static_cast<uInt>(packed.size() * sizeof(PackedEntry))));
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof header);
  bytes.append(reinterpret_cast<const char*>(packed.data()), packed.size() * sizeof(PackedEntry));
  return WriteFileAtomically(path, bytes);
}

Result<Aggregate> ReadAggregate(const std::string& path) {
  HVPROF_TRY(text, ReadFileToString(path));
  AggregateHeader header;
  if (text.size() < sizeof header) {
    return MakeError(ErrorKind::kCorrupt, "{} is truncated", path);
  }
  std::memcpy(&header, text.data(), sizeof header);
  if (std::memcmp(header.magic, kAggregateMagic, 8) != 0 || header.version != 1 ||
      header.entry_bytes != sizeof(PackedEntry) ||
      header.entries != (text.size() - sizeof header) / sizeof(PackedEntry) ||
      (text.size() - sizeof header) % sizeof(PackedEntry) != 0) {
    return MakeError(ErrorKind::kCorrupt, "{} is not a valid aggregate (damaged or truncated)", path);
  }
  const auto* entries = reinterpret_cast<const Bytef*>(text.data() + sizeof header);
  if (static_cast<uint32_t>(::crc32(0, entries, static_cast<uInt>(text.size() - sizeof header))) != header.crc) {
    return MakeError(ErrorKind::kCorrupt, "{} fails its checksum (damaged)", path);
  }
  Aggregate aggregate;
  aggregate.samples = header.samples;
  aggregate.source_bytes = header.source_bytes;
  aggregate.entries.resize(header.entries);
  for (uint64_t i = 0; i < header.entries; ++i) {
    PackedEntry entry;
    std::memcpy(&entry, text.data() + sizeof header + i * sizeof entry, sizeof entry);
    if (entry.mode > 2) return MakeError(ErrorKind::kCorrupt, "{}: entry {} has mode {}", path, i, entry.mode);
    aggregate.entries[i] = {{entry.ip, entry.pid, entry.domain, entry.mode, entry.event}, entry.count};
  }
  return aggregate;
}

// ---- session directories

std::optional<std::string> NewestSavedSession(const SessionPaths& paths) {
  std::error_code error;
  std::optional<std::string> newest;
  std::filesystem::file_time_type newest_time;
  for (const auto& entry : std::filesystem::directory_iterator(paths.samples_dir(), error)) {
    const std::string name = entry.path().filename().string();
    if (name == "current" || !ValidateSessionName(name)) continue;
    const auto written = std::filesystem::last_write_time(entry.path() / "session.json", error);
    if (error) continue;
    if (!newest || written > newest_time) {
      newest = name;
      newest_time = written;
    }
  }
  return newest;
}

Result<void> ValidateSessionName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 100 && name != "current" && name[0] != '.' &&
                  name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
                      std::string::npos;
  if (!ok) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a valid session name: use letters, digits, '-', '_' and '.', not "
                     "'current', and do not start with '.'",
                     name);
  }
  return Ok();
}

Result<SessionOnDisk> OpenSession(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string dir = directory;
  if (!fs::exists(dir + "/" + kMetadataFile, ec) && fs::exists(dir + "/samples/current", ec)) {
    dir += "/samples/current";
  }
  if (!fs::is_directory(dir, ec)) {
    return MakeError(ErrorKind::kNotFound,
                     "no session at {}: the directory does not exist (profile first with `hvprof "
                     "--start-daemon` and `hvprof --start`, or give --session-dir)",
                     directory);
  }
  const std::string metadata_path = dir + "/" + kMetadataFile;
  if (!fs::exists(metadata_path, ec)) {
    if (fs::exists(dir + "/" + kSamplesFile, ec)) {
      return MakeError(ErrorKind::kCorrupt,
                       "session {} has samples but no {} (metadata missing or deleted); the "
                       "samples cannot be interpreted without it",
                       dir, kMetadataFile);
    }
    return MakeError(ErrorKind::kNotFound, "no session at {}: it holds no {}", dir, kMetadataFile);
  }
  HVPROF_TRY(text, ReadFileToString(metadata_path));
  auto metadata = ParseMetadata(text, metadata_path);
  if (!metadata) return metadata.error();
  SessionOnDisk session;
  session.directory = dir;
  session.metadata = std::move(metadata).value();
  return session;
}

}  // namespace hvprof::store
