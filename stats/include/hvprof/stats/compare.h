// Comparing two sides (a base and a new) of counted runs, key by key (a key is whatever the
// caller counts: a symbol, an image, a stack). Each run gives a count per key out of its total;
// optionally the same per time slice of the run. The choice of test follows docs/compare.md:
//
//   one run a side      quasi-binomial: the two-proportion test, its variance scaled by the
//                       over-dispersion the time slices show (samples of one run are not
//                       independent: a function runs in bursts, a domain in time slices), with
//                       Student's t on the slices' degrees of freedom; Fisher's exact test on
//                       the counts divided by that factor when an expected count is below 5
//   several runs a side Mann-Whitney U over the runs' shares (the run-to-run noise itself),
//                       with Welch's interval for the difference of mean shares
//   slices as runs      the same rank test over the time slices of one run each (pseudo-repeats)
//
// then a correction for testing every key at once: Holm's (family-wise error) by default, or
// Benjamini-Hochberg's (false discovery rate).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace hvprof::stats {

struct CountedRun {
  uint64_t total = 0;             // every sample of the run (the denominator of shares)
  std::vector<uint64_t> counts;   // per key
  // Optional: the run cut into time slices: each slice's total and its count per key
  // (slice_counts[slice][key]). Two or more slices let the comparison measure dispersion.
  std::vector<uint64_t> slice_totals;
  std::vector<std::vector<uint64_t>> slice_counts;
};

struct CountedSide {
  std::vector<CountedRun> runs;
};

enum class Correction { kHolm, kBenjaminiHochberg };

enum class Method {
  kAuto,        // one run a side: quasi-binomial; several on both sides: Mann-Whitney
  kSlices,      // one run a side, its time slices taken as runs: Mann-Whitney
};

enum class TestKind {
  kNone,           // no samples on either side: nothing to test
  kZ,              // two-proportion z (no slices to measure dispersion)
  kQuasiT,         // two-proportion statistic over the measured dispersion, Student's t
  kFisher,         // Fisher's exact test (small expected counts)
  kMannWhitney,    // rank test across runs (or slices)
};
std::string_view TestName(TestKind test);

struct CompareOptions {
  Correction correction = Correction::kHolm;
  Method method = Method::kAuto;
  double alpha = 0.05;
  // One run a side without slices of their own: per key, a dispersion measured elsewhere (the
  // diff of stacks takes each stack's from its sampled function's), on `dispersion_df` degrees
  // of freedom. Empty: measured from the runs' slices, if any.
  std::vector<double> dispersion;
  double dispersion_df = 0;
};

struct KeyComparison {
  double base_share = 0;   // 0..1
  double new_share = 0;
  double delta = 0;        // new_share - base_share
  double ratio = 0;        // new_share / base_share; infinity when base_share is 0
  double ci_low = 0;       // of delta, at 1 - alpha
  double ci_high = 0;
  double p = 1;            // the test's own p
  double p_adjusted = 1;   // after the correction
  double dispersion = 1;   // the variance factor used (1 when none was measured)
  // The smallest p the test could give with this row's samples (however they split between
  // the sides): rows that could never be significant are left out of the correction (Tarone).
  double smallest_p = 0;
  bool in_family = false;  // counted in the correction
  bool significant = false;
  TestKind test = TestKind::kNone;
  uint64_t base_count = 0;  // summed over runs
  uint64_t new_count = 0;
};

struct Comparison {
  std::vector<KeyComparison> keys;
  TestKind verdict_test = TestKind::kNone;  // what decided most rows (the rank test or the count test)
  size_t tested = 0;                        // keys with samples on either side
  size_t family = 0;                        // the m the correction divides by (Tarone's)
  size_t untestable = 0;                    // keys too small to ever be significant: left out
  // With a rank test: the smallest p its sample sizes can give, and whether any key could be
  // significant at all after the correction (too few runs cannot show anything).
  double smallest_possible_p = 0;
  bool can_reach_significance = true;
  uint64_t base_total = 0;
  uint64_t new_total = 0;
};

// Compares `keys` keys of the two sides. Every run's counts vector must hold `keys` values (and
// each slice's too); the caller guarantees it.
Comparison Compare(const CountedSide& base, const CountedSide& next, size_t keys, const CompareOptions& options);

}  // namespace hvprof::stats
