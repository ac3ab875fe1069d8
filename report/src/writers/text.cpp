#include "hvprof/report/writers/text.h"

#include <algorithm>

#include "writers/common.h"

namespace hvprof::report {

namespace {

// ANSI SGR sequences for --color.
constexpr const char* kBold = "\x1b[1m";
constexpr const char* kYellow = "\x1b[33m";
constexpr const char* kRed = "\x1b[31m";
constexpr const char* kReset = "\x1b[0m";

std::string Paint(bool color, const char* style, const std::string& text) {
  return color ? style + text + kReset : text;
}

// Rows at or above this share of the first column stand out in colour.
constexpr double kLargeShare = 5.0;

std::string IdleLines(const Profile& profile, const ReportOptions& options) {
  std::string out;
  bool any = false;
  for (const EventIdle& event : IdleByEvent(profile)) {
    if (event.idle == 0) continue;
    any = true;
    std::string cpus;
    for (const CpuIdle& cpu : event.cpus) {
      cpus += fmt::format("{}cpu{} {:.1f}%", cpus.empty() ? "" : ", ", cpu.cpu, Percent(cpu.idle, cpu.samples));
    }
    out += fmt::format("CPU idle {:.1f}% of {} samples ({} of {}){}\n", Percent(event.idle, event.samples),
                       Safe(event.event), event.idle, event.samples, cpus.empty() ? "" : "; per CPU: " + cpus);
  }
  if (any) {
    out += KeepsIdle(options) ? "  the idle loop's samples are kept in the rows and shares below\n"
                              : "  the idle loop's samples are left out of the rows and shares below (--include-idle "
                                "keeps them)\n";
  }
  return out;
}

}  // namespace

std::string FormatHeader(const Profile& profile, const Table& table, const ReportOptions& options) {
  const store::SessionMetadata& m = profile.metadata();
  std::string out;
  out += Paint(options.color, kBold, fmt::format("Session: {}", Safe(profile.directory()))) + "\n";
  out += fmt::format("Platform: {}{}; CPU: {}, {} CPUs\n", Safe(m.platform),
                     m.machine.empty() ? "" : " (" + Safe(m.machine) + ")", Safe(m.cpu_type), m.num_cpus);
  const double seconds = static_cast<double>(SampledNs(m)) / 1e9;
  for (const store::EventRecord& event : m.events) {
    uint64_t samples = 0;
    for (const Entry& entry : profile.entries()) {
      if (entry.event == event.counter) samples += entry.count;
    }
    std::string rate;
    if (seconds > 0 && m.num_cpus > 0) {
      rate = fmt::format("; achieved {:.0f} samples/s per CPU", static_cast<double>(samples) / seconds / m.num_cpus);
    }
    const std::string mask = fmt::format(" (unit mask {:#04x}{})", event.unit_mask,
                                         event.unit_mask_name.empty() ? "" : ": " + Safe(event.unit_mask_name));
    const char* modes = event.kernel && event.user ? "" : event.kernel ? ", kernel only" : ", user only";
    if (!event.sampled_by.empty()) {
      // A timer counts nothing: it samples where interrupts are enabled, and its count is its
      // event's unit (ns of CPU time, or cycles at the nominal clock), not overflows.
      out += fmt::format("Sampled by {}, not a hardware counter: {}:{}{}{}{}{}; code that runs with interrupts "
                         "masked is never sampled\n",
                         Safe(event.sampled_by), Safe(event.name), event.count, mask, modes, rate,
                         samples == 0 ? "; no samples of this event" : "");
      continue;
    }
    out += fmt::format("Counted {} events{}{} with a sample every {} events{}{}\n", Safe(event.name), mask, modes,
                       event.count, rate, samples == 0 ? "; no samples of this event" : "");
  }
  if (seconds > 0) out += fmt::format("Sampled time: {:.3f} s of the platform's clock\n", seconds);
  out += PlatformRates(m);
  out += fmt::format("Buffers: {} rings of {} samples ({} format), notified at {}, polled every {} ms\n",
                     m.rings.size(), m.ring_capacity, m.ring_format.empty() ? "?" : Safe(m.ring_format),
                     m.ring_watermark, m.poll_interval_ms);

  out += IdleLines(profile, options);
  if (!table.domains.empty()) {
    out += fmt::format("Samples of {} by domain and mode:\n", Safe(table.columns[0].event));
    // The domain column fits the longest name.
    std::vector<std::string> names;
    size_t width = 22;
    for (const DomainSummary& d : table.domains) {
      names.push_back(Safe(d.name + (d.role.empty() ? "" : " [" + d.role + "]")));
      width = std::max(width, names.back().size());
    }
    out += fmt::format("  {:<{}}", "domain", width);
    for (uint8_t mode = 0; mode < sample_mode::kCount; ++mode) out += fmt::format(" {:>10}", sample_mode::Name(mode));
    out += '\n';
    for (size_t i = 0; i < table.domains.size(); ++i) {
      out += fmt::format("  {:<{}}", names[i], width);
      for (uint64_t samples : table.domains[i].samples) out += fmt::format(" {:>10}", samples);
      out += '\n';
    }
  }
  for (const PublishedSource& guest : profile.published()) {
    const uint64_t lost = guest.losses.ring_full + guest.losses.corrupt_index + guest.losses.no_ring +
                          guest.losses.malformed_records + guest.losses.store_failed;
    out += fmt::format("Merged: {} samples published by {} (user and kernel symbolized there, hypervisor "
                       "addresses here){}\n",
                       guest.samples, Safe(store::DomainName(guest.domain, guest.name)),
                       lost == 0 ? "" : fmt::format("; it lost {} samples", lost));
  }
  const auto losses = Losses(m);
  if (losses.empty()) {
    out += "Lost samples: none\n";
  } else {
    const uint64_t lost = TotalLost(losses);
    out += Paint(options.color, kYellow,
                 fmt::format("Lost samples: {} ({:.2f}% of what was sampled)", lost, Percent(lost, lost + m.samples_stored))) +
           "\n";
    for (const LossLine& line : losses) {
      out += fmt::format("  {} {} ({}): {}\n", line.count, line.cause, line.layer, line.advice);
    }
  }
  if (m.losses.unprofiled_domain != 0) {
    out += fmt::format("Not profiled: {} samples fell in domains on neither list (add them to "
                       "--active-domains or --passive-domains to see them)\n",
                       m.losses.unprofiled_domain);
  }
  for (const std::string& warning : profile.Warnings()) {
    out += Paint(options.color, kRed, fmt::format("Warning: {}", Safe(warning))) + "\n";
  }
  for (const std::string& note : m.notes) out += fmt::format("Note: {}\n", Safe(note));
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
    for (const Column& column : table.columns) names.push_back(Safe(column.event));
    out += fmt::format("No samples of {} match in this session ({} samples in all).\n",
                       fmt::join(names, ", "), profile.total_samples());
    return out;
  }
  // Heading: per column "samples %" (and "cum. %") under the event's name, then the keys. A
  // column is as wide as its event's name, never cut: the counts are right-aligned under it.
  std::string heading;
  std::string units;
  std::vector<size_t> widths;
  for (const Column& column : table.columns) {
    const std::string block = options.accumulated ? fmt::format("{:>9} {:>8} {:>8}", "samples", "%", "cum. %")
                                                  : fmt::format("{:>9} {:>8}", "samples", "%");
    const std::string label = Safe(column.event) + ":" + (column.count ? std::to_string(column.count) : std::string("*"));
    const size_t width = std::max(block.size(), label.size());
    widths.push_back(width);
    heading += fmt::format("{:<{}}|", label, width);
    units += fmt::format("{:>{}}|", block, width);
  }
  const bool symbols = table.view != View::kImage;
  std::string keys;
  size_t domain_width = 20;
  for (const Row& row : table.rows) domain_width = std::max(domain_width, Safe(row.domain).size());
  if (options.by_domain) keys += fmt::format("{:<{}} ", "domain", domain_width);
  size_t process_width = 24;
  for (const Row& row : table.rows) process_width = std::max(process_width, Safe(row.process).size());
  if (options.by_process) keys += fmt::format("{:<{}} ", "process", process_width);
  if (options.show_address && symbols) keys += fmt::format("{:<18} ", "vma");
  if (table.view == View::kDebugInfo) keys += fmt::format("{:<32} ", "linenr info");
  keys += symbols ? fmt::format("{:<28} {}", "image name", "symbol name") : "image name";
  out += Paint(options.color, kBold, heading) + "\n" + Paint(options.color, kBold, units + " " + keys) + "\n";
  out += std::string(units.size() + 1 + keys.size(), '-') + "\n";

