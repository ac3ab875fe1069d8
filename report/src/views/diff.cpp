#include "hvprof/report/views/diff.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "hvprof/report/load.h"

namespace hvprof::report {
namespace {

constexpr char kSeparator = '\x1f';

// Keys shared by both sides: each distinct row (or stack) once, with what names it.
struct KeySpace {
  std::unordered_map<std::string, size_t> index;
  std::vector<DiffRow> rows;

  size_t Intern(const std::string& key, const DiffRow& row) {
    auto [it, added] = index.emplace(key, rows.size());
    if (added) rows.push_back(row);
    return it->second;
  }
};

// One run counted per key: the table's rows (first column) or the named stacks; with slices,
// each key's count in each time slice too.
struct Counted {
  uint64_t total = 0;
  std::vector<std::pair<size_t, uint64_t>> counts;  // key, samples
  std::string event;
  uint32_t slices = 0;
  std::vector<uint64_t> slice_totals;                       // per slice
  std::vector<std::pair<size_t, std::vector<uint64_t>>> slice_counts;  // key, per slice
};

Result<Counted> CountTable(const Profile& profile, const DiffRun& run, KeySpace& keys, uint32_t slices) {
  ReportOptions options = run.table;
  options.threshold = 0;
  std::vector<uint32_t> row_of_entry;
  HVPROF_TRY(table, BuildTable(profile, options, slices >= 2 ? &row_of_entry : nullptr));
  Counted counted;
  counted.total = table.columns.front().total;
  counted.event = table.columns.front().event;
  std::vector<size_t> key_of_row;
  for (const Row& row : table.rows) {
    DiffRow named;
    named.domain = options.by_domain ? row.domain : std::string();
    named.image = row.image == kNoIndex ? std::string() : profile.images()[row.image].name;
    named.symbol = row.symbol == kNoIndex || options.view == View::kImage ? std::string()
                                                                          : profile.symbols()[row.symbol].name;
    std::string key = named.domain + kSeparator + named.image + kSeparator + named.symbol;
    key_of_row.push_back(keys.Intern(key, named));
    counted.counts.emplace_back(key_of_row.back(), row.samples.front());
  }
  if (slices >= 2) {
    if (profile.time_slices() != slices) {
      return MakeError(ErrorKind::kInvalidArgument, "{} was loaded with {} time slices where the diff counts {}",
                       profile.directory(), profile.time_slices(), slices);
    }
    const std::vector<uint32_t>& per_entry = profile.slice_counts();
    counted.slices = slices;
    counted.slice_totals.assign(slices, 0);
    std::vector<std::vector<uint64_t>> per_row(table.rows.size(), std::vector<uint64_t>(slices, 0));
    for (size_t e = 0; e < row_of_entry.size(); ++e) {
      if (row_of_entry[e] == kNoIndex) continue;
      for (uint32_t k = 0; k < slices; ++k) {
        per_row[row_of_entry[e]][k] += per_entry[e * slices + k];
        counted.slice_totals[k] += per_entry[e * slices + k];
      }
    }
    for (size_t r = 0; r < per_row.size(); ++r) counted.slice_counts.emplace_back(key_of_row[r], std::move(per_row[r]));
  }
  return counted;
}

Counted CountStacks(const Profile& profile, const DiffRun& run, StackRoot root, KeySpace& keys) {
  StackOptions options;
  options.root = root;
  options.filter = run.stacks;
  const NamedStacks named = NameStacks(profile, options);
  Counted counted;
  counted.total = named.samples;
  counted.event = StackEventName(profile, run.stacks);
  for (const NamedStack& stack : named.stacks) {
    DiffRow row;
    std::string key;
    for (uint32_t frame : stack.frames) {
      row.frames.push_back(named.names[frame]);
      row.frame_modes.push_back(named.modes[frame]);
      key += named.names[frame];
      key += kSeparator;
    }
    counted.counts.emplace_back(keys.Intern(key, row), stack.count);
  }
  return counted;
}

stats::CountedRun ToRun(const Counted& counted, size_t keys) {
  stats::CountedRun run;
  run.total = counted.total;
  run.counts.assign(keys, 0);
  for (const auto& [key, count] : counted.counts) run.counts[key] += count;
  if (counted.slices >= 2) {
    run.slice_totals = counted.slice_totals;
    run.slice_counts.assign(counted.slices, std::vector<uint64_t>(keys, 0));
    for (const auto& [key, per_slice] : counted.slice_counts) {
      for (uint32_t k = 0; k < counted.slices; ++k) run.slice_counts[k][key] += per_slice[k];
    }
  }
  return run;
}

// Counts every run of a side.
struct SideCounts {
  std::vector<Counted> runs;
};

Result<SideCounts> CountSide(const std::vector<DiffRun>& side, const DiffOptions& options, bool stacks, uint32_t slices,
                             KeySpace& keys) {
  SideCounts out;
  for (const DiffRun& run : side) {
    if (stacks) {
      out.runs.push_back(CountStacks(*run.profile, run, options.root, keys));
    } else {
      HVPROF_TRY(counted, CountTable(*run.profile, run, keys, slices));
      out.runs.push_back(std::move(counted));
    }
  }
  return out;
}

stats::CountedSide ToSide(const SideCounts& side, size_t keys) {
  stats::CountedSide out;
  for (const Counted& run : side.runs) out.runs.push_back(ToRun(run, keys));
  return out;
}

// Both sides counted the same event, and every session counted something: a session with
// nothing counted compares nothing (every row would be "new" or "gone", and a regression gate
// would pass on nothing), an error of its own kind.
Result<void> CheckComparable(const std::vector<DiffRun>& base, const std::vector<DiffRun>& next,
                             const SideCounts& base_counts, const SideCounts& new_counts, Diff& diff) {
  diff.event = base_counts.runs.front().event;
  for (const SideCounts* side : {&base_counts, &new_counts}) {
    for (const Counted& run : side->runs) {
      if (run.event != diff.event) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "the sessions counted different events ('{}' and '{}'): name one both counted with --event",
                         diff.event, run.event);
      }
    }
  }
  for (const bool is_base : {true, false}) {
    const std::vector<DiffRun>& runs = is_base ? base : next;
    const SideCounts& counted = is_base ? base_counts : new_counts;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (counted.runs[i].total != 0) continue;
      const bool any = runs[i].profile->total_samples() != 0;
      return MakeError(ErrorKind::kEmpty,
                       "{} ({} side) has no samples{}: there is nothing to compare. {}",
                       runs[i].label, is_base ? "base" : "new",
                       any ? " of what was selected (--domain, --mode, --event, --image, --symbol)" : "",
                       any ? "Widen the selection" : "Compare a session that holds samples (hvprof-report --list shows each session's)");
    }
  }

  return Ok();
}

