// Fuzzes the unpacking of archives (archive/reader.h): `hvprof-report archive:FILE` reads tars
// from anywhere. Whatever the bytes, nothing may be created outside the private directory they
// are unpacked in, nothing but regular files and directories may be created in it, every file
// stays within the limits, and all of them together hold no more bytes than the archive.
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "hvprof/archive/reader.h"

namespace {

constexpr uint64_t kMaxEntryBytes = 1 << 20;

// A parent of every destination: anything that appears here beside `unpack/` escaped it. Never
// destroyed, so that the exit handler that removes it can still name it.
const std::string& Parent() {
  static const std::string* const parent = [] {
    auto* path = new std::string(std::filesystem::temp_directory_path().string() + "/hvprof-archive-fuzz-XXXXXX");
    if (::mkdtemp(path->data()) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(Parent(), ec);
    });
    return path;
  }();
  return *parent;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string destination = Parent() + "/unpack";
  std::filesystem::remove_all(destination);
  if (::mkdir(destination.c_str(), 0700) != 0) std::abort();
  hvprof::archive::UnpackLimits limits;
  limits.max_entry_bytes = kMaxEntryBytes;
  limits.max_total_bytes = 4 * kMaxEntryBytes;
  limits.max_entries = 64;
  limits.spare_bytes = 0;  // the fuzzer's own files are small; the disk's room is not what is fuzzed
  auto unpacked = hvprof::archive::UnpackMemory({data, size}, "fuzz.tar", destination, limits);
  if (unpacked && unpacked.value().session_directory != destination + "/session") std::abort();
  // Only `unpack` beside it, and only regular files within the limits and directories in it.
  for (const auto& entry : std::filesystem::directory_iterator(Parent())) {
    if (entry.path().filename() != "unpack") std::abort();
  }
  // And no more than the archive holds: a tar stores its files' bytes, so a sparse or lying
  // entry (an archive bomb) may not make the reader write more.
  uint64_t unpacked_bytes = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(destination)) {
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0) std::abort();
    if (S_ISDIR(st.st_mode)) continue;
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) std::abort();
    unpacked_bytes += static_cast<uint64_t>(st.st_size);
  }
  if (unpacked_bytes > size) std::abort();
  return 0;
}
