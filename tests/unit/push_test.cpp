// Pushing to Pyroscope: a loopback HTTP/1.1 server written here takes the requests and
// checks them against Pyroscope's ingest API (POST /ingest, the query it parses, the raw
// profile as the body); failures say what happened and never show the URL's credentials;
// bad input is refused before anything is sent.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/base/escape.h"

#include "http_server.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/push/pyroscope.h"

using hvprof::ErrorKind;
using hvprof::ScopedFd;
using hvprof::push::IngestUrl;
using hvprof::push::PushOptions;
using hvprof::push::PushToPyroscope;
using hvprof::push::PyroscopeSeries;
using hvprof::push::SanitizeLabelValue;
using hvprof::push::SeriesName;
using hvprof::push::ValidateAppName;
using hvprof::push::ValidateLabelKey;
using hvprof::push::ValidateTenant;

namespace {

using hvprof::testing::BypassProxies;
using hvprof::testing::ClosedPort;
using hvprof::testing::LoopbackServer;
using hvprof::testing::Reply;
using hvprof::testing::Request;

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(random() & 0xFF);
  return bytes;
}

PyroscopeSeries CpuSeries(std::string domain, std::string domain_name, std::string profile) {
  PyroscopeSeries series;
  series.app = "hvprof.cpu";
  series.labels = {{"domain", std::move(domain)}, {"domain_name", std::move(domain_name)}, {"host", "h1"}};
  series.from_seconds = 1'700'000'000;
  series.until_seconds = 1'700'000'060;
  series.profile = std::move(profile);
  return series;
}

}  // namespace

TEST_CASE("push: a series arrives as Pyroscope's /ingest takes it", "[push][pyroscope]") {
  LoopbackServer server;
  const std::string profile = RandomBytes(6000, 1);
  const PyroscopeSeries series = CpuSeries("1", "build-vm", profile);
  PushOptions options;
  options.url = server.url();
  options.tenant = "team-a";

  const auto pushed = PushToPyroscope(options, std::span(&series, 1));
  const std::vector<Request> requests = server.Stop();
  REQUIRE(pushed);
  CHECK(pushed.value().series == 1);
  CHECK(pushed.value().bytes == profile.size());
  REQUIRE(requests.size() == 1);
  const Request& request = requests[0];
  CHECK(request.problem.empty());
  CHECK(request.method == "POST");
  CHECK(request.path == "/ingest");
  // The braces, commas and '=' of the name are percent-encoded, not sent raw.
  CHECK(request.target.find_first_of("{},") == std::string::npos);
  CHECK(request.query == std::map<std::string, std::string>{
                             {"name", "hvprof.cpu{domain=1,domain_name=build-vm,host=h1}"},
                             {"from", "1700000000"},
                             {"until", "1700000060"},
                             {"format", "pprof"},
                             {"spyName", "hvprof"},
                         });
  CHECK(request.headers.at("content-type") == "application/octet-stream");
  CHECK(request.headers.at("x-scope-orgid") == "team-a");
  CHECK(request.headers.count("expect") == 0);  // no 100-continue round trip
  CHECK(request.headers.count("authorization") == 0);
  CHECK(request.headers.at("content-length") == std::to_string(profile.size()));
  CHECK(request.body == profile);
}

TEST_CASE("push: a large profile goes whole, without waiting for 100-continue", "[push][pyroscope]") {
  // libcurl asks "Expect: 100-continue" for large bodies (above 1 MiB in 7.88) unless told not
  // to; servers that ignore it cost a second's wait each.
  LoopbackServer server;
  const PyroscopeSeries series = CpuSeries("1", "big", RandomBytes(3 << 20, 7));
  PushOptions options;
  options.url = server.url();

  const auto start = std::chrono::steady_clock::now();
  const auto pushed = PushToPyroscope(options, std::span(&series, 1));
  const auto took = std::chrono::steady_clock::now() - start;
  const std::vector<Request> requests = server.Stop();
  REQUIRE(pushed);
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].problem.empty());
  CHECK(requests[0].headers.count("expect") == 0);
  CHECK(requests[0].body == series.profile);
  CHECK(took < std::chrono::seconds(5));
}

