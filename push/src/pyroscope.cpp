#include "hvprof/push/pyroscope.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "hvprof/base/escape.h"
#include "hvprof/base/utf8.h"
#include "hvprof/base/version.h"

namespace hvprof::push {

namespace {

// Unix seconds Pyroscope reads as seconds: 10 digits (2001-09-09 to 2286-11-20).
constexpr uint64_t kMinUnixSeconds = 1'000'000'000;
constexpr uint64_t kMaxUnixSeconds = 9'999'999'999;
// How much of a refusing server's answer an error shows, and how much is kept to show it.
constexpr size_t kShownBodyBytes = 200;
constexpr size_t kKeptBodyBytes = 4096;

struct CurlEasyDeleter {
  void operator()(CURL* handle) const { curl_easy_cleanup(handle); }
};
struct CurlUrlDeleter {
  void operator()(CURLU* url) const { curl_url_cleanup(url); }
};
struct CurlSlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
struct CurlFreeDeleter {
  void operator()(char* text) const { curl_free(text); }
};
using CurlEasy = std::unique_ptr<CURL, CurlEasyDeleter>;
using CurlUrl = std::unique_ptr<CURLU, CurlUrlDeleter>;
using CurlSlist = std::unique_ptr<curl_slist, CurlSlistDeleter>;
using CurlString = std::unique_ptr<char, CurlFreeDeleter>;

Result<void> InitCurlOnce() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (result != CURLE_OK) {
    return MakeError(ErrorKind::kInternal, "libcurl: initialization failed: {}", curl_easy_strerror(result));
  }
  return Ok();
}

bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// The text a user may be shown of a URL that may hold credentials: "scheme://user:pw@host/x"
// becomes "scheme://host/x", escaped for a terminal.
std::string RedactRawUrl(std::string_view url) { return EscapeForTerminal(RedactUrls(url)); }

// What Go's unicode.IsSpace takes, which strings.TrimSpace (in Pyroscope's parser) trims.
bool IsUnicodeSpace(uint32_t code) {
  return code == ' ' || (code >= '\t' && code <= '\r') || code == 0x85 || code == 0xA0 || code == 0x1680 ||
         (code >= 0x2000 && code <= 0x200A) || code == 0x2028 || code == 0x2029 || code == 0x202F ||
         code == 0x205F || code == 0x3000;
}

// The first `limit` bytes of `text` or fewer, not cutting a UTF-8 sequence.
std::string_view CutUtf8(std::string_view text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t end = limit;
  for (size_t back = 0; back < 3 && end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80; ++back) {
    --end;
  }
  return text.substr(0, end);
}

std::string Base64(std::string_view bytes) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) group |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) group |= static_cast<unsigned char>(bytes[i + 2]);
    out += kDigits[group >> 18 & 63];
    out += kDigits[group >> 12 & 63];
    out += i + 1 < bytes.size() ? kDigits[group >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kDigits[group & 63] : '=';
  }
  return out;
}

// Replaces every occurrence of each secret by "***" (secrets shorter than 3 bytes are left:
// they cannot be told from ordinary text).
std::string Scrub(std::string text, const std::vector<std::string>& secrets) {
  for (const std::string& secret : secrets) {
    if (secret.size() < 3) continue;
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3)) {
      text.replace(at, secret.size(), "***");
    }
  }
  return text;
}

std::string CurlPartOr(CURLU* url, CURLUPart part, unsigned flags, CURLUcode* code) {
  char* raw = nullptr;
  *code = curl_url_get(url, part, &raw, flags);
  CurlString owned(raw);
  return *code == CURLUE_OK && raw != nullptr ? std::string(raw) : std::string();
}

// options.url parsed: the endpoint (scheme, host, port and path ending in /ingest; no
// credentials, query or fragment) and the credentials it held.
struct Endpoint {
  CurlUrl url;
  std::string printable;  // the endpoint URL, escaped for a terminal
  std::string username;
  std::string password;
  std::vector<std::string> secrets;  // forms of the credentials no message may show
};

