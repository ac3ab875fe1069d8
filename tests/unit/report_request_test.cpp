// hvprof-report's command line as a typed request (control/report_request.h): every refusal
// rule, each with the words its message must carry, and what accepted commands ask for.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/base/scoped_fd.h"
#include "hvprof/control/report_request.h"
#include "skip.h"

using namespace hvprof;
using control::ReportFormat;
using control::ReportKind;
using control::ReportRequest;

namespace {

Result<ReportRequest> Parse(std::vector<std::string> args, int stdout_fd = -1) {
  return control::ParseReportRequest(args, control::ReportTerminal{stdout_fd});
}

// The command must be refused, as bad usage, with `words` in its message.
void RequireRefusal(const std::vector<std::string>& args, const std::string& words) {
  std::string shown;
  for (const std::string& arg : args) shown += arg + " ";
  INFO("hvprof-report " << shown);
  auto request = Parse(args);
  REQUIRE_FALSE(request.has_value());
  CHECK(request.error().kind() == ErrorKind::kInvalidArgument);
  INFO("message: " << request.error().message());
  CHECK(request.error().message().find(words) != std::string::npos);
}

ReportRequest Accept(const std::vector<std::string>& args) {
  auto request = Parse(args);
  if (!request) FAIL("refused: " << request.error().message());
  return request.value();
}

}  // namespace

TEST_CASE("hvprof-report refuses what it cannot honour: the sessions and the command line's shape", "[cli]") {
  RequireRefusal({"{", "a", "{"}, "an unexpected '{'");
  RequireRefusal({"a", "}"}, "a '}' without its '{'");
  RequireRefusal({"{", "a", "}"}, "give both sides");
  RequireRefusal({"--no-such-option"}, "Try 'hvprof-report --help'");
  RequireRefusal({"--thresold=5"}, "unrecognised option '--thresold=5' (did you mean --threshold?)");
  RequireRefusal({"--pid=abc"}, "--pid: 'abc' is not a process id (a number)");
  RequireRefusal({"--pid=1,,2"}, "empty item in the list");
  RequireRefusal({"-l", "--tid=7"}, "--tid narrows the views of stacks");
  RequireRefusal({"--diff", "a", "b", "--comm=x"}, "--diff does not take --comm");
  RequireRefusal({"--threshold=many"}, "Try 'hvprof-report --help'");
  RequireRefusal({"one", "two"}, "one session at a time; to compare two, use --diff");
  for (const std::string option : {"--fdr", "--slices=4", "--fail-on-regression"}) {
    RequireRefusal({option}, "goes with --diff");
  }
  RequireRefusal({"-d", "-g"}, "choose one of -d and -g");
  RequireRefusal({"-l", "-d", "-g"}, "choose one of -d and -g");
  RequireRefusal({"--color=sometimes"}, "sometimes");
  RequireRefusal({"-t", "101"}, "--threshold must be 0-100");
  RequireRefusal({"-t", "-1"}, "--threshold must be 0-100");
  RequireRefusal({"--format=yaml"}, "--format: 'yaml' is not text, csv, json, folded, pprof, html or perfetto");
  RequireRefusal({"--format=perfetto"}, "is the scheduling time line's: add --timeline");
  RequireRefusal({"--format=chrome-json"}, "add --timeline");
  RequireRefusal({"--top=3"}, "--top goes with --sched");
  RequireRefusal({"--buckets=30"}, "--buckets goes with --timeline");
  RequireRefusal({"--stack-root=thread"}, "--stack-root=thread: expected domain");
  RequireRefusal({"--demangle=fancy"}, "--demangle: 'fancy' is not none, normal or smart");
  RequireRefusal({"--merge=some"}, "--merge: 'some' is not unitmask or all");
  RequireRefusal({"--sort=size"}, "--sort: 'size' is not a sort key");
  RequireRefusal({"--mode=guest"}, "--mode: 'guest' is not user, kernel or hypervisor");
  for (const std::string option : {"--domain", "--event", "--image", "--symbol", "--image-path"}) {
    RequireRefusal({option + "=a,,b"}, "empty item in the list");
  }
}

TEST_CASE("hvprof-report refuses what it cannot honour: --list", "[cli]") {
  RequireRefusal({"--list", "--format=csv"}, "--list prints text or json");
  RequireRefusal({"--list", "before"}, "--list lists every session: name none");
  RequireRefusal({"--list", "--diff", "a", "b"}, "--list lists every session: name none");
}

