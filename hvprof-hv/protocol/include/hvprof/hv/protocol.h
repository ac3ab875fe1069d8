// The hvprof-hv protocol: how a domain's agent reaches the hosted hypervisor. One Unix stream
// socket per domain; the socket a connection arrives on is the caller's domain, as the
// hypervisor knows who made a hypercall. Every message is a 16-byte header and a payload of
// `length` bytes; replies echo the request's sequence number and set kReplyBit in the type.
// File descriptors (ring memfds, notification eventfds) travel with replies as SCM_RIGHTS.
// docs/hosted-protocol.md describes each message.
#pragma once

#include <cstdint>
#include <string>

#include "hvpmu/abi/ops.h"

namespace hvprof::hv {

using hvpmu::DomainId;

// Where hvprof-hv puts its sockets by default: /run/hvprof for root, else
// $XDG_RUNTIME_DIR/hvprof, else /tmp/hvprof-UID.
std::string DefaultRunDir();
// The socket of `domain` in `run_dir`.
std::string DomainSocketPath(const std::string& run_dir, DomainId domain);
// The lock the one agent of a domain socket holds while it drives that domain's profiler (its
// pid, then its session directory, one per line): two agents of one domain would each take the
// other's state for a crashed agent's.
std::string AgentLockPath(const std::string& socket_path);

inline constexpr uint32_t kProtocolMagic = 0x50485648;  // "HVHP" little-endian
// 2: ContextEventsReply has flags (kContextEventsMore).
inline constexpr uint16_t kProtocolVersion = 2;
inline constexpr uint32_t kMaxRequestPayload = 64 * 1024;
inline constexpr uint32_t kMaxPublishPayload = 16u << 20;  // a Publish request may be this big
inline constexpr uint32_t kMaxReplyPayload = 256u << 20;
inline constexpr uint32_t kMaxFdsPerMessage = 250;  // below the kernel's SCM_MAX_FD (253)
inline constexpr uint16_t kReplyBit = 0x8000;

enum class MessageType : uint16_t {
  kHello = 1,        // HelloRequest -> HelloReply
  kOp = 2,           // OpRequest + argument bytes -> OpReply + argument bytes
  kMapRegion = 3,    // MapRequest -> MapReply + 1 memfd
  kNotifyFds = 4,    // NotifyRequest -> NotifyReply + one eventfd per ring
  kContext = 5,      // empty or ContextRequest -> StatusReply + JSON: the images the domain runs
  kSimControl = 6,   // SimControlRequest -> SimControlReply (primary domain only)
  kGroundTruth = 7,  // GroundTruthRequest -> StatusReply + JSON (primary domain only, sim only)
  kDomains = 8,      // empty -> StatusReply + JSON: the domains the caller may know of
  kPublish = 9,      // the caller's profile (bytes) -> StatusReply (guests only)
  kFetchPublished = 10,  // FetchPublishedRequest -> StatusReply + PublishedEntry... (primary only)
  kPlatformInfo = 11,    // empty -> StatusReply + JSON: rates, limits, notes (primary only)
  kXenTrace = 12,        // XenTraceRequest -> XenTraceReply + memfd and eventfd once the buffers
                         // exist (primary only, sim only): Xen's trace buffers, for the fake Xen
  kContextEvents = 13,   // ContextEventsRequest -> ContextEventsReply + encoded context events
                         // (hvprof/context/context_event.h) of the domains the caller may know of
  kError = 0x7FFF,   // literal: a message type, the last; reply to a request that could not be understood: StatusReply + text
};

// Errors of the protocol layer itself; engine refusals travel as hvpmu::ErrorCode in OpReply.
enum class ProtocolError : int32_t {
  kOk = 0,
  kMalformed = 1,      // wrong size or contents for the message type
  kUnknownType = 2,
  kDenied = 3,         // this domain may not ask for that
  kNoSuchRegion = 4,   // the region does not exist or is not shared with the caller
  kUnsupported = 5,    // not available on this platform (ground truth on linux...)
  kBadVersion = 6,
  kInternal = 7,
  kBusy = 8,           // too many requests of this kind are waiting; retry after one is answered
};

const char* ProtocolErrorName(ProtocolError error);

struct MessageHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t type;      // MessageType, | kReplyBit in replies
  uint32_t length;    // payload bytes after this header
  uint32_t sequence;  // chosen by the client, echoed in the reply
};
static_assert(sizeof(MessageHeader) == 16);

struct HelloRequest {
  uint32_t client_version;  // kProtocolVersion
  uint32_t reserved;
};

enum class PlatformKind : uint32_t { kSim = 1, kLinux = 2 };

struct HelloReply {
  int32_t error;          // ProtocolError
  uint16_t domain;        // who the server believes the caller is
  uint16_t primary_socket;  // 1 on the hardware domain's socket
  uint32_t platform;      // PlatformKind
  uint32_t num_cpus;
  char platform_name[16];
  char machine_name[64];  // scenario name (sim) or host name (linux)
};

struct OpRequest {
  uint32_t op;
  uint32_t arg_size;  // argument bytes that follow
};

struct OpReply {
  int32_t error;      // hvpmu::ErrorCode
  uint32_t arg_size;  // the argument, as the engine left it, follows
};

struct MapRequest {
  uint64_t handle;  // region_handle / buf_gmaddr from get_buffer or set_passive
};

