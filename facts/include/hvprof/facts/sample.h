// What every sample says, defined once: the mode it was taken in, the domain ids that name no
// guest, and the pid (or tid) that says "not known".
//
// The engine defines these for the wire in its ABI headers (hvpmu/abi/ring.h, hvpmu/abi/ops.h),
// which cannot include user space; this header gives user space the same definitions under
// short names, and the session format stores the same values (docs/session-format.md). Code
// outside the engine, tests and this header writes no 0/1/2 for a mode, no 0x7FFF for the idle
// domain and no 0xFFFFFFFF for an unknown pid: scripts/check-facts.sh checks it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"

namespace hvprof {

// The privilege level a sample was taken at. Stored as one byte in rings, samples.hvs and the
// aggregate; sample_mode:: reads and writes that byte.
using Mode = hvpmu::ring::Mode;

namespace sample_mode {

inline constexpr uint8_t kUser = static_cast<uint8_t>(Mode::kUser);
inline constexpr uint8_t kKernel = static_cast<uint8_t>(Mode::kKernel);
inline constexpr uint8_t kHypervisor = static_cast<uint8_t>(Mode::kHypervisor);
// Modes there are: arrays indexed by a mode byte have this many entries.
inline constexpr uint8_t kCount = static_cast<uint8_t>(hvpmu::ring::kModeCount);
static_assert(kUser < kCount && kKernel < kCount && kHypervisor < kCount);

constexpr uint8_t Byte(Mode mode) { return static_cast<uint8_t>(mode); }
// True for a byte that names a mode (a corrupt file's may not).
constexpr bool IsValid(uint8_t byte) { return byte < kCount; }
// The mode a valid byte names; a byte out of range is read as the hypervisor's, the mode with
// the least claim to a process, for callers that have already counted it as corrupt.
constexpr Mode Of(uint8_t byte) { return IsValid(byte) ? static_cast<Mode>(byte) : Mode::kHypervisor; }

// "user", "kernel", "hypervisor": the names reports, JSON and the CLI use.
constexpr std::string_view Name(Mode mode) {
  switch (mode) {
    case Mode::kUser: return "user";
    case Mode::kKernel: return "kernel";
    case Mode::kHypervisor: return "hypervisor";
  }
  return "hypervisor";
}
constexpr std::string_view Name(uint8_t byte) { return Name(Of(byte)); }
// The mode a name gives ("xen" is the hypervisor's other name), or nothing.
constexpr std::optional<Mode> FromName(std::string_view name) {
  if (name == "user") return Mode::kUser;
  if (name == "kernel") return Mode::kKernel;
  if (name == "hypervisor" || name == "xen") return Mode::kHypervisor;
  return std::nullopt;
}

}  // namespace sample_mode

// The domain whose vCPUs are the physical CPUs' idle loops (Xen's DOMID_IDLE); its "vCPU" is the
// physical CPU.
inline constexpr uint16_t kIdleDomain = hvpmu::kDomainIdle;
// No domain (Xen's DOMID_INVALID).
inline constexpr uint16_t kInvalidDomain = hvpmu::kDomainInvalid;
// The pid and the tid of a sample or a record whose task is not known.
inline constexpr uint32_t kNoPid = hvpmu::ring::kNoPid;
inline constexpr uint32_t kNoTid = hvpmu::ring::kNoPid;
// The physical CPU of a record that does not say it.
inline constexpr uint16_t kUnknownPcpu = hvpmu::ring::kUnknownPcpu;

}  // namespace hvprof
