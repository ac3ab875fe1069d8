// The flat tables as versioned JSON (docs/report-json.md).
#pragma once

#include <string>

#include "hvprof/report/model.h"
#include "hvprof/report/views/table.h"

namespace hvprof::report {

inline constexpr int kJsonSchemaVersion = 2;

std::string FormatJson(const Profile& profile, const Table& table, const ReportOptions& options);

}  // namespace hvprof::report
