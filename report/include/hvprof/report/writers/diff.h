// A diff (views/diff.h) printed: text (significant rows marked, largest change first), CSV,
// JSON (docs/report-json.md: one object per row with a boolean `significant`), folded with two
// counts per stack (the input of differential flame graphs: "stack BASE NEW"), and the HTML
// flame graph of the new side coloured by the change (red grew, blue shrank).
#pragma once

#include <string>

#include "hvprof/report/views/diff.h"

namespace hvprof::report {

std::string FormatDiffText(const Diff& diff, bool no_header);
// What a row is, unescaped: "domain  image  symbol", or its stack "root;...;function".
std::string DiffRowName(const DiffRow& row);
std::string FormatDiffCsv(const Diff& diff);
// `verdict_points`: with --fail-on-regression, the threshold the verdict was taken at (a
// negative value: no verdict asked).
std::string FormatDiffJson(const Diff& diff, double verdict_points = -1);
std::string FormatDiffFolded(const Diff& diff);
std::string FormatDiffFlameGraph(const Diff& diff);

}  // namespace hvprof::report
