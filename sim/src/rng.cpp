#include "hvprof/sim/rng.h"

namespace hvprof::sim {

void AliasTable::Build(const std::vector<double>& weights) {
  const size_t n = weights.size();
  probability_.assign(n, 0.0);
  alias_.assign(n, 0);
  if (n == 0) return;
  double total = 0.0;
  for (double weight : weights) total += weight;
  std::vector<double> scaled(n);
  std::vector<uint32_t> small;
  std::vector<uint32_t> large;
  for (size_t i = 0; i < n; ++i) {
    scaled[i] = weights[i] * static_cast<double>(n) / total;
    (scaled[i] < 1.0 ? small : large).push_back(static_cast<uint32_t>(i));
  }
  while (!small.empty() && !large.empty()) {
    const uint32_t less = small.back();
    small.pop_back();
    const uint32_t more = large.back();
    probability_[less] = scaled[less];
    alias_[less] = more;
    scaled[more] = (scaled[more] + scaled[less]) - 1.0;
    if (scaled[more] < 1.0) {
      large.pop_back();
      small.push_back(more);
    }
  }
  for (uint32_t i : large) probability_[i] = 1.0;
  for (uint32_t i : small) probability_[i] = 1.0;  // rounding leftovers
}

}  // namespace hvprof::sim
