// Names printed for a terminal: one line of printable text, whatever bytes a guest chose.
#include <catch2/catch.hpp>

#include "hvprof/base/escape.h"

using hvprof::EscapeForTerminal;

TEST_CASE("escaping: control characters, C1 controls and bad UTF-8 become \\xNN", "[base][escape][safety]") {
  CHECK(EscapeForTerminal("memcpy") == "memcpy");
  CHECK(EscapeForTerminal("std::vector<int>::push_back(int&&)") == "std::vector<int>::push_back(int&&)");
  CHECK(EscapeForTerminal("a\x1b[2Jb") == "a\\x1b[2Jb");
  CHECK(EscapeForTerminal("row\nFORGED\r") == "row\\x0aFORGED\\x0d");
  CHECK(EscapeForTerminal(std::string_view("nul\0here", 8)) == "nul\\x00here");
  CHECK(EscapeForTerminal("del\x7f") == "del\\x7f");
  CHECK(EscapeForTerminal("back\\slash") == "back\\\\slash");
  // Printable UTF-8 is kept; the C1 control U+009B (CSI) is not.
  CHECK(EscapeForTerminal("caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x94\xa5") == "caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x94\xa5");
  CHECK(EscapeForTerminal("\xc2\x9b" "31m") == "\\xc2\\x9b31m");
  // Truncated, overlong, surrogate and out-of-range sequences.
  CHECK(EscapeForTerminal("\xe6\x97") == "\\xe6\\x97");
  CHECK(EscapeForTerminal("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(EscapeForTerminal("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(EscapeForTerminal("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
  CHECK(EscapeForTerminal("\xff") == "\\xff");
  // Bidirectional overrides and line separators would reorder or break a row: escaped.
  CHECK(EscapeForTerminal("evil\xe2\x80\xae" "cod.exe") == "evil\\xe2\\x80\\xaecod.exe");
  CHECK(EscapeForTerminal("a\xe2\x80\xa8" "b") == "a\\xe2\\x80\\xa8b");
  CHECK(EscapeForTerminal("\xe2\x81\xa6x") == "\\xe2\\x81\\xa6x");
}
