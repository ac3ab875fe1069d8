// `hvprof-report --list`: the sessions of a session root (source.h's ListSessions), as an
// aligned table or as JSON (docs/report-json.md, hvprof-sessions).
#pragma once

#include <string>
#include <vector>

#include "hvprof/report/source.h"

namespace hvprof::report {

std::string FormatSessionList(const std::string& session_root, const std::vector<SessionSummary>& sessions,
                              bool color);
std::string FormatSessionListJson(const std::string& session_root, const std::vector<SessionSummary>& sessions);

}  // namespace hvprof::report
