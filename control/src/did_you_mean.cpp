#include "did_you_mean.h"

#include <algorithm>

#include <fmt/format.h>

namespace hvprof::control {

namespace po = boost::program_options;

namespace {

// Edits from `a` to `b`, swaps of neighbours counted once (optimal string alignment).
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t change = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + change});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string_view WithoutDashes(std::string_view word) {
  while (!word.empty() && word.front() == '-') word.remove_prefix(1);
  return word;
}

}  // namespace

std::string Nearest(std::string_view given, const std::vector<std::string>& candidates) {
  const std::string_view bare = WithoutDashes(given);
  if (bare.empty()) return {};
  const size_t allowed = std::max<size_t>(1, bare.size() / 3);
  std::string best;
  size_t best_distance = allowed + 1;
  for (const std::string& candidate : candidates) {
    const std::string_view name = WithoutDashes(candidate);
    size_t distance = EditDistance(bare, name);
    // `--callg` for `--callgraph`: a start long enough to mean one option.
    if (bare.size() >= 3 && name.starts_with(bare)) distance = std::min<size_t>(distance, 1);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::vector<std::string> LongOptionNames(const po::options_description& options) {
  std::vector<std::string> names;
  for (const auto& option : options.options()) {
    if (!option->long_name().empty()) names.push_back("--" + option->long_name());
  }
  return names;
}

std::string DescribeCommandLineError(const po::error& error, const po::options_description& options,
                                     std::string_view try_line) {
  std::string message = error.what();
  if (const auto* unknown = dynamic_cast<const po::unknown_option*>(&error)) {
    std::string given = unknown->get_option_name();
    given = given.substr(0, given.find('='));
    if (given.starts_with("--")) {
      if (std::string near = Nearest(given, LongOptionNames(options)); !near.empty()) {
        message += fmt::format(" (did you mean {}?)", near);
      }
    }
  }
  return message + "\n" + std::string(try_line);
}

}  // namespace hvprof::control
