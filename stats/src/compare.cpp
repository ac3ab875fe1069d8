#include "hvprof/stats/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hvprof/stats/tests.h"

namespace hvprof::stats {
namespace {

double Share(uint64_t count, uint64_t total) {
  return total == 0 ? 0.0 : static_cast<double>(count) / static_cast<double>(total);
}

// Pearson's statistic of one key over the time slices of a side's runs, against the run's own
// share of the key: how much more the key's count varies from slice to slice than independent
// samples would let it. Adds to `chi2` and `df`.
void AddDispersion(const CountedSide& side, size_t key, double* chi2, double* df) {
  for (const CountedRun& run : side.runs) {
    const double p = Share(run.counts[key], run.total);
    if (run.slice_totals.size() < 2 || p <= 0 || p >= 1) continue;
    size_t used = 0;
    for (size_t s = 0; s < run.slice_totals.size(); ++s) {
      const double n = static_cast<double>(run.slice_totals[s]);
      if (n == 0) continue;
      const double expected = n * p;
      const double deviation = static_cast<double>(run.slice_counts[s][key]) - expected;
      *chi2 += deviation * deviation / (expected * (1 - p));
      ++used;
    }
    if (used >= 2) *df += static_cast<double>(used - 1);
  }
}

// One share per run, or per time slice of every run.
std::vector<double> RunShares(const CountedSide& side, size_t key, bool slices) {
  std::vector<double> shares;
  for (const CountedRun& run : side.runs) {
    if (!slices) {
      if (run.total != 0) shares.push_back(Share(run.counts[key], run.total));
      continue;
    }
    for (size_t s = 0; s < run.slice_totals.size(); ++s) {
      if (run.slice_totals[s] != 0) shares.push_back(Share(run.slice_counts[s][key], run.slice_totals[s]));
    }
  }
  return shares;
}

size_t SliceCount(const CountedSide& side) {
  size_t slices = 0;
  for (const CountedRun& run : side.runs) {
    for (uint64_t total : run.slice_totals) slices += total != 0;
  }
  return slices;
}

}  // namespace

std::string_view TestName(TestKind test) {
  switch (test) {
    case TestKind::kNone: return "none";
    case TestKind::kZ: return "two-proportion z";
    case TestKind::kQuasiT: return "two-proportion, dispersion from time slices (t)";
    case TestKind::kFisher: return "Fisher's exact";
    case TestKind::kMannWhitney: return "Mann-Whitney U";
  }
  return "none";
}

Comparison Compare(const CountedSide& base, const CountedSide& next, size_t keys, const CompareOptions& options) {
  Comparison result;
  result.keys.resize(keys);
  for (const CountedRun& run : base.runs) result.base_total += run.total;
  for (const CountedRun& run : next.runs) result.new_total += run.total;
  const bool slices_as_runs = options.method == Method::kSlices;
  const bool rank = slices_as_runs || (base.runs.size() >= 2 && next.runs.size() >= 2);
  const size_t base_n = slices_as_runs ? SliceCount(base) : base.runs.size();
  const size_t new_n = slices_as_runs ? SliceCount(next) : next.runs.size();
  bool any_dispersion = false;
  for (size_t key = 0; key < keys; ++key) {
    KeyComparison& row = result.keys[key];
    for (const CountedRun& run : base.runs) row.base_count += run.counts[key];
    for (const CountedRun& run : next.runs) row.new_count += run.counts[key];
    row.base_share = Share(row.base_count, result.base_total);
    row.new_share = Share(row.new_count, result.new_total);
    row.delta = row.new_share - row.base_share;
    row.ratio = row.base_share == 0 ? std::numeric_limits<double>::infinity() : row.new_share / row.base_share;
    if (row.base_count + row.new_count == 0) continue;  // kNone: not tested
    if (rank) {
      const std::vector<double> x = RunShares(base, key, slices_as_runs);
      const std::vector<double> y = RunShares(next, key, slices_as_runs);
      if (x.size() < 2 || y.size() < 2) continue;
      const RankTest test = MannWhitneyU(x, y);
      row.test = TestKind::kMannWhitney;
      row.p = test.p;
      const Interval interval = WelchDifference(x, y, options.alpha);
      row.ci_low = interval.low;
      row.ci_high = interval.high;
      continue;
    }
    double chi2 = 0;
    double df = 0;
    if (!options.dispersion.empty()) {
      df = options.dispersion_df;
      chi2 = options.dispersion[key] * df;
    } else {
      AddDispersion(base, key, &chi2, &df);
      AddDispersion(next, key, &chi2, &df);
    }
    row.dispersion = df > 0 ? std::max(1.0, chi2 / df) : 1.0;
    any_dispersion |= df > 0;
    const double phi = row.dispersion;
    const double a = static_cast<double>(row.base_count) / phi;
    const double n1 = static_cast<double>(result.base_total) / phi;
    const double b = static_cast<double>(row.new_count) / phi;
    const double n2 = static_cast<double>(result.new_total) / phi;
    const double pooled = (a + b) / (n1 + n2);
    const double smallest_expected = std::min({n1 * pooled, n2 * pooled, n1 * (1 - pooled), n2 * (1 - pooled)});
    const double critical = TwoSidedCritical(options.alpha, df);
    const Interval interval = NewcombeDifference(a, n1, b, n2, critical);
    row.ci_low = interval.low;
    row.ci_high = interval.high;
    // The most extreme split of this row's samples: all on one side.
    {
      auto whole = [](double v) { return static_cast<uint64_t>(std::llround(v)); };
      const uint64_t k = whole(a + b);
      const uint64_t w1 = whole(n1), w2 = whole(n2);
      row.smallest_p = k > 60 || k > w1 || k > w2
                           ? 0.0
                           : std::min(FisherExactTwoSided(0, w1, k, w2), FisherExactTwoSided(k, w1, 0, w2));
    }
    if (smallest_expected < 5) {
      // Fisher's test on the effective counts: the samples' worth of independent evidence.
      auto whole = [](double v) { return static_cast<uint64_t>(std::llround(v)); };
      const uint64_t ea = whole(a);
      const uint64_t eb = whole(b);
      row.p = FisherExactTwoSided(ea, std::max(whole(n1), ea), eb, std::max(whole(n2), eb));
      row.test = TestKind::kFisher;
    } else {
      const double z = TwoProportionZ(row.base_count, result.base_total, row.new_count, result.new_total) / std::sqrt(phi);
      row.p = df > 0 ? StudentTwoSidedP(z, df) : NormalTwoSidedP(z);
      row.test = df > 0 ? TestKind::kQuasiT : TestKind::kZ;
    }
  }
  std::vector<double> p;
  std::vector<size_t> tested;
  for (size_t key = 0; key < keys; ++key) {
    if (result.keys[key].test == TestKind::kNone) continue;
    p.push_back(result.keys[key].p);
    tested.push_back(key);
  }
  result.tested = tested.size();
  // Tarone: rows that cannot reach alpha / m are not in the family of m.
  std::vector<double> smallest;
  for (size_t key : tested) smallest.push_back(result.keys[key].smallest_p);
  const size_t family = rank ? tested.size() : TaroneFamily(smallest, options.alpha);
  const double level = options.alpha / static_cast<double>(std::max<size_t>(1, family));
  std::vector<double> family_p;
  std::vector<size_t> members;
  for (size_t i = 0; i < tested.size(); ++i) {
    if (rank || result.keys[tested[i]].smallest_p <= level) {
      family_p.push_back(p[i]);
      members.push_back(tested[i]);
    }
  }
  result.family = family;
  result.untestable = tested.size() - members.size();
  const std::vector<double> adjusted = options.correction == Correction::kHolm
                                           ? HolmAdjust(family_p, family)
                                           : BenjaminiHochbergAdjust(family_p, family);
  for (size_t i = 0; i < members.size(); ++i) {
    KeyComparison& row = result.keys[members[i]];
    row.in_family = true;
    row.p_adjusted = adjusted[i];
    row.significant = adjusted[i] < options.alpha;
  }
  result.verdict_test = rank ? TestKind::kMannWhitney : any_dispersion ? TestKind::kQuasiT : TestKind::kZ;
  if (rank) {
    result.smallest_possible_p = MannWhitneySmallestP(base_n, new_n);
    const double first_step = options.correction == Correction::kHolm
                                  ? result.smallest_possible_p * static_cast<double>(std::max<size_t>(1, result.family))
                                  : result.smallest_possible_p;
    result.can_reach_significance = first_step < options.alpha;
  }
  return result;
}

}  // namespace hvprof::stats
