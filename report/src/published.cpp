#include "hvprof/report/published.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "hvprof/report/profile.h"

namespace hvprof::report {

using Json = nlohmann::json;

namespace {

constexpr size_t kMaxText = 4096;  // names and paths

std::string Hex(uint64_t value) { return fmt::format("{:#x}", value); }

// Reads fields of one JSON object without exceptions; the first problem is kept with its path.
class Reader {
 public:
  Reader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  const Json* Field(const char* key) {
    if (!ok()) return nullptr;
    if (!object_.is_object()) return Fail("", "is not an object");
    auto it = object_.find(key);
    if (it == object_.end()) return Fail(key, "is missing");
    return &*it;
  }
  uint64_t Unsigned(const char* key, uint64_t max = UINT64_MAX) {
    const Json* value = Field(key);
    if (value == nullptr) return 0;
    if (!value->is_number_unsigned()) return Fail(key, "is not a whole number"), 0;
    const auto number = value->get<uint64_t>();
    if (number > max) return Fail(key, fmt::format("is above {}", max)), 0;
    return number;
  }
  uint64_t HexNumber(const char* key) {
    const std::string text = String(key);
    if (!ok()) return 0;
    char* end = nullptr;
    const uint64_t value = std::strtoull(text.c_str(), &end, 16);
    if (text.size() < 3 || text.compare(0, 2, "0x") != 0 || end == nullptr || *end != '\0') {
      return Fail(key, "is not a hex number like \"0x1f\""), 0;
    }
    return value;
  }
  std::string String(const char* key) {
    const Json* value = Field(key);
    if (value == nullptr) return {};
    if (!value->is_string()) return Fail(key, "is not a string"), std::string();
    const auto& text = value->get_ref<const std::string&>();
    if (text.size() > kMaxText) return Fail(key, "is too long"), std::string();
    return text;
  }
  bool Bool(const char* key) {
    const Json* value = Field(key);
    if (value == nullptr) return false;
    if (!value->is_boolean()) return Fail(key, "is not true or false"), false;
    return value->get<bool>();
  }
  const Json* Array(const char* key, size_t max) {
    const Json* value = Field(key);
    if (value == nullptr) return nullptr;
    if (!value->is_array()) return Fail(key, "is not an array");
    if (value->size() > max) return Fail(key, fmt::format("has more than {} entries", max));
    return value;
  }
  std::vector<uint64_t> Counts(const char* key, size_t expected) {
    const Json* list = Array(key, kMaxPublishedEvents);
    std::vector<uint64_t> counts;
    if (list == nullptr) return counts;
    if (list->size() != expected) return Fail(key, fmt::format("has {} counts for {} events", list->size(), expected)), counts;
    for (const Json& value : *list) {
      if (!value.is_number_unsigned()) return Fail(key, "holds something that is not a count"), counts;
      counts.push_back(value.get<uint64_t>());
    }
    return counts;
  }
  void Adopt(const Reader& child) {
    if (ok() && !child.ok()) error_ = child.error_;
  }

 private:
  std::nullptr_t Fail(const std::string& key, const std::string& what) {
    if (ok()) error_ = fmt::format("{}{}{} {}", path_, key.empty() ? "" : ".", key, what);
    return nullptr;
  }

