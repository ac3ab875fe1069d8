// aggregate.hva: the session's samples counted, written and read back (WriteAggregate, ReadAggregate).
#include "hvprof/store/session.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <type_traits>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "hvprof/base/json_fields.h"

#include "address_counter.h"
#include "samples_decode.h"
#include "hvprof/base/files.h"
#include "hvprof/base/process.h"

namespace hvprof::store {

using Json = nlohmann::json;

bool AggregateKey::operator<(const AggregateKey& other) const {
  return std::tie(domain, mode, event, pid, ip) <
         std::tie(other.domain, other.mode, other.event, other.pid, other.ip);
}

namespace {

constexpr char kAggregateMagic[8] = {'H', 'V', 'P', 'R', 'O', 'F', 'A', '1'};

struct AggregateHeader {
  char magic[8];
  uint32_t version;  // 1: entries only; 2: a stack section, then the entries, stacks and words
  uint32_t entry_bytes;
  uint64_t entries;
  uint64_t samples;
  uint64_t source_bytes;
  uint32_t crc;    // of everything after the header
  uint32_t flags;  // version 2: kHasStacks; version 1: 0
};
static_assert(sizeof(AggregateHeader) == 48);
constexpr uint32_t kHasStacks = 1;
constexpr uint32_t kHasSlices = 2;  // version 3
constexpr uint32_t kHasImages = 4;  // version 4
// Version 4: after the header, a u64 (the size of the sections, inflated) and one zlib stream of
// the sections; the header's crc is of the inflated sections.
constexpr uint32_t kDeflated = 8;
// Version 5: the region table lists every region its per-process addresses fell in.
constexpr uint32_t kHasRegions = 16;
constexpr uint32_t kAggregateVersion = 5;

// Version 4: after the slice section header, the image table's size. The table itself is the
// file's last section: per image, u32 id, u16 path bytes, u16 build-id bytes, then both.
struct ImageSection {
  uint32_t images;
  uint32_t bytes;
};
static_assert(sizeof(ImageSection) == 8);
constexpr size_t kMaxImageText = 4096;

// Version 5: after the image section header, the region table's size. The table comes after the
// image table, last: per region, PackedRegion, then its path.
struct RegionSection {
  uint32_t regions;
  uint32_t bytes;
};
static_assert(sizeof(RegionSection) == 8);
struct PackedRegion {
  uint64_t start;
  uint64_t end;
  uint64_t time_ns;
  uint32_t pid;
  uint16_t domain;
  uint16_t path_bytes;
};
static_assert(sizeof(PackedRegion) == 32);

// Version 3: after the stack section header, the time slices' (zeros without them). `nonzero`:
// version 4, the counts kept (the slices with samples, over all entries); 0 before.
struct SliceSection {
  uint32_t slices;
  uint32_t nonzero;
  uint64_t first_ns;
  uint64_t last_ns;
};
static_assert(sizeof(SliceSection) == 24);

struct StackSection {
  uint64_t stacks;
  uint64_t words;
};
static_assert(sizeof(StackSection) == 16);

struct PackedStack {
  uint64_t count;
  uint32_t pid;
  uint32_t tid;
  uint16_t domain;
  uint8_t mode;
  uint8_t event;
  uint16_t vcpu;
  uint16_t pcpu;
  uint32_t length;
  uint32_t reserved;
};
static_assert(sizeof(PackedStack) == 32);

// The largest aggregate read: a cache of a samples file of tens of millions of samples.
constexpr uint64_t kMaxAggregateBytes = uint64_t{1} << 30;

struct PackedEntry {
  uint64_t ip;
  uint32_t pid;
  uint16_t domain;
  uint8_t mode;
  uint8_t event;
  uint64_t count;
};
static_assert(sizeof(PackedEntry) == 24);
// An aggregate's entries are read straight into AggregateEntry: the layouts must agree.
static_assert(sizeof(AggregateEntry) == sizeof(PackedEntry) && offsetof(AggregateEntry, count) == 16 &&
              offsetof(AggregateKey, ip) == 0 && offsetof(AggregateKey, pid) == 8 &&
              offsetof(AggregateKey, domain) == 12 && offsetof(AggregateKey, mode) == 14 &&
              offsetof(AggregateKey, event) == 15 && std::endian::native == std::endian::little);

// Inflates one zlib stream, read from a file a piece at a time, into the caller's buffers.
class Inflater {
 public:
  using Reader = std::function<Result<void>(void*, size_t, uint64_t)>;
  Inflater(Reader read, uint64_t from, uint64_t end) : read_(std::move(read)), at_(from), end_(end) {}
  ~Inflater() {
    if (started_) ::inflateEnd(&stream_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  Result<void> Init(const std::string& path) {
    path_ = path;
    if (::inflateInit(&stream_) != Z_OK) return MakeError(ErrorKind::kNoSpace, "cannot inflate {}: zlib", path);
    started_ = true;
    return Ok();
  }
  // Exactly `bytes` inflated bytes; a stream that ends first, or is damaged, is a damaged file.
  Result<void> Read(void* into, size_t bytes) {
    stream_.next_out = static_cast<Bytef*>(into);
    size_t left = bytes;
    while (left != 0) {
      if (ended_) return Damaged();
      if (stream_.avail_in == 0) HVPROF_TRYV(Fill());
      const uInt room = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
      stream_.avail_out = room;
      const int status = ::inflate(&stream_, Z_NO_FLUSH);
      left -= room - stream_.avail_out;
      if (status == Z_STREAM_END) {
        ended_ = true;
      } else if (status != Z_OK && !(status == Z_BUF_ERROR && stream_.avail_in == 0 && at_ < end_)) {
        return Damaged();
      }
    }
    return Ok();
  }
  // Whether the stream ended right after what was read, with nothing behind it in the file.
  bool AtEnd() {
    if (!ended_) {
      // The last section read may have ended exactly where the stream's end marker starts.
      uint8_t byte = 0;
      stream_.next_out = &byte;
      stream_.avail_out = 1;
      while (!ended_) {
        if (stream_.avail_in == 0 && !Fill()) return false;
        const int status = ::inflate(&stream_, Z_NO_FLUSH);
        if (status == Z_STREAM_END) ended_ = true;
        else if (status != Z_OK || stream_.avail_out == 0) return false;
      }
      if (stream_.avail_out == 0) return false;
    }
    return stream_.avail_in == 0 && at_ == end_;
  }

 private:
  Result<void> Fill() {
    if (at_ >= end_) return Damaged();
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(end_ - at_, sizeof buffer_));
    HVPROF_TRYV(read_(buffer_, piece, at_));
    at_ += piece;
    stream_.next_in = buffer_;
    stream_.avail_in = static_cast<uInt>(piece);
    return Ok();
  }
  Error Damaged() const {
    return Error(ErrorKind::kCorrupt, fmt::format("{} is not a valid aggregate (its compressed sections are damaged "
                                                  "or cut short)", path_));
  }

  Reader read_;
  uint64_t at_;
  uint64_t end_;
  z_stream stream_{};
  bool started_ = false;
  bool ended_ = false;
  std::string path_;
  Bytef buffer_[1 << 16];
};

}  // namespace

Result<void> WriteAggregate(const std::string& path, const Aggregate& aggregate, AggregateCompression compression) {
  std::vector<PackedEntry> packed;
  packed.reserve(aggregate.entries.size());
  for (const auto& entry : aggregate.entries) {
    packed.push_back({entry.key.ip, entry.key.pid, entry.key.domain, entry.key.mode,
                      entry.key.event, entry.count});
  }
  // Stacks are left out when they would take more than four times the room of the samples (decoding
  // those is then about as quick) or make the aggregate too large to read: a report reads the
  // samples.
  const uint64_t stack_bytes =
      aggregate.stacks.size() * sizeof(PackedStack) + aggregate.stack_words.size() * sizeof(uint64_t);
  const bool stacks = aggregate.has_stacks && stack_bytes <= 4 * aggregate.source_bytes &&
                      stack_bytes + packed.size() * sizeof(PackedEntry) <= kMaxAggregateBytes / 2;
  AggregateHeader header{};
  std::memcpy(header.magic, kAggregateMagic, 8);
  const bool slices = aggregate.time_slices != 0 && aggregate.slice_counts.size() ==
                                                        aggregate.entries.size() * aggregate.time_slices;
  // Version 4 keeps only the slices that count something: per entry a mask of them, then their
  // counts (a short process's row has samples in one or two of them).
  uint32_t nonzero = 0;
  if (slices) {
    for (uint32_t count : aggregate.slice_counts) nonzero += count != 0;
  }
  std::string image_table;
  for (const AggregateImage& image : aggregate.images) {
    const std::string_view image_path = std::string_view(image.path).substr(0, kMaxImageText);
    const std::string_view build_id = std::string_view(image.build_id).substr(0, kMaxImageText);
    const uint32_t id = image.id;
    const auto path_bytes = static_cast<uint16_t>(image_path.size());
    const auto id_bytes = static_cast<uint16_t>(build_id.size());
    image_table.append(reinterpret_cast<const char*>(&id), sizeof id);
    image_table.append(reinterpret_cast<const char*>(&path_bytes), sizeof path_bytes);
    image_table.append(reinterpret_cast<const char*>(&id_bytes), sizeof id_bytes);
    image_table.append(image_path);
    image_table.append(build_id);
  }
  std::string region_table;
  if (aggregate.has_regions) {
    for (const AggregateRegion& region : aggregate.regions) {
      const std::string_view region_path = std::string_view(region.path).substr(0, kMaxImageText);
      const PackedRegion record{region.start, region.end, region.time_ns, region.pid, region.domain,
                                static_cast<uint16_t>(region_path.size())};
      region_table.append(reinterpret_cast<const char*>(&record), sizeof record);
      region_table.append(region_path);
    }
  }
  header.version = kAggregateVersion;
  header.entry_bytes = sizeof(PackedEntry);
  header.entries = packed.size();
  header.samples = aggregate.samples;
  header.source_bytes = aggregate.source_bytes;
  header.flags = (stacks ? kHasStacks : 0) | (slices ? kHasSlices : 0) | (aggregate.images.empty() ? 0 : kHasImages) |
                 (aggregate.has_regions ? kHasRegions : 0);
  std::string bytes(sizeof header, '\0');
  const StackSection section{stacks ? aggregate.stacks.size() : 0, stacks ? aggregate.stack_words.size() : 0};
  bytes.append(reinterpret_cast<const char*>(&section), sizeof section);
  const SliceSection slice_section{slices ? aggregate.time_slices : 0, nonzero, slices ? aggregate.slices_first_ns : 0,
                                   slices ? aggregate.slices_last_ns : 0};
  bytes.append(reinterpret_cast<const char*>(&slice_section), sizeof slice_section);
  const ImageSection image_section{static_cast<uint32_t>(aggregate.images.size()),
                                   static_cast<uint32_t>(image_table.size())};
  bytes.append(reinterpret_cast<const char*>(&image_section), sizeof image_section);
  const RegionSection region_section{aggregate.has_regions ? static_cast<uint32_t>(aggregate.regions.size()) : 0,
                                     static_cast<uint32_t>(region_table.size())};
  bytes.append(reinterpret_cast<const char*>(&region_section), sizeof region_section);
  bytes.append(reinterpret_cast<const char*>(packed.data()), packed.size() * sizeof(PackedEntry));
  if (stacks) {
    bytes.reserve(bytes.size() + section.stacks * sizeof(PackedStack) + section.words * sizeof(uint64_t));
    for (const CountedStack& stack : aggregate.stacks) {
      const PackedStack record{stack.count,    stack.key.pid,  stack.key.tid,  stack.key.domain, stack.key.mode,
                               stack.key.event, stack.key.vcpu, stack.key.pcpu, stack.length,     0};
      bytes.append(reinterpret_cast<const char*>(&record), sizeof record);
    }
    bytes.append(reinterpret_cast<const char*>(aggregate.stack_words.data()),
                 aggregate.stack_words.size() * sizeof(uint64_t));
  }
  if (slices) {
    const uint32_t n = aggregate.time_slices;
    for (size_t e = 0; e < aggregate.entries.size(); ++e) {
      uint64_t mask = 0;
      for (uint32_t k = 0; k < n; ++k) mask |= uint64_t{aggregate.slice_counts[e * n + k] != 0} << k;
      bytes.append(reinterpret_cast<const char*>(&mask), sizeof mask);
    }
    for (uint32_t count : aggregate.slice_counts) {
      if (count != 0) bytes.append(reinterpret_cast<const char*>(&count), sizeof count);
    }
  }
  bytes.append(image_table);
  bytes.append(region_table);
  header.crc = static_cast<uint32_t>(::crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data() + sizeof header),
                                               bytes.size() - sizeof header));
  if (compression == AggregateCompression::kPlain) {
    std::memcpy(bytes.data(), &header, sizeof header);
    return WriteFileAtomically(path, bytes);
  }
  header.flags |= kDeflated;
  const uint64_t inflated = bytes.size() - sizeof header;
  uLongf room = ::compressBound(inflated);
  std::string file(sizeof header + sizeof inflated + room, '\0');
  std::memcpy(file.data(), &header, sizeof header);
  std::memcpy(file.data() + sizeof header, &inflated, sizeof inflated);
  const int status = ::compress2(reinterpret_cast<Bytef*>(file.data() + sizeof header + sizeof inflated), &room,
                                 reinterpret_cast<const Bytef*>(bytes.data() + sizeof header), inflated, 1);
  if (status != Z_OK) return MakeError(ErrorKind::kNoSpace, "cannot compress {}: zlib error {}", path, status);
  file.resize(sizeof header + sizeof inflated + room);
  bytes = {};  // the sections, no longer needed while the file is written
  return WriteFileAtomically(path, file);
}