TEST_CASE("push: two series are two requests, in order", "[push][pyroscope]") {
  LoopbackServer server;
  const std::vector<PyroscopeSeries> series = {CpuSeries("0", "Domain-0", RandomBytes(3000, 2)),
                                               CpuSeries("7", "web server, eu", RandomBytes(5000, 3))};
  PushOptions options;
  options.url = server.url() + "/";  // a trailing slash does not double

  const auto pushed = PushToPyroscope(options, series);
  const std::vector<Request> requests = server.Stop();
  REQUIRE(pushed);
  CHECK(pushed.value().series == 2);
  CHECK(pushed.value().bytes == 8000);
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].path == "/ingest");
  CHECK(requests[1].path == "/ingest");
  CHECK(requests[0].query.at("name") == "hvprof.cpu{domain=0,domain_name=Domain-0,host=h1}");
  // The comma would end the value in Pyroscope's parser: sanitized; the space is kept.
  CHECK(requests[1].query.at("name") == "hvprof.cpu{domain=7,domain_name=web server_ eu,host=h1}");
  CHECK(requests[0].body == series[0].profile);
  CHECK(requests[1].body == series[1].profile);
  CHECK(requests[0].headers.count("x-scope-orgid") == 0);  // no tenant given, none sent
}

TEST_CASE("push: an HTTP error names the status, the server's words and the series", "[push][pyroscope]") {
  const std::string long_tail(300, 'x');
  LoopbackServer server({{200, "", ""}, {500, "ingester \x1b[31mdown\n" + long_tail, ""}});
  const std::vector<PyroscopeSeries> series = {CpuSeries("1", "a", RandomBytes(100, 4)),
                                               CpuSeries("2", "b", RandomBytes(100, 5)),
                                               CpuSeries("3", "c", RandomBytes(100, 6))};
  PushOptions options;
  options.url = server.url();

  const auto pushed = PushToPyroscope(options, series);
  const std::vector<Request> requests = server.Stop();
  REQUIRE_FALSE(pushed);
  const std::string message = pushed.error().message();
  INFO(message);
  CHECK(pushed.error().kind() == ErrorKind::kIo);
  CHECK(message.find("HTTP 500") != std::string::npos);
  CHECK(message.find(server.url() + "/ingest") != std::string::npos);
  CHECK(message.find("series 2 of 3") != std::string::npos);
  CHECK(message.find("after 1 accepted") != std::string::npos);
  CHECK(message.find("domain=2") != std::string::npos);
  // The body is shown escaped and cut.
  CHECK(message.find("ingester \\x1b[31mdown\\x0a") != std::string::npos);
  CHECK(message.find('\x1b') == std::string::npos);
  CHECK(message.find(long_tail) == std::string::npos);
  CHECK(message.find("see its log") != std::string::npos);
  // It stopped at the failure: the third series was not sent.
  CHECK(requests.size() == 2);
}

TEST_CASE("push: statuses other than 5xx say what to do", "[push][pyroscope]") {
  LoopbackServer server({{404, "404 page not found", ""},
                         {307, "", "Location: http://user:pw123@elsewhere:4040/ingest\r\n"},
                         {429, "", ""}});
  const PyroscopeSeries series = CpuSeries("1", "a", "x");
  PushOptions options;
  options.url = server.url();

  const auto not_found = PushToPyroscope(options, std::span(&series, 1));
  const auto moved = PushToPyroscope(options, std::span(&series, 1));
  const auto busy = PushToPyroscope(options, std::span(&series, 1));
  server.Stop();
  REQUIRE_FALSE(not_found);
  CHECK(not_found.error().kind() == ErrorKind::kNotFound);
  CHECK(not_found.error().message().find("HTTP 404 \"404 page not found\"") != std::string::npos);
  CHECK(not_found.error().message().find("base URL") != std::string::npos);
  REQUIRE_FALSE(moved);
  INFO(moved.error().message());
  CHECK(moved.error().message().find("redirects to http://elsewhere:4040/ingest") != std::string::npos);
  CHECK(moved.error().message().find("pw123") == std::string::npos);
  REQUIRE_FALSE(busy);
  CHECK(busy.error().kind() == ErrorKind::kBusy);
}

TEST_CASE("push: a refused connection says so and what to check", "[push][pyroscope]") {
  BypassProxies();
  const uint16_t port = ClosedPort();
  const PyroscopeSeries series = CpuSeries("1", "a", "x");
  PushOptions options;
  options.url = "http://127.0.0.1:" + std::to_string(port);

  const auto pushed = PushToPyroscope(options, std::span(&series, 1));
  REQUIRE_FALSE(pushed);
  const std::string message = pushed.error().message();
  INFO(message);
  CHECK(pushed.error().kind() == ErrorKind::kIo);
  CHECK(message.find(options.url + "/ingest") != std::string::npos);
  CHECK(message.find("series 1 of 1") != std::string::npos);
  CHECK(message.find(std::to_string(port)) != std::string::npos);
  CHECK(message.find("is Pyroscope running") != std::string::npos);
}

