// The statistics behind --diff, checked against values from the literature and from tables,
// worked out by hand in the comments (not by the code under test).
#include <cmath>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/stats/compare.h"
#include "hvprof/stats/tests.h"

using namespace hvprof::stats;
using Catch::Detail::Approx;

TEST_CASE("normal and t tails match the tables", "[stats]") {
  CHECK(NormalTwoSidedP(1.959964) == Approx(0.05).epsilon(1e-5));
  CHECK(NormalTwoSidedP(-2.575829) == Approx(0.01).epsilon(1e-5));
  CHECK(NormalTwoSidedP(0) == Approx(1.0));
  // Student's t, two-sided 5% critical values: 2.228139 at 10 df, 2.100922 at 18 df.
  CHECK(StudentTwoSidedP(2.228139, 10) == Approx(0.05).epsilon(1e-5));
  CHECK(StudentTwoSidedP(2.100922, 18) == Approx(0.05).epsilon(1e-5));
  CHECK(TwoSidedCritical(0.05) == Approx(1.959964).epsilon(1e-6));
  CHECK(TwoSidedCritical(0.05, 10) == Approx(2.228139).epsilon(1e-6));
  CHECK(NormalTwoSidedP(std::numeric_limits<double>::quiet_NaN()) == 1.0);
}

TEST_CASE("Fisher's exact test gives the textbook p-values", "[stats]") {
  // Fisher's lady tasting tea: 3 of 4 cups right against 1 of 4: 2 * (16 + 1) / 70 = 0.4857.
  CHECK(FisherExactTwoSided(3, 4, 1, 4) == Approx(34.0 / 70.0).epsilon(1e-9));
  // The dieting example (rows 1/10 and 11/14): one-sided 0.001346, two-sided 0.002759.
  CHECK(FisherExactTwoSided(1, 10, 11, 14) == Approx(0.002759).epsilon(1e-3));
  // Symmetric: swapping the rows changes nothing.
  CHECK(FisherExactTwoSided(11, 14, 1, 10) == Approx(FisherExactTwoSided(1, 10, 11, 14)));
  // Nothing to see: equal proportions, or an empty margin.
  CHECK(FisherExactTwoSided(5, 10, 5, 10) == Approx(1.0));
  CHECK(FisherExactTwoSided(0, 10, 0, 10) == 1.0);
  CHECK(FisherExactTwoSided(0, 0, 3, 10) == 1.0);
  // 0 of 1e7 against 10 of 1e7: P = 2 * C(10,0)/2^10 for equal rows = 2/1024 (all on one side).
  CHECK(FisherExactTwoSided(0, 10'000'000, 10, 10'000'000) == Approx(2.0 / 1024).epsilon(1e-4));
}

TEST_CASE("the two-proportion statistic and the intervals", "[stats]") {
  // 50/100 against 60/100: pooled 0.55, se = sqrt(.55 * .45 * .02) = 0.0703562, z = 1.421338.
  CHECK(TwoProportionZ(50, 100, 60, 100) == Approx(1.421338).epsilon(1e-6));
  CHECK(TwoProportionZ(0, 100, 0, 100) == 0);
  // Wilson at 0/10: upper bound z^2 / (n + z^2) = 3.841459 / 13.841459 = 0.277533.
  const Interval zero = WilsonInterval(0, 10, 1.959964);
  CHECK(zero.low == 0);
  CHECK(zero.high == Approx(0.277533).epsilon(1e-5));
  // Newcombe (1998), Table II, 56/70 against 48/80, method 10: 0.0524 to 0.3339.
  const Interval difference = NewcombeDifference(48, 80, 56, 70, 1.959964);
  CHECK(difference.low == Approx(0.0524).margin(5e-5));
  CHECK(difference.high == Approx(0.3339).margin(5e-5));
}

