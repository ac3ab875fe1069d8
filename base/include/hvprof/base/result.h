// Expected-style results for user-space hvprof code.
//
// Every fallible function returns Result<T>. Errors carry a kind (for exit codes and tests)
// and a message written for the user: lower-case, "what: why", no trailing period, and where
// it helps, what to do about it. Exceptions are used only by third-party libraries and are
// caught in main().
#pragma once

#include <boost/outcome/result.hpp>
#include <boost/outcome/try.hpp>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace hvprof {

enum class ErrorKind {
  kInvalidArgument,  // the caller (often the user) asked for something malformed
  kNotFound,         // a file, domain, event or session does not exist
  kPermissionDenied, // not allowed: privileges, a guest asking for a privileged op
  kCorrupt,          // data on disk or in shared memory fails validation
  kIo,               // an OS call failed
  kNoSpace,          // the disk or a buffer is full
  kUnsupported,      // the platform or CPU cannot do it
  kBusy,             // a resource is held by someone else
  kBadState,         // the operation is valid but not now
  kProtocol,         // a peer sent something that breaks the protocol
  kEmpty,            // nothing to work on: no samples where some are needed (a save, a side of a diff)
  kInternal,         // a bug in hvprof
};

std::string_view ErrorKindName(ErrorKind kind);

class Error {
 public:
  Error() = default;  // required by the result type; holds kInternal with no message
  Error(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }

  // Returns a copy with "context: " in front of the message.
  Error WithContext(std::string_view context) const;

 private:
  ErrorKind kind_ = ErrorKind::kInternal;
  std::string message_;
};

template <typename... Args>
Error MakeError(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  return Error(kind, fmt::format(format, std::forward<Args>(args)...));
}

// An error from a failed system call, with strerror(errnum) appended.
Error ErrnoError(ErrorKind kind, int errnum, std::string_view what);
// As above, choosing the kind from errnum (ENOENT -> kNotFound, EACCES -> kPermissionDenied...).
Error ErrnoError(int errnum, std::string_view what);

template <typename T>
using Result = BOOST_OUTCOME_V2_NAMESPACE::result<T, Error, BOOST_OUTCOME_V2_NAMESPACE::policy::terminate>;

inline Result<void> Ok() { return BOOST_OUTCOME_V2_NAMESPACE::success(); }

}  // namespace hvprof

// HVPROF_TRY(var, expr): evaluates expr (a Result); on error returns it, else binds var.
#define HVPROF_TRY(var, ...) BOOST_OUTCOME_TRY(var, __VA_ARGS__)
// HVPROF_TRYV(expr): evaluates expr (a Result<void> or any Result); on error returns it.
// A single statement, so it may stand alone after an `if` or a `for`.
#define HVPROF_TRYV(...)                \
  do {                                  \
    BOOST_OUTCOME_TRYV(__VA_ARGS__);    \
  } while (false)