TEST_CASE("push: a server that never answers times out", "[push][pyroscope]") {
  BypassProxies();
  // Listening but never accepting: the kernel takes the connection, nobody answers.
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(listen(fd.get(), 4) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const PyroscopeSeries series = CpuSeries("1", "a", "x");
  PushOptions options;
  options.url = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  options.timeout_seconds = 0.1;

  const auto start = std::chrono::steady_clock::now();
  const auto pushed = PushToPyroscope(options, std::span(&series, 1));
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(pushed);
  INFO(pushed.error().message());
  CHECK(pushed.error().message().find("no answer within 0.1 s") != std::string::npos);
  CHECK(took < std::chrono::seconds(5));
}

TEST_CASE("push: bad keys, names, URLs and times are refused before anything is sent", "[push][pyroscope]") {
  LoopbackServer server;
  PushOptions options;
  options.url = server.url();
  const PyroscopeSeries good = CpuSeries("1", "a", "x");

  PyroscopeSeries bad_key = good;
  bad_key.labels.emplace_back("domain-name", "x");
  // The bad series is the second: the first is not sent either.
  const std::vector<PyroscopeSeries> with_bad_key = {good, bad_key};
  const auto refused_key = PushToPyroscope(options, with_bad_key);
  REQUIRE_FALSE(refused_key);
  CHECK(refused_key.error().kind() == ErrorKind::kInvalidArgument);
  CHECK(refused_key.error().message().find("\"domain-name\"") != std::string::npos);
  CHECK(refused_key.error().message().find("[a-zA-Z_][a-zA-Z0-9_]*") != std::string::npos);

  PyroscopeSeries bad_app = good;
  bad_app.app = "hvprof cpu{x}";
  CHECK_FALSE(PushToPyroscope(options, std::span(&bad_app, 1)));
  PyroscopeSeries twice = good;
  twice.labels.emplace_back("domain", "2");
  CHECK_FALSE(PushToPyroscope(options, std::span(&twice, 1)));
  PyroscopeSeries empty_value = good;
  empty_value.labels.emplace_back("guest", "");
  CHECK_FALSE(PushToPyroscope(options, std::span(&empty_value, 1)));
  PyroscopeSeries milliseconds = good;
  milliseconds.from_seconds = 1'700'000'000'000;
  milliseconds.until_seconds = 1'700'000'060'000;
  CHECK_FALSE(PushToPyroscope(options, std::span(&milliseconds, 1)));
  PyroscopeSeries backwards = good;
  backwards.until_seconds = good.from_seconds - 1;
  CHECK_FALSE(PushToPyroscope(options, std::span(&backwards, 1)));
  PyroscopeSeries no_profile = good;
  no_profile.profile.clear();
  CHECK_FALSE(PushToPyroscope(options, std::span(&no_profile, 1)));
  CHECK_FALSE(PushToPyroscope(options, std::span<const PyroscopeSeries>()));

  PushOptions ftp = options;
  ftp.url = "ftp://127.0.0.1:" + std::to_string(server.port());
  const auto refused_ftp = PushToPyroscope(ftp, std::span(&good, 1));
  REQUIRE_FALSE(refused_ftp);
  CHECK(refused_ftp.error().kind() == ErrorKind::kInvalidArgument);
  CHECK(refused_ftp.error().message().find("\"ftp\"") != std::string::npos);
  CHECK(refused_ftp.error().message().find("use http:// or https://") != std::string::npos);

  PushOptions bad_tenant = options;
  bad_tenant.tenant = "a\r\nX-Injected: 1";
  CHECK_FALSE(PushToPyroscope(bad_tenant, std::span(&good, 1)));
  PushOptions bad_timeout = options;
  bad_timeout.timeout_seconds = 0;
  CHECK_FALSE(PushToPyroscope(bad_timeout, std::span(&good, 1)));

  CHECK(server.Stop().empty());
}

TEST_CASE("push: credentials in the URL go as basic auth and never into a message", "[push][pyroscope][safety]") {
  const std::string secret = "s3cret-token";
  // The server even repeats the password: the message must still not show it.
  LoopbackServer server({{401, "invalid credentials for alice: " + secret, ""}});
  const PyroscopeSeries series = CpuSeries("1", "a", "x");
  PushOptions options;
  options.url = "http://alice:" + secret + "@127.0.0.1:" + std::to_string(server.port());

  const auto url = IngestUrl(options, series);
  REQUIRE(url);
  CHECK(url.value().find(secret) == std::string::npos);
  CHECK(url.value().find("alice") == std::string::npos);

  const auto pushed = PushToPyroscope(options, std::span(&series, 1));
  const std::vector<Request> requests = server.Stop();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].headers.at("authorization") == "Basic YWxpY2U6czNjcmV0LXRva2Vu");  // alice:s3cret-token
  REQUIRE_FALSE(pushed);
  CHECK(pushed.error().kind() == ErrorKind::kPermissionDenied);
  CHECK(pushed.error().message().find("HTTP 401") != std::string::npos);
  CHECK(pushed.error().message().find(secret) == std::string::npos);
  CHECK(pushed.error().message().find("alice:") == std::string::npos);

  // Nor when the connection fails, the URL is refused, or the password is %-encoded.
  PushOptions refused = options;
  refused.url = "http://alice:" + secret + "@127.0.0.1:" + std::to_string(ClosedPort());
  const auto not_connected = PushToPyroscope(refused, std::span(&series, 1));
  REQUIRE_FALSE(not_connected);
  CHECK(not_connected.error().message().find(secret) == std::string::npos);
  PushOptions with_query = options;
  with_query.url = "https://alice:" + secret + "@example.net/?x=1";
  const auto bad_url = PushToPyroscope(with_query, std::span(&series, 1));
  REQUIRE_FALSE(bad_url);
  CHECK(bad_url.error().message().find("has a query") != std::string::npos);
  CHECK(bad_url.error().message().find(secret) == std::string::npos);
  PushOptions ftp = options;
  ftp.url = "ftp://alice:" + secret + "@example.net";
  const auto bad_scheme = PushToPyroscope(ftp, std::span(&series, 1));
  REQUIRE_FALSE(bad_scheme);
  CHECK(bad_scheme.error().message().find(secret) == std::string::npos);
}

