// --push end to end: `hvprof-report --push=URL` and `hvprof run --push=URL` send a sim
// session's stacks to a loopback server that reads the requests as Pyroscope would: one
// series per domain, labelled, each a pprof profile holding that domain's samples (read back
// with the real `go tool pprof` where it is installed). A server that fails or is not there
// is reported, and the session stays as it was.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "host_harness.h"
#include "http_server.h"
#include "programs.h"
#include "stacks_support.h"
#include "temp_dir.h"

using hvprof::testing::CommandResult;
using hvprof::testing::Host;
using hvprof::testing::LoopbackServer;
using hvprof::testing::Reply;
using hvprof::testing::Request;
using Json = nlohmann::json;

namespace {

// Samples per domain id, from folded output rooted at the domain ("dom0", "dom1 (build-vm)").
std::map<std::string, uint64_t> FoldedByDomain(const std::string& folded) {
  std::map<std::string, uint64_t> totals;
  std::istringstream in(folded);
  for (std::string line; std::getline(in, line);) {
    const std::string root = line.substr(0, line.find(';'));
    const std::string id = root == "idle" ? "32767" : root.substr(3, root.find(' ') - 3);
    totals[id] += std::stoull(line.substr(line.rfind(' ') + 1));
  }
  return totals;
}

// What `go tool pprof` counts in a profile: the "of N total" of -top.
uint64_t PprofTotal(const std::string& bytes) {
  hvprof::testing::TempDir dir;
  dir.Write("profile.pb.gz", bytes);
  const CommandResult top =
      hvprof::testing::RunProgram({"/usr/bin/go", "tool", "pprof", "-top", "-nodecount=1", dir.File("profile.pb.gz")});
  INFO(top.err);
  REQUIRE(top.status == 0);
  std::smatch match;
  REQUIRE(std::regex_search(top.out, match, std::regex(R"(of (\d+) total)")));
  return std::stoull(match[1]);
}

// Every file of a session with its size and modification time: what "untouched" means.
std::map<std::string, std::pair<uintmax_t, int64_t>> Snapshot(const std::string& directory) {
  std::map<std::string, std::pair<uintmax_t, int64_t>> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory)) {
    if (!entry.is_regular_file()) continue;
    files[entry.path().string()] = {entry.file_size(), entry.last_write_time().time_since_epoch().count()};
  }
  return files;
}

// The requests as Pyroscope reads them: domain label -> request, after checking what every
// series must carry.
std::map<std::string, Request> CheckSeries(const std::vector<Request>& requests) {
  std::map<std::string, Request> by_domain;
  const std::regex name(R"(^hvprof\{domain=(\d+),domain_name=([^,{}=]+),event=CPU_CLK_UNHALTED,platform=sim,host=default\}$)");
  for (const Request& request : requests) {
    INFO(request.target);
    CHECK(request.problem.empty());
    CHECK(request.method == "POST");
    CHECK(request.path == "/ingest");
    CHECK(request.query.at("format") == "pprof");
    const uint64_t from = std::stoull(request.query.at("from"));
    const uint64_t until = std::stoull(request.query.at("until"));
    CHECK(from > 1'600'000'000);
    CHECK(from <= until);
    CHECK(until <= from + 600);
    std::smatch match;
    const std::string series = request.query.at("name");
    REQUIRE(std::regex_match(series, match, name));
    // The body is the gzipped profile.proto.
    REQUIRE(request.body.size() > 20);
    CHECK(static_cast<unsigned char>(request.body[0]) == 0x1f);
    CHECK(static_cast<unsigned char>(request.body[1]) == 0x8b);
    by_domain[match[1]] = request;
  }
  return by_domain;
}

}  // namespace