// A stack's samples come in the bursts of the function it was sampled in: each stack takes the
// dispersion its sampled function's symbol shows over the slices (into `compare`).
Result<void> StackDispersion(const std::vector<DiffRun>& base, const std::vector<DiffRun>& next,
                             const DiffOptions& options, const KeySpace& keys, stats::CompareOptions& compare) {
  std::vector<DiffRun> base_symbols = base, new_symbols = next;
  for (auto* side : {&base_symbols, &new_symbols}) {
    for (DiffRun& run : *side) {
      run.table.view = View::kSymbol;
      run.table.by_domain = false;
      run.table.events = run.stacks.events;
      run.table.merge_all = run.stacks.events.size() > 1;
      run.table.domains = run.stacks.domains;
      run.table.modes = run.stacks.modes;
      run.table.images.clear();
      run.table.symbols.clear();
      run.table.exclude_dependent = false;
    }
  }
  KeySpace symbol_keys;
  HVPROF_TRY(base_symbols_counted, CountSide(base_symbols, options, false, options.slices, symbol_keys));
  HVPROF_TRY(new_symbols_counted, CountSide(new_symbols, options, false, options.slices, symbol_keys));
  const stats::Comparison by_symbol =
      stats::Compare(ToSide(base_symbols_counted, symbol_keys.rows.size()),
                     ToSide(new_symbols_counted, symbol_keys.rows.size()), symbol_keys.rows.size(), {});
  std::unordered_map<std::string, double> by_name;
  for (size_t k = 0; k < symbol_keys.rows.size(); ++k) {
    double& factor = by_name[symbol_keys.rows[k].symbol];
    factor = std::max(factor, by_symbol.keys[k].dispersion);
  }
  compare.dispersion.assign(keys.rows.size(), 1.0);
  for (size_t k = 0; k < keys.rows.size(); ++k) {
    if (keys.rows[k].frames.empty()) continue;
    auto it = by_name.find(keys.rows[k].frames.back());
    if (it != by_name.end()) compare.dispersion[k] = it->second;
  }
  compare.dispersion_df = 2.0 * (options.slices - 1);
  return Ok();
}