  std::vector<uint64_t> cumulative(columns, 0);
  auto counts = [&](const Row& row, const std::vector<uint64_t>* base, bool accumulate) {
    std::string text;
    for (size_t c = 0; c < columns; ++c) {
      const uint64_t whole = base != nullptr ? (*base)[c] : table.columns[c].total;
      std::string cell = fmt::format("{:>9} {:>8.4f}", row.samples[c], Percent(row.samples[c], whole));
      if (options.accumulated) {
        if (accumulate) cumulative[c] += row.samples[c];
        cell += fmt::format(" {:>8.4f}", Percent(cumulative[c], table.columns[c].total));
      }
      text += fmt::format("{:>{}} ", cell, widths[c]);
    }
    return text;
  };
  for (const Row& row : table.rows) {
    std::string line = counts(row, nullptr, true) + " ";
    if (options.by_domain) line += fmt::format("{:<{}} ", Safe(row.domain), domain_width);
    if (options.by_process) line += fmt::format("{:<{}} ", Safe(row.process), process_width);
    if (options.show_address && symbols) line += fmt::format("{:<18} ", fmt::format("{:016x}", row.address));
    if (table.view == View::kDebugInfo) line += fmt::format("{:<32} ", Safe(SourceOf(profile, row)));
    if (symbols) {
      line += fmt::format("{:<28} {}", Safe(ImageName(profile, row.image, options)),
                          Safe(profile.symbols()[row.symbol].name));
      if (options.verbose && !profile.symbols()[row.symbol].resolved) {
        line += fmt::format("  ({})", Safe(profile.symbols()[row.symbol].reason));
      }
    } else {
      line += Safe(ImageName(profile, row.image, options));
    }
    const bool large = Percent(row.samples[0], table.columns[0].total) >= kLargeShare;
    out += (large ? Paint(options.color, kYellow, line) : line) + "\n";
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
}  // namespace hvprof::report