namespace {

// The header of an aggregate of a version this reader knows, with the flags that version has.
bool HeaderValid(const AggregateHeader& header) {
  return std::memcmp(header.magic, kAggregateMagic, 8) == 0 && header.version >= 1 &&
         header.version <= kAggregateVersion && header.entry_bytes == sizeof(PackedEntry) &&
         !(header.version == 1 && header.flags != 0) && !(header.version == 2 && (header.flags & ~kHasStacks) != 0) &&
         !(header.version == 3 && (header.flags & ~(kHasStacks | kHasSlices)) != 0) &&
         !(header.version == 4 && (header.flags & kHasRegions) != 0) &&
         (header.flags & ~(kHasStacks | kHasSlices | kHasImages | kDeflated | kHasRegions)) == 0;
}

// The sections' headers agree with the flags: stacks, images and regions only where flagged, no
// more slices than kMaxTimeSlices, tables large enough for their records.
bool SectionsValid(const AggregateHeader& header, const StackSection& section, const SliceSection& slices,
                   const ImageSection& images, const RegionSection& regions) {
  if ((header.flags & kHasStacks) == 0 && (section.stacks != 0 || section.words != 0)) return false;
  if (slices.slices > kMaxTimeSlices) return false;
  if (header.version >= 4 && (((header.flags & kHasImages) != 0) != (images.images != 0) ||
                              images.images > images.bytes / 8)) {
    return false;
  }
  return !(((header.flags & kHasRegions) == 0 && (regions.regions != 0 || regions.bytes != 0)) ||
           regions.regions > regions.bytes / sizeof(PackedRegion));
}

// The sections fill the `left` bytes after their headers exactly: the entries, the slice counts
// (entries x slices u32, at most 64 x the entries, which fit the file; version 4: a mask per
// entry, then the counts the masks have bits for), the tables, then the stacks and their words.
// Says how many bytes the slice counts take.
bool SectionsFit(const AggregateHeader& header, const StackSection& section, const SliceSection& slices,
                 const ImageSection& images, const RegionSection& regions, uint64_t left, uint64_t* slice_bytes) {
  const bool sparse = header.version >= 4;
  if (header.entries > left / sizeof(PackedEntry)) return false;
  const uint64_t after_entries = left - header.entries * sizeof(PackedEntry);
  if (sparse && slices.slices == 0 && slices.nonzero != 0) return false;
  *slice_bytes = sparse ? (slices.slices != 0 ? header.entries * sizeof(uint64_t) : 0) +
                              uint64_t{slices.nonzero} * sizeof(uint32_t)
                        : header.entries * slices.slices * sizeof(uint32_t);
  const uint64_t table_bytes = uint64_t{images.bytes} + regions.bytes;
  if (*slice_bytes > after_entries || table_bytes > after_entries - *slice_bytes) return false;
  const uint64_t stack_room = after_entries - *slice_bytes - table_bytes;
  return section.stacks <= stack_room / sizeof(PackedStack) &&
         section.words == (stack_room - section.stacks * sizeof(PackedStack)) / sizeof(uint64_t) &&
         (stack_room - section.stacks * sizeof(PackedStack)) % sizeof(uint64_t) == 0;
}

// Version 4's sparse time slices: a mask per entry of the slices it has counts in, then those
// counts, none zero; into `slice_counts` (entries x slices). False when they do not fit.
bool UnpackSlices(const std::vector<uint64_t>& masks, const std::vector<uint32_t>& counts, uint32_t n,
                  std::vector<uint32_t>& slice_counts) {
  const uint64_t valid = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  size_t next = 0;
  for (size_t e = 0; e < masks.size(); ++e) {
    if ((masks[e] & ~valid) != 0) return false;
    for (uint32_t k = 0; k < n; ++k) {
      if ((masks[e] >> k & 1) == 0) continue;
      if (next == counts.size() || counts[next] == 0) return false;
      slice_counts[e * n + k] = counts[next++];
    }
  }
  return next == counts.size();
}

// The image table: each image's id (1, 2, ...), path and build-id, and nothing else. False when
// it is damaged.
bool ReadImageTable(const std::string& image_table, uint64_t images, Aggregate& aggregate) {
  for (size_t at = 0, i = 0; i < images; ++i) {
    uint32_t id = 0;
    uint16_t path_bytes = 0, id_bytes = 0;
    if (image_table.size() - at < 8) return false;
    std::memcpy(&id, image_table.data() + at, 4);
    std::memcpy(&path_bytes, image_table.data() + at + 4, 2);
    std::memcpy(&id_bytes, image_table.data() + at + 6, 2);
    at += 8;
    if (id != i + 1 || image_table.size() - at < size_t{path_bytes} + id_bytes) return false;
    aggregate.images.push_back({id, image_table.substr(at, path_bytes), image_table.substr(at + path_bytes, id_bytes)});
    at += size_t{path_bytes} + id_bytes;
    if (i + 1 == images && at != image_table.size()) return false;
  }
  return true;
}

// Regions: each a range of user space with a path, in order of (domain, pid, start), one per
// start; the table holds them and nothing else. False when it is damaged.
bool ReadRegionTable(const std::string& region_table, uint64_t regions, Aggregate& aggregate) {
  for (size_t at = 0, i = 0; i < regions; ++i) {
    PackedRegion record;
    if (region_table.size() - at < sizeof record) return false;
    std::memcpy(&record, region_table.data() + at, sizeof record);
    at += sizeof record;
    if (region_table.size() - at < record.path_bytes || record.start >= record.end || (record.end - 1) >> 47 != 0) {
      return false;
    }
    AggregateRegion region{record.domain, record.pid, record.start, record.end, record.time_ns,
                           region_table.substr(at, record.path_bytes)};
    at += record.path_bytes;
    if (!aggregate.regions.empty()) {
      const AggregateRegion& last = aggregate.regions.back();
      if (std::tie(last.domain, last.pid, last.start) >= std::tie(region.domain, region.pid, region.start)) {
        return false;
      }
    }
    aggregate.regions.push_back(std::move(region));
    if (i + 1 == regions && at != region_table.size()) return false;
  }
  if (regions == 0 && !region_table.empty()) return false;
  return true;
}

// Every entry's mode is one, an image word names an image of the table, and only an entry across
// processes has one; such an entry's other addresses are the kernel's or the hypervisor's.
Result<void> CheckEntries(const std::string& path, const Aggregate& aggregate) {
  for (uint64_t i = 0; i < aggregate.entries.size(); ++i) {
    const uint8_t mode = aggregate.entries[i].key.mode;
    if (!sample_mode::IsValid(mode)) return MakeError(ErrorKind::kCorrupt, "{}: entry {} has mode {}", path, i, mode);
  }
  for (const AggregateEntry& entry : aggregate.entries) {
    const bool word = IsImageWord(entry.key.ip);
    if (entry.key.pid == kAnyProcess && !word && (entry.key.ip >> 47) == 0) {
      return MakeError(ErrorKind::kCorrupt,
                       "{}: an entry counted across processes has user address {:#x}, which names no image", path,
                       entry.key.ip);
    }
    if (word && entry.key.pid != kAnyProcess) {
      return MakeError(ErrorKind::kCorrupt, "{}: an entry of pid {} has address {:#x}, at which no CPU runs", path,
                       entry.key.pid, entry.key.ip);
    }
    if (word && ImageOfWord(entry.key.ip) > aggregate.images.size()) {
      return MakeError(ErrorKind::kCorrupt, "{}: an entry names image {}, which it does not list", path,
                       ImageOfWord(entry.key.ip));
    }
  }
  return Ok();
}

// Each entry's slices add up to its count: the slices are the entries, cut by time.
Result<void> CheckSlices(const std::string& path, const SliceSection& slice_section, Aggregate& aggregate) {
  if (slice_section.slices != 0) {
    const uint32_t n = slice_section.slices;
    for (uint64_t i = 0; i < aggregate.entries.size(); ++i) {
      uint64_t sum = 0;
      for (uint32_t k = 0; k < n; ++k) sum += aggregate.slice_counts[i * n + k];
      if (sum != aggregate.entries[i].count) {
        return MakeError(ErrorKind::kCorrupt, "{}: entry {}'s time slices count {} samples where it counts {}", path, i,
                         sum, aggregate.entries[i].count);
      }
    }
    aggregate.time_slices = n;
    aggregate.slices_first_ns = slice_section.first_ns;
    aggregate.slices_last_ns = slice_section.last_ns;
  }
  return Ok();
}

// Every stack has the sampled address and at most the deepest chain; together they hold the
// words and count the samples, no more.
Result<void> UnpackStacks(const std::string& path, uint64_t header_samples, uint64_t section_words,
                          const std::vector<PackedStack>& packed, Aggregate& aggregate) {
  aggregate.has_stacks = true;
  aggregate.stacks.resize(packed.size());
  uint64_t words = 0, samples = 0;
  for (uint64_t i = 0; i < packed.size(); ++i) {
    const PackedStack& record = packed[i];
    if (!sample_mode::IsValid(record.mode) || record.length == 0 || record.length > kMaxFrames + 1 || record.reserved != 0 ||
        __builtin_add_overflow(samples, record.count, &samples)) {
      return MakeError(ErrorKind::kCorrupt, "{}: stack {} is damaged", path, i);
    }
    aggregate.stacks[i] = {{record.pid, record.tid, record.domain, record.mode, record.event, record.vcpu, record.pcpu},
                           static_cast<uint32_t>(words),
                           record.length,
                           record.count};
    words += record.length;
  }
  for (uint64_t word : aggregate.stack_words) {
    if (IsImageWord(word) && (ImageOfWord(word) == 0 || ImageOfWord(word) > aggregate.images.size())) {
      return MakeError(ErrorKind::kCorrupt, "{}: a stack names image {}, which it does not list", path,
                       ImageOfWord(word));
    }
  }
  if (words != section_words || samples != header_samples) {
    return MakeError(ErrorKind::kCorrupt, "{}: its stacks hold {} words and {} samples where it says {} and {}", path,
                     words, samples, section_words, header_samples);
  }
  return Ok();
}

}  // namespace

