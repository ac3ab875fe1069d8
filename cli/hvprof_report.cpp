// hvprof-report: opreport-like reports over a session directory. Thin main: the command line is
// read by control::ParseReportRequest and the report made by control::RunReport.

#include <unistd.h>

#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "hvprof/base/files.h"
#include "hvprof/base/version.h"
#include "hvprof/control/report_command.h"
#include "hvprof/control/report_request.h"

using namespace hvprof;

int main(int argc, char** argv) {
  try {
    auto request = control::ParseReportRequest(std::vector<std::string>(argv + 1, argv + argc),
                                               control::ReportTerminal{STDOUT_FILENO});
    if (!request) {
      std::cerr << "hvprof-report: " << request.error().message() << "\n";
      return 2;
    }
    if (request.value().kind == control::ReportKind::kHelp) {
      std::cout << control::ReportUsage() << "\n";
      return 0;
    }
    if (request.value().kind == control::ReportKind::kVersion) {
      std::cout << "hvprof-report (hvprof) " << kVersion << "\n";
      return 0;
    }
    const std::string& output = request.value().output;
    control::ReportSink sink;
    sink.err = &std::cerr;
    sink.emit = [&output](std::string_view text) -> Result<void> {
      if (!output.empty()) return WriteOutput(output, text);
      std::cout << text << std::flush;
      return Ok();
    };
    return control::RunReport(request.value(), sink);
  } catch (const std::exception& error) {
    std::cerr << "hvprof-report: internal error: " << error.what() << "\n";
    return 1;
  }
}