// -t: the keys whose share reaches the threshold on either side (runs added up); rows small on
// both sides are neither shown nor tested.
std::vector<size_t> KeptKeys(const stats::CountedSide& base_side, const stats::CountedSide& new_side, size_t keys,
                             double threshold) {
  auto add_up = [&](const stats::CountedSide& side, std::vector<uint64_t>* per_key, uint64_t* total) {
    per_key->assign(keys, 0);
    *total = 0;
    for (const stats::CountedRun& run : side.runs) {
      *total += run.total;
      for (size_t k = 0; k < per_key->size(); ++k) (*per_key)[k] += run.counts[k];
    }
  };
  std::vector<uint64_t> base_per_key, new_per_key;
  uint64_t base_total = 0, new_total = 0;
  add_up(base_side, &base_per_key, &base_total);
  add_up(new_side, &new_per_key, &new_total);
  auto percent = [](uint64_t part, uint64_t whole) {
    return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  };
  std::vector<size_t> kept;
  for (size_t k = 0; k < keys; ++k) {
    if (base_per_key[k] + new_per_key[k] == 0) continue;
    if (std::max(percent(base_per_key[k], base_total), percent(new_per_key[k], new_total)) >= threshold) {
      kept.push_back(k);
    }
  }
  return kept;
}

// A side's counts of the kept keys only.
stats::CountedSide Project(const stats::CountedSide& side, const std::vector<size_t>& kept) {
  stats::CountedSide out = side;
  for (stats::CountedRun& run : out.runs) {
    std::vector<uint64_t> counts;
    for (size_t k : kept) counts.push_back(run.counts[k]);
    run.counts = std::move(counts);
    for (std::vector<uint64_t>& slice : run.slice_counts) {
      std::vector<uint64_t> part;
      for (size_t k : kept) part.push_back(slice[k]);
      slice = std::move(part);
    }
  }
  return out;
}

// How to read the diff: the test, its caveats, the idle loop left out; and the sessions' warnings.
void AddNotes(const std::vector<DiffRun>& base, const std::vector<DiffRun>& next, const DiffOptions& options,
              bool rank, bool slices_as_runs, Diff& diff) {
  const std::string correction = options.compare.correction == stats::Correction::kHolm
                                     ? "Holm's correction (family-wise error)"
                                     : "Benjamini-Hochberg's correction (false discovery rate)";
  if (slices_as_runs) {
    diff.notes.push_back(fmt::format(
        "test: Mann-Whitney U over {} time slices of each session as pseudo-repeats, {} over {} rows, at {}%", options.slices,
        correction, diff.summary.family, 100 * options.compare.alpha));
    diff.notes.push_back(
        "caveat: slices of one session are not independent runs: they share the machine's state, the build and "
        "whatever else differed between the two sessions; repeat the runs (hvprof run --repeat=N) for a verdict on the "
        "change itself");
  } else if (rank) {
    diff.notes.push_back(fmt::format("test: Mann-Whitney U over the runs' shares ({} against {} runs), {} over {} rows, "
                                     "at {}%; interval: Welch's, of the mean shares",
                                     base.size(), next.size(), correction, diff.summary.family,
                                     100 * options.compare.alpha));
  } else {
    diff.notes.push_back(fmt::format(
        "test: two proportions, {} (Fisher's exact where an expected count is under 5), {} over {} rows, at {}%",
        diff.slices >= 2 ? fmt::format("the variance scaled by each {}'s dispersion over {} slices of each session "
                                       "(Student's t)",
                                       options.stacks ? "stack's sampled function" : "row", diff.slices)
                         : std::string("samples taken as independent (no slices: this overstates significance when "
                                       "samples come in bursts)"),
        correction, diff.summary.family, 100 * options.compare.alpha));
    if (base.size() != next.size()) {
      diff.notes.push_back("one side has one session: their samples were pooled; give several sessions on both sides "
                           "for the rank test across runs");
    }
  }
  if (diff.summary.untestable != 0) {
    diff.notes.push_back(fmt::format(
        "{} rows have too few samples to be significant however they split between the sides; they are left out of the "
        "correction (Tarone's method), which keeps its power for the rest",
        diff.summary.untestable));
  }
  if (rank && !diff.summary.can_reach_significance) {
    diff.notes.push_back(fmt::format(
        "with this few runs nothing can be significant: the smallest p the rank test can give is {:.3g}, and {} rows "
        "are tested; add runs, or raise -t to test fewer rows",
        diff.summary.smallest_possible_p, diff.summary.family));
  }
  // The idle loop is left out of the shares of both sides, as in the flat views.
  uint64_t idle = 0;
  for (const auto* side : {&base, &next}) {
    for (const DiffRun& run : *side) {
      if (KeepsIdle(run.table)) continue;
      for (const Entry& entry : run.profile->entries()) idle += entry.idle ? entry.count : 0;
    }
  }
  if (idle != 0) {
    diff.notes.push_back(fmt::format("{} samples of the idle loop are left out of the shares (--include-idle keeps them)",
                                     idle));
  }
  for (const auto* side : {&base, &next}) {
    for (const DiffRun& run : *side) {
      for (const std::string& warning : run.profile->Warnings()) diff.warnings.push_back(run.label + ": " + warning);
    }
  }
}

}  // namespace

