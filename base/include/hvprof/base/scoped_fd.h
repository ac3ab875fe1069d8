// RAII owners for file descriptors and memory mappings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "hvprof/base/result.h"
#include "hvprof/base/unique_resource.h"

namespace hvprof {

void CloseFd(int fd);
using ScopedFd = UniqueResource<int, &CloseFd, -1>;

// Owns one mmap'ed range; unmaps it on destruction.
class ScopedMmap {
 public:
  ScopedMmap() = default;
  ScopedMmap(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~ScopedMmap() { Reset(); }
  ScopedMmap(ScopedMmap&& other) noexcept
      : addr_(std::exchange(other.addr_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  ScopedMmap& operator=(ScopedMmap&& other) noexcept;
  ScopedMmap(const ScopedMmap&) = delete;
  ScopedMmap& operator=(const ScopedMmap&) = delete;

  // Maps `size` bytes of `fd` at `offset`, shared, with the given PROT_* flags. With
  // `populate`, every page is faulted in now (MAP_POPULATE): memory written on a hot path (a
  // ring) then takes no page fault there, as perf's kernel-allocated rings take none.
  static Result<ScopedMmap> MapShared(int fd, size_t size, int prot, uint64_t offset = 0, bool populate = false);
  // Maps a whole file read-only and private. An empty file gives an empty mapping.
  static Result<ScopedMmap> MapFileReadOnly(int fd);
  // Maps `size` bytes of zeroed, private memory (touched only as it is used). With
  // `huge_pages`, asks for transparent huge pages: a large table read at random then costs a
  // TLB miss per 2 MiB rather than per 4 KiB (a hint; without THP it is plain memory).
  static Result<ScopedMmap> MapAnonymous(size_t size, bool huge_pages);

  void* data() const { return addr_; }
  size_t size() const { return size_; }
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(addr_), size_};
  }
  bool valid() const { return addr_ != nullptr; }
  void Reset();

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// open(2) with EINTR handling and an error that names the path.
Result<ScopedFd> OpenFile(const char* path, int flags, int mode = 0);

}  // namespace hvprof
