#include "hvprof/stats/tests.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>

namespace hvprof::stats {
namespace {

// Boost.Math reports domain errors by returning NaN rather than throwing.
using Policy = boost::math::policies::policy<boost::math::policies::domain_error<boost::math::policies::ignore_error>,
                                             boost::math::policies::overflow_error<boost::math::policies::ignore_error>>;

double LogChoose(double n, double k) { return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1); }

}  // namespace

double NormalTwoSidedP(double z) {
  if (!std::isfinite(z)) return std::isnan(z) ? 1.0 : 0.0;
  const boost::math::normal_distribution<double, Policy> normal;
  return std::min(1.0, 2.0 * boost::math::cdf(boost::math::complement(normal, std::fabs(z))));
}

double StudentTwoSidedP(double t, double df) {
  if (!std::isfinite(t)) return std::isnan(t) ? 1.0 : 0.0;
  const boost::math::students_t_distribution<double, Policy> student(df);
  return std::min(1.0, 2.0 * boost::math::cdf(boost::math::complement(student, std::fabs(t))));
}

double TwoSidedCritical(double alpha, double df) {
  if (df <= 0) {
    const boost::math::normal_distribution<double, Policy> normal;
    return boost::math::quantile(boost::math::complement(normal, alpha / 2));
  }
  const boost::math::students_t_distribution<double, Policy> student(df);
  return boost::math::quantile(boost::math::complement(student, alpha / 2));
}

double FisherExactTwoSided(uint64_t a, uint64_t n1, uint64_t b, uint64_t n2) {
  // Margins: row totals n1 and n2, column total k = a + b. X (the first row's count) is
  // hypergeometric on [max(0, k - n2), min(k, n1)].
  const double n = static_cast<double>(n1) + static_cast<double>(n2);
  const uint64_t k = a + b;
  if (n1 == 0 || n2 == 0 || k == 0 || k == n1 + n2) return 1.0;
  const uint64_t low = k > n2 ? k - n2 : 0;
  const uint64_t high = std::min<uint64_t>(k, n1);
  const double log_total = LogChoose(n, static_cast<double>(k));
  auto log_p = [&](uint64_t x) {
    return LogChoose(static_cast<double>(n1), static_cast<double>(x)) +
           LogChoose(static_cast<double>(n2), static_cast<double>(k - x)) - log_total;
  };
  const double observed = log_p(a);
  // Tables as likely as the observed one (to a relative 1e-7, as R does) count as extreme.
  const double limit = observed + std::log1p(1e-7);
  double p = 0;
  // The distribution is unimodal: walk out from each end while tables are no more likely than
  // the observed one, so the cost is the size of the tails, not of the support.
  uint64_t x = low;
  for (; x <= high; ++x) {
    const double lp = log_p(x);
    if (lp > limit) break;
    p += std::exp(lp);
  }
  for (uint64_t y = high; y > x; --y) {
    const double lp = log_p(y);
    if (lp > limit) break;
    p += std::exp(lp);
  }
  return std::min(1.0, p);
}

double TwoProportionZ(uint64_t a, uint64_t n1, uint64_t b, uint64_t n2) {
  if (n1 == 0 || n2 == 0) return 0;
  const double p1 = static_cast<double>(a) / static_cast<double>(n1);
  const double p2 = static_cast<double>(b) / static_cast<double>(n2);
  const double pooled = static_cast<double>(a + b) / (static_cast<double>(n1) + static_cast<double>(n2));
  const double variance = pooled * (1 - pooled) * (1.0 / static_cast<double>(n1) + 1.0 / static_cast<double>(n2));
  if (variance <= 0) return 0;
  return (p2 - p1) / std::sqrt(variance);
}

Interval WilsonInterval(double x, double n, double z) {
  if (n <= 0) return {0, 1};
  const double p = x / n;
  const double z2 = z * z;
  const double centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const double half = z / (1 + z2 / n) * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n));
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

Interval NewcombeDifference(double a, double n1, double b, double n2, double z) {
  const double p1 = n1 > 0 ? a / n1 : 0;
  const double p2 = n2 > 0 ? b / n2 : 0;
  const Interval w1 = WilsonInterval(a, n1, z);
  const Interval w2 = WilsonInterval(b, n2, z);
  const double d = p2 - p1;
  return {d - std::sqrt((p2 - w2.low) * (p2 - w2.low) + (w1.high - p1) * (w1.high - p1)),
          d + std::sqrt((w2.high - p2) * (w2.high - p2) + (p1 - w1.low) * (p1 - w1.low))};
}

double MannWhitneySmallestP(size_t n, size_t m) {
  if (n == 0 || m == 0) return 1.0;
  return std::min(1.0, 2.0 * std::exp(-LogChoose(static_cast<double>(n + m), static_cast<double>(n))));
}

