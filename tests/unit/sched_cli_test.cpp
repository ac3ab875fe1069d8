// hvprof-report's --sched, --timeline, --top and --format=perfetto as a user types them: listed
// in --help, refused where they make no sense, and a clear answer for a session that recorded
// no scheduling.
#include <catch2/catch.hpp>

#include "programs.h"
#include "synthetic_session.h"
#include "temp_dir.h"

using namespace hvprof;
using hvprof::testing::Binary;
using hvprof::testing::CommandResult;
using hvprof::testing::RunProgram;

namespace {

CommandResult Report(std::vector<std::string> args) {
  args.insert(args.begin(), Binary("hvprof-report"));
  return RunProgram(args);
}

std::string Session(const testing::TempDir& dir) {
  store::StoredSample sample;
  sample.ip = 0x401000;
  sample.time_ns = 1000;
  sample.period = 1000000;
  sample.pid = sample.tid = 100;
  return testing::WriteSyntheticSession(dir.File("session"), "linux", {{100, "app", {}}}, {sample});
}

}  // namespace

TEST_CASE("sched cli: --help lists the scheduling options, each with what it does", "[sched][cli]") {
  const CommandResult help = Report({"--help"});
  REQUIRE(help.status == 0);
  // The descriptions are wrapped: compare with runs of spaces and line breaks as one space.
  std::string text;
  for (char c : help.out) {
    if (c == ' ' || c == '\n') {
      if (text.empty() || text.back() != ' ') text += ' ';
    } else {
      text += c;
    }
  }
  for (const char* option : {"--sched the scheduling report instead of the samples: per domain and per vCPU",
                             "--timeline the scheduling time line: which domain ran on each pCPU",
                             "--buckets arg (=60) --timeline: how many columns",
                             "--top arg (=10) --sched: how many of the longest waits",
                             "perfetto (or chrome-json), with --timeline: Chrome's trace-event JSON"}) {
    INFO(option);
    CHECK(text.find(option) != std::string::npos);
  }
}

TEST_CASE("sched cli: a session without scheduling records says how to get them", "[sched][cli]") {
  testing::TempDir dir;
  const std::string session = Session(dir);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--sched", session},
           {"--sched", "-l", "--format=json", session},
           {"--timeline", session},  // the session is not taken for the buckets
           {"--timeline", "--buckets=30", "--format=perfetto", session},
           {"--sched", "--timeline", "--top=3", session}}) {
    const CommandResult result = Report(args);
    INFO(args[0] << " " << args[1] << ": " << result.err);
    CHECK(result.status == 1);
    CHECK(result.out.empty());
    CHECK(result.err.find("this session recorded no scheduling (run with --sched)") != std::string::npos);
  }
}

TEST_CASE("sched cli: combinations that make no sense are refused with the reason", "[sched][cli]") {
  testing::TempDir dir;
  const std::string session = Session(dir);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--format=perfetto", session}, "--format=perfetto is the scheduling time line's: add --timeline"},
      {{"--format=chrome-json", "--sched", session}, "--format=chrome-json is the scheduling time line's"},
      {{"--sched", "-d", session}, "--sched does not take --details"},
      {{"--sched", "--by-domain", session}, "--sched does not take --by-domain"},
      {{"--timeline", "--domain=dom0", session}, "--timeline does not take --domain"},
      {{"--sched", "--diff", session, session}, "--sched reports one session's scheduling: not with --diff"},
      {{"--sched", "--format=html", session}, "--sched writes text, csv or json, not html"},
      {{"--timeline", "--format=json", session}, "--timeline writes text, csv, html or perfetto, not json"},
      {{"--sched", "--timeline", "--format=csv", session}, "--sched and --timeline together print text"},
      {{"--timeline", "-l", session}, "--timeline does not take -l"},
      {{"--timeline", "--buckets=0", session}, "--buckets: 1 to 10000"},
      {{"--buckets=10", session}, "--buckets goes with --timeline"},
      {{"--top=3", session}, "--top goes with --sched"},
      {{"--sched", "--list"}, "--sched does not take --list"},
  };
  for (const auto& [args, message] : cases) {
    const CommandResult result = Report(args);
    INFO(args[0] << " " << args[1] << ": " << result.err);
    CHECK(result.status == 2);
    CHECK(result.err.find(message) != std::string::npos);
  }
}
