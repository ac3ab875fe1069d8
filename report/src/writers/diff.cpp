#include "hvprof/report/writers/diff.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "hvprof/report/writers/flamegraph.h"
#include "writers/common.h"

namespace hvprof::report {
namespace {

using Json = nlohmann::json;

const char* PresenceName(Presence presence) {
  switch (presence) {
    case Presence::kNew: return "new";
    case Presence::kGone: return "gone";
    case Presence::kBoth: break;
  }
  return "both";
}

std::string Points(double share) { return fmt::format("{:+.2f}", 100 * share); }

std::string Ratio(const DiffRow& row) {
  if (row.presence == Presence::kNew) return "new";
  if (row.presence == Presence::kGone) return "gone";
  return fmt::format("{:.2f}x", row.c.ratio);
}

std::string FoldedStack(const DiffRow& row) {
  std::string out;
  for (size_t i = 0; i < row.frames.size(); ++i) {
    if (i != 0) out += ';';
    std::string safe = Safe(row.frames[i]);
    for (char& c : safe) c = c == ';' ? ':' : c;
    out += safe;
  }
  return out;
}

std::string Sides(const std::vector<std::string>& labels) {
  return labels.size() == 1 ? labels.front() : fmt::format("{{ {} }}", fmt::join(labels, " "));
}

}  // namespace

std::string DiffRowName(const DiffRow& row) {
  if (!row.frames.empty()) return fmt::format("{}", fmt::join(row.frames, ";"));
  std::string name = row.domain.empty() ? row.image : row.domain + "  " + row.image;
  if (!row.symbol.empty()) name += "  " + row.symbol;
  return name;
}

std::string FormatDiffText(const Diff& diff, bool no_header) {
  std::string out;
  if (!no_header) {
    out += fmt::format("Diff: {} ({} samples, {} session{}) against base {} ({} samples, {} session{})\n",
                       Safe(Sides(diff.new_labels)), diff.summary.new_total, diff.new_labels.size(),
                       diff.new_labels.size() == 1 ? "" : "s", Safe(Sides(diff.base_labels)), diff.summary.base_total,
                       diff.base_labels.size(), diff.base_labels.size() == 1 ? "" : "s");
    out += fmt::format("Event: {}\n", Safe(diff.event));
    for (const std::string& note : diff.notes) out += "Note: " + Safe(note) + "\n";
    uint64_t significant = 0;
    for (const DiffRow& row : diff.rows) significant += row.c.significant;
    out += fmt::format("Significant: {} of {} rows (marked *); shares in percent, change in points of the samples, "
                       "largest change first\n\n",
                       significant, diff.rows.size());
  }
  const char* what = diff.stacks ? "stack" : diff.view == View::kImage ? "image" : "symbol";
  out += fmt::format("  {:>8} {:>8} {:>8} {:>18} {:>8} {:>9} {:>9}  {}{}{}\n", "base %", "new %", "change",
                     fmt::format("{:.0f}% interval", 100 * (1 - diff.compare.alpha)), "ratio", "p", "p adj",
                     diff.by_domain ? "domain  " : "", diff.view == View::kSymbol && !diff.stacks ? "image  " : "", what);
  for (const DiffRow& row : diff.rows) {
    std::string name;
    if (diff.stacks) {
      name = FoldedStack(row);
    } else {
      if (diff.by_domain) name += Safe(row.domain) + "  ";
      name += Safe(row.image);
      if (diff.view == View::kSymbol) name += "  " + Safe(row.symbol);
    }
    out += fmt::format("{} {:>8.3f} {:>8.3f} {:>8} {:>18} {:>8} {:>9.2g} {:>9.2g}  {}\n", row.c.significant ? '*' : ' ',
                       100 * row.c.base_share, 100 * row.c.new_share, Points(row.c.delta),
                       fmt::format("[{}, {}]", Points(row.c.ci_low), Points(row.c.ci_high)), Ratio(row), row.c.p,
                       row.c.p_adjusted, name);
  }
  for (const std::string& warning : diff.warnings) out += "Warning: " + Safe(warning) + "\n";
  return out;
}

std::string FormatDiffCsv(const Diff& diff) {
  std::string out = "domain,image,symbol,stack,base_samples,new_samples,base_percent,new_percent,change_points,"
                    "ci_low_points,ci_high_points,ratio,presence,p,p_adjusted,significant,test,dispersion\n";
  for (const DiffRow& row : diff.rows) {
    out += fmt::format("{},{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{},{},{:.6g},{:.6g},{},{},{:.4g}\n",
                       CsvField(row.domain), CsvField(row.image), CsvField(row.symbol), CsvField(FoldedStack(row)),
                       row.c.base_count, row.c.new_count, 100 * row.c.base_share, 100 * row.c.new_share,
                       100 * row.c.delta, 100 * row.c.ci_low, 100 * row.c.ci_high,
                       std::isfinite(row.c.ratio) ? fmt::format("{:.6g}", row.c.ratio) : std::string(),
                       PresenceName(row.presence), row.c.p, row.c.p_adjusted, row.c.significant ? "true" : "false",
                       CsvField(std::string(stats::TestName(row.c.test))), row.c.dispersion);
  }
  return out;
}

std::string FormatDiffJson(const Diff& diff, double verdict_points) {
  Json out;
  out["schema"] = "hvprof-diff";
  out["version"] = 1;
  static constexpr const char* kViews[] = {"image", "symbol", "details", "debug-info"};
  out["view"] = diff.stacks ? "stack" : kViews[static_cast<int>(diff.view)];
  out["by_domain"] = diff.by_domain;
  out["event"] = diff.event;
  out["base"] = {{"sessions", diff.base_labels}, {"samples", diff.summary.base_total}};
  out["new"] = {{"sessions", diff.new_labels}, {"samples", diff.summary.new_total}};
  out["test"] = stats::TestName(diff.summary.verdict_test);
  out["correction"] = diff.compare.correction == stats::Correction::kHolm ? "holm" : "benjamini-hochberg";
  out["alpha"] = diff.compare.alpha;
  out["slices"] = diff.slices;
  out["rows_tested"] = diff.summary.tested;
  out["rows_in_correction"] = diff.summary.family;
  out["rows_too_small"] = diff.summary.untestable;
  out["notes"] = diff.notes;
  out["warnings"] = diff.warnings;
  Json rows = Json::array();
  for (const DiffRow& row : diff.rows) {
    Json item;
    if (diff.by_domain) item["domain"] = row.domain;
    if (diff.stacks) {
      item["stack"] = row.frames;
    } else {
      item["image"] = row.image;
      if (diff.view == View::kSymbol) item["symbol"] = row.symbol;
    }
    item["base_samples"] = row.c.base_count;
    item["new_samples"] = row.c.new_count;
    item["base_percent"] = 100 * row.c.base_share;
    item["new_percent"] = 100 * row.c.new_share;
    item["change_points"] = 100 * row.c.delta;
    item["interval_points"] = {100 * row.c.ci_low, 100 * row.c.ci_high};
    item["ratio"] = std::isfinite(row.c.ratio) ? Json(row.c.ratio) : Json(nullptr);
    item["presence"] = PresenceName(row.presence);
    item["p"] = row.c.p;
    item["p_adjusted"] = row.c.p_adjusted;
    item["significant"] = row.c.significant;
    item["in_correction"] = row.c.in_family;
    item["test"] = stats::TestName(row.c.test);
    item["dispersion"] = row.c.dispersion;
    rows.push_back(std::move(item));
  }
  out["rows"] = std::move(rows);
  if (verdict_points >= 0) {
    const std::vector<const DiffRow*> regressions = Regressions(diff, verdict_points);
    out["verdict"] = {{"fail_on_regression_points", verdict_points},
                      {"regressions", regressions.size()},
                      {"passed", regressions.empty()}};
  }
  return out.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string FormatDiffFolded(const Diff& diff) {
  // flamegraph.pl's and difffolded.pl's differential input: "stack BASE NEW", one per line.
  std::string out;
  for (const DiffRow& row : diff.rows) {
    out += fmt::format("{} {} {}\n", FoldedStack(row), row.c.base_count, row.c.new_count);
  }
  return out;
}

std::string FormatDiffFlameGraph(const Diff& diff) {
  // The new side's stacks drawn as the flame graph draws them, each carrying its base count:
  // the page colours every frame by how its share changed.
  NamedStacks stacks;
  std::unordered_map<std::string, uint32_t> names;
  std::vector<uint64_t> base_counts;
  for (const DiffRow& row : diff.rows) {
    NamedStack stack;
    for (size_t i = 0; i < row.frames.size(); ++i) {
      auto [it, added] = names.emplace(row.frames[i], static_cast<uint32_t>(stacks.names.size()));
      if (added) {
        stacks.names.push_back(row.frames[i]);
        stacks.modes.push_back(i < row.frame_modes.size() ? row.frame_modes[i] : kRootFrame);
      }
      stack.frames.push_back(it->second);
    }
    stack.count = row.c.new_count;
    stacks.samples += stack.count;
    stacks.stacks.push_back(std::move(stack));
    base_counts.push_back(row.c.base_count);
  }
  FlameGraphDiff extra;
  extra.base_counts = std::move(base_counts);
  extra.base_total = diff.summary.base_total;
  extra.new_total = diff.summary.new_total;
  extra.title = fmt::format("hvprof diff: {} against base {} ({})", Sides(diff.new_labels), Sides(diff.base_labels),
                            diff.event);
  extra.facts.push_back({"Base", fmt::format("{} ({} samples)", Sides(diff.base_labels), diff.summary.base_total)});
  extra.facts.push_back({"New", fmt::format("{} ({} samples)", Sides(diff.new_labels), diff.summary.new_total)});
  extra.facts.push_back({"Event", diff.event});
  extra.facts.push_back({"Colour", "red: a larger share of the samples in New than in Base; blue: smaller; the deeper "
                                   "the colour, the larger the change. Widths are New's samples"});
  uint64_t significant = 0;
  for (const DiffRow& row : diff.rows) significant += row.c.significant;
  extra.facts.push_back({"Significant", fmt::format("{} of {} stacks", significant, diff.rows.size())});
  for (const std::string& note : diff.notes) extra.facts.push_back({"Note", note});
  for (const std::string& warning : diff.warnings) extra.warnings.push_back(warning);
  return FormatDiffFlameGraphPage(stacks, extra);
}

}  // namespace hvprof::report
