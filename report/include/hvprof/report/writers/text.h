// The flat tables as aligned text, in opreport's layout, with the session's header. Writers
// only lay out what a view computed; they aggregate nothing.
#pragma once

#include <string>

#include "hvprof/report/model.h"
#include "hvprof/report/views/table.h"

namespace hvprof::report {

std::string FormatText(const Profile& profile, const Table& table, const ReportOptions& options);

// The header alone (platform, events, samples per domain and mode, losses with advice,
// buffers and rates, images that did not match), as text lines.
std::string FormatHeader(const Profile& profile, const Table& table, const ReportOptions& options);

}  // namespace hvprof::report
