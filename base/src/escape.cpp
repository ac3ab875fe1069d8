#include "hvprof/base/escape.h"

#include <fmt/format.h>

#include "hvprof/base/utf8.h"

namespace hvprof {

namespace {

// The length of the UTF-8 sequence starting at text[i] if it may be shown as it is, or 0 if it
// is not valid UTF-8 or must be escaped.
size_t Utf8Length(std::string_view text, size_t i) {
  const auto [length, code] = DecodeUtf8(text, i);
  if (length == 0) return 0;
  // C1 control characters (U+0080 to U+009F) act on terminals as ESC sequences do; the
  // bidirectional controls reorder what is shown around them, and the line and paragraph
  // separators break lines.
  if (code >= 0x80 && code <= 0x9F) return 0;
  if (code == 0x061C || code == 0x200E || code == 0x200F || (code >= 0x202A && code <= 0x202E) ||
      (code >= 0x2066 && code <= 0x2069) || code == 0x2028 || code == 0x2029) {
    return 0;
  }
  return length;
}

}  // namespace

std::string EscapeForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
      ++i;
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (const size_t length = c >= 0x80 ? Utf8Length(text, i) : 0; length != 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  return out;
}

std::string RedactUrls(std::string_view text) {
  std::string out(text);
  for (size_t scheme_end = out.find("://"); scheme_end != std::string::npos;
       scheme_end = out.find("://", scheme_end + 3)) {
    const size_t authority = scheme_end + 3;
    size_t authority_end = out.find_first_of("/?# \t\r\n", authority);
    if (authority_end == std::string::npos) authority_end = out.size();
    const size_t at = out.rfind('@', authority_end == 0 ? 0 : authority_end - 1);
    if (at != std::string::npos && at >= authority && at < authority_end) out.erase(authority, at + 1 - authority);
  }
  return out;
}

}  // namespace hvprof
