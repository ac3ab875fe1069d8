// Printing a report table: aligned text (opreport's layout), CSV, and versioned JSON
// (docs/report-json.md). Nothing here aggregates; it only lays out what BuildTable made.
#pragma once

#include <string>

#include "hvprof/report/profile.h"
#include "hvprof/report/report.h"

namespace hvprof::report {

inline constexpr int kJsonSchemaVersion = 1;

std::string FormatText(const Profile& profile, const Table& table, const ReportOptions& options);
std::string FormatCsv(const Profile& profile, const Table& table, const ReportOptions& options);
std::string FormatJson(const Profile& profile, const Table& table, const ReportOptions& options);

// The header alone (platform, events, samples per domain and mode, losses with advice,
// buffers and rates, images that did not match), as text lines.
std::string FormatHeader(const Profile& profile, const Table& table, const ReportOptions& options);

}  // namespace hvprof::report