TEST_CASE("Mann-Whitney U, exact and approximate", "[stats]") {
  const std::vector<double> low3 = {1, 2, 3}, high3 = {4, 5, 6};
  // Complete separation of 3 and 3: 2 of the C(6,3) = 20 orderings are as extreme.
  RankTest test = MannWhitneyU(low3, high3);
  CHECK(test.exact);
  CHECK(test.u == 0);
  CHECK(test.p == Approx(0.1));
  // 4 and 4 with U = 1: orderings with U <= 1 are 2 of 70 on each side: p = 4/70 (tables: the
  // critical U at 5% two-sided for 4 and 4 is 0, so this one is not significant).
  test = MannWhitneyU(std::vector<double>{1, 2, 3, 5}, std::vector<double>{4, 6, 7, 8});
  CHECK(test.u == 1);
  CHECK(test.p == Approx(4.0 / 70.0));
  CHECK(MannWhitneySmallestP(5, 5) == Approx(2.0 / 252.0));
  // Ties go to the normal approximation with the tie correction: identical samples give p = 1.
  test = MannWhitneyU(std::vector<double>{1, 1, 1}, std::vector<double>{1, 1, 1});
  CHECK_FALSE(test.exact);
  CHECK(test.p == Approx(1.0));
  // 25 against 25 fully separated: z = (312.5 - 0.5) / sqrt(25*25*51/12) = 6.052; p ~ 1.43e-9.
  std::vector<double> x, y;
  for (int i = 0; i < 25; ++i) x.push_back(i), y.push_back(100 + i);
  test = MannWhitneyU(x, y);
  CHECK_FALSE(test.exact);
  CHECK(test.p == Approx(NormalTwoSidedP(312.0 / std::sqrt(25.0 * 25 * 51 / 12))).epsilon(1e-9));
  CHECK(test.p < 1e-8);
}

TEST_CASE("Holm and Benjamini-Hochberg adjust in place", "[stats]") {
  // Sorted: 0.005, 0.01, 0.03, 0.04. Holm: 4*.005 = .02, 3*.01 = .03, 2*.03 = .06, max(.06, .04).
  const std::vector<double> p = {0.01, 0.04, 0.03, 0.005};
  const std::vector<double> holm = HolmAdjust(p);
  CHECK(holm[0] == Approx(0.03));
  CHECK(holm[1] == Approx(0.06));
  CHECK(holm[2] == Approx(0.06));
  CHECK(holm[3] == Approx(0.02));
  // BH: m/j * p = .02, .02, .04, .04, then the running minimum from the top.
  const std::vector<double> bh = BenjaminiHochbergAdjust(p);
  CHECK(bh[0] == Approx(0.02));
  CHECK(bh[1] == Approx(0.04));
  CHECK(bh[2] == Approx(0.04));
  CHECK(bh[3] == Approx(0.02));
  CHECK(HolmAdjust(std::vector<double>{0.9, 0.8}) == std::vector<double>{1.0, 1.0});
}

namespace {

// A run of `total` samples over three keys, cut into slices with the given counts of key 0.
CountedRun SlicedRun(const std::vector<uint64_t>& key0_per_slice, uint64_t per_slice) {
  CountedRun run;
  run.counts = {0, 0, 0};
  for (uint64_t count : key0_per_slice) {
    run.slice_totals.push_back(per_slice);
    run.slice_counts.push_back({count, per_slice / 2 - count, per_slice / 2});
    run.counts[0] += count;
    run.counts[1] += per_slice / 2 - count;
    run.counts[2] += per_slice / 2;
    run.total += per_slice;
  }
  return run;
}

}  // namespace

TEST_CASE("dispersion between time slices widens the test", "[stats]") {
  // Key 0 has the same 10% share on both sides overall, but the new side's slices swing
  // wildly: the test must take that variance in, not only the binomial one.
  const CountedSide steady{{SlicedRun({100, 100, 100, 100}, 1000)}};
  const CountedSide bursty{{SlicedRun({0, 300, 10, 200}, 1000)}};  // 12.75% share, swinging
  const Comparison comparison = Compare(steady, bursty, 3, {});
  const KeyComparison& key0 = comparison.keys[0];
  // With that dispersion the 8000 samples are worth only 8000 / 97.5 = 82 independent ones:
  // too few for the normal approximation, so Fisher's test on the effective counts decides.
  CHECK(key0.test == TestKind::kFisher);
  // Pearson over the new side's slices against p = .1275: sum (c - 127.5)^2 / (127.5 * .8725)
  // = (16256.25 + 29756.25 + 13806.25 + 5256.25) / 111.24375 = 584.98, over 3 df; the steady
  // side adds 0 over 3 df: dispersion = 584.98 / 6 = 97.5.
  CHECK(key0.dispersion == Approx(584.98 / 6).epsilon(1e-3));
  // Without slices the same counts (400 of 4000 against 510 of 4000) are a z of 3.92...
  CountedSide flat_base = steady, flat_new = bursty;
  flat_base.runs[0].slice_totals.clear();
  flat_base.runs[0].slice_counts.clear();
  flat_new.runs[0].slice_totals.clear();
  flat_new.runs[0].slice_counts.clear();
  const Comparison flat = Compare(flat_base, flat_new, 3, {});
  CHECK(flat.keys[0].test == TestKind::kZ);
  CHECK(flat.keys[0].p < 1e-3);
  CHECK(flat.keys[0].significant);
  // ...which the dispersion reduces to nothing worth reporting.
  CHECK(key0.p > 0.3);
  CHECK_FALSE(key0.significant);
  CHECK(key0.ci_low < 0);
  CHECK(key0.ci_high > 0);
}

