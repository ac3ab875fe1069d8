#include "hvprof/symbolizer/output.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>

#include "hvprof/base/files.h"

namespace hvprof::symbolizer {
namespace {

constexpr uint8_t kBad = 0xff;

constexpr std::array<uint8_t, 256> MakeHexTable() {
  std::array<uint8_t, 256> t{};
  for (auto& v : t) v = kBad;
  for (int c = '0'; c <= '9'; ++c) t[c] = static_cast<uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[c] = static_cast<uint8_t>(c - 'a' + 10);
  for (int c = 'A'; c <= 'F'; ++c) t[c] = static_cast<uint8_t>(c - 'A' + 10);
  return t;
}
constexpr std::array<uint8_t, 256> kHex = MakeHexTable();

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// "0x" and the lower-case hex digits of `value`, written at the end of `buffer`.
std::string_view FormatHex(uint64_t value, char (&buffer)[18]) {
  char* end = buffer + sizeof buffer;
  char* p = end;
  do {
    *--p = "0123456789abcdef"[value & 15];
    value >>= 4;
  } while (value != 0);
  *--p = 'x';
  *--p = '0';
  return {p, static_cast<size_t>(end - p)};
}

void AppendHex(uint64_t value, std::string* out) {
  char buffer[18];
  out->append(FormatHex(value, buffer));
}

void AppendDecimal(uint64_t value, std::string* out) {
  char buffer[24];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  out->append(buffer, static_cast<size_t>(end - buffer));
}

// Length of the valid UTF-8 sequence at s[0], or 0.
size_t Utf8Length(std::string_view s) {
  auto c = static_cast<unsigned char>(s[0]);
  size_t n;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) return 0;
  }
  return n;
}

bool ShowsLocation(const Symbolization& s, const Frame& f) {
  return !f.file.empty() || f.line != 0 || s.reason == Reason::kNoLineInfo;
}

void AppendTextFrame(const Symbolization& s, const Frame& f, std::string* out) {
  if (f.function.empty()) {
    out->append("??");
  } else {
    out->append(f.function);
  }
  if (!f.inlined) {
    out->push_back('+');
    AppendHex(f.offset, out);
  }
  if (ShowsLocation(s, f)) {
    out->append(" at ");
    out->append(f.file.empty() ? std::string_view("??") : f.file);
    out->push_back(':');
    AppendDecimal(f.line, out);
    if (f.column != 0) {
      out->push_back(':');
      AppendDecimal(f.column, out);
    }
  }
}

}  // namespace

bool ParseHexAddress(std::string_view text, uint64_t* value) {
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
  }
  if (text.empty() || text.size() > 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    uint8_t d = kHex[static_cast<unsigned char>(c)];
    if (d == kBad) return false;
    v = (v << 4) | d;
  }
  *value = v;
  return true;
}

size_t ParseAddressLines(std::string_view text, bool at_eof, ParsedAddresses* out) {
  const char* data = text.data();
  const size_t size = text.size();
  size_t position = 0;
  while (position < size) {
    // The usual line, "0x" and 1 to 16 hex digits then a newline, in one pass.
    size_t p = position;
    if (size - p >= 2 && data[p] == '0' && (data[p + 1] == 'x' || data[p + 1] == 'X')) p += 2;
    const size_t digits_begin = p;
    const size_t digits_end = std::min(size, p + 17);
    uint64_t v = 0;
    uint8_t d;
    while (p < digits_end && (d = kHex[static_cast<unsigned char>(data[p])]) != kBad) {
      v = (v << 4) | d;
      ++p;
    }
    if (p < size && data[p] == '\n' && p != digits_begin && p - digits_begin <= 16) {
      out->addresses.push_back(v);
      position = p + 1;
      continue;
    }
    // Anything else: blanks around the address, a last line without a newline, invalid lines.
    const void* newline = std::memchr(data + position, '\n', size - position);
    size_t end;
    size_t next;
    if (newline == nullptr) {
      if (!at_eof) break;
      end = size;
      next = size;
    } else {
      end = static_cast<size_t>(static_cast<const char*>(newline) - data);
      next = end + 1;
    }
    size_t begin = position;
    position = next;
    while (begin < end && IsBlank(data[begin])) ++begin;
    while (end > begin && IsBlank(data[end - 1])) --end;
    if (begin == end) continue;
    std::string_view line(data + begin, end - begin);
    uint64_t value = 0;
    if (ParseHexAddress(line, &value)) {
      out->addresses.push_back(value);
    } else {
      out->invalid.push_back({out->addresses.size(), line});
    }
  }
  return position;
}

void AppendJsonString(std::string_view text, std::string* out) {
  out->push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out->append(buffer);
      ++i;
    } else if (c < 0x80) {
      out->push_back(static_cast<char>(c));
      ++i;
    } else if (size_t n = Utf8Length(text.substr(i)); n != 0) {
      out->append(text.substr(i, n));
      i += n;
    } else {
      out->append("\\ufffd");
      ++i;
    }
  }
  out->push_back('"');
}