TEST_CASE("push: a server that echoes the request cannot make a message show the credentials",
          "[push][pyroscope][safety]") {
  // Issue 38: the error body is quoted; a server (or a proxy) answering with what it was sent
  // showed the Authorization header, and a password the terminal escaping changes was not
  // recognised once escaped.
  const std::string user = "alice";
  const std::string password = "p\\ss\x1bw\xc3\xa9rd";  // a backslash, an escape, UTF-8
  // base64("alice:p\ss\x1bw\xc3\xa9rd"), as libcurl sends it.
  const std::string basic = "YWxpY2U6cFxzcxt3w6lyZA==";
  LoopbackServer server({{401, "you sent Authorization: Basic " + basic + " and password " + password, ""}});
  const PyroscopeSeries series = CpuSeries("1", "a", "x");
  PushOptions options;
  options.url = "http://127.0.0.1:" + std::to_string(server.port());
  options.username = user;
  options.password = password;
  const auto pushed = PushToPyroscope(options, std::span(&series, 1));
  const std::vector<Request> requests = server.Stop();
  REQUIRE(requests.size() == 1);
  REQUIRE(requests[0].headers.at("authorization") == "Basic " + basic);
  REQUIRE_FALSE(pushed);
  const std::string message = pushed.error().message();
  INFO(message);
  CHECK(message.find("HTTP 401") != std::string::npos);
  CHECK(message.find(basic) == std::string::npos);
  CHECK(message.find("YWxpY2U6") == std::string::npos);
  CHECK(message.find(hvprof::EscapeForTerminal(password)) == std::string::npos);
  CHECK(message.find("and password ***") != std::string::npos);  // the body is still quoted, without them
}

