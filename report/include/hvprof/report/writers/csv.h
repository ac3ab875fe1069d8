// The flat tables as CSV: one header line, then one line per row, fields quoted as RFC 4180 says.
#pragma once

#include <string>

#include "hvprof/report/model.h"
#include "hvprof/report/views/table.h"

namespace hvprof::report {

std::string FormatCsv(const Profile& profile, const Table& table, const ReportOptions& options);

}  // namespace hvprof::report