RankTest MannWhitneyU(std::span<const double> x, std::span<const double> y) {
  RankTest result;
  const size_t n = x.size();
  const size_t m = y.size();
  if (n == 0 || m == 0) return result;
  // Midranks of the pooled values.
  std::vector<std::pair<double, int>> pooled;
  pooled.reserve(n + m);
  for (double v : x) pooled.emplace_back(v, 0);
  for (double v : y) pooled.emplace_back(v, 1);
  std::sort(pooled.begin(), pooled.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
  double rank_sum_x = 0;
  double tie_term = 0;  // sum of t^3 - t over groups of ties
  for (size_t i = 0; i < pooled.size();) {
    size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double midrank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (size_t k = i; k < j; ++k) {
      if (pooled[k].second == 0) rank_sum_x += midrank;
    }
    i = j;
  }
  const double dn = static_cast<double>(n);
  const double dm = static_cast<double>(m);
  result.u = rank_sum_x - dn * (dn + 1) / 2;
  if (tie_term == 0 && n <= 20 && m <= 20) {
    // Exact: count the ways of choosing n ranks out of n + m with each U (a DP over U,
    // the standard recurrence f(n, m, u) = f(n - 1, m, u - m) + f(n, m - 1, u)).
    const size_t max_u = n * m;
    // ways[i][j][u] laid out for the current i: keep one table per j.
    std::vector<std::vector<double>> previous(m + 1, std::vector<double>(max_u + 1, 0.0));
    for (size_t j = 0; j <= m; ++j) previous[j][0] = 1;  // i = 0: U is 0 one way
    for (size_t i = 1; i <= n; ++i) {
      std::vector<std::vector<double>> current(m + 1, std::vector<double>(max_u + 1, 0.0));
      current[0][0] = 1;  // j = 0: U is 0
      for (size_t j = 1; j <= m; ++j) {
        for (size_t u = 0; u <= i * j; ++u) {
          double ways = current[j - 1][u];  // the largest value is from y: adds nothing to U
          if (u >= j) ways += previous[j][u - j];  // it is from x: it beats all j of y
          current[j][u] = ways;
        }
      }
      previous = std::move(current);
    }
    const std::vector<double>& ways = previous[m];
    const double total = std::exp(LogChoose(dn + dm, dn));
    const double low = std::min(result.u, dn * dm - result.u);
    double tail = 0;
    for (size_t u = 0; u <= max_u && static_cast<double>(u) <= low + 1e-9; ++u) tail += ways[u];
    result.p = std::min(1.0, 2.0 * tail / total);
    result.exact = true;
    return result;
  }
  const double nm = dn + dm;
  const double variance = dn * dm / 12.0 * ((nm + 1) - tie_term / (nm * (nm - 1)));
  if (variance <= 0) return result;  // every value tied: no evidence either way
  const double centred = std::fabs(result.u - dn * dm / 2) - 0.5;
  result.p = NormalTwoSidedP(std::max(0.0, centred) / std::sqrt(variance));
  return result;
}

Interval WelchDifference(std::span<const double> x, std::span<const double> y, double alpha) {
  auto moments = [](std::span<const double> v, double* mean, double* variance) {
    *mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    double sum = 0;
    for (double value : v) sum += (value - *mean) * (value - *mean);
    *variance = v.size() > 1 ? sum / static_cast<double>(v.size() - 1) : 0;
  };
  double mx, vx, my, vy;
  moments(x, &mx, &vx);
  moments(y, &my, &vy);
  const double sx = vx / static_cast<double>(x.size());
  const double sy = vy / static_cast<double>(y.size());
  const double se = std::sqrt(sx + sy);
  const double d = my - mx;
  if (se == 0) return {d, d};
  const double df = (sx + sy) * (sx + sy) /
                    (sx * sx / static_cast<double>(x.size() - 1) + sy * sy / static_cast<double>(y.size() - 1));
  const double t = TwoSidedCritical(alpha, df);
  return {d - t * se, d + t * se};
}

std::vector<double> HolmAdjust(std::span<const double> p, size_t family) {
  const size_t m = p.size();
  const size_t multiplier = std::max(family, m);
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t l, size_t r) { return p[l] < p[r]; });
  std::vector<double> adjusted(m);
  double running = 0;
  for (size_t i = 0; i < m; ++i) {
    running = std::max(running, std::min(1.0, static_cast<double>(multiplier - i) * p[order[i]]));
    adjusted[order[i]] = running;
  }
  return adjusted;
}

std::vector<double> BenjaminiHochbergAdjust(std::span<const double> p, size_t family) {
  const size_t m = p.size();
  const double multiplier = static_cast<double>(std::max(family, m));
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t l, size_t r) { return p[l] < p[r]; });
  std::vector<double> adjusted(m);
  double running = 1.0;
  for (size_t i = m; i-- > 0;) {
    running = std::min(running, std::min(1.0, multiplier / static_cast<double>(i + 1) * p[order[i]]));
    adjusted[order[i]] = running;
  }
  return adjusted;
}

size_t TaroneFamily(std::span<const double> smallest_p, double alpha) {
  std::vector<double> sorted(smallest_p.begin(), smallest_p.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t m = 1; m <= sorted.size(); ++m) {
    // Tests that can reach alpha / m: the first `reachable` of the sorted ones.
    const double level = alpha / static_cast<double>(m);
    const size_t reachable = static_cast<size_t>(std::upper_bound(sorted.begin(), sorted.end(), level) - sorted.begin());
    if (reachable <= m) return m;
  }
  return sorted.size();
}

}  // namespace hvprof::stats
