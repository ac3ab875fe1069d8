// Puts a fuzzer input in an anonymous in-memory file, so the symbolizer opens it by path
// (/proc/self/fd/N) exactly as it opens real images; or in a temporary file (TempFile).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
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

// A fuzzer input in a real temporary file, removed again when done: for the readers that refuse
// to follow a link (the session store opens with O_NOFOLLOW, so /proc/self/fd/N fails there).
class TempFile {
 public:
  TempFile(const uint8_t* data, size_t size) {
    const char* dir = ::getenv("TMPDIR");
    std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/hvprof-fuzz-XXXXXX";
    ScopedFd fd(::mkstemp(path.data()));
    if (!fd.valid()) return;
    path_ = path;
    size_t written = 0;
    while (written < size) {
      ssize_t n = ::write(fd.get(), data + written, size - written);
      if (n <= 0) return;
      written += static_cast<size_t>(n);
    }
    ok_ = true;
  }
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool ok_ = false;
};

}  // namespace hvprof::fuzz
