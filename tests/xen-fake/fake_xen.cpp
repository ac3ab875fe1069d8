// A fake of the parts of libxencall, libxenforeignmemory and libxenevtchn that hvprof's xen
// link uses, for tests. It plays Xen 4.17's xenoprof with hvprof's engine: hypercalls go to
// hvprof-hv's socket for domain $HVPROF_FAKE_XEN_DOMAIN (default 0) in $HVPROF_FAKE_XEN_RUN_DIR,
// mappings of a buffer's frames map the engine's shared region, and VIRQ_XENOPROF fires when
// any of the caller's rings notifies; xenstore answers with the domains hvprof-hv reports. Xen's
// own refusals are kept: EBUSY for get_buffer while its rings are mapped, EINVAL for an op
// above 17, ENOSYS for other hypercalls (xen_version's XENVER_version says 4.17), and the
// engine's refusals as Xen's errno.
//
// HVPROF_FAKE_XEN_ENGINE=1 plays instead a Xen built with hvprof's engine (xen-engine/): every
// op, the v2 ones (0x100-0x103) included, goes to the engine as it is, with none of xenoprof's
// bookkeeping, and the buffers of get_buffer_v2 and set_passive_v2 are mapped as get_buffer's.
//
// Xen's trace buffers (--sched; hvpmu/abi/xen_trace.h) are hvprof-hv's simulated ones
// (kXenTrace): libxenctrl's xc_tbuf_*, xc_physinfo and the cpumap helpers drive them as Xen's
// sysctl does (the size is one-shot: another size is EINVAL; enable before any size is EINVAL),
// xenforeignmemory_map of DOMID_XEN's frames maps their pages one by one (a CPU's frames are not
// contiguous, as Xen's are not), and VIRQ_TBUF fires when a buffer passes half full.
//
// Where the engine departs from Xen 4.17 on purpose, the fake keeps Xen's own bookkeeping (the
// Book below, from xen/common/xenoprof.c) and answers as Xen does, as tests/qemu's
// qemu_xenoprof_quirks saw the real hypervisor answer:
// - the active list is Xen's: set_active appends, duplicates included; enable_virq marks the
//   first entry of the caller ready and counts it; start needs as many ready as listed;
//   disable_virq clears the caller's entry, and when nobody is left ready Xen forgets the whole
//   list. A domain not on it (or with no buffer yet) is refused disable_virq and enable_virq.
// - a domain's buffer is shared by get_buffer (or set_passive) and stays shared until its own
//   disable_virq (or, passive, the passive list's reset), whatever happens to the process that
//   mapped it: get_buffer is refused (EBUSY) meanwhile. Its size is the first allocation's.
//   (set_passive's EBUSY for a guest whose own buffer is still shared follows Xen's source: the
//   QEMU boot has no guest to show it.)
// The Book is shared by every process of one hvprof-hv, as Xen's state is: it lives in the run
// directory (fake-xen-4.17.book, locked around each hypercall) and starts afresh with a new
// hvprof-hv. What the fake cannot copy, because the engine's rings and routing do it: the sample
// and loss counters of a ring restart with each buffer and each enable_virq (Xen never zeroes
// them while the domain lives), a second enable_virq is refused (Xen counts it twice), init is
// refused while profiling, and a guest whose agent disconnects is deactivated and its rings
// freed by hvprof-hv.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

// The Xen library headers have no extern "C" of their own.
extern "C" {
#include <xencall.h>
#include <xenevtchn.h>
#include <xenforeignmemory.h>
#include <xenstore.h>
#include <xen/version.h>
#include <xen/xen.h>
}

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/base/files.h"
#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/xen_trace.h"
#include "hvpmu/abi/xenoprof_legacy.h"
#include "hvprof/hv/protocol.h"
#include "hvprof/xen/xenctrl_subset.h"

namespace {

namespace legacy = hvpmu::legacy;
using hvprof::agent::HypervisorLink;
using hvprof::agent::MappedRegion;

// One connection per process, as one process has one domain's privcmd.
struct FakeXen {
  std::mutex mutex;
  std::unique_ptr<HypervisorLink> link;
  struct Buffer {
    uint64_t bytes;
    uint32_t rings;
  };
  std::map<uint64_t, Buffer> own_buffers;      // get_buffer's, by machine address
  std::map<uint64_t, Buffer> passive_buffers;  // set_passive's
  std::map<void*, size_t> hypercall_buffers;   // xencall_alloc_buffer's, with their sizes
  struct Mapping {
    uint64_t address;  // the buffer's machine address
    MappedRegion region;
  };
  std::map<void*, Mapping> mappings;  // live foreign mappings
  hvpmu::DomainId domain = 0;
  // Xen's trace buffers, as hvprof-hv last described them, and the live mappings of their frames.
  hvprof::agent::SimTraceBuffers trace;
  std::map<void*, size_t> trace_mappings;  // address -> pages

  std::string connected_to;  // run directory and domain of `link`

