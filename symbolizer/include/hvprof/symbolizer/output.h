// Reading address lists and printing answers: the line protocol of hvprof-symbolize, kept in the
// library so other tools print the same way and the CLI stays a thin main.
//
// Text output, one line per input address (frames innermost first):
//   functions:  NAME+0xOFF
//   lines:      NAME+0xOFF at FILE:LINE:COLUMN          (??:0 when no line is known)
//   inlines:    INNER at FILE:LINE:COL inlined into OUTER+0xOFF at FILE:LINE:COL
//   module:     ... [kvm]
//   failure:    ?? (REASON: detail)                     REASON as in ReasonName()
// With print_address each line starts with "0xADDR: ".
//
// JSON lines output, one object per input address:
//   {"address":"0x..","frames":[{"function":"..","start":"0x..","offset":12,"file":"..",
//    "line":3,"column":7,"inlined":false}],"module":"kvm","reason":"none","detail":""}
// Addresses are hex strings (64-bit values do not fit a JSON double).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "hvprof/symbolizer/types.h"

namespace hvprof::symbolizer {

// A line of input that is not an address. It came right before addresses[before].
struct InvalidLine {
  size_t before = 0;
  std::string_view text;
};

struct ParsedAddresses {
  std::vector<uint64_t> addresses;
  std::vector<InvalidLine> invalid;  // views into the parsed text
  void Clear() {
    addresses.clear();
    invalid.clear();
  }
};

// Parses one hex address (optional 0x/0X, at most 16 digits). Returns false if malformed.
bool ParseHexAddress(std::string_view text, uint64_t* value);

// Parses the complete lines of `text` (one address per line, blanks around it ignored, empty
// lines skipped) and appends them to `out`. Unless `at_eof`, a last line without '\n' is left
// alone. Returns how many bytes were consumed.
size_t ParseAddressLines(std::string_view text, bool at_eof, ParsedAddresses* out);

enum class OutputStyle : uint8_t { kText, kJson };

struct PrintOptions {
  OutputStyle style = OutputStyle::kText;
  bool print_address = false;  // text: prefix "0xADDR: " (JSON always has the address)
};

void AppendSymbolization(const Symbolization& symbolization, const PrintOptions& options,
                         std::string* out);
void AppendInvalidInput(std::string_view text, const PrintOptions& options, std::string* out);

// Appends `text` as a JSON string literal (quoted and escaped).
void AppendJsonString(std::string_view text, std::string* out);

class OutputWriter;

// Prints whole batches: each distinct address is formatted once (in address order), then the
// lines are copied out in input order, with the invalid input lines in their places.
class BatchPrinter {
 public:
  explicit BatchPrinter(PrintOptions options) : options_(options) {}
  Result<void> Print(const BatchResult& batch, std::span<const InvalidLine> invalid,
                     OutputWriter* writer);

 private:
  PrintOptions options_;
  std::string formatted_;
  std::vector<size_t> offsets_;
  std::string scratch_;
};

// A buffered writer for large outputs: Append() (or Room() and Commit()), call MaybeFlush()
// now and then.
class OutputWriter {
 public:
  explicit OutputWriter(int fd, size_t flush_at = size_t{1} << 20)
      : fd_(fd), flush_at_(flush_at) {}
  void Append(std::string_view text);
  // Room for `bytes` more bytes at the end of the buffer: write there, then Commit() what was
  // written (at most `bytes`).
  char* Room(size_t bytes) {
    if (capacity_ - size_ < bytes) Grow(bytes);
    return buffer_.get() + size_;
  }
  void Commit(size_t bytes) { size_ += bytes; }
  Result<void> MaybeFlush() { return size_ >= flush_at_ ? Flush() : Ok(); }
  Result<void> Flush();

 private:
  void Grow(size_t bytes);

  int fd_;
  size_t flush_at_;
  std::unique_ptr<char[]> buffer_;  // not zeroed: pages are touched only as they are written
  size_t capacity_ = 0;
  size_t size_ = 0;
};

}  // namespace hvprof::symbolizer
