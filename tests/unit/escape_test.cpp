// Names printed for a terminal: one line of printable text, whatever bytes a guest chose.
#include <catch2/catch.hpp>

#include "hvprof/base/escape.h"
#include "hvprof/base/utf8.h"

using hvprof::EscapeForTerminal;

TEST_CASE("escaping: control characters, C1 controls and bad UTF-8 become hex escapes (backslash, x, two digits)", "[base][escape][safety]") {
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

TEST_CASE("UTF-8 decoding: valid characters and every invalid form", "[base][escape]") {
  using hvprof::DecodeUtf8;
  CHECK(DecodeUtf8("a", 0).length == 1);
  CHECK(DecodeUtf8("\xC3\xA9", 0).code == 0xE9);
  CHECK(DecodeUtf8("\xE2\x82\xAC", 0).code == 0x20AC);
  const auto four = DecodeUtf8("\xF0\x9F\x98\x80", 0);
  CHECK((four.length == 4 && four.code == 0x1F600));
  for (const char* bad : {"\x80", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82",
                          "\xC3\x28"}) {
    INFO(hvprof::EscapeForTerminal(bad));
    CHECK(DecodeUtf8(bad, 0).length == 0);
  }
}

TEST_CASE("URLs lose their credentials before any message shows them", "[base][escape][safety]") {
  using hvprof::RedactUrls;
  // Issue 38: DEBUGINFOD_URLS with user:password@ reached stderr in debuginfod's messages.
  CHECK(RedactUrls("https://alice:s3cret@debuginfod.example/buildid") == "https://debuginfod.example/buildid");
  CHECK(RedactUrls("http://token@host:8002 https://bob:pw@other/x?q=1 http://plain") ==
        "http://host:8002 https://other/x?q=1 http://plain");
  CHECK(RedactUrls("http://a:b@c@host/p@q") == "http://host/p@q");  // the last '@' of the authority
  CHECK(RedactUrls("no url here: user@example.com") == "no url here: user@example.com");
  CHECK(RedactUrls("") == "");
  CHECK(RedactUrls("x://") == "x://");
}