TEST_CASE("hvprof-report refuses what it cannot honour: --sched and --timeline", "[cli]") {
  RequireRefusal({"--sched", "--diff", "a", "b"}, "--sched reports one session's scheduling: not with --diff");
  RequireRefusal({"--timeline", "{", "a", "}", "{", "b", "}"}, "--timeline reports one session's scheduling");
  // Every option of the samples' reports, refused by name.
  const std::vector<std::vector<std::string>> samples_options = {
      {"--list"},           {"--details"},         {"--debug-info"},      {"--callgraph"},     {"--children"},
      {"--by-domain"},      {"--by-process"},      {"--all-domains"},     {"--domain=dom0"},   {"--mode=user"},
      {"--image=a"},        {"--event=CYCLES"},    {"--symbol=f"},        {"--threshold=1"},   {"--sort=image"},
      {"--reverse-sort"},   {"--merge=all"},       {"--show-address"},    {"--long-filenames"}, {"--accumulated"},
      {"--global-percent"}, {"--exclude-dependent"}, {"--include-idle"},  {"--push=http://127.0.0.1:1"},
      {"--raw-samples"},    {"--stack-root=mode"}, {"--verbose"},         {"--timing"}};
  for (const auto& option : samples_options) {
    const std::string name = option[0].substr(2, option[0].find('=') - 2);
    for (const char* view : {"--sched", "--timeline"}) {
      std::vector<std::string> args{view};
      args.insert(args.end(), option.begin(), option.end());
      RequireRefusal(args, std::string(view) + " does not take --" + name + ": it reports the scheduling records");
    }
  }
  RequireRefusal({"--timeline", "-l"}, "--timeline does not take -l");
  RequireRefusal({"--sched", "--timeline", "--format=csv"}, "--sched and --timeline together print text");
  for (const char* format : {"folded", "pprof", "html"}) {
    RequireRefusal({"--sched", std::string("--format=") + format}, "--sched writes text, csv or json, not");
  }
  for (const char* format : {"json", "folded", "pprof"}) {
    RequireRefusal({"--timeline", std::string("--format=") + format}, "--timeline writes text, csv, html or perfetto");
  }
  RequireRefusal({"--timeline", "--buckets=0"}, "--buckets: 1 to 10000");
  RequireRefusal({"--timeline", "--buckets=10001"}, "--buckets: 1 to 10000");
}

TEST_CASE("hvprof-report refuses what it cannot honour: the stack views", "[cli]") {
  RequireRefusal({"--children"}, "--children goes with -c");
  const std::vector<std::string> table_options = {"--image=a",          "--symbol=f",     "--exclude-dependent",
                                                  "--all-domains",      "--accumulated",  "--show-address",
                                                  "--global-percent",   "--sort=image",   "--reverse-sort",
                                                  "--by-process"};
  for (const std::string& option : table_options) {
    const std::string name = option.substr(2, option.find('=') - 2);
    for (const std::string view : {"-c", "--format=folded", "--format=pprof", "--format=html"}) {
      if (view == "-c" && name == "symbol") continue;  // -c --symbol: the call graph focused on it
      std::vector<std::string> args{view, option};
      if (view == "--format=pprof" || view == "--format=html") args.push_back("-o=/dev/null");
      RequireRefusal(args, view + " does not take --" + name + ": stacks are filtered by --domain");
    }
  }
  RequireRefusal({"-c", "--all-domains"}, "the profiles guests publish carry no call chains");
  RequireRefusal({"--format=folded", "--by-domain"}, "--format=folded writes every stack");
  RequireRefusal({"--format=folded", "-t", "2"}, "--by-domain and -t are for the tables");
  RequireRefusal({"-c", "-l"}, "-c is a view of its own");
  RequireRefusal({"-c", "--format=folded"}, "-c is a view of its own");
}

TEST_CASE("hvprof-report refuses a binary format on a terminal, and takes it in a file or a pipe", "[cli]") {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
    if (master >= 0) ::close(master);
    if (hvprof::testing::SkipTest("needs a pseudo-terminal (posix_openpt)")) return;
  }
  ScopedFd owner(master);
  ScopedFd terminal(::open(::ptsname(master), O_RDWR | O_NOCTTY));
  REQUIRE(terminal.valid());
  for (const char* format : {"pprof", "html"}) {
    auto refused = Parse({std::string("--format=") + format}, terminal.get());
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().message().find("is a file to open elsewhere: give -o FILE") != std::string::npos);
    CHECK(Parse({std::string("--format=") + format, "-o", "out"}, terminal.get()).has_value());
    CHECK(Parse({std::string("--format=") + format}, -1).has_value());  // a pipe
  }
  // Colour follows the terminal the report goes to, and only text has it.
  ::unsetenv("NO_COLOR");
  CHECK(Parse({"-l"}, terminal.get()).value().table.color == ::isatty(terminal.get()));
  CHECK_FALSE(Parse({"-l", "-o", "file"}, terminal.get()).value().table.color);
  CHECK_FALSE(Parse({"-l", "--format=csv"}, terminal.get()).value().table.color);
  CHECK(Parse({"-l", "--color=always"}, -1).value().table.color);
}