Result<Endpoint> ParseEndpoint(std::string_view url) {
  const std::string shown = RedactRawUrl(url);
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope URL \"{}\": no scheme: give the server's base URL with http:// or https://, "
                     "e.g. http://127.0.0.1:4040",
                     shown);
  }
  std::string scheme(url.substr(0, scheme_end));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), AsciiLower);
  if (scheme != "http" && scheme != "https") {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope URL \"{}\": the scheme \"{}\" is not supported: use http:// or https://", shown,
                     EscapeForTerminal(scheme));
  }
  CurlUrl parsed(curl_url());
  if (!parsed) return MakeError(ErrorKind::kNoSpace, "libcurl: out of memory");
  const std::string copy(url);
  if (const CURLUcode rc = curl_url_set(parsed.get(), CURLUPART_URL, copy.c_str(), 0); rc != CURLUE_OK) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope URL \"{}\": {}: check how it is written", shown,
                     curl_url_strerror(rc));
  }
  CURLUcode rc = CURLUE_OK;
  const std::string host = CurlPartOr(parsed.get(), CURLUPART_HOST, 0, &rc);
  if (rc != CURLUE_OK || host.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope URL \"{}\": no host: give it as {}://HOST:PORT", shown,
                     scheme);
  }
  CurlPartOr(parsed.get(), CURLUPART_QUERY, 0, &rc);
  if (rc != CURLUE_NO_QUERY) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope URL \"{}\": has a query: give the server's base URL only; hvprof adds /ingest and its "
                     "parameters",
                     shown);
  }
  CurlPartOr(parsed.get(), CURLUPART_FRAGMENT, 0, &rc);
  if (rc != CURLUE_NO_FRAGMENT) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope URL \"{}\": has a fragment (#...): leave it out",
                     shown);
  }

  Endpoint endpoint;
  endpoint.username = CurlPartOr(parsed.get(), CURLUPART_USER, CURLU_URLDECODE, &rc);
  endpoint.password = CurlPartOr(parsed.get(), CURLUPART_PASSWORD, CURLU_URLDECODE, &rc);
  for (const CURLUPart part : {CURLUPART_USER, CURLUPART_PASSWORD}) {
    endpoint.secrets.push_back(CurlPartOr(parsed.get(), part, 0, &rc));  // as written, maybe %-encoded
  }
  endpoint.secrets.push_back(endpoint.username);
  endpoint.secrets.push_back(endpoint.password);
  for (const CURLUPart part : {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS}) {
    if (curl_url_set(parsed.get(), part, nullptr, 0) != CURLUE_OK) {
      return MakeError(ErrorKind::kInternal, "libcurl: cannot take the credentials out of the pyroscope URL");
    }
  }

  std::string path = CurlPartOr(parsed.get(), CURLUPART_PATH, 0, &rc);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (!path.ends_with("/ingest")) path += "/ingest";
  if (const CURLUcode set = curl_url_set(parsed.get(), CURLUPART_PATH, path.c_str(), 0); set != CURLUE_OK) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope URL \"{}\": path {}: {}", shown, EscapeForTerminal(path),
                     curl_url_strerror(set));
  }
  const std::string full = CurlPartOr(parsed.get(), CURLUPART_URL, 0, &rc);
  if (rc != CURLUE_OK) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope URL \"{}\": {}", shown, curl_url_strerror(rc));
  }
  endpoint.printable = EscapeForTerminal(full);
  endpoint.url = std::move(parsed);
  return endpoint;
}

