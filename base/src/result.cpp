#include "hvprof/base/result.h"

#include <cerrno>
#include <cstring>

namespace hvprof {

std::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kNotFound: return "not found";
    case ErrorKind::kPermissionDenied: return "permission denied";
    case ErrorKind::kCorrupt: return "corrupt data";
    case ErrorKind::kIo: return "i/o error";
    case ErrorKind::kNoSpace: return "no space";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kBusy: return "busy";
    case ErrorKind::kBadState: return "bad state";
    case ErrorKind::kProtocol: return "protocol error";
    case ErrorKind::kEmpty: return "no samples";
    case ErrorKind::kInternal: return "internal error";
  }
  return "unknown error";
}

Error Error::WithContext(std::string_view context) const {
  return Error(kind_, fmt::format("{}: {}", context, message_));
}

Error ErrnoError(ErrorKind kind, int errnum, std::string_view what) {
  return Error(kind, fmt::format("{}: {}", what, std::strerror(errnum)));
}

Error ErrnoError(int errnum, std::string_view what) {
  ErrorKind kind = ErrorKind::kIo;
  switch (errnum) {
    case ENOENT: kind = ErrorKind::kNotFound; break;
    case EACCES:
    case EPERM: kind = ErrorKind::kPermissionDenied; break;
    case ENOSPC:
    case EDQUOT: kind = ErrorKind::kNoSpace; break;
    case EBUSY:
    case EAGAIN: kind = ErrorKind::kBusy; break;
    case EINVAL: kind = ErrorKind::kInvalidArgument; break;
    case ENOSYS:
    case EOPNOTSUPP:
    case ENODEV: kind = ErrorKind::kUnsupported; break;
    default: break;
  }
  return ErrnoError(kind, errnum, what);
}

}  // namespace hvprof
