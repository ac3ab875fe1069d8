#include "hvprof/report/format.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace hvprof::report {

using Json = nlohmann::json;

namespace {

constexpr const char* kModeNames[] = {"user", "kernel", "hypervisor"};

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

const std::string& ImageName(const Profile& profile, uint32_t image, const ReportOptions& options) {
  const Image& i = profile.images()[image];
  return options.long_filenames ? i.long_name : i.name;
}

std::string SourceOf(const Profile& profile, const Row& row) {
  if (row.line == kNoIndex) return "(no location information)";
  const SourceLine& line = profile.lines()[row.line];
  return fmt::format("{}:{}", line.file, line.line);
}

// A loss cause and what to do about it.
struct LossLine {
  const char* layer;
  const char* cause;
  uint64_t count;
  const char* advice;
};

std::vector<LossLine> Losses(const store::SessionMetadata& m) {
  std::vector<LossLine> lines = {
      {"hypervisor", "ring full", m.losses.ring_full,
       "the agent did not drain in time: give --buffer-size a larger value, a shorter "
       "--poll-interval, or use a larger event count"},
      {"hypervisor", "corrupt ring index", m.losses.corrupt_index,
       "a consumer wrote an impossible index into its ring: a bug in (or tampering with) that "
       "domain's agent; restart it"},
      {"hypervisor", "vCPU without a ring", m.losses.no_ring,
       "vCPUs were added after profiling was set up: --shutdown and --start-daemon again"},
      {"agent", "malformed records", m.losses.malformed_records,
       "records in a ring did not follow the format: the hypervisor and hvprof disagree on the "
       "ABI, or the ring memory was overwritten"},
      {"store", "not written", m.losses.store_failed,
       "the session could not be written (a full disk?): free space; samples written before "
       "are kept"},
      {"platform", "perf ring overflow", m.losses.platform_lost,
       "perf's own buffers filled before hvprof-hv read them: use a larger event count, or "
       "fewer events"},
  };
  std::erase_if(lines, [](const LossLine& line) { return line.count == 0; });
  return lines;
}

// Numbers from a session's platform stats; anything that is not a number reads as zero.
double NumberOr(const Json& object, const char* key, double fallback = 0) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : fallback;
}

// What the platform said of its own sampling (linux): the timer or PMU, and the rate asked for
// against the rate each CPU achieved, with the kernel's throttling.
std::string PlatformRates(const store::SessionMetadata& m) {
  if (m.platform_stats.empty()) return {};
  const Json stats = Json::parse(m.platform_stats, nullptr, false);
  if (!stats.is_object()) return {};
  const auto source = stats.find("source");
  const bool timer = source != stats.end() && source->is_string() && *source == "cpu-clock";
  std::string out = fmt::format("Sampling: {}", timer ? "perf's cpu-clock timer (no hardware PMU)"
                                                      : "perf hardware events");
  if (NumberOr(stats, "nominal_mhz") > 0) out += fmt::format(", nominal {:.0f} MHz", NumberOr(stats, "nominal_mhz"));
  std::string achieved;
  double requested = 0;
  double throttles = 0;
  const auto cpus = stats.find("cpus");
  if (cpus != stats.end() && cpus->is_array()) {
    for (const Json& cpu : *cpus) {
      if (!cpu.is_object()) continue;
      requested = std::max(requested, NumberOr(cpu, "requested_hz"));
      throttles += NumberOr(cpu, "throttles");
      achieved += fmt::format("{}cpu{:.0f} {:.0f}", achieved.empty() ? "" : ", ", NumberOr(cpu, "cpu"),
                              NumberOr(cpu, "achieved_hz"));
    }
  }
  if (requested > 0) out += fmt::format("; asked {:.0f} samples/s per CPU, achieved {}", requested, achieved);
  if (throttles > 0) {
    out += fmt::format("; the kernel throttled sampling {:.0f} times (kernel.perf_event_max_sample_rate={:.0f})",
                       throttles, NumberOr(stats, "max_sample_rate", -1));
  }
  return out + "\n";
}

}  // namespace

