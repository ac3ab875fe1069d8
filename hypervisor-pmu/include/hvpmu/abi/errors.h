// Every refusal of the engine has a name, a stable number, the errno Xen 4.17 would give for
// the same refusal (used when speaking the legacy ABI) and a one-line explanation.
// docs/errors.md lists them with advice; a test keeps that page and this table in step.
#pragma once

#include <cstdint>

namespace hvpmu {

// X(name, number, errno, message)
#define HVPMU_ERROR_TABLE(X)                                                                   \
  X(Ok, 0, 0, "success")                                                                       \
  X(BadOp, 1, 22, "unknown operation number")                                                  \
  X(BadArgSize, 2, 22, "argument size does not match the operation")                           \
  X(ReservedNotZero, 3, 22, "a reserved field of the argument is not zero")                    \
  X(BadAbiVersion, 4, 71, "the caller speaks an ABI version the engine does not")              \
  X(NotPrimary, 5, 1, "only the primary profiler may do this")                                 \
  X(BadState, 6, 1, "not allowed in the profiler's current state")                             \
  X(Profiling, 7, 16, "not allowed while profiling; stop first")                               \
  X(NoSuchDomain, 8, 22, "no such domain")                                                     \
  X(TooManyDomains, 9, 7, "the domain list is full")                                           \
  X(AlreadyListed, 10, 17, "the domain is already on that list")                               \
  X(ActiveAndPassive, 11, 17, "a domain cannot be both active and passive")                    \
  X(NotListed, 12, 1, "the domain is not on the active list")                                  \
  X(NoBuffer, 13, 1, "get_buffer has not been called")                                         \
  X(AlreadyActivated, 14, 114, "enable_virq was already called by this domain")                \
  X(NotActivated, 15, 1, "some active domains have not called enable_virq")                    \
  X(NoActiveDomains, 16, 1, "the active list is empty")                                        \
  X(Busy, 17, 16, "the buffer is still mapped or the PMU is owned by someone else")            \
  X(NoPmu, 18, 19, "no supported PMU on this CPU")                                             \
  X(NotSupported, 19, 95, "not supported by this engine")                                      \
  X(BadCounter, 20, 7, "counter index out of range")                                           \
  X(UnknownEvent, 21, 22, "event code not known for this CPU type")                            \
  X(EventNotOnCounter, 22, 22, "this counter cannot count that event")                         \
  X(BadUnitMask, 23, 22, "unit mask not valid for the event")                                  \
  X(CountTooSmall, 24, 22, "count is below the event's minimum")                               \
  X(CountTooLarge, 25, 34, "count does not fit the counter")                                   \
  X(NoCounters, 26, 22, "no counter is enabled")                                               \
  X(NoMemory, 27, 12, "out of memory for buffers, or the engine's vCPU rings are all taken")        \
  X(BadBufferSize, 28, 22, "requested buffer size is out of range")                            \
  X(BadBacktraceDepth, 29, 22, "backtrace depth above the maximum")                            \
  X(HardwareFault, 30, 5, "a PMU register access failed")                                      \
  X(NotActive, 31, 1, "the domain has no profiling state to release")

enum class ErrorCode : int32_t {
#define HVPMU_ERROR_ENUM(name, number, errnum, message) k##name = number,
  HVPMU_ERROR_TABLE(HVPMU_ERROR_ENUM)
#undef HVPMU_ERROR_ENUM
};

inline constexpr const char* ErrorName(ErrorCode code) {
  switch (code) {
#define HVPMU_ERROR_NAME(name, number, errnum, message) \
  case ErrorCode::k##name: return #name;
    HVPMU_ERROR_TABLE(HVPMU_ERROR_NAME)
#undef HVPMU_ERROR_NAME
  }
  return "Unknown";
}

inline constexpr const char* ErrorMessage(ErrorCode code) {
  switch (code) {
#define HVPMU_ERROR_MESSAGE(name, number, errnum, message) \
  case ErrorCode::k##name: return message;
    HVPMU_ERROR_TABLE(HVPMU_ERROR_MESSAGE)
#undef HVPMU_ERROR_MESSAGE
  }
  return "unknown error";
}

// The errno Xen 4.17 returns (negated by the hypercall) for the same condition.
inline constexpr int32_t ErrorErrno(ErrorCode code) {
  switch (code) {
#define HVPMU_ERROR_ERRNO(name, number, errnum, message) \
  case ErrorCode::k##name: return errnum;
    HVPMU_ERROR_TABLE(HVPMU_ERROR_ERRNO)
#undef HVPMU_ERROR_ERRNO
  }
  return 22;
}

}  // namespace hvpmu