Result<void> CheckOptions(const PushOptions& options) {
  if (!std::isfinite(options.timeout_seconds) || options.timeout_seconds <= 0 ||
      options.timeout_seconds > 24 * 3600) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope push: timeout {} s: give a number of seconds above 0 and at most a day",
                     options.timeout_seconds);
  }
  HVPROF_TRYV(ValidateTenant(options.tenant));
  if (options.spy_name.empty() ||
      !std::all_of(options.spy_name.begin(), options.spy_name.end(),
                   [](char c) { return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_' || c == '.' || c == '-'; })) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope spy name \"{}\": use only [A-Za-z0-9_.-]",
                     EscapeForTerminal(options.spy_name));
  }
  if (options.password.size() > 0 && options.username.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope push: a password without a user name: give both");
  }
  return Ok();
}

// libcurl's progress callback (about once a second, and at every chunk): nonzero stops the
// transfer.
int StopWhenCancelled(void* cancel, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(cancel)->load(std::memory_order_relaxed) ? 1 : 0;
}

// The series checked as PushToPyroscope sends it: its name.
Result<std::string> CheckSeries(const PyroscopeSeries& series) {
  HVPROF_TRY(name, SeriesName(series));
  if (series.from_seconds < kMinUnixSeconds || series.until_seconds > kMaxUnixSeconds ||
      series.from_seconds > series.until_seconds) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope series {}: from {} until {}: give unix seconds (10 digits), from <= until",
                     EscapeForTerminal(name), series.from_seconds, series.until_seconds);
  }
  if (series.profile.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope series {}: the profile is empty: nothing to push",
                     EscapeForTerminal(name));
  }
  return name;
}

Result<std::string> BuildIngestUrl(const CurlUrl& endpoint, const PyroscopeSeries& series, std::string_view name,
                                   std::string_view spy_name) {
  CurlUrl url(curl_url_dup(endpoint.get()));
  if (!url) return MakeError(ErrorKind::kNoSpace, "libcurl: out of memory");
  const std::string parameters[] = {
      fmt::format("name={}", name),
      fmt::format("from={}", series.from_seconds),
      fmt::format("until={}", series.until_seconds),
      "format=pprof",
      fmt::format("spyName={}", spy_name),
  };
  for (const std::string& parameter : parameters) {
    // With CURLU_APPENDQUERY, CURLU_URLENCODE encodes all but the first '='.
    if (const CURLUcode rc = curl_url_set(url.get(), CURLUPART_QUERY, parameter.c_str(),
                                          CURLU_APPENDQUERY | CURLU_URLENCODE);
        rc != CURLUE_OK) {
      return MakeError(ErrorKind::kInternal, "libcurl: cannot add a query parameter: {}", curl_url_strerror(rc));
    }
  }
  CURLUcode rc = CURLUE_OK;
  std::string out = CurlPartOr(url.get(), CURLUPART_URL, 0, &rc);
  if (rc != CURLUE_OK) return MakeError(ErrorKind::kInternal, "libcurl: {}", curl_url_strerror(rc));
  return out;
}

template <typename T>
Result<void> SetOption(CURL* handle, CURLoption option, T value) {
  if (const CURLcode rc = curl_easy_setopt(handle, option, value); rc != CURLE_OK) {
    return MakeError(ErrorKind::kUnsupported, "libcurl: option {}: {}: hvprof needs libcurl 7.85 or newer",
                     static_cast<int>(option), curl_easy_strerror(rc));
  }
  return Ok();
}

struct Answer {
  std::string body;  // the first kKeptBodyBytes
};

size_t KeepBody(char* data, size_t size, size_t count, void* user) {
  auto* answer = static_cast<Answer*>(user);
  const size_t bytes = size * count;
  if (answer->body.size() < kKeptBodyBytes) {
    answer->body.append(data, std::min(bytes, kKeptBodyBytes - answer->body.size()));
  }
  return bytes;
}