  const Json& object_;
  std::string path_;
  std::string error_;
};

}  // namespace

PublishedProfile BuildPublished(const Profile& profile) {
  const store::SessionMetadata& m = profile.metadata();
  PublishedProfile out;
  out.domain = m.agent_domain;
  for (const store::DomainRecord& domain : m.domains) {
    if (domain.id == out.domain) out.name = domain.name;
  }
  out.session_id = m.session_id;
  out.hvprof_version = m.hvprof_version;
  out.cpu_type = m.cpu_type;
  out.published_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
  out.losses = m.losses;
  std::map<uint32_t, size_t> column;
  for (const store::EventRecord& event : m.events) {
    column[event.counter] = out.events.size();
    out.events.push_back({event.counter, event.name, event.count});
  }
  const size_t nevents = out.events.size();
  std::map<std::tuple<uint8_t, uint32_t, uint32_t>, size_t> symbol_rows;
  std::map<uint64_t, size_t> address_rows;
  for (const Entry& entry : profile.entries()) {
    const auto it = column.find(entry.event);
    if (it == column.end() || entry.domain != out.domain) continue;
    out.samples += entry.count;
    if (entry.mode == 2) {
      auto [row, added] = address_rows.emplace(entry.ip, out.hypervisor.size());
      if (added) out.hypervisor.push_back({entry.ip, std::vector<uint64_t>(nevents, 0)});
      out.hypervisor[row->second].samples[it->second] += entry.count;
      continue;
    }
    auto [row, added] = symbol_rows.emplace(std::tuple{entry.mode, entry.image, entry.symbol}, out.symbols.size());
    if (added) {
      const Symbol& symbol = profile.symbols()[entry.symbol];
      out.symbols.push_back({entry.mode, profile.images()[entry.image].name, symbol.name,
                             symbol.resolved ? symbol.start : 0, symbol.resolved, std::vector<uint64_t>(nevents, 0)});
    }
    out.symbols[row->second].samples[it->second] += entry.count;
  }
  return out;
}

std::string SerializePublished(const PublishedProfile& p) {
  Json events = Json::array();
  for (const PublishedEvent& event : p.events) {
    events.push_back({{"counter", event.counter}, {"name", event.name}, {"count", event.count}});
  }
  Json symbols = Json::array();
  for (const PublishedSymbol& s : p.symbols) {
    symbols.push_back({{"mode", s.mode == 0 ? "user" : "kernel"},
                       {"image", s.image},
                       {"symbol", s.symbol},
                       {"address", Hex(s.address)},
                       {"resolved", s.resolved},
                       {"samples", s.samples}});
  }
  Json hypervisor = Json::array();
  for (const PublishedAddress& a : p.hypervisor) hypervisor.push_back({{"ip", Hex(a.ip)}, {"samples", a.samples}});
  const Json out{{"format", "hvprof-published"},
                 {"version", kPublishedVersion},
                 {"domain", p.domain},
                 {"name", p.name},
                 {"session_id", p.session_id},
                 {"hvprof_version", p.hvprof_version},
                 {"cpu_type", p.cpu_type},
                 {"published_ns", p.published_ns},
                 {"samples", p.samples},
                 {"losses", {{"ring_full", p.losses.ring_full}, {"corrupt_index", p.losses.corrupt_index},
                             {"no_ring", p.losses.no_ring}, {"malformed_records", p.losses.malformed_records},
                             {"store_failed", p.losses.store_failed}}},
                 {"events", events},
                 {"symbols", symbols},
                 {"hypervisor", hypervisor}};
  // Names come from the guest's files; replace bytes that are not UTF-8 rather than fail.
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<PublishedProfile> ParsePublished(std::string_view text, uint16_t expected_domain) {
  const std::string origin = fmt::format("the profile domain {} published", expected_domain);
  const Json root = Json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return MakeError(ErrorKind::kCorrupt, "{} is not JSON", origin);
  }
  Reader r(root, "profile");
  if (r.String("format") != "hvprof-published" && r.ok()) {
    return MakeError(ErrorKind::kCorrupt, "{} is not an hvprof published profile", origin);
  }
  if (r.Unsigned("version") != kPublishedVersion && r.ok()) {
    return MakeError(ErrorKind::kUnsupported, "{} has format version {}; this hvprof reads version {}", origin,
                     root["version"].dump(), kPublishedVersion);
  }
  PublishedProfile p;
  p.domain = static_cast<uint16_t>(r.Unsigned("domain", 0x7FEF));
  p.name = r.String("name");
  p.session_id = r.String("session_id");
  p.hvprof_version = r.String("hvprof_version");
  p.cpu_type = r.String("cpu_type");
  p.published_ns = r.Unsigned("published_ns");
  p.samples = r.Unsigned("samples");
  if (const Json* losses = r.Field("losses")) {
    Reader l(*losses, "profile.losses");
    p.losses.ring_full = l.Unsigned("ring_full");
    p.losses.corrupt_index = l.Unsigned("corrupt_index");
    p.losses.no_ring = l.Unsigned("no_ring");
    p.losses.malformed_records = l.Unsigned("malformed_records");
    p.losses.store_failed = l.Unsigned("store_failed");
    r.Adopt(l);
  }
  if (const Json* events = r.Array("events", kMaxPublishedEvents)) {
    for (size_t i = 0; i < events->size() && r.ok(); ++i) {
      Reader e((*events)[i], fmt::format("profile.events[{}]", i));
      PublishedEvent event;
      event.counter = static_cast<uint32_t>(e.Unsigned("counter", 255));
      event.name = e.String("name");
      event.count = e.Unsigned("count");
      r.Adopt(e);
      p.events.push_back(std::move(event));
    }
  }
  if (r.ok() && p.events.empty()) return MakeError(ErrorKind::kCorrupt, "{} counts no events", origin);
  const size_t nevents = p.events.size();
  uint64_t total = 0;
  if (const Json* symbols = r.Array("symbols", kMaxPublishedRows)) {
    for (size_t i = 0; i < symbols->size() && r.ok(); ++i) {
      Reader s((*symbols)[i], fmt::format("profile.symbols[{}]", i));
      PublishedSymbol symbol;
      const std::string mode = s.String("mode");
      if (s.ok() && mode != "user" && mode != "kernel") {
        return MakeError(ErrorKind::kCorrupt, "{}: symbols[{}].mode is '{}', not user or kernel", origin, i, mode);
      }
      symbol.mode = mode == "kernel" ? 1 : 0;
      symbol.image = s.String("image");
      symbol.symbol = s.String("symbol");
      symbol.address = s.HexNumber("address");
      symbol.resolved = s.Bool("resolved");
      symbol.samples = s.Counts("samples", nevents);
      r.Adopt(s);
      for (uint64_t count : symbol.samples) total += count;
      p.symbols.push_back(std::move(symbol));
    }
  }
  if (const Json* addresses = r.Array("hypervisor", kMaxPublishedRows)) {
    for (size_t i = 0; i < addresses->size() && r.ok(); ++i) {
      Reader a((*addresses)[i], fmt::format("profile.hypervisor[{}]", i));
      PublishedAddress address;
      address.ip = a.HexNumber("ip");
      address.samples = a.Counts("samples", nevents);
      r.Adopt(a);
      for (uint64_t count : address.samples) total += count;
      p.hypervisor.push_back(std::move(address));
    }
  }
  if (!r.ok()) return MakeError(ErrorKind::kCorrupt, "{} is damaged: {}", origin, r.error());
  if (p.domain != expected_domain) {
    return MakeError(ErrorKind::kPermissionDenied, "{} claims to be domain {}'s; it is not used", origin, p.domain);
  }
  if (total != p.samples) {
    return MakeError(ErrorKind::kCorrupt, "{} is inconsistent: its rows hold {} samples, its total says {}", origin,
                     total, p.samples);
  }
  return p;
}

}  // namespace hvprof::report
