// Fuzzes what root's hvprof-hv reads of the files processes map (linux platform, image_reader.h):
// the ELF header, program headers and build-id note (linux/elf_info.h), and the load bias a
// mapping gets from them. Any user can map a file of any bytes; whatever they are, nothing may
// crash, a build-id must be lower-case hex, and the bias must be the one its segment gives.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "hvprof/linux/elf_info.h"
#include "memfd_file.h"

namespace lh = hvprof::linux_host;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hvprof::fuzz::MemfdFile file(data, size);
  if (!file.ok()) return 0;
  auto info = lh::ReadElfInfo(file.path());
  if (!info) return 0;
  const std::string& id = info.value().build_id;
  if (id.size() % 2 != 0 || id.size() > 128) std::abort();
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) std::abort();
  }
  // A mapping at each segment's page, and past every one: the bias is the segment's, or start - pgoff.
  const uint64_t start = 0x7f0000000000;
  for (const lh::ElfLoad& load : info.value().loads) {
    const uint64_t pgoff = load.offset & ~uint64_t{0xFFF};
    const uint64_t bias = lh::LoadBias(info.value(), start, pgoff);
    bool in_some = false;
    for (const lh::ElfLoad& other : info.value().loads) {
      in_some |= pgoff >= (other.offset & ~uint64_t{0xFFF}) && pgoff < other.offset + other.filesz;
    }
    if (!in_some && bias != start - pgoff) std::abort();
  }
  (void)lh::LoadBias(info.value(), start, UINT64_MAX & ~uint64_t{0xFFF});
  return 0;
}