struct MapReply {
  int32_t error;  // ProtocolError
  uint32_t pad;
  uint64_t bytes;  // size of the region; the memfd comes as SCM_RIGHTS
};

struct NotifyRequest {
  uint64_t handle;      // the region whose rings to be told about
  uint32_t first_ring;
  uint32_t count;       // at most kMaxFdsPerMessage
};

struct NotifyReply {
  int32_t error;  // ProtocolError
  uint32_t count; // eventfds attached, one per ring from first_ring
};

enum class SimCommand : uint32_t {
  kQuery = 0,   // report the clock
  kRunFor = 1,  // advance the clock by `argument` ns (at most kMaxSimRunNs), reply when done
};

// The longest run one kRunFor may ask for: an hour of simulated time. Longer runs are asked for
// in steps (the dom0 agent asks for at most 20 ms at a time), so one request can neither wrap
// the clock nor set the machine running for good.
inline constexpr uint64_t kMaxSimRunNs = 3600ull * 1'000'000'000;
// kRunFor requests waiting for the clock: at most one per connection, and this many in all.
inline constexpr uint32_t kMaxPendingSimRuns = 8;

struct SimControlRequest {
  uint32_t command;  // SimCommand
  uint32_t pad;
  uint64_t argument;
};

struct SimControlReply {
  int32_t error;          // ProtocolError
  uint32_t halted;        // 1 once the scenario's duration is used up
  uint64_t sim_time_ns;   // simulated time since boot
  uint64_t pmis;          // PMIs delivered to the engine since boot
};

struct GroundTruthRequest {
  uint32_t reset;  // 1: clear the counts after reporting them
  uint32_t pad;
};

// Context of another domain than the caller's: dom0 only, and only where the platform lets dom0
// see that domain's processes (host processes on linux; never a guest's own user space).
struct ContextRequest {
  uint16_t domain;
  uint16_t pad[3];
};

// The processes' context events from sequence number `from` on (0: what is alive first, then
// every event still kept). The reply says where the events start (`first`: more than `from` when
// some were dropped untaken) and where to ask from next; the daemon forgets what came before
// `from` once dom0 asked from there (dom0 has it).
struct ContextEventsRequest {
  uint64_t from;
  uint32_t max_events;  // at most this many in one reply (0: the daemon's bound)
  uint32_t flags;       // kContextEventsSettle, or 0
};
// The caller is about to close its session: wait (a bounded time) for what the platform is still
// finding out of mappings it told (their files' ELF headers, read off its drain thread), so that
// the answers come in this reply.
inline constexpr uint32_t kContextEventsSettle = 1;
// In a reply: the reply stopped at its bound with more events already waiting; ask again from
// `next` now. Without it, the caller has what the platform knew when it answered.
inline constexpr uint32_t kContextEventsMore = 1;
struct ContextEventsReply {
  int32_t error;  // ProtocolError
  uint32_t events;
  uint64_t first;
  uint64_t next;
  uint32_t flags;  // kContextEventsMore, or 0
  uint32_t reserved;
};

struct FetchPublishedRequest {
  uint64_t after_sequence;  // only profiles published after this one (0: all)
};

// One published profile in a FetchPublished reply: this header, then `bytes` bytes.
struct PublishedEntry {
  uint16_t domain;  // who published it, as the hypervisor knows
  uint16_t pad;
  uint32_t bytes;
  uint64_t sequence;  // increases with every publication
};
static_assert(sizeof(PublishedEntry) == 16);

// The simulated machine's Xen 4.17 trace buffers (hvpmu/abi/xen_trace.h), as Xen's sysctl
// XEN_SYSCTL_tbuf_op drives them; the fake Xen's xc_tbuf_* send these. Xen's refusals come back
// as its errno in `xen_errno`: EINVAL for a second set_size of another size, and for enable
// before any size.
enum class XenTraceCommand : uint32_t {  // XEN_SYSCTL_TBUFOP_*
  kGetInfo = 0,
  kSetCpuMask = 1,  // argument: CPUs 0-63 as bits
  kSetEvtMask = 2,  // argument: the event mask
  kSetSize = 3,     // argument: pages per CPU; allocates the buffers (once) and starts tracing
  kEnable = 4,
  kDisable = 5,
};

struct XenTraceRequest {
  uint32_t command;  // XenTraceCommand
  uint32_t pad;
  uint64_t argument;
};

struct XenTraceReply {
  int32_t error;       // ProtocolError
  int32_t xen_errno;   // 0, or what Xen would refuse the command with
  uint32_t evt_mask;   // get_info's
  uint32_t tbuf_pages; // pages per CPU (t_info's tbuf_size), 0 before the buffers exist
  uint64_t t_info_mfn; // the frame of t_info's first page (get_info's buffer_mfn)
  uint32_t t_info_pages;
  uint32_t num_cpus;
  uint64_t first_mfn;  // the frame of the memfd's first page: frame f is at (f - first_mfn) * 4096
  uint64_t bytes;      // the memfd's size; 0 before the buffers exist (then no descriptors come)
  uint32_t cpu_khz;    // the TSC's rate (xc_physinfo's cpu_khz)
  uint32_t enabled;    // tracing is on
};
static_assert(sizeof(XenTraceReply) == 56);

struct StatusReply {
  int32_t error;  // ProtocolError; text or JSON follows
  uint32_t pad;
};

}  // namespace hvprof::hv
