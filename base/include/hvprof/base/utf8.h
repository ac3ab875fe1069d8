// Decoding UTF-8 strictly: what counts as a character for the escaping of names
// (escape.h) and for the values hvprof sends to other tools (push/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hvprof {

struct Utf8Char {
  size_t length = 0;  // bytes; 0 when text[i] does not start valid UTF-8
  uint32_t code = 0;  // the code point
};

// The character at text[i] (i < text.size()). Invalid: a stray continuation byte, a truncated
// sequence, an overlong form, a surrogate, or a code point above U+10FFFF.
Utf8Char DecodeUtf8(std::string_view text, size_t i);

}  // namespace hvprof