  // The connection for the domain the environment names; a test that switches domains in one
  // process gets a fresh one, as another domain's process would have.
  HypervisorLink* Link() {
    const char* run_dir = std::getenv("HVPROF_FAKE_XEN_RUN_DIR");
    const char* domain_text = std::getenv("HVPROF_FAKE_XEN_DOMAIN");
    const std::string wanted = std::string(run_dir != nullptr ? run_dir : "") + "|" + (domain_text ? domain_text : "0");
    if (link && wanted == connected_to) return link.get();
    link.reset();
    own_buffers.clear();
    passive_buffers.clear();
    domain = static_cast<hvpmu::DomainId>(domain_text ? std::atoi(domain_text) : 0);
    auto connected = hvprof::agent::ConnectHostedDomain(run_dir != nullptr ? run_dir : "", domain);
    if (!connected) return nullptr;
    link = std::move(connected).value();
    connected_to = wanted;
    return link.get();
  }
};

FakeXen& Fake() {
  static FakeXen fake;
  return fake;
}

size_t ArgumentSize(unsigned int op) {
  switch (op) {
    case legacy::kOpInit: return sizeof(legacy::Init);
    case legacy::kOpGetBuffer: return sizeof(legacy::GetBuffer);
    case legacy::kOpSetActive: return sizeof(legacy::DomainIdArg);
    case legacy::kOpSetPassive: return sizeof(legacy::Passive);
    case legacy::kOpCounter: return sizeof(legacy::Counter);
    case legacy::kOpSetBacktrace: return sizeof(legacy::BacktraceDepthArg);
    case legacy::kOpIbsCounter: return sizeof(legacy::IbsCounter);
    case hvpmu::kOpInitV2: return sizeof(hvpmu::InitV2);
    case hvpmu::kOpStatus: return sizeof(hvpmu::Status);
    case hvpmu::kOpGetBufferV2:
    case hvpmu::kOpSetPassiveV2: return sizeof(hvpmu::BufferV2);
    default: return 0;
  }
}

// get_buffer's and set_passive's answers: where the buffer is and how it is cut into rings.
template <typename Answer>
std::pair<uint64_t, FakeXen::Buffer> BufferOf(const std::byte* argument) {
  Answer answer;
  std::memcpy(&answer, argument, sizeof answer);
  return {answer.buf_gmaddr, {uint64_t(answer.nbuf) * uint64_t(answer.bufsize), static_cast<uint32_t>(answer.nbuf)}};
}

// HVPROF_FAKE_XEN_ENGINE=1: Xen with hvprof's engine rather than 4.17's xenoprof.
bool EngineXen() {
  const char* engine = std::getenv("HVPROF_FAKE_XEN_ENGINE");
  return engine != nullptr && std::string(engine) == "1";
}

// HVPROF_FAKE_XEN_PRIVCMD=restricted plays a guest kernel with the XSA-482 fix whose privcmd was
// loaded without unrestricted=1: it passes no hypercall and maps nothing (EPERM).
bool RestrictedPrivcmd() {
  const char* domain = std::getenv("HVPROF_FAKE_XEN_DOMAIN");
  const char* privcmd = std::getenv("HVPROF_FAKE_XEN_PRIVCMD");
  return domain != nullptr && std::atoi(domain) != 0 && privcmd != nullptr && std::string(privcmd) == "restricted";
}

int Fail(int errnum) {
  errno = errnum;
  return -1;
}

// Xen 4.17's xenoprof bookkeeping where hvprof's engine keeps its own (xen/common/xenoprof.c):
// the active list, as add_active_list, set_active and reset_active keep it, and which domain's
// buffer exists and is still shared. A plain struct, read and written whole.
struct Book {
  static constexpr uint32_t kVersion = 1;
  static constexpr uint32_t kDomains = 64;  // domain ids followed; the engine alone answers for others
  enum Type : uint8_t { kIgnored = 0, kActive = 1, kPassive = 2 };  // xenoprof's domain_type
  struct Domain {
    uint8_t has_buffer;   // d->xenoprof: from the first get_buffer or set_passive until the domain dies
    uint8_t shared;       // its pages shared (get_buffer: with itself; set_passive: with dom0)
    uint8_t type;
    uint8_t passive;      // on the passive list
    int32_t max_samples;  // the first allocation's request: later ones are ignored
  };

  uint32_t version;
  char boot[64];  // the hvprof-hv this is about: its pid file
  uint32_t adomains;
  int32_t active[legacy::kMaxOprofDomains];  // domain ids; -1 for an entry reset_active cleared
  uint8_t ready[legacy::kMaxOprofDomains];
  uint32_t activated;  // unsigned, as Xen's: reset_active of an entry never made ready wraps it
  Domain domains[kDomains];

  static bool Followed(uint32_t domain) { return domain < kDomains; }

