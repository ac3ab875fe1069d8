// Stopping a daemon cleanly on SIGTERM or SIGINT.
#pragma once

namespace hvprof {

// Runs `on_stop` on SIGTERM and SIGINT; it runs in signal context, so it may only do
// async-signal-safe work (store a flag, write to an eventfd). Also ignores SIGPIPE, so that a
// peer that goes away shows up as EPIPE on the write instead of killing the process.
void InstallStopHandler(void (*on_stop)(int));

}  // namespace hvprof