TEST_CASE("hvprof-report refuses what it cannot honour: --diff", "[cli]") {
  RequireRefusal({"{", "a", "}", "{", "b", "}", "c"}, "with { BASE } { NEW }, name no other session");
  RequireRefusal({"--diff", "a"}, "--diff takes two sides: --diff BASE NEW");
  RequireRefusal({"--diff", "a", "b", "c"}, "--diff takes two sides");
  RequireRefusal({"--diff", "a,,b", "c"}, "empty item in the list");
  RequireRefusal({"--diff", "a", "b", "-d"}, "--diff compares images, symbols (-l) or stacks");
  RequireRefusal({"--diff", "a", "b", "-g"}, "not -d or -g");
  for (const std::string option : {"--all-domains", "--push=http://127.0.0.1:1", "--children", "--accumulated",
                                   "--global-percent", "--show-address", "--by-process"}) {
    std::vector<std::string> args{"--diff", "a", "b", option};
    if (option == "--children") args.push_back("-c");
    RequireRefusal(args, "--diff does not take --" + option.substr(2, option.find('=') - 2));
  }
  RequireRefusal({"--diff", "a", "b", "--format=pprof"}, "not pprof");
  RequireRefusal({"--diff", "a", "b", "--alpha=0"}, "--alpha must be between 0 and 1");
  RequireRefusal({"--diff", "a", "b", "--alpha=1"}, "--alpha must be between 0 and 1");
  RequireRefusal({"--diff", "a", "b", "--slices=1"}, "--slices must be 2 to 64");
  RequireRefusal({"--diff", "a", "b", "--slices=65"}, "--slices must be 2 to 64");
  RequireRefusal({"--diff", "a", "b", "--slices=4", "-c"}, "--slices compares images or symbols");
  RequireRefusal({"--diff", "a", "b", "--slices=4", "--format=folded"}, "--slices compares images or symbols");
}

