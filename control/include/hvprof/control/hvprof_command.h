// hvprof's work once its command line is read (hvprof_request.h): the action, the run or the
// archive carried out, its outcome printed.
#pragma once

#include <ostream>

#include "hvprof/control/hvprof_request.h"

namespace hvprof::control {

// Carries `request` out and returns hvprof's exit status (0 done, 1 failed with the message on
// `err`, 2 bad usage, 3 done with samples lost; `hvprof run`: its command's, or the gate's).
// What the command answers goes to `out`, warnings and errors to `err`.
int RunHvprof(const HvprofRequest& request, std::ostream& out, std::ostream& err);

}  // namespace hvprof::control