TEST_CASE("pushing from hvprof-report sends one labelled pprof series per domain to Pyroscope's /ingest",
          "[report][stacks][push]") {
  Host host(hvprof::testing::DefaultScenario());
  hvprof::testing::ProfileWithChains(host, 8, "200ms");
  const auto folded = FoldedByDomain(host.Report({"--format=folded"}).out);
  REQUIRE(folded.size() >= 3);
  const auto before = Snapshot(host.current());

  LoopbackServer server;
  const CommandResult pushed = host.Report({"--push=" + server.url(), "-l", "-t", "5"});
  INFO(pushed.err);
  CHECK(pushed.status == 0);
  CHECK(pushed.out.find("CPU_CLK_UNHALTED") != std::string::npos);  // the report is printed as always
  CHECK(pushed.err.find(fmt::format("pushed {} series", folded.size())) != std::string::npos);
  const auto by_domain = CheckSeries(server.Stop());
  REQUIRE(by_domain.size() == folded.size());
  for (const auto& [domain, samples] : folded) {
    INFO("domain " << domain);
    REQUIRE(by_domain.count(domain) == 1);
    if (std::filesystem::exists("/usr/bin/go")) CHECK(PprofTotal(by_domain.at(domain).body) == samples);
  }
  CHECK(by_domain.at("0").query.at("name").find("domain_name=dom0,") != std::string::npos);
  CHECK(by_domain.at("1").query.at("name").find("domain_name=build-vm,") != std::string::npos);

  // --domain narrows what is sent.
  LoopbackServer narrowed;
  const CommandResult one = host.Report({"--push=" + narrowed.url(), "--domain=1", "--push-app=ci.build"});
  INFO(one.err);
  CHECK(one.status == 0);
  const std::vector<Request> requests = narrowed.Stop();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].query.at("name").rfind("ci.build{domain=1,", 0) == 0);

  // A server that fails, and one that is not there: exit status 4, the reason, and the session
  // as it was.
  LoopbackServer failing({Reply{503, "ingester overloaded", ""}});
  const CommandResult refused = host.Report({"--push=" + failing.url()});
  CHECK(refused.status == 4);
  CHECK(refused.err.find("503") != std::string::npos);
  CHECK(refused.err.find("ingester overloaded") != std::string::npos);
  CHECK(failing.Stop().size() == 1);  // it stops at the first failure
  const CommandResult gone =
      host.Report({"--push=http://127.0.0.1:" + std::to_string(hvprof::testing::ClosedPort())});
  CHECK(gone.status == 4);
  CHECK(gone.err.find("is Pyroscope running") != std::string::npos);
  const CommandResult bad = host.Report({"--push=ftp://127.0.0.1/"});
  CHECK(bad.status == 4);
  CHECK(bad.err.find("http://") != std::string::npos);
  CHECK(Snapshot(host.current()) == before);
}

TEST_CASE("pushing from hvprof run: each run is pushed, and a failed push is a warning in the summary",
          "[control][run][push]") {
  Host host(hvprof::testing::DefaultScenario());
  hvprof::testing::TempDir dir;
  LoopbackServer server;
  const CommandResult run = host.Hvprof({"run", "--passive-domains=1,2", "--callgraph=8", "--duration=200ms",
                                         "--push=" + server.url(), "--json=" + dir.File("summary.json")});
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(run.out.find("pushed ") != std::string::npos);
  const auto by_domain = CheckSeries(server.Stop());
  CHECK(by_domain.size() >= 3);
  std::ifstream in(dir.File("summary.json"));
  const Json summary = Json::parse(in, nullptr, false);
  REQUIRE(summary.is_object());
  CHECK(summary["runs"][0]["push"]["series"] == by_domain.size());

  const CommandResult failed = host.Hvprof({"run", "--passive-domains=1,2", "--callgraph=8", "--duration=100ms",
                                            "--push=http://127.0.0.1:" + std::to_string(hvprof::testing::ClosedPort()),
                                            "--json=" + dir.File("failed.json")});
  INFO(failed.err);
  CHECK(failed.status == 0);  // the workload's status: the profile itself is fine
  CHECK(failed.err.find("hvprof run: warning: --push:") != std::string::npos);
  std::ifstream failed_in(dir.File("failed.json"));
  const Json failed_summary = Json::parse(failed_in, nullptr, false);
  REQUIRE(failed_summary.is_object());
  CHECK(failed_summary["runs"][0]["push"]["error"].get<std::string>().find("is Pyroscope running") !=
        std::string::npos);
  CHECK(std::filesystem::exists(failed_summary["runs"][0]["session"].get<std::string>() + "/session.json"));
}
