// Fuzzes the redaction of URLs in messages (base/escape.h RedactUrls): DEBUGINFOD_URLS, a push
// server's address or a redirect may hold user:password@. Whatever the text, no URL in what is
// left may keep credentials, nothing is added, and redacting again changes nothing. A URL made
// of the input with credentials spliced in never shows them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hvprof/base/escape.h"

namespace {

// Whether some "://" in `text` is followed by an '@' before the end of its authority.
bool KeepsCredentials(std::string_view text) {
  for (size_t at = text.find("://"); at != std::string_view::npos; at = text.find("://", at + 3)) {
    const size_t end = std::min(text.find_first_of("/?# \t\r\n", at + 3), text.size());
    if (text.substr(at + 3, end - at - 3).find('@') != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string redacted = hvprof::RedactUrls(text);
  if (redacted.size() > text.size() || KeepsCredentials(redacted)) std::abort();
  if (hvprof::RedactUrls(redacted) != redacted) std::abort();
  // The input as a password, between a URL's user and host.
  std::string password;
  for (char c : text) {
    if (c != '/' && c != '?' && c != '#' && c != '@' && c != ' ' && c != '\t' && c != '\r' && c != '\n') password += c;
  }
  if (password.size() >= 3) {
    const std::string url = "https://user:" + password + "@host.example/buildid";
    const std::string shown = hvprof::RedactUrls("servers: " + url + " http://other");
    if (shown.find(password) != std::string::npos && std::string("servers: https://host.example/buildid http://other")
                                                             .find(password) == std::string::npos) {
      std::abort();
    }
  }
  return 0;
}
