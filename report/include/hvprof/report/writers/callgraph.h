// The call-graph view (views/callgraph.h) printed: as opreport -c prints it (text), one row
// per caller, node and callee (CSV), or as nodes with their arcs (JSON).
//
// Text, per node: its callers indented, the node itself (with "[self]"), its callees indented,
// then a rule. With --children the node's line shows its inclusive samples too.
#pragma once

#include <string>

#include "hvprof/report/model.h"
#include "hvprof/report/views/callgraph.h"
#include "hvprof/report/views/table.h"

namespace hvprof::report {

std::string FormatCallgraphText(const Profile& profile, const Callgraph& graph, const CallgraphOptions& options,
                                const ReportOptions& report);
std::string FormatCallgraphCsv(const Profile& profile, const Callgraph& graph, const CallgraphOptions& options,
                               const ReportOptions& report);
std::string FormatCallgraphJson(const Profile& profile, const Callgraph& graph, const CallgraphOptions& options,
                                const ReportOptions& report);

}  // namespace hvprof::report
