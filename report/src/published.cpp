#include "hvprof/report/published.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "hvprof/base/json_fields.h"

#include "hvprof/report/model.h"

namespace hvprof::report {

using Json = nlohmann::json;

namespace {

std::string Hex(uint64_t value) { return fmt::format("{:#x}", value); }

// A guest's list of per-event counts: one whole number per event, each saturating nowhere: a
// count above the samples the profile claims in total is caught by the total check.
Result<std::vector<uint64_t>> Counts(const json::Node& row, size_t events) {
  HVPROF_TRY(samples, row.Member("samples"));
  HVPROF_TRY(list, samples.Elements(kMaxPublishedEvents));
  if (list.size() != events) return samples.Fail("has {} counts for {} events", list.size(), events);
  std::vector<uint64_t> counts;
  counts.reserve(list.size());
  for (const json::Node& count : list) {
    HVPROF_TRY(value, count.As<uint64_t>());
    counts.push_back(value);
  }
  return counts;
}

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
    if (entry.mode == sample_mode::kHypervisor) {
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

Json PublishedToJson(const PublishedProfile& p) {
  Json events = Json::array();
  for (const PublishedEvent& event : p.events) {
    events.push_back({{"counter", event.counter}, {"name", event.name}, {"count", event.count}});
  }
  Json symbols = Json::array();
  for (const PublishedSymbol& s : p.symbols) {
    symbols.push_back({{"mode", sample_mode::Name(s.mode)},
                       {"image", s.image},
                       {"symbol", s.symbol},
                       {"address", Hex(s.address)},
                       {"resolved", s.resolved},
                       {"samples", s.samples}});
  }
  Json hypervisor = Json::array();
  for (const PublishedAddress& a : p.hypervisor) hypervisor.push_back({{"ip", Hex(a.ip)}, {"samples", a.samples}});
  return Json{{"format", "hvprof-published"},
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
}

std::string SerializePublished(const PublishedProfile& p) {
  // Names come from the guest's files; replace bytes that are not UTF-8 rather than fail.
  return PublishedToJson(p).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<PublishedProfile> ParsePublished(std::string_view text, uint16_t expected_domain) {
  const std::string origin = fmt::format("the profile domain {} published", expected_domain);
  HVPROF_TRY(root, json::Node::Parse(text, origin, ErrorKind::kCorrupt));
  if (!root.IsObject()) return root.Fail("expected a JSON object, got {}", root.Describe());
  HVPROF_TRY(format, root.Get<std::string>("format"));
  if (format != "hvprof-published") {
    return MakeError(ErrorKind::kCorrupt, "{} is not an hvprof published profile (format '{}')", origin, format);
  }
  HVPROF_TRY(version, root.Get<uint64_t>("version"));
  if (version != kPublishedVersion) {
    return MakeError(ErrorKind::kUnsupported, "{} has format version {}; this hvprof reads version {}", origin, version,
                     kPublishedVersion);
  }
  PublishedProfile p;
  HVPROF_TRY(domain_node, root.Member("domain"));
  HVPROF_TRY(domain, domain_node.Unsigned());
  if (domain > 0x7FEF) return domain_node.Fail("expected a domain id from 0 to 32751, got {}", domain);
  p.domain = static_cast<uint16_t>(domain);
  HVPROF_TRY(name, root.Get<std::string>("name"));
  HVPROF_TRY(session_id, root.Get<std::string>("session_id"));
  HVPROF_TRY(hvprof_version, root.Get<std::string>("hvprof_version"));
  HVPROF_TRY(cpu_type, root.Get<std::string>("cpu_type"));
  HVPROF_TRY(published_ns, root.Get<uint64_t>("published_ns"));
  HVPROF_TRY(samples, root.Get<uint64_t>("samples"));
  p.name = name;
  p.session_id = session_id;
  p.hvprof_version = hvprof_version;
  p.cpu_type = cpu_type;
  p.published_ns = published_ns;
  p.samples = samples;
  HVPROF_TRY(losses, root.Member("losses"));
  HVPROF_TRY(ring_full, losses.Get<uint64_t>("ring_full"));
  HVPROF_TRY(corrupt_index, losses.Get<uint64_t>("corrupt_index"));
  HVPROF_TRY(no_ring, losses.Get<uint64_t>("no_ring"));
  HVPROF_TRY(malformed_records, losses.Get<uint64_t>("malformed_records"));
  HVPROF_TRY(store_failed, losses.Get<uint64_t>("store_failed"));
  p.losses.ring_full = ring_full;
  p.losses.corrupt_index = corrupt_index;
  p.losses.no_ring = no_ring;
  p.losses.malformed_records = malformed_records;
  p.losses.store_failed = store_failed;
  HVPROF_TRY(events, root.Array("events", kMaxPublishedEvents));
  for (const json::Node& e : events) {
    PublishedEvent event;
    HVPROF_TRY(counter_node, e.Member("counter"));
    HVPROF_TRY(counter, counter_node.Unsigned(0, 255));
    HVPROF_TRY(event_name, e.Get<std::string>("name"));
    HVPROF_TRY(count, e.Get<uint64_t>("count"));
    event.counter = static_cast<uint32_t>(counter);
    event.name = event_name;
    event.count = count;
    p.events.push_back(std::move(event));
  }
  if (p.events.empty()) return MakeError(ErrorKind::kCorrupt, "{} counts no events", origin);
  const size_t nevents = p.events.size();
  uint64_t total = 0;
  HVPROF_TRY(symbols, root.Array("symbols", kMaxPublishedRows));
  for (const json::Node& s : symbols) {
    PublishedSymbol symbol;
    HVPROF_TRY(mode_node, s.Member("mode"));
    HVPROF_TRY(mode, mode_node.String());
    if (mode != "user" && mode != "kernel") return mode_node.Fail("expected \"user\" or \"kernel\", got '{}'", mode);
    symbol.mode = mode == "kernel" ? sample_mode::kKernel : sample_mode::kUser;
    HVPROF_TRY(image, s.Get<std::string>("image"));
    HVPROF_TRY(symbol_name, s.Get<std::string>("symbol"));
    HVPROF_TRY(address_node, s.Member("address"));
    HVPROF_TRY(address, address_node.Hex());
    HVPROF_TRY(resolved, s.Get<bool>("resolved"));
    HVPROF_TRY(counts, Counts(s, nevents));
    symbol.image = image;
    symbol.symbol = symbol_name;
    symbol.address = address;
    symbol.resolved = resolved;
    symbol.samples = std::move(counts);
    for (uint64_t count : symbol.samples) {
      if (__builtin_add_overflow(total, count, &total)) return s.Fail("samples: the counts add up to more than 2^64");
    }
    p.symbols.push_back(std::move(symbol));
  }
  HVPROF_TRY(addresses, root.Array("hypervisor", kMaxPublishedRows));
  for (const json::Node& a : addresses) {
    PublishedAddress address;
    HVPROF_TRY(ip_node, a.Member("ip"));
    HVPROF_TRY(ip, ip_node.Hex());
    HVPROF_TRY(counts, Counts(a, nevents));
    address.ip = ip;
    address.samples = std::move(counts);
    for (uint64_t count : address.samples) {
      if (__builtin_add_overflow(total, count, &total)) return a.Fail("samples: the counts add up to more than 2^64");
    }
    p.hypervisor.push_back(std::move(address));
  }
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
