#include "hvprof/control/archive_command.h"

#include "hvprof/report/source.h"

namespace hvprof::control {

Result<Outcome> Archive(const ArchiveRequest& request) {
  if (request.output.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "name the archive to write with -o FILE.tar");
  }
  if (request.session.starts_with("archive:")) {
    return MakeError(ErrorKind::kInvalidArgument, "{} is an archive already; copy the file instead", request.session);
  }
  HVPROF_TRY(source, report::OpenSessionSource(request.session, request.session_root));
  HVPROF_TRY(summary, archive::WriteArchive(source.directory, request.output, request.options));
  Outcome outcome;
  outcome.message = fmt::format("archived {} in {}: {} files, {} bytes (report it with `hvprof-report archive:{}`)",
                                source.directory, request.output, summary.files, summary.bytes, request.output);
  outcome.warnings = summary.notes;
  return outcome;
}

}  // namespace hvprof::control