// Why a transfer failed, and what to do.
Error TransferError(CURLcode code, const char* detail, double timeout_seconds) {
  std::string why = detail != nullptr && detail[0] != '\0' ? detail : curl_easy_strerror(code);
  while (!why.empty() && (why.back() == '\n' || why.back() == '.')) why.pop_back();
  if (why.size() >= 2 && why[0] >= 'A' && why[0] <= 'Z' && why[1] >= 'a' && why[1] <= 'z') why[0] = AsciiLower(why[0]);
  why = EscapeForTerminal(why);
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
      return MakeError(ErrorKind::kNotFound, "{}: check the host name in the URL", why);
    case CURLE_COULDNT_RESOLVE_PROXY:
      return MakeError(ErrorKind::kNotFound, "{}: check the proxy variables (http_proxy, https_proxy, no_proxy)",
                       why);
    case CURLE_COULDNT_CONNECT:
      return MakeError(ErrorKind::kIo,
                       "{}: is Pyroscope running and listening there? check the host and the port (Pyroscope "
                       "listens on 4040 unless told otherwise)",
                       why);
    case CURLE_OPERATION_TIMEDOUT:
      return MakeError(ErrorKind::kIo,
                       "{}: no answer within {} s: check that the URL points at Pyroscope, or allow more time", why,
                       timeout_seconds);
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
      return MakeError(ErrorKind::kIo,
                       "{}: TLS failed: check the server's certificate, or use http:// if the server speaks plain "
                       "HTTP",
                       why);
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
      return MakeError(ErrorKind::kIo,
                       "{}: check that the URL points at a Pyroscope server, and http:// or https:// as it expects",
                       why);
    case CURLE_OUT_OF_MEMORY:
      return MakeError(ErrorKind::kNoSpace, "{}", why);
    default:
      return MakeError(ErrorKind::kIo, "{}: check the URL and the network", why);
  }
}

// An answer other than 2xx: its status, the start of its body, and what to do.
Error StatusError(long status, std::string_view body, std::string_view redirect) {
  while (!body.empty() && (body.back() == '\n' || body.back() == '\r' || body.back() == ' ')) body.remove_suffix(1);
  std::string shown;
  if (!body.empty()) {
    const std::string_view cut = CutUtf8(body, kShownBodyBytes);
    shown = fmt::format(" \"{}{}\"", EscapeForTerminal(cut), cut.size() < body.size() ? "..." : "");
  }
  const std::string what = fmt::format("the server answered HTTP {}{}", status, shown);
  if (status >= 300 && status < 400) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "{}: it redirects{}{}; hvprof does not follow redirects: give the URL it redirects to", what,
                     redirect.empty() ? "" : " to ", RedactRawUrl(redirect));
  }
  switch (status) {
    case 400:
      return MakeError(ErrorKind::kInvalidArgument,
                       "{}: Pyroscope refused the series name or the profile: see its message", what);
    case 401:
    case 403:
      return MakeError(ErrorKind::kPermissionDenied,
                       "{}: check the credentials (https://USER:PASSWORD@HOST in the URL) and the tenant "
                       "(X-Scope-OrgID)",
                       what);
    case 404:
      return MakeError(ErrorKind::kNotFound,
                       "{}: no ingest endpoint there: give the base URL of a Pyroscope server, e.g. "
                       "http://HOST:4040",
                       what);
    case 413:
      return MakeError(ErrorKind::kNoSpace, "{}: the profile is larger than the server takes: push fewer stacks",
                       what);
    case 429:
      return MakeError(ErrorKind::kBusy, "{}: the server's ingestion limit was reached: push again later", what);
    default:
      if (status >= 500) {
        return MakeError(ErrorKind::kIo, "{}: the server failed: see its log, then push again", what);
      }
      return MakeError(ErrorKind::kIo, "{}: see the server's message", what);
  }
}

}  // namespace

Result<void> ValidateAppName(std::string_view app) {
  if (app.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope application name: empty: give one, e.g. hvprof.cpu");
  }
  for (const char c : app) {
    if (!IsAsciiAlpha(c) && !IsAsciiDigit(c) && c != '_' && c != '.' && c != '-') {
      return MakeError(ErrorKind::kInvalidArgument,
                       "pyroscope application name \"{}\": Pyroscope takes only letters, digits, '_', '.' and '-'",
                       EscapeForTerminal(app));
    }
  }
  return Ok();
}