void AppendSymbolization(const Symbolization& s, const PrintOptions& options, std::string* out) {
  if (options.style == OutputStyle::kJson) {
    out->append("{\"address\":\"");
    AppendHex(s.address, out);
    out->append("\",\"frames\":[");
    for (size_t i = 0; i < s.frames.size(); ++i) {
      const Frame& f = s.frames[i];
      if (i != 0) out->push_back(',');
      out->append("{\"function\":");
      AppendJsonString(f.function, out);
      out->append(",\"start\":\"");
      AppendHex(f.function_start, out);
      out->append("\",\"offset\":");
      AppendDecimal(f.offset, out);
      if (ShowsLocation(s, f)) {
        out->append(",\"file\":");
        AppendJsonString(f.file, out);
        out->append(",\"line\":");
        AppendDecimal(f.line, out);
        out->append(",\"column\":");
        AppendDecimal(f.column, out);
      }
      out->append(f.inlined ? ",\"inlined\":true}" : ",\"inlined\":false}");
    }
    out->append("],");
    if (!s.module.empty()) {
      out->append("\"module\":");
      AppendJsonString(s.module, out);
      out->push_back(',');
    }
    out->append("\"reason\":\"");
    out->append(ReasonName(s.reason));
    out->push_back('"');
    if (!s.detail.empty()) {
      out->append(",\"detail\":");
      AppendJsonString(s.detail, out);
    }
    out->append("}\n");
    return;
  }
  if (s.frames.size() == 1 && !options.print_address && s.module.empty() &&
      !s.frames[0].inlined && !ShowsLocation(s, s.frames[0])) {
    // The usual answer without lines, "function+0xoffset", in one step.
    const Frame& f = s.frames[0];
    const std::string_view name = f.function.empty() ? std::string_view("??") : f.function;
    char buffer[18];
    const std::string_view hex = FormatHex(f.offset, buffer);
    const size_t at = out->size();
    out->resize(at + name.size() + hex.size() + 2);
    char* p = out->data() + at;
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    *p++ = '+';
    std::memcpy(p, hex.data(), hex.size());
    p[hex.size()] = '\n';
    return;
  }
  if (options.print_address) {
    AppendHex(s.address, out);
    out->append(": ");
  }
  if (!s.resolved()) {
    out->append("?? (");
    out->append(ReasonName(s.reason));
    if (!s.detail.empty()) {
      out->append(": ");
      out->append(s.detail);
    }
    out->append(")\n");
    return;
  }
  for (size_t i = 0; i < s.frames.size(); ++i) {
    if (i != 0) out->append(" inlined into ");
    AppendTextFrame(s, s.frames[i], out);
  }
  if (!s.module.empty()) {
    out->append(" [");
    out->append(s.module);
    out->push_back(']');
  }
  out->push_back('\n');
}

void AppendInvalidInput(std::string_view text, const PrintOptions& options, std::string* out) {
  if (options.style == OutputStyle::kJson) {
    out->append("{\"input\":");
    AppendJsonString(text, out);
    out->append(",\"frames\":[],\"reason\":\"invalid-input\",\"detail\":\"not a hex address\"}\n");
    return;
  }
  if (options.print_address) {
    out->append(text);
    out->append(": ");
  }
  out->append("?? (invalid-input: not a hex address)\n");
}

Result<void> BatchPrinter::Print(const BatchResult& batch, std::span<const InvalidLine> invalid,
                                 OutputWriter* writer) {
  // Each distinct address is formatted once, then copied out once per input line.
  const size_t unique = batch.unique_count();
  formatted_.clear();
  offsets_.resize(unique + 1);
  for (size_t u = 0; u < unique; ++u) {
    offsets_[u] = formatted_.size();
    AppendSymbolization(batch.unique(u), options_, &formatted_);
  }
  offsets_[unique] = formatted_.size();
  // Slack after the last answer, so that answers are copied in whole blocks of kBlock bytes.
  constexpr size_t kBlock = 16;
  formatted_.append(kBlock, '\0');
  const char* text = formatted_.data();
  const std::span<const uint32_t> order = batch.unique_indexes();
  size_t next_invalid = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    while (next_invalid < invalid.size() && invalid[next_invalid].before <= i) {
      scratch_.clear();
      AppendInvalidInput(invalid[next_invalid++].text, options_, &scratch_);
      writer->Append(scratch_);
    }
    const size_t begin = offsets_[order[i]];
    const size_t length = offsets_[order[i] + 1] - begin;
    char* to = writer->Room(length + kBlock);
    for (size_t k = 0; k < length; k += kBlock) std::memcpy(to + k, text + begin + k, kBlock);
    writer->Commit(length);
    HVPROF_TRYV(writer->MaybeFlush());
  }
  while (next_invalid < invalid.size()) {
    scratch_.clear();
    AppendInvalidInput(invalid[next_invalid++].text, options_, &scratch_);
    writer->Append(scratch_);
  }
  return Ok();
}

void OutputWriter::Grow(size_t bytes) {
  const size_t capacity = std::max({capacity_ * 2, size_ + bytes, flush_at_ + 4096});
  std::unique_ptr<char[]> grown(new char[capacity]);
  if (size_ != 0) std::memcpy(grown.get(), buffer_.get(), size_);
  buffer_ = std::move(grown);
  capacity_ = capacity;
}

void OutputWriter::Append(std::string_view text) {
  std::memcpy(Room(text.size()), text.data(), text.size());
  Commit(text.size());
}

Result<void> OutputWriter::Flush() {
  if (size_ == 0) return Ok();
  auto bytes = std::as_bytes(std::span(buffer_.get(), size_));
  auto written = WriteAll(fd_, bytes, "output");
  size_ = 0;
  return written;
}

}  // namespace hvprof::symbolizer
