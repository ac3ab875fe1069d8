// Sending pprof profiles to a Grafana Pyroscope server through its HTTP ingest API.
//
// What Pyroscope expects (grafana/pyroscope: pkg/ingester/pyroscope/ingest_handler.go,
// api/model/labelset/{labelset,validate}.go, pkg/og/convert/pprof/profile.go,
// pkg/validation/validate.go; docs/sources/reference-server-api, "Pyroscope Legacy HTTP API"):
//
//   POST <base>/ingest?name=APP{KEY=VALUE,...}&from=UNIX_S&until=UNIX_S&format=pprof&spyName=hvprof
//   Content-Type: application/octet-stream
//   X-Scope-OrgID: TENANT                      (only when a tenant is given)
//   Authorization: Basic ...                   (only when credentials are given)
//   body: the profile.proto bytes, gzipped or not
//
// - One request per series: one profile with one label set. With format=pprof the body is
//   the raw profile; a multipart/form-data body is parsed only when no format is given, so
//   hvprof sends raw bytes. The server answers 200 with an empty body on success.
// - `name` is the application name and the labels. The application name becomes the series'
//   `service_name`; the profile type (`process_cpu`...) comes from the sample types inside
//   the profile. `units`, `aggregationType` and `sampleRate` are ignored for pprof and not
//   sent. `from` and `until` are unix seconds (Pyroscope reads a 13-, 16- or 19-digit number
//   as milli-, micro- or nanoseconds, so they are kept to 10 digits).
// - Application names may hold only [A-Za-z0-9_.-] (Pyroscope also takes '/', its older
//   servers do not). Label keys must match [A-Za-z_][A-Za-z0-9_]* (Pyroscope's parser also
//   takes '.', then rewrites it to '_'); keys starting with "__" are reserved and dropped by
//   the server, so they are refused here, as are duplicate keys. Invalid application names
//   and keys are refused before anything is sent: they are chosen by hvprof or its user.
// - Label values are sanitized, not refused, because they come from guests (domain names):
//   the bytes Pyroscope's name parser cannot hold (',' and '}' end a value; '{' and '=' are
//   replaced too so the name reads unambiguously), control characters and bytes that are not
//   UTF-8 (the server refuses those) each become '_'; so does white space at either end (the
//   server would trim it); values are cut to 2048 bytes (the server's default limit). An
//   empty value is refused: leave such a label out.
// - The URL is the server's base, http:// or https:// only, e.g. http://127.0.0.1:4040 or
//   https://profiles.example.net/pyroscope ("/ingest" is appended unless the path already
//   ends with it). It must not hold a query or a fragment. Basic-auth credentials may be
//   given in it (https://USER:PASSWORD@host) or in PushOptions; they are never printed.
// - The tenant goes into X-Scope-OrgID (needed by multi-tenant servers, ignored otherwise):
//   at most 150 characters of [A-Za-z0-9!_.*'()-], not "." or "..".
// - Every series is checked before the first request, so a bad one sends nothing. Requests
//   go in order and stop at the first failure; the error says which series failed, how many
//   were pushed before it, the URL (without credentials), what went wrong (curl's reason, or
//   the HTTP status and the first 200 bytes of the answer, escaped for a terminal) and what
//   to do. Redirects are not followed (they would resend the profile and the credentials
//   elsewhere); a 3xx is an error naming where the server points.
// - libcurl honours the usual proxy variables (http_proxy, https_proxy, no_proxy). It runs
//   with CURLOPT_NOSIGNAL (safe beside threads), so it does not ignore SIGPIPE for the
//   caller: a program that pushes over https should ignore it (InstallStopHandler does).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hvprof/base/result.h"

namespace hvprof::push {

// Pyroscope's default limits (pkg/validation/limits.go) and tenant rules.
inline constexpr size_t kMaxLabelValueBytes = 2048;
inline constexpr size_t kMaxLabelKeyBytes = 1024;
inline constexpr size_t kMaxTenantBytes = 150;

// One profile to ingest.
struct PyroscopeSeries {
  std::string app;  // the application name, e.g. "hvprof.cpu"
  // In the order given, e.g. {"domain", "1"}, {"domain_name", "build-vm"}, {"host", "h1"}.
  std::vector<std::pair<std::string, std::string>> labels;
  uint64_t from_seconds = 0;   // unix seconds
  uint64_t until_seconds = 0;  // unix seconds, >= from_seconds
  std::string profile;         // profile.proto, gzipped or not (report::FormatPprof's bytes)
};

struct PushOptions {
  std::string url;     // the server's base URL, e.g. http://127.0.0.1:4040
  std::string tenant;  // X-Scope-OrgID; empty sends none
  // Basic-auth credentials, for callers that keep them off the command line (an environment
  // variable, a file). Not together with credentials in `url`.
  std::string username;
  std::string password;
  double timeout_seconds = 30;  // for each request, connecting included
  std::string spy_name = "hvprof";  // spyName: the series' pyroscope_spy label
  // When set, a transfer in progress stops soon after it turns true (a daemon shutting down
  // does not wait out a slow server's timeout); the push fails with kBadState.
  const std::atomic<bool>* cancel = nullptr;
};

struct PushSummary {
  size_t series = 0;  // requests the server accepted
  uint64_t bytes = 0;  // profile bytes in them
};

// Refuses an application name Pyroscope would refuse (empty, or a character outside
// [A-Za-z0-9_.-]).
Result<void> ValidateAppName(std::string_view app);
// Refuses a label key outside [A-Za-z_][A-Za-z0-9_]*, longer than kMaxLabelKeyBytes, or
// starting with "__".
Result<void> ValidateLabelKey(std::string_view key);
// Refuses a tenant Pyroscope would refuse; an empty tenant is valid (none is sent).
Result<void> ValidateTenant(std::string_view tenant);
// A value Pyroscope stores as it is (see the rules above). Never empty for a non-empty value.
std::string SanitizeLabelValue(std::string_view value);

// The `name` parameter of a series: "APP{KEY=VALUE,...}", values sanitized. Refuses a bad
// application name, a bad or duplicate key and an empty value.
Result<std::string> SeriesName(const PyroscopeSeries& series);
// The URL one series is posted to, query encoded. Never holds credentials: those in
// options.url are taken out (PushToPyroscope sends them as basic auth), so it may be printed.
Result<std::string> IngestUrl(const PushOptions& options, const PyroscopeSeries& series);

// Checks a server URL and options as PushToPyroscope will, sending nothing: for a daemon to
// refuse a bad --url when it starts, not at its first window. With `allow_credentials` false,
// credentials in the URL are refused (they would be written into settings files and shown by
// `ps`): the error says to give them in the environment.
Result<void> CheckPushOptions(const PushOptions& options, bool allow_credentials);

// Posts each series in order. Checks the options and every series first, then sends; stops
// at the first failure. `http_status`, when given, gets the last answer's HTTP status (0 when
// none came): callers that retry tell a server that refuses the profile (400, 413) from one
// that is down, busy or misconfigured. No exception escapes.
Result<PushSummary> PushToPyroscope(const PushOptions& options, std::span<const PyroscopeSeries> series,
                                    long* http_status = nullptr);

}  // namespace hvprof::push