Result<void> ValidateLabelKey(std::string_view key) {
  const bool valid = !key.empty() && key.size() <= kMaxLabelKeyBytes && (IsAsciiAlpha(key[0]) || key[0] == '_') &&
                     std::all_of(key.begin(), key.end(),
                                 [](char c) { return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_'; });
  if (!valid) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope label key \"{}\": must match [a-zA-Z_][a-zA-Z0-9_]* (at most {} bytes)",
                     EscapeForTerminal(key), kMaxLabelKeyBytes);
  }
  if (key.starts_with("__")) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope label key \"{}\": keys starting with \"__\" are reserved: Pyroscope drops them",
                     EscapeForTerminal(key));
  }
  return Ok();
}

Result<void> ValidateTenant(std::string_view tenant) {
  if (tenant.empty()) return Ok();
  const bool valid = tenant.size() <= kMaxTenantBytes && tenant != "." && tenant != ".." &&
                     std::all_of(tenant.begin(), tenant.end(), [](char c) {
                       return IsAsciiAlpha(c) || IsAsciiDigit(c) ||
                              std::string_view("!-_.*'()").find(c) != std::string_view::npos;
                     });
  if (!valid) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope tenant \"{}\": Pyroscope takes at most {} characters of letters, digits and "
                     "!-_.*'(), not \".\" or \"..\"",
                     EscapeForTerminal(tenant), kMaxTenantBytes);
  }
  return Ok();
}

std::string SanitizeLabelValue(std::string_view value) {
  // Pieces of the output, one a character, each remembering whether it was white space.
  struct Piece {
    std::string_view text;  // the kept bytes, or "_" for a replaced character
    bool space = false;
  };
  std::vector<Piece> pieces;
  size_t bytes = 0;
  for (size_t i = 0; i < value.size();) {
    const Utf8Char c = DecodeUtf8(value, i);
    Piece piece;
    if (c.length == 0) {
      piece.text = "_";  // not UTF-8: one '_' per byte
      i += 1;
    } else {
      const bool control = c.code < 0x20 || c.code == 0x7F || (c.code >= 0x80 && c.code <= 0x9F);
      const bool syntax = c.code == ',' || c.code == '{' || c.code == '}' || c.code == '=';
      piece.text = control || syntax ? std::string_view("_") : value.substr(i, c.length);
      piece.space = IsUnicodeSpace(c.code);
      i += c.length;
    }
    if (bytes + piece.text.size() > kMaxLabelValueBytes) break;
    bytes += piece.text.size();
    pieces.push_back(piece);
  }
  // White space at either end would be trimmed by the server: keep its place visible.
  for (auto it = pieces.begin(); it != pieces.end() && it->space; ++it) it->text = "_";
  for (auto it = pieces.rbegin(); it != pieces.rend() && it->space; ++it) it->text = "_";
  std::string out;
  out.reserve(bytes);
  for (const Piece& piece : pieces) out.append(piece.text);
  return out;
}

Result<std::string> SeriesName(const PyroscopeSeries& series) {
  HVPROF_TRYV(ValidateAppName(series.app));
  std::string name = series.app + "{";
  std::set<std::string_view> keys;
  for (const auto& [key, value] : series.labels) {
    if (auto valid = ValidateLabelKey(key); !valid) return valid.error().WithContext(series.app);
    if (!keys.insert(key).second) {
      return MakeError(ErrorKind::kInvalidArgument, "{}: pyroscope label key \"{}\" given twice", series.app, key);
    }
    if (value.empty()) {
      return MakeError(ErrorKind::kInvalidArgument, "{}: pyroscope label \"{}\" has an empty value: leave it out",
                       series.app, key);
    }
    if (keys.size() > 1) name += ',';
    name += key;
    name += '=';
    name += SanitizeLabelValue(value);
  }
  name += '}';
  return name;
}

