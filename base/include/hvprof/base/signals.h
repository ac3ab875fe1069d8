// Stopping a daemon cleanly on SIGTERM or SIGINT, and telling it to reload on SIGHUP.
#pragma once

namespace hvprof {

// Runs `on_stop` on SIGTERM and SIGINT; it runs in signal context, so it may only do
// async-signal-safe work (store a flag, write to an eventfd). Also ignores SIGPIPE, so that a
// peer that goes away shows up as EPIPE on the write instead of killing the process.
void InstallStopHandler(void (*on_stop)(int));

// Runs `on_reload` on SIGHUP (a daemon's "read your settings again"), in signal context as above.
void InstallReloadHandler(void (*on_reload)(int));

}  // namespace hvprof