Result<Aggregate> ReadAggregate(const std::string& path) {
  // Each section is read straight into where it is kept (the entries' layout in memory is the
  // file's), the checksum taken as it goes: an aggregate holds tens of megabytes of stacks, and
  // a copy of the whole file cost as much as reading it.
  HVPROF_TRY(fd, OpenRegularFile(path, O_RDONLY));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, fmt::format("cannot stat {}", path));
  // `size` and `offset` count the file's bytes as they are, or, deflated, the header's and the
  // inflated sections': every section is checked against that room before it is read.
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > kMaxAggregateBytes) {
    return MakeError(ErrorKind::kCorrupt, "{} is {} bytes, more than an aggregate may be ({})", path, size,
                     kMaxAggregateBytes);
  }
  uint64_t offset = 0;
  uLong crc = ::crc32_z(0, nullptr, 0);
  auto pread_exact = [&](void* into, size_t bytes, uint64_t at) -> Result<void> {
    auto* out = static_cast<char*>(into);
    for (size_t done = 0; done < bytes;) {
      const ssize_t n = ::pread(fd.get(), out + done, bytes - done, static_cast<off_t>(at + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError(errno, fmt::format("cannot read {}", path));
      if (n == 0) return MakeError(ErrorKind::kCorrupt, "{} is truncated", path);
      done += static_cast<size_t>(n);
    }
    return Ok();
  };
  // A deflated file's sections are inflated straight into where they are kept, the file read a
  // piece at a time.
  std::optional<Inflater> inflater;
  auto read_exact = [&](void* into, size_t bytes, bool checksum) -> Result<void> {
    if (inflater) {
      HVPROF_TRYV(inflater->Read(into, bytes));
    } else {
      HVPROF_TRYV(pread_exact(into, bytes, offset));
    }
    if (checksum && bytes != 0) crc = ::crc32_z(crc, reinterpret_cast<const Bytef*>(into), bytes);
    offset += bytes;
    return Ok();
  };
  AggregateHeader header;
  if (size < sizeof header) return MakeError(ErrorKind::kCorrupt, "{} is truncated", path);
  HVPROF_TRYV(read_exact(&header, sizeof header, false));
  auto invalid = [&path] {
    return MakeError(ErrorKind::kCorrupt, "{} is not a valid aggregate (damaged or truncated)", path);
  };
  if (!HeaderValid(header)) return invalid();
  if ((header.flags & kDeflated) != 0) {
    uint64_t inflated = 0;
    if (size - offset < sizeof inflated) return invalid();
    HVPROF_TRYV(pread_exact(&inflated, sizeof inflated, offset));
    if (inflated > kMaxAggregateBytes) {
      return MakeError(ErrorKind::kCorrupt, "{} inflates to {} bytes, more than an aggregate may be ({})", path,
                       inflated, kMaxAggregateBytes);
    }
    inflater.emplace(pread_exact, offset + sizeof inflated, size);
    HVPROF_TRYV(inflater->Init(path));
    size = sizeof header + inflated;
  }
  // The sections' headers (as many as the version has), each checked against what is left of the
  // file before it is read.
  StackSection section{0, 0};
  SliceSection slice_section{0, 0, 0, 0};
  ImageSection image_section{0, 0};
  RegionSection region_section{0, 0};
  for (const auto& [version, into, bytes] : {std::tuple{2u, static_cast<void*>(&section), sizeof section},
                                             std::tuple{3u, static_cast<void*>(&slice_section), sizeof slice_section},
                                             std::tuple{4u, static_cast<void*>(&image_section), sizeof image_section},
                                             std::tuple{5u, static_cast<void*>(&region_section), sizeof region_section}}) {
    if (header.version < version) break;
    if (size - offset < bytes) return invalid();
    HVPROF_TRYV(read_exact(into, bytes, true));
  }
  const bool sparse = header.version >= 4;
  uint64_t slice_bytes = 0;
  if (!SectionsValid(header, section, slice_section, image_section, region_section) ||
      !SectionsFit(header, section, slice_section, image_section, region_section, size - offset, &slice_bytes)) {
    return invalid();
  }
  Aggregate aggregate;
  aggregate.samples = header.samples;
  aggregate.source_bytes = header.source_bytes;
  aggregate.entries.resize(header.entries);
  HVPROF_TRYV(read_exact(aggregate.entries.data(), header.entries * sizeof(AggregateEntry), true));
  std::vector<PackedStack> packed(section.stacks);
  HVPROF_TRYV(read_exact(packed.data(), packed.size() * sizeof(PackedStack), true));
  aggregate.stack_words.resize(section.words);
  HVPROF_TRYV(read_exact(aggregate.stack_words.data(), section.words * sizeof(uint64_t), true));
  aggregate.slice_counts.resize(header.entries * slice_section.slices);
  if (!sparse) {
    HVPROF_TRYV(read_exact(aggregate.slice_counts.data(), slice_bytes, true));
  } else if (slice_section.slices != 0) {
    std::vector<uint64_t> masks(header.entries);
    HVPROF_TRYV(read_exact(masks.data(), masks.size() * sizeof(uint64_t), true));
    std::vector<uint32_t> counts(slice_section.nonzero);
    HVPROF_TRYV(read_exact(counts.data(), counts.size() * sizeof(uint32_t), true));
    if (!UnpackSlices(masks, counts, slice_section.slices, aggregate.slice_counts)) return invalid();
  }
  std::string image_table(image_section.bytes, '\0');
  HVPROF_TRYV(read_exact(image_table.data(), image_table.size(), true));
  std::string region_table(region_section.bytes, '\0');
  HVPROF_TRYV(read_exact(region_table.data(), region_table.size(), true));
  if (inflater && !inflater->AtEnd()) return invalid();  // more than the sections, or the stream not ended
  if (static_cast<uint32_t>(crc) != header.crc) {
    return MakeError(ErrorKind::kCorrupt, "{} fails its checksum (damaged)", path);
  }
  aggregate.has_regions = (header.flags & kHasRegions) != 0;
  if (!ReadImageTable(image_table, image_section.images, aggregate) ||
      !ReadRegionTable(region_table, region_section.regions, aggregate)) {
    return invalid();
  }
  if ((!sparse && slice_section.nonzero != 0) || ((header.flags & kHasSlices) != 0) != (slice_section.slices != 0)) {
    return invalid();
  }
  HVPROF_TRYV(CheckEntries(path, aggregate));
  HVPROF_TRYV(CheckSlices(path, slice_section, aggregate));
  if ((header.flags & kHasStacks) == 0) return aggregate;
  HVPROF_TRYV(UnpackStacks(path, header.samples, section.words, packed, aggregate));
  return aggregate;
}

}  // namespace hvprof::store