  int ActiveIndex(uint32_t domain) const {
    for (uint32_t i = 0; i < adomains && i < legacy::kMaxOprofDomains; ++i) {
      if (active[i] == static_cast<int32_t>(domain)) return static_cast<int>(i);
    }
    return -1;
  }
  void AddActive(uint32_t domain) {  // add_active_list, once the engine took the domain
    if (!Followed(domain) || adomains >= legacy::kMaxOprofDomains) return;
    active[adomains] = static_cast<int32_t>(domain);
    ready[adomains] = 0;
    ++adomains;
  }
  bool CanSetActive(uint32_t domain) const {  // set_active's refusals (EPERM)
    return Followed(domain) && ActiveIndex(domain) >= 0 && domains[domain].has_buffer != 0;
  }
  void SetActive(uint32_t domain) {  // enable_virq
    if (!CanSetActive(domain)) return;
    const int i = ActiveIndex(domain);
    domains[domain].type = kActive;
    ready[i] = 1;
    ++activated;
  }
  bool ResetActive(uint32_t domain) {  // disable_virq, reset_active_list
    if (!CanSetActive(domain)) return false;
    const int i = ActiveIndex(domain);
    domains[domain].type = kIgnored;
    ready[i] = 0;
    active[i] = -1;
    --activated;
    if (activated == 0) adomains = 0;  // Xen's `activated <= 0`, unsigned
    return true;
  }
  void ResetActiveList() {
    for (uint32_t i = 0; i < adomains && i < legacy::kMaxOprofDomains; ++i) {
      if (ready[i] != 0 && active[i] >= 0) ResetActive(static_cast<uint32_t>(active[i]));
    }
    adomains = 0;
    activated = 0;
  }
  void ResetPassiveList() {
    for (Domain& domain : domains) {
      if (domain.passive == 0) continue;
      domain.passive = 0;
      domain.shared = 0;
      domain.type = kIgnored;
    }
  }
};
static_assert(std::is_trivially_copyable_v<Book>);

std::string RunDir() {
  const char* run_dir = std::getenv("HVPROF_FAKE_XEN_RUN_DIR");
  return run_dir != nullptr ? run_dir : "";
}

// The Book for one hypercall: read from the run directory with the file locked, written back
// and unlocked when it goes. Without a run directory (hvprof-hv's default one), the process
// keeps its own.
class BookLock {
 public:
  BookLock() {
    const std::string dir = RunDir();
    std::string boot;
    if (!dir.empty()) {
      fd_ = hvprof::ScopedFd(::open((dir + "/fake-xen-4.17.book").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
      if (fd_.valid()) ::flock(fd_.get(), LOCK_EX);
      if (auto pid = hvprof::ReadFileToString(dir + "/hvprof-hv.pid")) boot = pid.value();
    }
    static Book own{};
    book_ = own;
    if (fd_.valid() && ::pread(fd_.get(), &book_, sizeof book_, 0) != static_cast<ssize_t>(sizeof book_)) {
      book_ = Book{};
    }
    boot.resize(sizeof book_.boot - 1);
    if (book_.version != Book::kVersion || std::memcmp(book_.boot, boot.c_str(), sizeof book_.boot) != 0) {
      book_ = Book{};  // another hvprof-hv: a machine that booted afresh
      book_.version = Book::kVersion;
      std::memcpy(book_.boot, boot.c_str(), sizeof book_.boot);
    }
    if (!fd_.valid()) own_ = &own;
  }
  ~BookLock() {
    if (own_ != nullptr) *own_ = book_;
    if (fd_.valid()) {
      [[maybe_unused]] ssize_t n = ::pwrite(fd_.get(), &book_, sizeof book_, 0);
      ::flock(fd_.get(), LOCK_UN);
    }
  }
  BookLock(const BookLock&) = delete;
  BookLock& operator=(const BookLock&) = delete;
  Book& operator*() { return book_; }
  Book* operator->() { return &book_; }

 private:
  hvprof::ScopedFd fd_;
  Book book_{};
  Book* own_ = nullptr;
};

// The engine's state and list, as its status op says.
std::optional<hvpmu::Status> EngineStatus(HypervisorLink& link) {
  auto status = std::make_unique<hvpmu::Status>();
  status->struct_size = sizeof(hvpmu::Status);
  status->abi_version = hvpmu::kAbiVersion;
  auto code = link.Op(hvpmu::kOpStatus, std::as_writable_bytes(std::span(status.get(), 1)));
  if (!code || code.value() != hvpmu::ErrorCode::kOk) return std::nullopt;
  return *status;
}

// Xen forgot its active list (the last ready domain left): the engine forgets its own, as
// dom0 would with reset_active_list, so that start and counter answer as Xen's do.
void ForgetEngineList(HypervisorLink& link, hvpmu::DomainId caller) {
  const auto status = EngineStatus(link);
  if (!status || status->num_active == 0 ||
      status->state == static_cast<uint32_t>(hvpmu::EngineState::kProfiling) || status->primary > 0x7FEF) {
    return;
  }
  if (caller == status->primary) {
    (void)link.Op(legacy::kOpResetActiveList, {});
    return;
  }
  auto primary = hvprof::agent::ConnectHostedDomain(RunDir(), status->primary);
  if (primary) (void)primary.value()->Op(legacy::kOpResetActiveList, {});
}

// One XEN_SYSCTL_tbuf_op to hvprof-hv; keeps what it says of the buffers. False when hvprof-hv
// cannot be asked; Xen's own refusal is in fake.trace.xen_errno.
bool RefreshTrace(FakeXen& fake, hvprof::hv::XenTraceCommand command, uint64_t argument) {
  HypervisorLink* link = fake.Link();
  if (link == nullptr) return false;
  auto answer = link->SimXenTrace(static_cast<uint32_t>(command), argument);
  if (!answer) return false;
  hvprof::agent::SimTraceBuffers& trace = answer.value();
  if (!trace.memory.valid() && fake.trace.memory.valid()) {  // the descriptors come once the buffers exist
    trace.memory = std::move(fake.trace.memory);
    trace.notify = std::move(fake.trace.notify);
  }
  fake.trace = std::move(trace);
  return true;
}

// The sysctl as libxenctrl returns it: 0, or -1 with Xen's errno.
int TraceCommand(hvprof::hv::XenTraceCommand command, uint64_t argument) {
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  if (fake.domain != 0) return Fail(EPERM);  // XEN_SYSCTL_*: the control domain's
  if (!RefreshTrace(fake, command, argument)) return Fail(EIO);
  return fake.trace.xen_errno != 0 ? Fail(fake.trace.xen_errno) : 0;
}

// DOMID_XEN's frames of the trace buffers, each mapped on its own into one reservation, as the
// privcmd driver maps a frame list.
void* MapTraceFrames(FakeXen& fake, int prot, size_t pages, const xen_pfn_t frames[], int err[]) {
  if (fake.domain != 0) {
    for (size_t i = 0; i < pages; ++i) err[i] = -EPERM;
    return errno = EPERM, nullptr;
  }
  if (!fake.trace.memory.valid()) RefreshTrace(fake, hvprof::hv::XenTraceCommand::kGetInfo, 0);
  const uint64_t first = fake.trace.first_mfn;
  const uint64_t count = fake.trace.bytes / 4096;
  bool any_bad = false;
  for (size_t i = 0; i < pages; ++i) {
    const bool known = fake.trace.memory.valid() && frames[i] >= first && frames[i] - first < count;
    err[i] = known ? 0 : -EPERM;  // not a page Xen shares
    any_bad |= !known;
  }
  if (any_bad) return errno = EPERM, nullptr;
  void* base = ::mmap(nullptr, pages * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  for (size_t i = 0; i < pages; ++i) {
    void* page = ::mmap(static_cast<uint8_t*>(base) + i * 4096, 4096, prot, MAP_SHARED | MAP_FIXED,
                        fake.trace.memory.get(), static_cast<off_t>((frames[i] - first) * 4096));
    if (page == MAP_FAILED) {
      const int errnum = errno;
      ::munmap(base, pages * 4096);
      return errno = errnum, nullptr;
    }
  }
  fake.trace_mappings[base] = pages;
  return base;
}

// A v2 buffer's answer (get_buffer_v2, set_passive_v2).
std::pair<uint64_t, FakeXen::Buffer> BufferOfV2(const std::byte* argument) {
  hvpmu::BufferV2 answer;
  std::memcpy(&answer, argument, sizeof answer);
  return {answer.region_handle, {answer.region_bytes, answer.nbuf}};
}

// Xen with hvprof's engine, after an op succeeded: where its buffer is, for the mappings of the
// buffer's frames and VIRQ_XENOPROF.
void KeepEngineBuffer(FakeXen& fake, unsigned int command, const std::byte* argument) {
  auto keep = [](std::map<uint64_t, FakeXen::Buffer>& buffers, std::pair<uint64_t, FakeXen::Buffer> buffer) {
    buffers.insert_or_assign(buffer.first, buffer.second);
  };
  switch (command) {
    case legacy::kOpGetBuffer: keep(fake.own_buffers, BufferOf<legacy::GetBuffer>(argument)); break;
    case legacy::kOpSetPassive: keep(fake.passive_buffers, BufferOf<legacy::Passive>(argument)); break;
    case hvpmu::kOpGetBufferV2: keep(fake.own_buffers, BufferOfV2(argument)); break;
    case hvpmu::kOpSetPassiveV2: keep(fake.passive_buffers, BufferOfV2(argument)); break;
    default: break;
  }
}

}  // namespace

struct xencall_handle {
  int unused;
};
struct xenforeignmemory_handle {
  int unused;
};
struct xenevtchn_handle {
  int epoll_fd = -1;
  std::vector<hvprof::ScopedFd> ring_fds;
  bool bound = false;
  hvprof::ScopedFd tbuf_fd;  // VIRQ_TBUF: port 2
  bool tbuf_bound = false;
};
struct xc_interface_core {
  int unused;
};

extern "C" {

xencall_handle* xencall_open(xentoollog_logger*, unsigned) {
  std::lock_guard lock(Fake().mutex);
  if (Fake().Link() == nullptr) {
    errno = ENOENT;  // as without /dev/xen/privcmd
    return nullptr;
  }
  return new xencall_handle{};
}

int xencall_close(xencall_handle* handle) {
  delete handle;
  return 0;
}

void* xencall_alloc_buffer(xencall_handle*, size_t size) {
  void* memory = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  std::lock_guard lock(Fake().mutex);
  Fake().hypercall_buffers[memory] = size;
  return memory;
}

void xencall_free_buffer(xencall_handle*, void* buffer) {
  std::lock_guard lock(Fake().mutex);
  auto it = Fake().hypercall_buffers.find(buffer);
  if (it == Fake().hypercall_buffers.end()) return;
  ::munmap(buffer, it->second);
  Fake().hypercall_buffers.erase(it);
}

int xencall2(xencall_handle*, unsigned int op, uint64_t arg1, uint64_t arg2) {
  if (RestrictedPrivcmd()) return Fail(EPERM);
  if (op == __HYPERVISOR_xen_version && arg1 == XENVER_version) return (4 << 16) | 17;  // any domain may ask
  if (op != legacy::kHypercallXenoprofOp) return Fail(ENOSYS);
  const auto command = static_cast<unsigned int>(arg1);
  // Xen's range check: xenoprof's EINVAL above op 17; hvprof's engine knows the v2 ops too.
  const bool engine_xen = EngineXen();
  if (engine_xen ? !hvpmu::IsKnownOp(command) : command > legacy::kOpLast) return Fail(engine_xen ? ENOSYS : EINVAL);
  const size_t size = ArgumentSize(command);
  auto* argument = reinterpret_cast<std::byte*>(arg2);
  if (size > 0 && argument == nullptr) return Fail(EFAULT);
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  HypervisorLink* link = fake.Link();
  if (link == nullptr) return Fail(EIO);
  auto engine = [&]() -> std::optional<hvpmu::ErrorCode> {
    auto code = link->Op(command, std::span<std::byte>(argument, size));
    if (!code) return std::nullopt;
    return code.value();
  };
  auto answer = [](std::optional<hvpmu::ErrorCode> code) {
    if (!code) return Fail(EIO);
    if (*code != hvpmu::ErrorCode::kOk) return Fail(hvpmu::ErrorErrno(*code));
    return 0;
  };
  if (engine_xen) {  // the engine answers every op itself, with none of xenoprof's bookkeeping
    const auto code = engine();
    if (code == hvpmu::ErrorCode::kOk) KeepEngineBuffer(fake, command, argument);
    return answer(code);
  }
  const hvpmu::DomainId caller = fake.domain;
  BookLock book;
  Book::Domain* self = Book::Followed(caller) ? &book->domains[caller] : nullptr;

  switch (command) {
    case legacy::kOpGetBuffer: {
      // Xen forgets a domain's active state on any get_buffer of an existing buffer, then
      // refuses to share pages still shared or mapped.
      if (self != nullptr && self->has_buffer != 0) self->type = Book::kIgnored;
      for (const auto& [base, mapping] : fake.mappings) {
        if (fake.own_buffers.count(mapping.address) != 0) return Fail(EBUSY);
      }
      if (self != nullptr && self->shared != 0) return Fail(EBUSY);
      legacy::GetBuffer request;
      std::memcpy(&request, argument, sizeof request);
      legacy::GetBuffer sized = request;
      if (self != nullptr && self->has_buffer != 0) sized.max_samples = self->max_samples;  // the first size
      std::memcpy(argument, &sized, sizeof sized);
      const auto code = engine();
      std::memcpy(&sized, argument, sizeof sized);
      sized.max_samples = request.max_samples;  // Xen gives the request back as it was
      std::memcpy(argument, &sized, sizeof sized);
      if (code != hvpmu::ErrorCode::kOk) return answer(code);
      const auto [address, buffer] = BufferOf<legacy::GetBuffer>(argument);
      fake.own_buffers.insert_or_assign(address, buffer);
      if (self != nullptr) {
        if (self->has_buffer == 0) self->max_samples = request.max_samples;
        self->has_buffer = 1;
        self->shared = 1;
        self->type = Book::kIgnored;
      }
      return 0;
    }
    case legacy::kOpSetPassive: {
      legacy::Passive request;
      std::memcpy(&request, argument, sizeof request);
      Book::Domain* target = Book::Followed(request.domain_id) ? &book->domains[request.domain_id] : nullptr;
      legacy::Passive sized = request;
      if (target != nullptr && target->has_buffer != 0) sized.max_samples = target->max_samples;
      std::memcpy(argument, &sized, sizeof sized);
      // Xen's checks come first: the primary, INITIALIZED; then the pages must be free.
      const auto status = EngineStatus(*link);
      const bool allowed = status && status->primary == caller &&
                           status->state == static_cast<uint32_t>(hvpmu::EngineState::kInitialized);
      std::optional<hvpmu::ErrorCode> code =
          allowed && target != nullptr && target->shared != 0 ? hvpmu::ErrorCode::kBusy : engine();
      std::memcpy(&sized, argument, sizeof sized);
      sized.max_samples = request.max_samples;
      std::memcpy(argument, &sized, sizeof sized);
      if (code != hvpmu::ErrorCode::kOk) return answer(code);
      const auto [address, buffer] = BufferOf<legacy::Passive>(argument);
      fake.passive_buffers.insert_or_assign(address, buffer);
      if (target != nullptr) {
        if (target->has_buffer == 0) target->max_samples = request.max_samples;
        target->has_buffer = 1;
        target->shared = 1;
        target->type = Book::kPassive;
        target->passive = 1;
      }
      return 0;
    }
    case legacy::kOpSetActive: {
      // Xen appends a domain already listed: the engine's refusal of a duplicate is not Xen's.
      legacy::DomainIdArg domain;
      std::memcpy(&domain, argument, sizeof domain);
      auto code = engine();
      if (code == hvpmu::ErrorCode::kAlreadyListed) code = hvpmu::ErrorCode::kOk;
      if (code == hvpmu::ErrorCode::kOk) book->AddActive(domain);
      return answer(code);
    }
    case legacy::kOpEnableVirq: {
      // Xen looks for the caller on its own list: one that disable_virq took off, or that the
      // list lost, is refused even where the engine still lists it.
      if (self != nullptr && !book->CanSetActive(caller)) return Fail(EPERM);
      const auto code = engine();
      if (code == hvpmu::ErrorCode::kOk && self != nullptr) book->SetActive(caller);
      return answer(code);
    }
    case legacy::kOpStart:
      // Every entry of Xen's list, duplicates and cleared ones included, must be ready.
      if (book->activated != book->adomains) return Fail(EPERM);
      return answer(engine());
    case legacy::kOpCounter:
    case legacy::kOpIbsCounter:
      if (book->adomains == 0) return Fail(EPERM);  // Xen's own list is empty
      return answer(engine());
    case legacy::kOpDisableVirq: {
      if (self == nullptr) return answer(engine());
      // Refused while profiling to a domain Xen counts as active, and to one not on Xen's
      // list (or with no buffer): its buffer then stays shared.
      const auto status = EngineStatus(*link);
      const bool profiling = status && status->state == static_cast<uint32_t>(hvpmu::EngineState::kProfiling);
      if (profiling && self->type == Book::kActive) return Fail(EPERM);
      if (!book->CanSetActive(caller)) return Fail(EPERM);
      const auto code = engine();
      // Where the engine has nothing left to release (hvprof-hv freed it), Xen still succeeds.
      if (code != hvpmu::ErrorCode::kOk && code != hvpmu::ErrorCode::kNotActive) return answer(code);
      book->ResetActive(caller);
      self->shared = 0;
      if (book->adomains == 0) ForgetEngineList(*link, caller);
      return 0;
    }
    case legacy::kOpResetActiveList: {
      const auto code = engine();
      if (code == hvpmu::ErrorCode::kOk) book->ResetActiveList();
      return answer(code);
    }
    case legacy::kOpResetPassiveList:
    case legacy::kOpReleaseCounters: {
      const auto code = engine();
      if (code == hvpmu::ErrorCode::kOk) book->ResetPassiveList();
      return answer(code);
    }
    case legacy::kOpShutdown: {
      // The lists' counts go; the domains' types stay as they were (Xen's shutdown).
      const auto code = engine();
      if (code == hvpmu::ErrorCode::kOk) {
        book->adomains = 0;
        book->activated = 0;
      }
      return answer(code);
    }
    default:
      return answer(engine());
  }
}

xenforeignmemory_handle* xenforeignmemory_open(xentoollog_logger*, unsigned) { return new xenforeignmemory_handle{}; }

int xenforeignmemory_close(xenforeignmemory_handle* handle) {
  delete handle;
  return 0;
}

void* xenforeignmemory_map(xenforeignmemory_handle*, uint32_t dom, int prot, size_t pages, const xen_pfn_t arr[],
                           int err[]) {
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  if (pages == 0 || arr == nullptr) return errno = EINVAL, nullptr;
  if (RestrictedPrivcmd()) {
    for (size_t i = 0; i < pages; ++i) err[i] = -EPERM;
    return errno = EPERM, nullptr;
  }
  if (dom == hvpmu::xentrace::kDomidXen) return MapTraceFrames(fake, prot, pages, arr, err);
  // The buffer's pages belong to the caller: Xen maps them only as DOMID_SELF's (a domain id,
  // its own or the passive domain's, is refused).
  if (dom != 0x7FF0) {
    for (size_t i = 0; i < pages; ++i) err[i] = -EPERM;
    return errno = EPERM, nullptr;
  }
  const uint64_t address = uint64_t(arr[0]) * 4096;
  const bool known = fake.own_buffers.count(address) != 0 || fake.passive_buffers.count(address) != 0;
  for (size_t i = 0; i < pages; ++i) {
    err[i] = known && arr[i] == arr[0] + i ? 0 : -EINVAL;
  }
  if (!known) return errno = EINVAL, nullptr;
  HypervisorLink* link = fake.Link();
  if (link == nullptr) return errno = EIO, nullptr;
  auto region = link->MapRegion(address);
  if (!region) return errno = EFAULT, nullptr;
  if (pages * 4096 > ((region.value().bytes + 4095) & ~uint64_t{4095})) return errno = EINVAL, nullptr;
  void* base = region.value().base();
  fake.mappings[base] = FakeXen::Mapping{address, std::move(region).value()};
  return base;
}

int xenforeignmemory_unmap(xenforeignmemory_handle*, void* addr, size_t) {
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  if (auto it = fake.trace_mappings.find(addr); it != fake.trace_mappings.end()) {
    ::munmap(addr, it->second * 4096);
    fake.trace_mappings.erase(it);
    return 0;
  }
  return fake.mappings.erase(addr) == 1 ? 0 : Fail(EINVAL);
}

xenevtchn_handle* xenevtchn_open(xentoollog_logger*, unsigned) {
  auto* handle = new xenevtchn_handle{};
  handle->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  return handle;
}

int xenevtchn_close(xenevtchn_handle* handle) {
  if (handle == nullptr) return 0;
  ::close(handle->epoll_fd);
  delete handle;
  return 0;
}

int xenevtchn_fd(xenevtchn_handle* handle) { return handle->epoll_fd; }

// Port 1 stands for VIRQ_XENOPROF on vCPU 0: every ring of the caller's own buffer wakes it.
// Port 2 for VIRQ_TBUF (dom0 only): hvprof-hv's trace buffers' eventfd.
xenevtchn_port_or_error_t xenevtchn_bind_virq(xenevtchn_handle* handle, unsigned int virq) {
  if (virq == hvpmu::xentrace::kVirqTbuf) {
    if (handle->tbuf_bound) return Fail(EEXIST);
    FakeXen& fake = Fake();
    std::lock_guard lock(fake.mutex);
    if (fake.domain != 0) return Fail(EPERM);  // a global VIRQ: dom0's
    if (!fake.trace.notify.valid() && !RefreshTrace(fake, hvprof::hv::XenTraceCommand::kGetInfo, 0)) return Fail(EIO);
    if (fake.trace.notify.valid()) {
      handle->tbuf_fd = hvprof::ScopedFd(::fcntl(fake.trace.notify.get(), F_DUPFD_CLOEXEC, 0));
      epoll_event event{};
      event.events = EPOLLIN;
      ::epoll_ctl(handle->epoll_fd, EPOLL_CTL_ADD, handle->tbuf_fd.get(), &event);
    }
    handle->tbuf_bound = true;
    return 2;
  }
  if (virq != legacy::kVirqXenoprof) return Fail(EINVAL);
  if (handle->bound) return Fail(EEXIST);
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  HypervisorLink* link = fake.Link();
  if (link == nullptr) return Fail(EIO);
  for (const auto& [address, buffer] : fake.own_buffers) {
    auto fds = link->NotificationFds(address, 0, buffer.rings);
    if (!fds) continue;
    for (hvprof::ScopedFd& fd : fds.value()) {
      epoll_event event{};
      event.events = EPOLLIN;
      ::epoll_ctl(handle->epoll_fd, EPOLL_CTL_ADD, fd.get(), &event);
      handle->ring_fds.push_back(std::move(fd));
    }
  }
  handle->bound = true;
  return 1;
}

int xenevtchn_unbind(xenevtchn_handle* handle, evtchn_port_t port) {
  if (port == 2 && handle->tbuf_bound) {
    if (handle->tbuf_fd.valid()) ::epoll_ctl(handle->epoll_fd, EPOLL_CTL_DEL, handle->tbuf_fd.get(), nullptr);
    handle->tbuf_fd.Reset();
    handle->tbuf_bound = false;
    return 0;
  }
  if (port != 1 || !handle->bound) return Fail(EINVAL);
  for (const hvprof::ScopedFd& fd : handle->ring_fds) ::epoll_ctl(handle->epoll_fd, EPOLL_CTL_DEL, fd.get(), nullptr);
  handle->ring_fds.clear();
  handle->bound = false;
  return 0;
}

xenevtchn_port_or_error_t xenevtchn_pending(xenevtchn_handle* handle) {
  bool fired = false;
  for (const hvprof::ScopedFd& fd : handle->ring_fds) {
    uint64_t count = 0;
    while (::read(fd.get(), &count, sizeof count) == sizeof count) fired = true;
  }
  if (fired) return 1;
  if (handle->tbuf_fd.valid()) {
    uint64_t count = 0;
    while (::read(handle->tbuf_fd.get(), &count, sizeof count) == sizeof count) fired = true;
  }
  return fired ? 2 : Fail(EAGAIN);
}

int xenevtchn_unmask(xenevtchn_handle*, evtchn_port_t port) { return port == 1 || port == 2 ? 0 : Fail(EINVAL); }

}  // extern "C"

// libxenctrl: the trace buffers' sysctl, physinfo and the cpumap helpers.
extern "C" {

xc_interface* xc_interface_open(xentoollog_logger*, xentoollog_logger*, unsigned) {
  std::lock_guard lock(Fake().mutex);
  if (RestrictedPrivcmd() || Fake().Link() == nullptr) {
    errno = RestrictedPrivcmd() ? EPERM : ENOENT;
    return nullptr;
  }
  return new xc_interface{};
}

int xc_interface_close(xc_interface* xch) {
  delete xch;
  return 0;
}

int xc_physinfo(xc_interface*, HvprofXenPhysinfo* info) {
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  if (!RefreshTrace(fake, hvprof::hv::XenTraceCommand::kGetInfo, 0)) return Fail(EIO);
  *info = HvprofXenPhysinfo{};
  info->threads_per_core = 1;
  info->cores_per_socket = fake.trace.num_cpus;
  info->nr_cpus = fake.trace.num_cpus;
  info->max_cpu_id = fake.trace.num_cpus - 1;
  info->nr_nodes = 1;
  info->cpu_khz = fake.trace.cpu_khz;
  return 0;
}

int xc_get_cpumap_size(xc_interface*) {
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  if (fake.trace.num_cpus == 0 && !RefreshTrace(fake, hvprof::hv::XenTraceCommand::kGetInfo, 0)) return Fail(EIO);
  return static_cast<int>((fake.trace.num_cpus + 7) / 8);
}

xc_cpumap_t xc_cpumap_alloc(xc_interface* xch) {
  const int size = xc_get_cpumap_size(xch);
  if (size <= 0) return nullptr;
  return static_cast<xc_cpumap_t>(std::calloc(1, static_cast<size_t>(size)));
}

int xc_tbuf_set_cpu_mask(xc_interface* xch, xc_cpumap_t mask) {
  const int size = xc_get_cpumap_size(xch);
  if (size <= 0 || mask == nullptr) return Fail(EINVAL);
  uint64_t bits = 0;
  for (int i = 0; i < size && i < 8; ++i) bits |= uint64_t{mask[i]} << (8 * i);
  return TraceCommand(hvprof::hv::XenTraceCommand::kSetCpuMask, bits);
}

int xc_tbuf_set_evt_mask(xc_interface*, uint32_t mask) {
  return TraceCommand(hvprof::hv::XenTraceCommand::kSetEvtMask, mask);
}

int xc_tbuf_set_size(xc_interface*, unsigned long size) {
  return TraceCommand(hvprof::hv::XenTraceCommand::kSetSize, size);
}

// As libxenctrl 4.17: set_size's answer ignored, enable, then t_info's frame and its size in
// bytes.
int xc_tbuf_enable(xc_interface* xch, unsigned long pages, unsigned long* mfn, unsigned long* size) {
  (void)xc_tbuf_set_size(xch, pages);
  if (TraceCommand(hvprof::hv::XenTraceCommand::kEnable, 0) != 0) return -1;
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  if (RefreshTrace(fake, hvprof::hv::XenTraceCommand::kGetInfo, 0) && fake.trace.xen_errno == 0) {
    *mfn = fake.trace.t_info_mfn;
    *size = uint64_t{fake.trace.t_info_pages} * 4096;
  }
  return 0;
}

int xc_tbuf_disable(xc_interface*) { return TraceCommand(hvprof::hv::XenTraceCommand::kDisable, 0); }

// Pages per CPU (t_info's tbuf_size), whatever xenctrl.h says.
int xc_tbuf_get_size(xc_interface*, unsigned long* size) {
  if (TraceCommand(hvprof::hv::XenTraceCommand::kGetInfo, 0) != 0) return -1;
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  if (fake.trace.tbuf_pages == 0) return -1;
  *size = fake.trace.tbuf_pages;
  return 0;
}

}  // extern "C"

// xenstore: the domains hvprof-hv reports, as /local/domain/ID/{name,cpu/N}, and "domid".
struct xs_handle {
  nlohmann::json domains;
};

namespace {

// A malloc'ed copy, as xenstore's callers free() what it returns.
void* CopyOut(const std::string& text, unsigned int* length) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return nullptr;
  std::memcpy(copy, text.c_str(), text.size() + 1);
  if (length != nullptr) *length = static_cast<unsigned int>(text.size());
  return copy;
}

char** ListOut(const std::vector<std::string>& names, unsigned int* count) {
  size_t bytes = sizeof(char*) * names.size();
  for (const std::string& name : names) bytes += name.size() + 1;
  auto** list = static_cast<char**>(std::malloc(bytes == 0 ? 1 : bytes));
  if (list == nullptr) return nullptr;
  char* text = reinterpret_cast<char*>(list + names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    std::memcpy(text, names[i].c_str(), names[i].size() + 1);
    list[i] = text;
    text += names[i].size() + 1;
  }
  *count = static_cast<unsigned int>(names.size());
  return list;
}

const nlohmann::json* FindDomain(const xs_handle* handle, const std::string& id) {
  for (const nlohmann::json& domain : handle->domains) {
    if (std::to_string(domain.value("id", 0)) == id) return &domain;
  }
  return nullptr;
}

}  // namespace

extern "C" {

xs_handle* xs_open(unsigned long) {
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  HypervisorLink* link = fake.Link();
  if (link == nullptr) return errno = ENOENT, nullptr;
  auto domains = link->Domains();
  auto* handle = new xs_handle{domains ? hvprof::context::ToJson(domains.value()) : nlohmann::json::array()};
  // A guest's xenstore shows it only its own nodes.
  if (fake.domain != 0) {
    nlohmann::json own = nlohmann::json::array();
    for (const nlohmann::json& domain : handle->domains) {
      if (domain.value("id", -1) == fake.domain) own.push_back(domain);
    }
    handle->domains = own;
  }
  return handle;
}

void xs_close(xs_handle* handle) { delete handle; }

void* xs_read(xs_handle* handle, xs_transaction_t, const char* path, unsigned int* length) {
  const std::string key = path;
  if (key == "domid") return CopyOut(std::to_string(Fake().domain), length);
  const std::string prefix = "/local/domain/";
  if (key.rfind(prefix, 0) == 0 && key.size() > prefix.size() + 5 && key.substr(key.size() - 5) == "/name") {
    if (const nlohmann::json* domain = FindDomain(handle, key.substr(prefix.size(), key.size() - prefix.size() - 5))) {
      return CopyOut(domain->value("name", ""), length);
    }
  }
  errno = ENOENT;
  return nullptr;
}

char** xs_directory(xs_handle* handle, xs_transaction_t, const char* path, unsigned int* count) {
  const std::string key = path;
  const std::string prefix = "/local/domain";
  std::vector<std::string> names;
  if (key == prefix) {
    for (const nlohmann::json& domain : handle->domains) names.push_back(std::to_string(domain.value("id", 0)));
    return ListOut(names, count);
  }
  if (key.rfind(prefix + "/", 0) == 0 && key.size() > prefix.size() + 5 && key.substr(key.size() - 4) == "/cpu") {
    if (const nlohmann::json* domain = FindDomain(handle, key.substr(prefix.size() + 1, key.size() - prefix.size() - 5))) {
      for (int i = 0; i < domain->value("vcpus", 0); ++i) names.push_back(std::to_string(i));
      return ListOut(names, count);
    }
  }
  errno = ENOENT;
  return nullptr;
}

}  // extern "C"
