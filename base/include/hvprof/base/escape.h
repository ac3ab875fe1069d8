// Names that come from profiled code (symbols, images, comms, domain names: all chosen by a
// guest or a process) printed so that they cannot act on a terminal or forge a report row.
#pragma once

#include <string>
#include <string_view>

namespace hvprof {

// Control characters (C0, DEL and the C1 range as UTF-8), the bidirectional controls and
// line separators of Unicode, bytes that are not UTF-8, and the backslash itself become \xNN
// byte by byte (the backslash \\), so every printed name is one line of
// printable text and the escaping is unambiguous. Valid printable UTF-8 is kept as it is.
std::string EscapeForTerminal(std::string_view text);

// `text` with the credentials of every URL in it taken out: "scheme://user:pw@host/x" becomes
// "scheme://host/x" (DEBUGINFOD_URLS, a push server's address, a redirect), so that no message
// prints them. Not escaped: print it through EscapeForTerminal.
std::string RedactUrls(std::string_view text);

}  // namespace hvprof
