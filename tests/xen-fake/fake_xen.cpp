// A fake of the parts of libxencall, libxenforeignmemory and libxenevtchn that hvprof's xen
// link uses, for tests. It plays Xen 4.17's xenoprof with hvprof's engine: hypercalls go to
// hvprof-hv's socket for domain $HVPROF_FAKE_XEN_DOMAIN (default 0) in $HVPROF_FAKE_XEN_RUN_DIR,
// mappings of a buffer's frames map the engine's shared region, and VIRQ_XENOPROF fires when
// any of the caller's rings notifies; xenstore answers with the domains hvprof-hv reports. Xen's
// own refusals are kept: EBUSY for get_buffer while its rings are mapped, EINVAL for an op
// above 17, ENOSYS for other hypercalls, and the engine's refusals as Xen's errno.
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

// The Xen library headers have no extern "C" of their own.
extern "C" {
#include <xencall.h>
#include <xenevtchn.h>
#include <xenforeignmemory.h>
#include <xenstore.h>
}

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/agent/hypervisor_link.h"
#include "hvpmu/abi/xenoprof_legacy.h"

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

int Fail(int errnum) {
  errno = errnum;
  return -1;
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
  if (op != legacy::kHypercallXenoprofOp) return Fail(ENOSYS);
  const auto command = static_cast<unsigned int>(arg1);
  if (command > legacy::kOpLast) return Fail(EINVAL);  // Xen's range check
  const size_t size = ArgumentSize(command);
  auto* argument = reinterpret_cast<std::byte*>(arg2);
  if (size > 0 && argument == nullptr) return Fail(EFAULT);
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  // Xen refuses to share the buffer again while it is still mapped.
  if (command == legacy::kOpGetBuffer) {
    for (const auto& [base, mapping] : fake.mappings) {
      if (fake.own_buffers.count(mapping.address) != 0) return Fail(EBUSY);
    }
  }
  HypervisorLink* link = fake.Link();
  if (link == nullptr) return Fail(EIO);
  auto code = link->Op(command, std::span<std::byte>(argument, size));
  if (!code) return Fail(EIO);
  if (code.value() != hvpmu::ErrorCode::kOk) return Fail(hvpmu::ErrorErrno(code.value()));
  if (command == legacy::kOpGetBuffer) {
    const auto [address, buffer] = BufferOf<legacy::GetBuffer>(argument);
    fake.own_buffers.insert_or_assign(address, buffer);
  } else if (command == legacy::kOpSetPassive) {
    const auto [address, buffer] = BufferOf<legacy::Passive>(argument);
    fake.passive_buffers.insert_or_assign(address, buffer);
  }
  return 0;
}

xenforeignmemory_handle* xenforeignmemory_open(xentoollog_logger*, unsigned) { return new xenforeignmemory_handle{}; }

int xenforeignmemory_close(xenforeignmemory_handle* handle) {
  delete handle;
  return 0;
}

void* xenforeignmemory_map(xenforeignmemory_handle*, uint32_t dom, int, size_t pages, const xen_pfn_t arr[],
                           int err[]) {
  FakeXen& fake = Fake();
  std::lock_guard lock(fake.mutex);
  if (pages == 0 || arr == nullptr) return errno = EINVAL, nullptr;
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
xenevtchn_port_or_error_t xenevtchn_bind_virq(xenevtchn_handle* handle, unsigned int virq) {
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
  return fired ? 1 : Fail(EAGAIN);
}

int xenevtchn_unmask(xenevtchn_handle*, evtchn_port_t port) { return port == 1 ? 0 : Fail(EINVAL); }

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
  auto* handle = new xs_handle{nlohmann::json::parse(domains ? domains.value() : "[]", nullptr, false)};
  if (!handle->domains.is_array()) handle->domains = nlohmann::json::array();
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
