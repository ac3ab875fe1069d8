// The diff of two sides of sessions (hvprof-report --diff BASE NEW): per image, symbol or call
// stack, each side's share of the samples, the change, its interval and whether it is
// significant, by the tests of stats/compare.h. docs/compare.md says how to read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/model.h"
#include "hvprof/report/views/stacks.h"
#include "hvprof/report/views/table.h"
#include "hvprof/stats/compare.h"

namespace hvprof::report {

// One session of a side, with the filters resolved against its own metadata (domain and
// event ids can differ between sessions).
struct DiffRun {
  const Profile* profile = nullptr;
  std::string label;       // as the user named it
  ReportOptions table;     // the table views' filters (kImage or kSymbol, --by-domain)
  StackFilter stacks;      // the stack views' filters
};

struct DiffOptions {
  bool stacks = false;      // per call stack (folded, html, -c) instead of per table row
  StackRoot root = StackRoot::kDomain;
  stats::CompareOptions compare;
  // Slices each session is cut into to measure dispersion (or, with Method::kSlices, to take
  // as pseudo-repeats); 0 for none (then the plain two-proportion test decides).
  uint32_t slices = 10;
  double threshold = 0;     // percent: rows under it on both sides are neither shown nor tested
};

enum class Presence { kBoth, kNew, kGone };

struct DiffRow {
  std::string domain;               // --by-domain
  std::string image;                // table views
  std::string symbol;               // the symbol view
  std::vector<std::string> frames;  // stacks: root first
  std::vector<uint8_t> frame_modes; // stacks: per frame, as NamedStacks::modes
  Presence presence = Presence::kBoth;
  stats::KeyComparison c;
};

struct Diff {
  View view = View::kImage;
  bool by_domain = false;
  bool stacks = false;
  std::string event;                 // what was compared
  std::vector<std::string> base_labels, new_labels;
  stats::Comparison summary;         // its keys moved into rows
  stats::CompareOptions compare;
  uint32_t slices = 0;
  std::vector<DiffRow> rows;         // by the size of the change, largest first
  std::vector<std::string> notes;    // how to read it: which test, caveats
  std::vector<std::string> warnings; // the sessions' own (images missing, damage...), prefixed
};

// The time slices BuildDiff counts each session in, with `base_runs` and `new_runs` sessions a
// side: the profiles must be loaded with that many (LoadOptions::time_slices). 0: none.
uint32_t DiffTimeSlices(const DiffOptions& options, size_t base_runs, size_t new_runs);

Result<Diff> BuildDiff(const std::vector<DiffRun>& base, const std::vector<DiffRun>& next, const DiffOptions& options);

// Rows that grew by at least `points` percentage points and are significant: what
// --fail-on-regression fails on.
std::vector<const DiffRow*> Regressions(const Diff& diff, double points);

}  // namespace hvprof::report