Result<std::string> IngestUrl(const PushOptions& options, const PyroscopeSeries& series) {
  HVPROF_TRYV(InitCurlOnce());
  HVPROF_TRYV(CheckOptions(options));
  HVPROF_TRY(endpoint, ParseEndpoint(options.url));
  HVPROF_TRY(name, CheckSeries(series));
  return BuildIngestUrl(endpoint.url, series, name, options.spy_name);
}

Result<void> CheckPushOptions(const PushOptions& options, bool allow_credentials) {
  HVPROF_TRYV(InitCurlOnce());
  HVPROF_TRYV(CheckOptions(options));
  HVPROF_TRY(endpoint, ParseEndpoint(options.url));
  if (!endpoint.username.empty() && !allow_credentials) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope URL \"{}\": holds credentials, which settings files and `ps` would show: give them "
                     "in HVPROF_PUSH_USER and HVPROF_PUSH_PASSWORD instead",
                     RedactRawUrl(options.url));
  }
  if (!options.username.empty() && !endpoint.username.empty()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope URL \"{}\": holds credentials, and others were given apart: give them once",
                     RedactRawUrl(options.url));
  }
  return Ok();
}

Result<PushSummary> PushToPyroscope(const PushOptions& options, std::span<const PyroscopeSeries> series,
                                    long* http_status) {
  if (http_status != nullptr) *http_status = 0;
  HVPROF_TRYV(InitCurlOnce());
  HVPROF_TRYV(CheckOptions(options));
  HVPROF_TRY(endpoint, ParseEndpoint(options.url));
  if (!options.username.empty() && !endpoint.username.empty()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "pyroscope URL \"{}\": holds credentials, and others were given apart: give them once",
                     RedactRawUrl(options.url));
  }
  if (series.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "pyroscope push to {}: no series: nothing to push",
                     endpoint.printable);
  }
  // Every series is checked before the first byte is sent.
  std::vector<std::string> names;
  std::vector<std::string> urls;
  for (const PyroscopeSeries& one : series) {
    HVPROF_TRY(name, CheckSeries(one));
    HVPROF_TRY(url, BuildIngestUrl(endpoint.url, one, name, options.spy_name));
    names.push_back(EscapeForTerminal(name));
    urls.push_back(std::move(url));
  }

  std::vector<std::string> secrets = endpoint.secrets;
  const std::string& username = options.username.empty() ? endpoint.username : options.username;
  const std::string& password = options.username.empty() ? endpoint.password : options.password;
  secrets.push_back(options.username);
  secrets.push_back(options.password);
  // A server (or a proxy) may answer with what it was sent: the Authorization header too.
  if (!username.empty()) secrets.push_back(Base64(username + ":" + password));
  // And each as a message shows it, escaped for the terminal.
  for (size_t i = 0, n = secrets.size(); i < n; ++i) secrets.push_back(EscapeForTerminal(secrets[i]));

  CurlEasy handle(curl_easy_init());
  if (!handle) return MakeError(ErrorKind::kNoSpace, "libcurl: cannot make a transfer handle");
  CURL* curl = handle.get();
  // "Expect:" turns off libcurl's Expect: 100-continue, which costs a round trip (or a
  // second's wait on servers that ignore it) on each large body.
  curl_slist* raw_headers = nullptr;
  CurlSlist headers;
  std::vector<std::string> lines = {"Content-Type: application/octet-stream", "Expect:"};
  if (!options.tenant.empty()) lines.push_back("X-Scope-OrgID: " + options.tenant);
  for (const std::string& line : lines) {
    curl_slist* grown = curl_slist_append(raw_headers, line.c_str());
    if (grown == nullptr) {
      curl_slist_free_all(raw_headers);
      return MakeError(ErrorKind::kNoSpace, "libcurl: out of memory");
    }
    raw_headers = grown;
  }
  headers.reset(raw_headers);

  Answer answer;
  char detail[CURL_ERROR_SIZE] = {};
  const long timeout_ms = std::max(1L, std::lround(options.timeout_seconds * 1000));
  HVPROF_TRYV(SetOption(curl, CURLOPT_NOSIGNAL, 1L));
  HVPROF_TRYV(SetOption(curl, CURLOPT_PROTOCOLS_STR, "http,https"));
  HVPROF_TRYV(SetOption(curl, CURLOPT_FOLLOWLOCATION, 0L));
  HVPROF_TRYV(SetOption(curl, CURLOPT_TIMEOUT_MS, timeout_ms));
  HVPROF_TRYV(SetOption(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms));
  HVPROF_TRYV(SetOption(curl, CURLOPT_HTTPHEADER, headers.get()));
  const std::string user_agent = std::string("hvprof/") + kVersion;  // libcurl copies it
  HVPROF_TRYV(SetOption(curl, CURLOPT_USERAGENT, user_agent.c_str()));
  HVPROF_TRYV(SetOption(curl, CURLOPT_ERRORBUFFER, detail));
  HVPROF_TRYV(SetOption(curl, CURLOPT_WRITEFUNCTION, &KeepBody));
  HVPROF_TRYV(SetOption(curl, CURLOPT_WRITEDATA, static_cast<void*>(&answer)));
  HVPROF_TRYV(SetOption(curl, CURLOPT_POST, 1L));
  if (options.cancel != nullptr) {
    HVPROF_TRYV(SetOption(curl, CURLOPT_NOPROGRESS, 0L));
    HVPROF_TRYV(SetOption(curl, CURLOPT_XFERINFOFUNCTION, &StopWhenCancelled));
    HVPROF_TRYV(SetOption(curl, CURLOPT_XFERINFODATA, static_cast<const void*>(options.cancel)));
  }
  if (!username.empty()) {
    HVPROF_TRYV(SetOption(curl, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC)));
    HVPROF_TRYV(SetOption(curl, CURLOPT_USERNAME, username.c_str()));
    HVPROF_TRYV(SetOption(curl, CURLOPT_PASSWORD, password.c_str()));
  }

  PushSummary summary;
  for (size_t i = 0; i < series.size(); ++i) {
    const PyroscopeSeries& one = series[i];
    HVPROF_TRYV(SetOption(curl, CURLOPT_URL, urls[i].c_str()));
    HVPROF_TRYV(SetOption(curl, CURLOPT_POSTFIELDS, static_cast<const void*>(one.profile.data())));
    HVPROF_TRYV(SetOption(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(one.profile.size())));
    answer.body.clear();
    detail[0] = '\0';

    const CURLcode rc = curl_easy_perform(curl);
    std::optional<Error> failure;
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
      failure = MakeError(ErrorKind::kBadState, "cancelled: hvprof is shutting down");
    } else if (rc != CURLE_OK) {
      failure = TransferError(rc, detail, options.timeout_seconds);
    } else {
      long status = 0;
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
      if (http_status != nullptr) *http_status = status;
      if (status < 200 || status >= 300) {
        char* redirect = nullptr;
        curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &redirect);
        failure = StatusError(status, answer.body, redirect != nullptr ? redirect : "");
      }
    }
    if (failure) {
      const std::string before = i == 0 ? "" : fmt::format(", after {} accepted", i);
      const std::string context = fmt::format("pushing to Pyroscope at {}: series {} of {} ({}){}", endpoint.printable,
                                              i + 1, series.size(), names[i], before);
      return Error(failure->kind(), Scrub(failure->WithContext(context).message(), secrets));
    }
    ++summary.series;
    summary.bytes += one.profile.size();
  }
  return summary;
}

}  // namespace hvprof::push