TEST_CASE("several runs a side are compared by rank, and too few runs say so", "[stats]") {
  auto run = [](uint64_t count) {
    CountedRun r;
    r.total = 1000;
    r.counts = {count, 1000 - count};
    return r;
  };
  CountedSide base, next;
  for (uint64_t c : {100, 102, 98, 101, 99, 104, 103, 97}) base.runs.push_back(run(c));
  for (uint64_t c : {130, 128, 131, 127, 133, 129, 126, 132}) next.runs.push_back(run(c));
  Comparison comparison = Compare(base, next, 2, {});
  CHECK(comparison.verdict_test == TestKind::kMannWhitney);
  REQUIRE(comparison.keys[0].test == TestKind::kMannWhitney);
  // Separated 8 and 8: p = 2 / C(16, 8) = 2 / 12870; Holm over 2 keys doubles it.
  CHECK(comparison.keys[0].p == Approx(2.0 / 12870));
  CHECK(comparison.keys[0].p_adjusted == Approx(4.0 / 12870));
  CHECK(comparison.keys[0].significant);
  CHECK(comparison.keys[0].ci_low > 0.02);
  CHECK(comparison.keys[0].ci_high < 0.04);
  CHECK(comparison.can_reach_significance);
  base.runs.resize(3);
  next.runs.resize(3);
  comparison = Compare(base, next, 2, {});
  CHECK(comparison.smallest_possible_p == Approx(0.1));
  CHECK_FALSE(comparison.can_reach_significance);
  CHECK_FALSE(comparison.keys[0].significant);
}

TEST_CASE("keys on one side only and keys on neither", "[stats]") {
  CountedRun base{10000, {0, 5000, 0}, {}, {}};
  CountedRun next{10000, {300, 4700, 0}, {}, {}};
  const Comparison comparison = Compare({{base}}, {{next}}, 3, {});
  CHECK(std::isinf(comparison.keys[0].ratio));
  CHECK(comparison.keys[0].significant);
  CHECK(comparison.keys[2].test == TestKind::kNone);
  CHECK_FALSE(comparison.keys[2].significant);
  CHECK(comparison.tested == 2);
}

TEST_CASE("Tarone's family leaves out rows that can never be significant", "[stats]") {
  // 100 rows of 2 samples each (at best p = 0.5) and one of 8 samples all on one side: the
  // family is 1, and that row keeps its p instead of being multiplied by 101.
  CountedRun base{100000, {}, {}, {}}, next{100000, {}, {}, {}};
  for (int i = 0; i < 100; ++i) {
    base.counts.push_back(1);
    next.counts.push_back(1);
  }
  base.counts.push_back(0);
  next.counts.push_back(8);
  const Comparison comparison = Compare({{base}}, {{next}}, 101, {});
  CHECK(comparison.family == 1);
  CHECK(comparison.untestable == 100);
  // Fisher (expected counts of 4), 0 of 1e5 against 8 of 1e5: 2 * 2^-8.
  CHECK(comparison.keys[100].test == TestKind::kFisher);
  CHECK(comparison.keys[100].p == Approx(2 * std::pow(0.5, 8)).epsilon(1e-3));
  CHECK(comparison.keys[100].p_adjusted == Approx(comparison.keys[100].p));
  CHECK(comparison.keys[100].significant);
  CHECK_FALSE(comparison.keys[0].in_family);
  CHECK(comparison.keys[0].p_adjusted == 1.0);
  // The smallest attainable p of m tests: at most m can reach alpha/m.
  CHECK(TaroneFamily(std::vector<double>{0.5, 0.5, 0.5, 1e-9}, 0.05) == 1);
  CHECK(TaroneFamily(std::vector<double>{0.01, 0.01, 0.01, 0.01}, 0.05) == 4);
  CHECK(TaroneFamily(std::vector<double>{0.02, 0.02, 0.02}, 0.05) == 3);  // 3 tests at .0167: none reaches
  CHECK(HolmAdjust(std::vector<double>{0.01}, 5)[0] == Approx(0.05));
}
