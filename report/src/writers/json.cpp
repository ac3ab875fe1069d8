#include "hvprof/report/writers/json.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "writers/common.h"

namespace hvprof::report {

using Json = nlohmann::json;

std::string FormatJson(const Profile& profile, const Table& table, const ReportOptions& options) {
  const store::SessionMetadata& m = profile.metadata();
  Json out;
  out["schema"] = "hvprof-report";
  out["version"] = kJsonSchemaVersion;
  out["session"] = {{"directory", profile.directory()},
                    {"id", m.session_id},
                    {"platform", m.platform},
                    {"machine", m.machine},
                    {"cpu_type", m.cpu_type},
                    {"cpus", m.num_cpus},
                    {"samples", profile.total_samples()},
                    {"sampled_ns", SampledNs(m)},
                    {"processes", profile.context_summary().processes},
                    {"images", profile.context_summary().images}};
  static constexpr const char* kViews[] = {"image", "symbol", "details", "debug-info"};
  out["view"] = kViews[static_cast<int>(table.view)];
  out["by_domain"] = options.by_domain;
  out["by_process"] = options.by_process;
  Json events = Json::array();
  for (const Column& column : table.columns) {
    events.push_back({{"name", column.event}, {"unit_mask", column.unit_mask}, {"count", column.count},
                      {"counters", column.counters}, {"samples", column.total}, {"idle", column.idle}});
  }
  out["events"] = events;
  // The idle loop per event of the session (all its samples, before filters) and per CPU where
  // the session says on which CPU: what the text header's "CPU idle" line says.
  Json idle_events = Json::array();
  for (const EventIdle& event : IdleByEvent(profile)) {
    Json cpus = Json::array();
    for (const CpuIdle& cpu : event.cpus) {
      cpus.push_back({{"cpu", cpu.cpu}, {"samples", cpu.samples}, {"idle", cpu.idle},
                      {"percent", Percent(cpu.idle, cpu.samples)}});
    }
    idle_events.push_back({{"name", event.event}, {"counter", event.counter}, {"samples", event.samples},
                           {"idle", event.idle}, {"percent", Percent(event.idle, event.samples)}, {"cpus", cpus}});
  }
  out["idle"] = {{"included", KeepsIdle(options)}, {"events", idle_events}};
  Json domains = Json::array();
  for (const DomainSummary& d : table.domains) {
    Json samples = Json::object();
    for (uint8_t mode = 0; mode < sample_mode::kCount; ++mode) samples[sample_mode::Name(mode)] = d.samples[mode];
    domains.push_back({{"id", d.domain}, {"name", d.name}, {"role", d.role}, {"samples", std::move(samples)}});
  }
  out["domains"] = domains;
  Json losses = Json::array();
  for (const LossLine& line : Losses(m)) {
    losses.push_back({{"layer", line.layer}, {"cause", line.cause}, {"count", line.count}, {"advice", line.advice}});
  }
  out["losses"] = losses;
  out["unprofiled_samples"] = m.losses.unprofiled_domain;
  out["buffers"] = {{"format", m.ring_format}, {"capacity", m.ring_capacity}, {"watermark", m.ring_watermark},
                    {"poll_interval_ms", m.poll_interval_ms}, {"rings", m.rings.size()}};
  Json images = Json::array();
  for (const Image& image : profile.images()) {
    images.push_back({{"name", image.name}, {"path", image.path}, {"has_symbols", image.has_symbols},
                      {"problem", image.problem}, {"build_id_mismatch", image.build_id_mismatch}});
  }
  out["images"] = images;
  Json rows = Json::array();
  auto counts = [&](const Row& row, const std::vector<uint64_t>* base) {
    Json samples = Json::array();
    Json percent = Json::array();
    for (size_t c = 0; c < table.columns.size(); ++c) {
      samples.push_back(row.samples[c]);
      percent.push_back(Percent(row.samples[c], base != nullptr ? (*base)[c] : table.columns[c].total));
    }
    return std::pair{samples, percent};
  };
  for (const Row& row : table.rows) {
    Json entry;
    if (options.by_domain) entry["domain"] = row.domain;
    if (options.by_process) {
      entry["pid"] = row.pid == kNoPid ? Json(nullptr) : Json(row.pid);
      entry["process"] = row.process;
    }
    entry["image"] = ImageName(profile, row.image, options);
    if (table.view != View::kImage) {
      const Symbol& symbol = profile.symbols()[row.symbol];
      entry["symbol"] = symbol.name;
      entry["resolved"] = symbol.resolved;
      if (!symbol.resolved) entry["reason"] = symbol.reason;
      entry["address"] = fmt::format("{:#x}", row.address);
    }
    if (table.view == View::kDebugInfo) entry["source"] = SourceOf(profile, row);
    auto [samples, percent] = counts(row, nullptr);
    entry["samples"] = samples;
    entry["percent"] = percent;
    if (table.view == View::kDetails) {
      Json details = Json::array();
      for (const Row& detail : row.details) {
        auto [detail_samples, detail_percent] = counts(detail, options.global_percent ? nullptr : &row.samples);
        details.push_back({{"address", fmt::format("{:#x}", detail.address)}, {"samples", detail_samples},
                           {"percent", detail_percent}});
      }
      entry["details"] = details;
    }
    rows.push_back(std::move(entry));
  }
  out["rows"] = rows;
  out["hidden_rows"] = table.hidden_rows;
  Json published = Json::array();
  for (const PublishedSource& guest : profile.published()) {
    published.push_back({{"domain", guest.domain}, {"name", guest.name}, {"samples", guest.samples},
                         {"published_ns", guest.published_ns},
                         {"lost", guest.losses.ring_full + guest.losses.corrupt_index + guest.losses.no_ring +
                                      guest.losses.malformed_records + guest.losses.store_failed}});
  }
  out["published"] = published;
  out["problems"] = profile.problems();
  out["notes"] = m.notes;
  // Names come from profiled code: bytes that are not UTF-8 become U+FFFD rather than fail.
  return out.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}
}  // namespace hvprof::report
