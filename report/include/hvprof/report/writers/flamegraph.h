// Stacks as one self-contained HTML page: an interactive flame graph (click to zoom, search
// with highlight, hover for counts, flame or icicle), coloured by domain and mode, under the
// session's header. The page is report/src/writers/flamegraph.html, compiled in; the stacks go
// into it as JSON. It loads nothing from anywhere (its Content-Security-Policy forbids it), so
// it opens offline and can be mailed around; every name is shown as text, never as markup.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hvprof/report/model.h"
#include "hvprof/report/views/stacks.h"

namespace hvprof::report {

// The page for `stacks`, named by NameStacks(profile, {root, filter}).
std::string FormatFlameGraph(const Profile& profile, const NamedStacks& stacks, const StackFilter& filter);

// A differential flame graph (writers/diff.h): the new side's stacks with each one's base
// count; the page colours each frame by the change of its share (red grew, blue shrank).
struct FlameGraphDiff {
  std::vector<uint64_t> base_counts;  // per stack of the NamedStacks
  uint64_t base_total = 0;
  uint64_t new_total = 0;
  std::string title;
  std::vector<std::pair<std::string, std::string>> facts;  // term, value
  std::vector<std::string> warnings;
};
std::string FormatDiffFlameGraphPage(const NamedStacks& stacks, const FlameGraphDiff& diff);

}  // namespace hvprof::report