TEST_CASE("push: the ingest URL keeps a path prefix and refuses what is not a base URL", "[push][pyroscope]") {
  const PyroscopeSeries series = CpuSeries("1", "a", "x");
  PushOptions options;
  const auto url_of = [&](std::string base) {
    options.url = std::move(base);
    return IngestUrl(options, series);
  };
  // %7b and %7B are the same escape; libcurl 7.88 writes lower case, others may not.
  const auto upper_escapes = [](std::string url) {
    for (size_t at = url.find('%'); at != std::string::npos && at + 2 < url.size(); at = url.find('%', at + 1)) {
      for (size_t k = at + 1; k <= at + 2; ++k) {
        url[k] = static_cast<char>(std::toupper(static_cast<unsigned char>(url[k])));
      }
    }
    return url;
  };
  const std::string query = "?name=hvprof.cpu%7Bdomain%3D1%2Cdomain_name%3Da%2Chost%3Dh1%7D&from=1700000000"
                            "&until=1700000060&format=pprof&spyName=hvprof";
  REQUIRE(url_of("http://127.0.0.1:4040"));
  CHECK(upper_escapes(url_of("http://127.0.0.1:4040").value()) == "http://127.0.0.1:4040/ingest" + query);
  CHECK(upper_escapes(url_of("https://profiles.example.net/pyroscope/").value()) ==
        "https://profiles.example.net/pyroscope/ingest" + query);
  CHECK(upper_escapes(url_of("HTTP://h:4040/ingest").value()) == "http://h:4040/ingest" + query);

  const auto refused = [&](std::string base, std::string_view says) {
    const auto url = url_of(std::move(base));
    REQUIRE_FALSE(url);
    INFO(url.error().message());
    CHECK(url.error().kind() == ErrorKind::kInvalidArgument);
    CHECK(url.error().message().find(says) != std::string::npos);
  };
  refused("127.0.0.1:4040", "no scheme");
  refused("file:///etc/passwd", "use http:// or https://");
  refused("http://", "http://");
  refused("http://h:4040/?tenant=x", "has a query");
  refused("http://h:4040/#x", "fragment");
  refused("http://h:4040/a b", "pyroscope URL");
}

TEST_CASE("push: label keys, application names and tenants follow Pyroscope's rules", "[push][pyroscope]") {
  CHECK(ValidateLabelKey("domain"));
  CHECK(ValidateLabelKey("domain_name"));
  CHECK(ValidateLabelKey("_x9"));
  CHECK_FALSE(ValidateLabelKey(""));
  CHECK_FALSE(ValidateLabelKey("9lives"));
  CHECK_FALSE(ValidateLabelKey("domain.name"));
  CHECK_FALSE(ValidateLabelKey("domain-name"));
  CHECK_FALSE(ValidateLabelKey("a=b"));
  CHECK_FALSE(ValidateLabelKey("__name__"));
  CHECK_FALSE(ValidateLabelKey(std::string(hvprof::push::kMaxLabelKeyBytes + 1, 'k')));

  CHECK(ValidateAppName("hvprof.cpu"));
  CHECK(ValidateAppName("my-app_2"));
  CHECK_FALSE(ValidateAppName(""));
  CHECK_FALSE(ValidateAppName("app{x=1}"));
  CHECK_FALSE(ValidateAppName("app name"));

  CHECK(ValidateTenant(""));
  CHECK(ValidateTenant("team-a.(prod)*!'"));
  CHECK_FALSE(ValidateTenant(".."));
  CHECK_FALSE(ValidateTenant("a/b"));
  CHECK_FALSE(ValidateTenant(std::string(151, 't')));
}

TEST_CASE("push: label values are sanitized to what Pyroscope's parser keeps", "[push][pyroscope][safety]") {
  CHECK(SanitizeLabelValue("build-vm") == "build-vm");
  CHECK(SanitizeLabelValue("a,b}c{d=e") == "a_b_c_d_e");
  CHECK(SanitizeLabelValue("tab\there\n") == "tab_here_");
  CHECK(SanitizeLabelValue("caf\xc3\xa9") == "caf\xc3\xa9");       // UTF-8 is kept
  CHECK(SanitizeLabelValue("bad\xff\xc3") == "bad__");              // bytes that are not UTF-8
  CHECK(SanitizeLabelValue("c1\xc2\x9b") == "c1_");                 // a C1 control
  CHECK(SanitizeLabelValue("  mid dle  ") == "__mid dle__");        // ends the server would trim
  CHECK(SanitizeLabelValue("\xe3\x80\x80x") == "_x");               // U+3000 is white space too
  CHECK(SanitizeLabelValue(std::string(3000, 'v')).size() == hvprof::push::kMaxLabelValueBytes);
  // Cut at a character, not inside one.
  std::string wide;
  while (wide.size() < 2100) wide += "\xe6\x97\xa5";
  const std::string cut = SanitizeLabelValue(wide);
  CHECK(cut.size() == 2046);
  CHECK(cut.substr(cut.size() - 3) == "\xe6\x97\xa5");

  PyroscopeSeries series = CpuSeries("3", "evil},x=1{", "p");
  const auto name = SeriesName(series);
  REQUIRE(name);
  CHECK(name.value() == "hvprof.cpu{domain=3,domain_name=evil__x_1_,host=h1}");
}
