// The scheduling view (views/scheduling.h) printed: aligned text tables as opreport lays them out
// (pCPUs, domains, vCPUs or tasks, wake-up latency, longest waits, migrations, preemptors),
// CSV (one table: a row per pCPU, domain and vCPU or task, after a header row), and versioned
// JSON ("schema": "hvprof-sched", docs/report-json.md). Names are escaped for terminals in text
// and CSV (Safe), left as they are in JSON.
#pragma once

#include <string>

#include "hvprof/report/views/scheduling.h"

namespace hvprof::report {

inline constexpr int kSchedJsonVersion = 1;

// With `shares` (--sched -l: SharesBesideSamples), each domain's CPU time beside its share of
// the samples too: a table after the others (text), columns of the domains' rows (CSV), a
// "samples" object (JSON).
std::string FormatSchedText(const SchedReport& report, bool no_header = false, const SchedShares* shares = nullptr);
std::string FormatSchedCsv(const SchedReport& report, const SchedShares* shares = nullptr);
std::string FormatSchedJson(const SchedReport& report, const SchedShares* shares = nullptr);

}  // namespace hvprof::report
