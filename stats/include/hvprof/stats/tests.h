// Statistical tests and intervals for sample counts. Each function documents the model it
// assumes; docs/compare.md says when each is used. All p-values are two-sided.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hvprof::stats {

// P(|Z| >= |z|) for a standard normal Z.
double NormalTwoSidedP(double z);
// P(|T| >= |t|) for Student's t with `df` degrees of freedom (df > 0).
double StudentTwoSidedP(double t, double df);
// The two-sided quantile: the x with P(|Z| >= x) = alpha (normal when df is 0, else Student's t).
double TwoSidedCritical(double alpha, double df = 0);

// Fisher's exact test of a 2x2 table: `a` of `n1` against `b` of `n2`. Two-sided: the sum of the
// probabilities (hypergeometric, margins fixed) of every table no more likely than the observed
// one. Exact for any counts; costs O(min(a + b, n1 + n2 - a - b)).
double FisherExactTwoSided(uint64_t a, uint64_t n1, uint64_t b, uint64_t n2);

// The two-proportion z statistic for a/n1 against b/n2, from the pooled proportion; 0 when
// both proportions are 0 or 1.
double TwoProportionZ(uint64_t a, uint64_t n1, uint64_t b, uint64_t n2);

struct Interval {
  double low = 0;
  double high = 0;
};

// Wilson's score interval for a proportion x/n at the two-sided critical value `z`.
Interval WilsonInterval(double x, double n, double z);
// Newcombe's hybrid score interval (his method 10) for b/n2 - a/n1 from the two Wilson
// intervals: well-behaved at 0 and 1, where the Wald interval collapses. Counts may be
// fractional (effective counts divided by a dispersion factor).
Interval NewcombeDifference(double a, double n1, double b, double n2, double z);

// The Mann-Whitney U test of two samples (e.g. a function's share in each run of A and of B).
// Exact (by counting rank sums) when there are no ties and both have at most 20 values, else
// the normal approximation with the tie correction and a continuity correction.
struct RankTest {
  double u = 0;     // U of the first sample
  double p = 1;
  bool exact = false;
};
RankTest MannWhitneyU(std::span<const double> x, std::span<const double> y);
// The smallest two-sided p the exact test can reach with samples of these sizes: 2 / C(n+m, n).
double MannWhitneySmallestP(size_t n, size_t m);

// Welch's interval for mean(y) - mean(x) (unequal variances, Welch-Satterthwaite degrees of
// freedom), at two-sided level alpha. Needs at least two values on each side.
Interval WelchDifference(std::span<const double> x, std::span<const double> y, double alpha);

// Adjusted p-values, in the order given: Holm's step-down (controls the family-wise error) and
// Benjamini-Hochberg's step-up (controls the false discovery rate). `family`: the number of
// tests to correct for when larger than p.size() (Tarone's, below); 0 for p.size().
std::vector<double> HolmAdjust(std::span<const double> p, size_t family = 0);
std::vector<double> BenjaminiHochbergAdjust(std::span<const double> p, size_t family = 0);

// Tarone's family for discrete tests: given each test's smallest attainable p (a row with 3
// samples can never reach p = 1e-6), the smallest m such that at most m tests can reach alpha/m.
// Tests that cannot reach alpha/m are left out of the correction: they could never be
// significant, and counting them would only weaken the others. Returns m (0 when none can).
size_t TaroneFamily(std::span<const double> smallest_p, double alpha);

}  // namespace hvprof::stats
