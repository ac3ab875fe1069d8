#include "hvprof/report/source.h"

#include "hvprof/store/session.h"

namespace hvprof::report {

Result<SessionSource> OpenSessionSource(const std::string& argument, const std::string& session_root) {
  store::SessionPaths paths{session_root};
  SessionSource source;
  source.argument = argument;
  source.directory = argument.empty() ? paths.current() : argument;
  if (!argument.empty() && argument.find('/') == std::string::npos && store::ValidateSessionName(argument)) {
    source.directory = paths.Saved(argument);
  }
  return source;
}

}  // namespace hvprof::report
