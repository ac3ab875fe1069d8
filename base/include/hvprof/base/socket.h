// Unix-domain listening sockets that appear only once they accept connections.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof {

struct UnixListenOptions {
  int mode = 0600;                 // the socket file's permissions (who may connect)
  std::optional<uid_t> owner;      // chown the socket to this uid (root only)
  int backlog = 16;
  bool nonblocking = true;         // SOCK_NONBLOCK on the listener
};

// Listens on `path`, close-on-exec. The socket is bound, given its mode and owner, and put in
// listening state under a random temporary name in the same directory, then renamed onto `path`: a
// client that sees `path` can connect at once, and never meets a socket that refuses or that
// has the wrong permissions. (When the temporary name would not fit sun_path, the socket is
// bound in place.) A stale socket at `path` is replaced by the rename (callers hold the
// lock that says its server is gone).
Result<ScopedFd> ListenUnix(const std::string& path, const UnixListenOptions& options = {});

// Connects to the Unix socket at `path` (blocking, close-on-exec) and, before anything is said,
// checks who serves it (SO_PEERCRED): only a server run by root or by this process's own user
// is spoken to. Another user's is refused (kPermissionDenied) with `advice` (what to do): they
// could have made the directory first and put their own server where ours was expected.
// kNotFound when nothing listens there.
Result<ScopedFd> ConnectUnix(const std::string& path, std::string_view advice);

}  // namespace hvprof