std::string FormatHeader(const Profile& profile, const Table& table, const ReportOptions&) {
  const store::SessionMetadata& m = profile.metadata();
  std::string out;
  out += fmt::format("Session: {}\n", profile.directory());
  out += fmt::format("Platform: {}{}; CPU: {}, {} CPUs\n", m.platform,
                     m.machine.empty() ? "" : " (" + m.machine + ")", m.cpu_type, m.num_cpus);
  const double seconds = m.last_sample_ns > m.first_sample_ns
                             ? static_cast<double>(m.last_sample_ns - m.first_sample_ns) / 1e9
                             : 0.0;
  for (const store::EventRecord& event : m.events) {
    uint64_t samples = 0;
    for (const Entry& entry : profile.entries()) {
      if (entry.event == event.counter) samples += entry.count;
    }
    std::string rate;
    if (seconds > 0 && m.num_cpus > 0) {
      rate = fmt::format("; achieved {:.0f} samples/s per CPU", static_cast<double>(samples) / seconds / m.num_cpus);
    }
    out += fmt::format("Counted {} events (unit mask {:#04x}{}{}) with a sample every {} events{}{}\n",
                       event.name, event.unit_mask,
                       event.unit_mask_name.empty() ? "" : ": " + event.unit_mask_name,
                       event.kernel && event.user ? "" : event.kernel ? ", kernel only" : ", user only",
                       event.count, rate, samples == 0 ? "; no samples of this event" : "");
  }
  if (seconds > 0) out += fmt::format("Sampled time: {:.3f} s of the platform's clock\n", seconds);
  out += PlatformRates(m);
  out += fmt::format("Buffers: {} rings of {} samples ({} format), notified at {}, polled every {} ms\n",
                     m.rings.size(), m.ring_capacity, m.ring_format.empty() ? "?" : m.ring_format,
                     m.ring_watermark, m.poll_interval_ms);

  if (!table.domains.empty()) {
    out += fmt::format("Samples of {} by domain and mode:\n", table.columns[0].event);
    out += fmt::format("  {:<22} {:>10} {:>10} {:>10}\n", "domain", "user", "kernel", "hypervisor");
    for (const DomainSummary& d : table.domains) {
      out += fmt::format("  {:<22} {:>10} {:>10} {:>10}\n", d.name + (d.role.empty() ? "" : " [" + d.role + "]"),
                         d.samples[0], d.samples[1], d.samples[2]);
    }
  }
  for (const PublishedSource& guest : profile.published()) {
    const uint64_t lost = guest.losses.ring_full + guest.losses.corrupt_index + guest.losses.no_ring +
                          guest.losses.malformed_records + guest.losses.store_failed;
    out += fmt::format("Merged: {} samples published by domain {}{} (user and kernel symbolized there, hypervisor "
                       "addresses here){}\n",
                       guest.samples, guest.domain, guest.name.empty() ? "" : " (" + guest.name + ")",
                       lost == 0 ? "" : fmt::format("; it lost {} samples", lost));
  }
  const auto losses = Losses(m);
  if (losses.empty()) {
    out += "Lost samples: none\n";
  } else {
    uint64_t lost = 0;
    for (const LossLine& line : losses) lost += line.count;
    out += fmt::format("Lost samples: {} ({:.2f}% of what was sampled)\n", lost,
                       Percent(lost, lost + m.samples_stored));
    for (const LossLine& line : losses) {
      out += fmt::format("  {} {} ({}): {}\n", line.count, line.cause, line.layer, line.advice);
    }
  }
  if (m.losses.unprofiled_domain != 0) {
    out += fmt::format("Not profiled: {} samples fell in domains on neither list (add them to "
                       "--active-domains or --passive-domains to see them)\n",
                       m.losses.unprofiled_domain);
  }
  for (const Image& image : profile.images()) {
    if (image.build_id_mismatch) {
      out += fmt::format("Warning: {} is not the image that was profiled: {}\n", image.long_name, image.problem);
    } else if (!image.problem.empty()) {
      out += fmt::format("Warning: {} could not be symbolized: {}\n", image.long_name, image.problem);
    }
  }
  for (const std::string& problem : profile.problems()) out += fmt::format("Warning: {}\n", problem);
  for (const std::string& note : m.notes) out += fmt::format("Note: {}\n", note);
  return out;
}