TEST_CASE("hvprof-report's accepted commands, as typed requests", "[cli]") {
  SECTION("the default: images of the chosen session, as text") {
    const ReportRequest r = Accept({});
    CHECK(r.kind == ReportKind::kTable);
    CHECK(r.format == ReportFormat::kText);
    CHECK(r.session.empty());
    CHECK(r.session_root == "/var/lib/hvprof");
    CHECK(r.table.view == report::View::kImage);
    CHECK(r.load.use_aggregate);
    CHECK_FALSE(r.load.stacks);
  }
  SECTION("symbols of one saved session, filtered") {
    const ReportRequest r = Accept({"before", "-l", "--domain=dom0,idle", "--mode=kernel,xen", "--event=CYCLES",
                                    "-t", "1.5", "--session-dir=/tmp/s", "--raw-samples"});
    CHECK(r.kind == ReportKind::kTable);
    CHECK(r.session == "before");
    CHECK(r.session_root == "/tmp/s");
    CHECK(r.table.view == report::View::kSymbol);
    CHECK(r.domains == std::vector<std::string>{"dom0", "idle"});
    CHECK(r.events == std::vector<std::string>{"CYCLES"});
    CHECK(r.table.modes == std::vector<uint8_t>{sample_mode::kKernel, sample_mode::kHypervisor});
    CHECK(r.table.threshold == 1.5);
    CHECK_FALSE(r.load.use_aggregate);
  }
  SECTION("narrowed to processes and threads: every entry and stack keeps its process") {
    const ReportRequest r = Accept({"-l", "--pid=42,7", "--comm=make,cc1"});
    CHECK(r.table.pids == std::vector<uint32_t>{7, 42});  // sorted, for lookups
    CHECK(r.comms == std::vector<std::string>{"make", "cc1"});
    CHECK(r.load.processes);
    CHECK_FALSE(Accept({"-l"}).load.processes);
    CHECK(Accept({"--format=folded", "--stack-root=process"}).load.processes);
    // Without --stack-root the session decides (process on linux): whether it was given is kept.
    CHECK_FALSE(Accept({"--format=folded"}).root_chosen);
    CHECK(Accept({"--format=folded", "--stack-root=domain"}).root_chosen);
    RequireRefusal({"--diff", "a", "b", "--format=folded", "--stack-root=process"}, "is not for --diff");
    const ReportRequest threads = Accept({"--format=folded", "--tid=9"});
    CHECK(threads.tids == std::vector<uint32_t>{9});
    CHECK((threads.load.processes && threads.load.stack_threads));
  }
  SECTION("pprof: whole stacks with threads and inlines") {
    const ReportRequest r = Accept({"--format=pprof", "-o", "cpu.pb.gz"});
    CHECK(r.kind == ReportKind::kStacks);
    CHECK(r.format == ReportFormat::kPprof);
    CHECK(r.output == "cpu.pb.gz");
    CHECK((r.load.stacks && r.load.stack_threads && r.load.inlines));
  }
  SECTION("the call graph, ranked by inclusive samples") {
    const ReportRequest r = Accept({"-c", "--children", "--format=json"});
    CHECK(r.kind == ReportKind::kCallgraph);
    CHECK(r.children);
    CHECK(r.load.stacks);
    CHECK_FALSE(r.load.stack_threads);
  }
  SECTION("a diff of two sets of runs, OProfile's spelling") {
    const ReportRequest r = Accept({"{", "a-1", "a-2", "}", "{", "b-1", "b-2", "}", "-l", "--fdr", "--alpha=0.01",
                                    "--fail-on-regression=2"});
    CHECK(r.kind == ReportKind::kDiff);
    CHECK(r.diff.base == std::vector<std::string>{"a-1", "a-2"});
    CHECK(r.diff.next == std::vector<std::string>{"b-1", "b-2"});
    CHECK(r.diff.table.view == report::View::kSymbol);
    CHECK(r.diff.diff.compare.alpha == 0.01);
    CHECK(r.diff.diff.compare.correction == stats::Correction::kBenjaminiHochberg);
    CHECK(r.fail_points == 2);
    CHECK_FALSE(r.diff.diff.stacks);
  }
  SECTION("a diff with commas and pseudo-repeats") {
    const ReportRequest r = Accept({"--diff", "a,b", "c", "--slices=8", "--fail-on-regression"});
    CHECK(r.diff.base == std::vector<std::string>{"a", "b"});
    CHECK(r.diff.diff.compare.method == stats::Method::kSlices);
    CHECK(r.diff.diff.slices == 8);
    CHECK(r.fail_points == 0);
  }
  SECTION("the scheduling views") {
    const ReportRequest sched = Accept({"--sched", "-l", "--top=3"});
    CHECK(sched.kind == ReportKind::kSched);
    CHECK((sched.sched.sched && sched.sched.samples && !sched.sched.timeline));
    CHECK(sched.sched.top == 3);
    const ReportRequest timeline = Accept({"--timeline", "--buckets=120", "--format=chrome-json"});
    CHECK(timeline.kind == ReportKind::kSched);
    CHECK(timeline.format == ReportFormat::kPerfetto);
    CHECK(timeline.sched.buckets == 120);
  }
  SECTION("--list, --help and --version") {
    CHECK(Accept({"--list", "--format=json"}).kind == ReportKind::kList);
    CHECK(Accept({"--help", "--format=yaml"}).kind == ReportKind::kHelp);
    CHECK(Accept({"--version"}).kind == ReportKind::kVersion);
    CHECK(control::ReportUsage().find("Exit status:") != std::string::npos);
  }
  SECTION("format names both ways") {
    for (ReportFormat f : {ReportFormat::kText, ReportFormat::kCsv, ReportFormat::kJson, ReportFormat::kFolded,
                           ReportFormat::kPprof, ReportFormat::kHtml, ReportFormat::kPerfetto}) {
      CHECK(control::ReportFormatFromName(control::ReportFormatName(f)) == f);
    }
  }
}

TEST_CASE("hvprof-report --since, --until and --last: a range of continuous mode's windows", "[cli][continuous]") {
  auto parse = [](std::vector<std::string> args) { return control::ParseReportRequest(args, {}); };
  auto given = parse({"--since=@1796000000", "--until=@1796003600", "-l"});
  REQUIRE(given.has_value());
  REQUIRE(given.value().range.has_value());
  CHECK(given.value().range->since_ns == 1'796'000'000'000'000'000);
  CHECK(given.value().range->until_ns == 1'796'003'600'000'000'000);
  auto last = parse({"--last=5m"});
  REQUIRE(last.has_value());
  REQUIRE(last.value().range.has_value());
  CHECK(last.value().range->until_ns == UINT64_MAX);
  CHECK(parse({"--since=2026-11-30 14:25"}).has_value());
  CHECK(parse({"--since=00:00", "--until=23:59:59"}).has_value());
  for (const auto& [args, words] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--last=5m", "--since=-1h"}, "give it or --since/--until"},
           {{"--since=@2", "--until=@1"}, "not after --since"},
           {{"--since=yesterday"}, "not a time"},
           {{"--last=soon"}, "not a duration"},
           {{"--last=1h", "baseline"}, "not with a session named"},
           {{"--last=1h", "--list"}, "not with a session named"},
           {{"--last=1h", "--sched"}, "not with a session named"}}) {
    auto refused = parse(args);
    REQUIRE_FALSE(refused.has_value());
    INFO(refused.error().message());
    CHECK(refused.error().message().find(words) != std::string::npos);
  }
}
