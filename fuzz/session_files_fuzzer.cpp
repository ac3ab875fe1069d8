// Fuzzes the session store's readers: samples.hvs (chunks, checksums, records, resync after
// damage), the aggregate file and session.json. One input feeds all three; the samples reader
// also gets the input behind a valid file header, so the fuzzer reaches the chunk parser.
#include <cstring>
#include <string_view>
#include <vector>

#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "memfd_file.h"

namespace store = hvprof::store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t checksum = 0;
  auto count = [&](const store::StoredSample& s) {
    checksum += s.ip + s.frames.size();
    for (uint64_t frame : s.frames) checksum ^= frame;
  };
  (void)store::ReadSamples(std::span<const uint8_t>(data, size), count);

  std::vector<uint8_t> with_header(sizeof(store::FileHeader) + size);
  store::FileHeader header{};
  std::memcpy(header.magic, store::kSamplesFileMagic, sizeof header.magic);
  header.version = store::kSamplesFileVersion;
  header.header_bytes = sizeof header;
  std::memcpy(with_header.data(), &header, sizeof header);
  if (size != 0) std::memcpy(with_header.data() + sizeof header, data, size);
  (void)store::ReadSamples(with_header, count);

  hvprof::fuzz::MemfdFile file(data, size);
  if (file.ok()) {
    auto aggregate = store::ReadAggregate(file.path());
    if (aggregate) {
      for (const auto& entry : aggregate.value().entries) checksum += entry.count;
    }
  }

  auto metadata = store::ParseMetadata(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (metadata) (void)store::SerializeMetadata(metadata.value());
  return checksum == 1 ? 1 : 0;  // keeps the reads from being optimised away; never 1 in practice
}
