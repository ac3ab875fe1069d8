#include "hvprof/base/scoped_fd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace hvprof {

void CloseFd(int fd) {
  // close() must not be retried on EINTR on Linux: the fd is already released.
  ::close(fd);
}

ScopedMmap& ScopedMmap::operator=(ScopedMmap&& other) noexcept {
  if (this != &other) {
    Reset();
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void ScopedMmap::Reset() {
  if (addr_ != nullptr && size_ != 0) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

Result<ScopedMmap> ScopedMmap::MapShared(int fd, size_t size, int prot, uint64_t offset, bool populate) {
  void* addr = ::mmap(nullptr, size, prot, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, static_cast<off_t>(offset));
  if (addr == MAP_FAILED) return ErrnoError(errno, fmt::format("mmap of {} bytes", size));
  return ScopedMmap(addr, size);
}

Result<ScopedMmap> ScopedMmap::MapFileReadOnly(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, "fstat");
  if (st.st_size == 0) return ScopedMmap();
  auto size = static_cast<size_t>(st.st_size);
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) return ErrnoError(errno, fmt::format("mmap of {} bytes", size));
  return ScopedMmap(addr, size);
}

Result<ScopedMmap> ScopedMmap::MapAnonymous(size_t size, bool huge_pages) {
  if (size == 0) return ScopedMmap();
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED) return ErrnoError(errno, fmt::format("mmap of {} bytes", size));
  if (huge_pages) (void)::madvise(addr, size, MADV_HUGEPAGE);
  return ScopedMmap(addr, size);
}

Result<ScopedFd> OpenFile(const char* path, int flags, int mode) {
  int fd;
  do {
    fd = ::open(path, flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, fmt::format("cannot open {}", path));
  return ScopedFd(fd);
}

}  // namespace hvprof
