// What the store's tests do to the session's chunk files (samples.hvs, sched.hvs): read their
// bytes, find their chunks, and seal a chunk again after changing it.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "hvprof/store/chunk_file.h"

namespace hvprof::testing {

inline std::vector<uint8_t> Bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), {}};
}

// The chunks of a file: where each starts and how long it is, header included.
struct ChunkSpan {
  size_t offset;
  size_t bytes;
  uint32_t records;
};

inline std::vector<ChunkSpan> Chunks(const std::vector<uint8_t>& file) {
  std::vector<ChunkSpan> chunks;
  size_t position = sizeof(store::FileHeader);
  while (position + sizeof(store::ChunkHeader) <= file.size()) {
    store::ChunkHeader header;
    std::memcpy(&header, file.data() + position, sizeof header);
    chunks.push_back({position, sizeof header + header.payload_bytes, header.records});
    position += sizeof header + header.payload_bytes;
  }
  return chunks;
}

inline std::vector<uint8_t> Slice(const std::vector<uint8_t>& bytes, const ChunkSpan& chunk) {
  return {bytes.begin() + static_cast<ptrdiff_t>(chunk.offset),
          bytes.begin() + static_cast<ptrdiff_t>(chunk.offset + chunk.bytes)};
}

// Makes both checksums of the chunk at `offset` right again after a test changed its header or
// payload, so that a reader gets past them to what was changed.
inline void Reseal(std::vector<uint8_t>& file, size_t offset) {
  store::ChunkHeader header;
  std::memcpy(&header, file.data() + offset, sizeof header);
  header.payload_crc = static_cast<uint32_t>(
      ::crc32_z(0, file.data() + offset + sizeof header, header.payload_bytes));
  header.header_crc = static_cast<uint32_t>(
      ::crc32_z(0, reinterpret_cast<const Bytef*>(&header), offsetof(store::ChunkHeader, header_crc)));
  std::memcpy(file.data() + offset, &header, sizeof header);
}

}  // namespace hvprof::testing