std::string FormatText(const Profile& profile, const Table& table, const ReportOptions& options) {
  std::string out;
  if (!options.no_header) out += FormatHeader(profile, table, options) + "\n";
  const size_t columns = table.columns.size();
  bool all_empty = true;
  for (const Column& column : table.columns) all_empty &= column.total == 0;
  if (all_empty) {
    std::vector<std::string> names;
    for (const Column& column : table.columns) names.push_back(column.event);
    out += fmt::format("No samples of {} match in this session ({} samples in all).\n",
                       fmt::join(names, ", "), profile.total_samples());
    return out;
  }
  // Heading: per column "samples %" (and "cum. %") under the event's name, then the keys.
  std::string heading;
  std::string units;
  for (const Column& column : table.columns) {
    const std::string block = options.accumulated ? fmt::format("{:>9} {:>8} {:>8}|", "samples", "%", "cum. %")
                                                  : fmt::format("{:>9} {:>8}|", "samples", "%");
    std::string label = column.event + ":" + (column.count ? std::to_string(column.count) : std::string("*"));
    if (label.size() > block.size() - 1) label = label.substr(0, block.size() - 4) + "...";
    heading += fmt::format("{:<{}}|", label, block.size() - 1);
    units += block;
  }
  const bool symbols = table.view != View::kImage;
  std::string keys;
  if (options.by_domain) keys += fmt::format("{:<20} ", "domain");
  if (options.show_address && symbols) keys += fmt::format("{:<18} ", "vma");
  if (table.view == View::kDebugInfo) keys += fmt::format("{:<32} ", "linenr info");
  keys += symbols ? fmt::format("{:<28} {}", "image name", "symbol name") : "image name";
  out += heading + "\n" + units + " " + keys + "\n";
  out += std::string(units.size() + 1 + keys.size(), '-') + "\n";

  std::vector<uint64_t> cumulative(columns, 0);
  auto counts = [&](const Row& row, const std::vector<uint64_t>* base, bool accumulate) {
    std::string text;
    for (size_t c = 0; c < columns; ++c) {
      const uint64_t whole = base != nullptr ? (*base)[c] : table.columns[c].total;
      text += fmt::format("{:>9} {:>8.4f}", row.samples[c], Percent(row.samples[c], whole));
      if (options.accumulated) {
        if (accumulate) cumulative[c] += row.samples[c];
        text += fmt::format(" {:>8.4f}", Percent(cumulative[c], table.columns[c].total));
      }
      text += " ";
    }
    return text;
  };
  for (const Row& row : table.rows) {
    std::string line = counts(row, nullptr, true) + " ";
    if (options.by_domain) line += fmt::format("{:<20} ", row.domain);
    if (options.show_address && symbols) line += fmt::format("{:<18} ", fmt::format("{:016x}", row.address));
    if (table.view == View::kDebugInfo) line += fmt::format("{:<32} ", SourceOf(profile, row));
    if (symbols) {
      line += fmt::format("{:<28} {}", ImageName(profile, row.image, options), profile.symbols()[row.symbol].name);
      if (options.verbose && !profile.symbols()[row.symbol].resolved) {
        line += fmt::format("  ({})", profile.symbols()[row.symbol].reason);
      }
    } else {
      line += ImageName(profile, row.image, options);
    }
    out += line + "\n";
    for (const Row& detail : row.details) {
      // Per-address percentages are of the symbol's samples, or of all with -%.
      out += "  " + counts(detail, options.global_percent ? nullptr : &row.samples, false) +
             fmt::format("  {:016x}\n", detail.address);
    }
  }
  if (table.hidden_rows != 0) {
    out += fmt::format("({} rows below the {}% threshold are not shown)\n", table.hidden_rows, options.threshold);
  }
  return out;
}

namespace {

std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

std::string FormatCsv(const Profile& profile, const Table& table, const ReportOptions& options) {
  std::string out;
  std::vector<std::string> heading;
  if (options.by_domain) heading.push_back("domain");
  heading.push_back("image");
  if (table.view != View::kImage) {
    heading.push_back("symbol");
    heading.push_back("vma");
  }
  if (table.view == View::kDebugInfo) heading.push_back("source");
  if (table.view == View::kDetails) heading.push_back("address");
  for (const Column& column : table.columns) {
    heading.push_back(column.event + " samples");
    heading.push_back(column.event + " %");
  }
  out += fmt::format("{}\n", fmt::join(heading, ","));
  auto emit = [&](const Row& row, const Row* detail) {
    std::vector<std::string> fields;
    if (options.by_domain) fields.push_back(CsvField(row.domain));
    fields.push_back(CsvField(ImageName(profile, row.image, options)));
    if (table.view != View::kImage) {
      fields.push_back(CsvField(profile.symbols()[row.symbol].name));
      fields.push_back(fmt::format("{:#x}", row.address));
    }
    if (table.view == View::kDebugInfo) fields.push_back(CsvField(SourceOf(profile, row)));
    if (table.view == View::kDetails) fields.push_back(detail ? fmt::format("{:#x}", detail->address) : "");
    const Row& counts = detail != nullptr ? *detail : row;
    for (size_t c = 0; c < table.columns.size(); ++c) {
      fields.push_back(std::to_string(counts.samples[c]));
      fields.push_back(fmt::format("{:.4f}", Percent(counts.samples[c], table.columns[c].total)));
    }
    out += fmt::format("{}\n", fmt::join(fields, ","));
  };
  for (const Row& row : table.rows) {
    emit(row, nullptr);
    for (const Row& detail : row.details) emit(row, &detail);
  }
  return out;
}

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
                    {"sampled_ns", m.last_sample_ns > m.first_sample_ns ? m.last_sample_ns - m.first_sample_ns : 0}};
  static constexpr const char* kViews[] = {"image", "symbol", "details", "debug-info"};
  out["view"] = kViews[static_cast<int>(table.view)];
  out["by_domain"] = options.by_domain;
  Json events = Json::array();
  for (const Column& column : table.columns) {
    events.push_back({{"name", column.event}, {"unit_mask", column.unit_mask}, {"count", column.count},
                      {"counters", column.counters}, {"samples", column.total}});
  }
  out["events"] = events;
  Json domains = Json::array();
  for (const DomainSummary& d : table.domains) {
    domains.push_back({{"id", d.domain}, {"name", d.name}, {"role", d.role},
                       {"samples", {{kModeNames[0], d.samples[0]}, {kModeNames[1], d.samples[1]}, {kModeNames[2], d.samples[2]}}}});
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
  return out.dump(1) + "\n";
}

}  // namespace hvprof::report
