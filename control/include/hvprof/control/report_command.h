// hvprof-report's work once its command line is read (report_request.h): the session chosen
// and loaded, the view built, written in the format asked, pushed when asked. The report goes
// out once, through the sink's emit; notes, warnings and errors go to its err as they happen.
#pragma once

#include <functional>
#include <ostream>
#include <string_view>

#include "hvprof/base/result.h"
#include "hvprof/control/report_request.h"

namespace hvprof::control {

struct ReportSink {
  // The report itself: to -o's file or to standard output. Called at most once.
  std::function<Result<void>(std::string_view)> emit;
  // Standard error: what is not the report ("hvprof-report: ..." lines, progress).
  std::ostream* err = nullptr;
};

// Makes the report `request` asks for (not kHelp or kVersion, which the main answers) and
// returns hvprof-report's exit status: 0, 1 (no report: the error said on err), 2 (a filter the
// session cannot honour), or one of the kReport* statuses.
int RunReport(const ReportRequest& request, const ReportSink& sink);

}  // namespace hvprof::control
