// Deterministic randomness for the simulator: xoshiro256** seeded through splitmix64, and a
// Vose alias table for O(1) weighted picks. Own implementations, not <random>'s
// distributions, so a seed gives the same run with any standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace hvprof::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed = 1) { Seed(seed); }

  void Seed(uint64_t seed) {
    for (uint64_t& word : state_) {
      seed += 0x9E3779B97F4A7C15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      word = z ^ (z >> 31);
    }
  }

  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 bits.
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift; the tiny bias is irrelevant here).
  uint64_t NextBelow(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * bound) >> 64);
  }

  // Exponentially distributed with the given mean, at least 1.
  uint64_t NextExponential(double mean) {
    const double u = 1.0 - NextDouble();  // (0, 1]
    const double value = -std::log(u) * mean;
    return value < 1.0 ? 1 : static_cast<uint64_t>(value);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

class AliasTable {
 public:
  AliasTable() = default;
  explicit AliasTable(const std::vector<double>& weights) { Build(weights); }

  void Build(const std::vector<double>& weights);
  bool empty() const { return probability_.empty(); }
  uint32_t size() const { return static_cast<uint32_t>(probability_.size()); }

  uint32_t Pick(Rng& rng) const {
    const auto column = static_cast<uint32_t>(rng.NextBelow(probability_.size()));
    return rng.NextDouble() < probability_[column] ? column : alias_[column];
  }

 private:
  std::vector<double> probability_;
  std::vector<uint32_t> alias_;
};

}  // namespace hvprof::sim
