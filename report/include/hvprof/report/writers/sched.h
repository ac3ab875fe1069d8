// The scheduling view (views/sched.h) printed: aligned text tables as opreport lays them out
// (pCPUs, domains, vCPUs or tasks, wake-up latency, longest waits, migrations, preemptors),
// CSV (one table: a row per pCPU, domain and vCPU or task, with a header row), and versioned
// JSON ("schema": "hvprof-sched", docs/report-json.md). Names are escaped for terminals in text
// and CSV (Safe), left as they are in JSON.
#pragma once

#include <string>

#include "hvprof/report/views/sched.h"

namespace hvprof::report {

inline constexpr int kSchedJsonVersion = 1;

std::string FormatSchedText(const SchedReport& report, bool no_header = false);
std::string FormatSchedCsv(const SchedReport& report);
std::string FormatSchedJson(const SchedReport& report);

// --sched -l: each domain's CPU time beside its share of the samples (SharesBesideSamples).
std::string FormatSchedSharesText(const SchedShares& shares);
std::string FormatSchedSharesCsv(const SchedShares& shares);
std::string FormatSchedSharesJson(const SchedShares& shares);

}  // namespace hvprof::report