uint32_t DiffTimeSlices(const DiffOptions& options, size_t base_runs, size_t new_runs) {
  // Slices serve the count test (its dispersion) and pseudo-repeats; the rank test over real
  // runs needs none.
  const bool slices_as_runs = options.compare.method == stats::Method::kSlices;
  const bool rank = slices_as_runs || (base_runs >= 2 && new_runs >= 2);
  return !rank || slices_as_runs ? options.slices : 0;
}

Result<Diff> BuildDiff(const std::vector<DiffRun>& base, const std::vector<DiffRun>& next, const DiffOptions& options) {
  if (base.empty() || next.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "--diff needs a session on each side");
  }
  Diff diff;
  diff.view = base.front().table.view;
  diff.by_domain = base.front().table.by_domain;
  diff.stacks = options.stacks;
  diff.compare = options.compare;
  for (const DiffRun& run : base) diff.base_labels.push_back(run.label);
  for (const DiffRun& run : next) diff.new_labels.push_back(run.label);
  const bool slices_as_runs = options.compare.method == stats::Method::kSlices;
  if (slices_as_runs && (base.size() != 1 || next.size() != 1)) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "--slices takes one session a side; with several, their runs are the repeats already");
  }
  const bool rank = slices_as_runs || (base.size() >= 2 && next.size() >= 2);
  // Stacks are sliced through their sampled function's symbol (below).
  diff.slices = DiffTimeSlices(options, base.size(), next.size());
  const uint32_t slices = options.stacks ? 0 : diff.slices;

  KeySpace keys;
  HVPROF_TRY(base_counts, CountSide(base, options, options.stacks, slices, keys));
  HVPROF_TRY(new_counts, CountSide(next, options, options.stacks, slices, keys));
  HVPROF_TRYV(CheckComparable(base, next, base_counts, new_counts, diff));

  stats::CompareOptions compare = options.compare;
  if (options.stacks && !rank && options.slices >= 2) {
    HVPROF_TRYV(StackDispersion(base, next, options, keys, compare));
    diff.slices = options.slices;
  }

  stats::CountedSide base_side = ToSide(base_counts, keys.rows.size());
  stats::CountedSide new_side = ToSide(new_counts, keys.rows.size());
  const std::vector<size_t> kept = KeptKeys(base_side, new_side, keys.rows.size(), options.threshold);
  if (!compare.dispersion.empty()) {
    std::vector<double> dispersion;
    for (size_t k : kept) dispersion.push_back(compare.dispersion[k]);
    compare.dispersion = std::move(dispersion);
  }
  diff.summary = stats::Compare(Project(base_side, kept), Project(new_side, kept), kept.size(), compare);
  for (size_t i = 0; i < kept.size(); ++i) {
    DiffRow row = keys.rows[kept[i]];
    row.c = diff.summary.keys[i];
    row.presence = row.c.base_count == 0 ? Presence::kNew : row.c.new_count == 0 ? Presence::kGone : Presence::kBoth;
    diff.rows.push_back(std::move(row));
  }
  diff.summary.keys.clear();
  std::stable_sort(diff.rows.begin(), diff.rows.end(), [](const DiffRow& l, const DiffRow& r) {
    return std::fabs(l.c.delta) > std::fabs(r.c.delta);
  });

  AddNotes(base, next, options, rank, slices_as_runs, diff);
  return diff;
}

std::vector<const DiffRow*> Regressions(const Diff& diff, double points) {
  std::vector<const DiffRow*> out;
  for (const DiffRow& row : diff.rows) {
    if (row.c.significant && 100 * row.c.delta >= points) out.push_back(&row);
  }
  return out;
}

}  // namespace hvprof::report
