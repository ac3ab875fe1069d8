// Puts a fuzzer input in an anonymous in-memory file, so the symbolizer opens it by path
// (/proc/self/fd/N) exactly as it opens real images.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "hvprof/base/scoped_fd.h"

namespace hvprof::fuzz {

class MemfdFile {
 public:
  MemfdFile(const uint8_t* data, size_t size) : fd_(::memfd_create("hvprof-fuzz", MFD_CLOEXEC)) {
    if (!fd_.valid()) return;
    size_t written = 0;
    while (written < size) {
      ssize_t n = ::write(fd_.get(), data + written, size - written);
      if (n <= 0) return;
      written += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_.get());
  }
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  ScopedFd fd_;
  std::string path_;
};

}  // namespace hvprof::fuzz
