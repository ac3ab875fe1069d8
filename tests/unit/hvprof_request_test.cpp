// hvprof's command line as a typed request (control/hvprof_request.h): every refusal rule, each
// with the words its message must carry, and what accepted commands ask for.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/control/hvprof_request.h"
#include "temp_dir.h"

using namespace hvprof;
using control::HvprofAction;
using control::HvprofKind;
using control::HvprofRequest;

namespace {

control::HvprofEnvironment Machine(bool xen_guest = false) {
  control::HvprofEnvironment environment;
  environment.xen_host = xen_guest;
  environment.xen_guest = xen_guest;
  environment.program_dir = "/opt/hvprof/bin";
  return environment;
}

void RequireRefusal(const std::vector<std::string>& args, const std::string& words, bool xen_guest = false) {
  std::string shown;
  for (const std::string& arg : args) shown += arg + " ";
  INFO("hvprof " << shown);
  auto request = control::ParseHvprofRequest(args, Machine(xen_guest));
  REQUIRE_FALSE(request.has_value());
  CHECK(request.error().kind() == ErrorKind::kInvalidArgument);
  INFO("message: " << request.error().message());
  CHECK(request.error().message().find(words) != std::string::npos);
}

HvprofRequest Accept(const std::vector<std::string>& args, const control::HvprofEnvironment& environment = Machine()) {
  auto request = control::ParseHvprofRequest(args, environment);
  if (!request) FAIL("refused: " << request.error().message());
  return request.value();
}

}  // namespace

TEST_CASE("hvprof refuses what it cannot honour: actions and their options", "[cli]") {
  RequireRefusal({"--no-such-option"}, "Try 'hvprof --help'");
  RequireRefusal({"--domain=1", "--domain=2", "--status"}, "Try 'hvprof --help'");
  RequireRefusal({"--session-dir=/tmp/x"}, "no action given");
  RequireRefusal({"--start", "--stop"}, "one action per call; you gave --start and --stop");
  RequireRefusal({"--save=a", "--reset"}, "one action per call");
  RequireRefusal({"--start-daemon", "--platform=linux", "--scenario=default"}, "--scenario is for --platform=sim");
  RequireRefusal({"--start-daemon", "--platform=sim", "--callgraph=65"}, "callgraph");
  RequireRefusal({"--start-daemon", "--platform=sim", "--buffer-size=100"}, "buffer-size");
  RequireRefusal({"--start-daemon", "--platform=sim", "--poll-interval=60001"}, "poll-interval");
  RequireRefusal({"--start-daemon", "--platform=sim", "--rate=-5"}, "rate");
  RequireRefusal({"--status", "--platform=xen"}, "this is a Xen guest: give its domain id with --domain=ID", true);
  for (const char* run_only : {"--baseline=before", "--fail-on-regression"}) {
    RequireRefusal({"--status", run_only}, "goes with `hvprof run`");
  }
  const std::vector<std::string> setup_only = {
      "--xen=/boot/xen-syms", "--vmlinux=/boot/vmlinux", "--no-vmlinux",    "--active-domains=1",
      "--passive-domains=2",  "--passive-images=/k",     "--event=CYCLES",  "--buffer-size=1024",
      "--callgraph=8",        "--poll-interval=10",      "--rate=99",       "--jit=on",
      "--sched",              "--verbose",               "--scenario=default"};
  for (const std::string& option : setup_only) {
    RequireRefusal({"--start", "--platform=sim", option},
                   "--" + option.substr(2, option.find('=') - 2) + " is a setup option; it only goes with --start-daemon");
  }
  RequireRefusal({"--start-daemon", "--platform=sim", "--active-domains=1,,2"}, "empty item in the list");
  RequireRefusal({"--start-daemon", "--platform=sim", "--passive-domains=,"}, "empty item in the list");
  RequireRefusal({"--start-daemon", "--platform=sim", "--passive-images=a,"}, "empty item in the list");
  RequireRefusal({"--run-sim=soon"}, "--run-sim: 'soon' is not a duration");
  RequireRefusal({"--start-daemon", "--platform=sim", "--build-id-cache=cache"},
                 "--build-id-cache=cache: give an absolute path, or none");
  RequireRefusal({"--start-daemon", "--platform=sim", "--build-id-cache-size=lots"}, "'lots' is not a size");
  RequireRefusal({"run", "--platform=sim", "--build-id-cache-size=1000k"}, "keeps less than 1 MiB");
  RequireRefusal({"--start", "--platform=sim", "--build-id-cache=/c"},
                 "--build-id-cache is a setup option; it only goes with --start-daemon");
}

TEST_CASE("hvprof refuses what it cannot honour: hvprof run", "[cli]") {
  RequireRefusal({"run", "--platform=sim", "--domain=1"}, "runs in dom0 (it drives the whole host)");
  for (const char* action : {"--start-daemon", "--start", "--stop", "--dump", "--shutdown", "--reset", "--save=x",
                             "--status", "--list-events", "--run-sim=1s", "--publish"}) {
    const std::string option(action);
    RequireRefusal({"run", "--platform=sim", option},
                   option.substr(0, option.find('=')) + " is an action of its own; `hvprof run` does them all");
  }
  RequireRefusal({"run", "--platform=sim", "--active-domains=1,,2"}, "empty item in the list");
  RequireRefusal({"run", "--platform=sim", "--duration=forever"}, "--duration: 'forever' is not a duration");
  RequireRefusal({"run", "--platform=sim", "--repeat=0"}, "--repeat must be at least 1");
  RequireRefusal({"run", "--platform=sim", "--fail-on-regression=1"},
                 "--fail-on-regression compares against --baseline=SESSION: name one");
  RequireRefusal({"run", "--platform=sim", "--bogus", "--", "true"}, "Try 'hvprof run --help'");
}

TEST_CASE("perf's words: record, -g, a workload without --, did you mean, per-action help", "[cli]") {
  SECTION("hvprof record is hvprof run, and the workload starts at the first word that is no option") {
    const HvprofRequest r = Accept({"record", "-g", "--platform=sim", "-F", "997", "-e", "CYCLES", "--duration", "2s",
                                    "--fail-on-regression", "--baseline=b", "./bench", "-F", "1", "--", "x"});
    CHECK(r.kind == HvprofKind::kRun);
    CHECK(r.run.setup.callgraph == 64);
    CHECK(r.run.setup.rate == 997);
    CHECK(r.run.setup.events == std::vector<std::string>{"CYCLES"});
    CHECK(r.run.duration_ns == 2'000'000'000);
    CHECK(r.run.fail_points == 0);  // an implicit value takes no word after it
    CHECK(r.run.command == std::vector<std::string>{"./bench", "-F", "1", "--", "x"});
    // Short options run together, the value attached or apart.
    CHECK(Accept({"run", "--platform=sim", "-gF997", "make"}).run.command == std::vector<std::string>{"make"});
    CHECK(Accept({"run", "--platform=sim", "-gF", "997", "make"}).run.setup.rate == 997);
    CHECK(Accept({"run", "--platform=sim", "-gF", "997", "make"}).run.command == std::vector<std::string>{"make"});
    CHECK(Accept({"run", "--platform=sim"}).run.command.empty());
    CHECK(Accept({"run", "--platform=sim", "--", "-x", "y"}).run.command == std::vector<std::string>{"-x", "y"});
    // A prefix that fits two options is Boost's usage error, not a crash.
    RequireRefusal({"run", "--session", "/tmp/x", "true"}, "ambiguous");
    RequireRefusal({"record", "--baseline=b", "--fail-on-regression", "1", "--", "./bench"},
                   "takes its points as --fail-on-regression=1: '1' would be run as the command");
  }
  SECTION("-g and its refusals") {
    CHECK(Accept({"--start-daemon", "--platform=sim", "-g"}).setup.callgraph == 64);
    RequireRefusal({"--start-daemon", "--platform=sim", "-g", "--callgraph=8"}, "give it or --callgraph=N, not both");
    RequireRefusal({"--start", "-g"}, "-g is a setup option; it only goes with --start-daemon");
  }
  SECTION("a misspelled option or command gets the one it nearly is") {
    RequireRefusal({"--start-deamon"}, "unrecognised option '--start-deamon' (did you mean --start-daemon?)");
    RequireRefusal({"--sesion-dir=/x", "--status"}, "(did you mean --session-dir?)");
    RequireRefusal({"run", "--platfrom=sim", "--", "true"}, "(did you mean --platform?)\nTry 'hvprof run --help'.");
    RequireRefusal({"archive", "--partail", "-o", "x.tar"}, "(did you mean --partial?)");
    RequireRefusal({"--zzzzzz"}, "unrecognised option '--zzzzzz'\nTry 'hvprof --help'.");  // nothing near
    RequireRefusal({"recrod", "--", "true"}, "'recrod' is not a command of hvprof");
    RequireRefusal({"recrod", "--", "true"}, "did you mean `hvprof record`?\nTry 'hvprof record --help'.");
    RequireRefusal({"start"}, "hvprof's actions are options, as opcontrol's; did you mean `hvprof --start`?");
    RequireRefusal({"status"}, "did you mean `hvprof --status`?");
    RequireRefusal({"archvie", "x"}, "did you mean `hvprof archive`?");
    RequireRefusal({"frobnicate"}, "it has run (or record), archive, and actions given as options");
  }
  SECTION("hvprof run --help and hvprof --ACTION --help have pages of their own") {
    CHECK(Accept({"run", "--help"}).kind == HvprofKind::kRunHelp);
    CHECK(Accept({"record", "--help"}).kind == HvprofKind::kRunHelp);
    const HvprofRequest save = Accept({"--save", "x", "--help"});
    CHECK(save.kind == HvprofKind::kActionHelp);
    CHECK(save.action == HvprofAction::kSave);
    const std::string run_page = control::HvprofRunUsage();
    CHECK(run_page.find("Usage: hvprof run [options] [--] CMD [ARGS...]") != std::string::npos);
    CHECK(run_page.find("--baseline arg") != std::string::npos);
    CHECK(run_page.find("[ --stop ]") == std::string::npos);  // the actions are not run's options
    const std::string daemon_page = control::HvprofActionUsage(HvprofAction::kStartDaemon);
    CHECK(daemon_page.find("Usage: hvprof --start-daemon [options]") != std::string::npos);
    CHECK(daemon_page.find("--callgraph") != std::string::npos);
    CHECK(daemon_page.find("[ --stop ]") == std::string::npos);
    const std::string stop_page = control::HvprofActionUsage(HvprofAction::kStop);
    CHECK(stop_page.find("stop profiling and write the samples") != std::string::npos);
    CHECK(stop_page.find("--session-dir") != std::string::npos);
    CHECK(stop_page.find("--callgraph") == std::string::npos);
  }
}

TEST_CASE("hvprof refuses what it cannot honour: hvprof archive", "[cli]") {
  RequireRefusal({"archive", "before"}, "name the archive to write with -o FILE.tar");
  RequireRefusal({"archive", "before", "extra", "-o", "x.tar"}, "Try 'hvprof archive --help'");
  RequireRefusal({"archive", "--start"}, "Try 'hvprof archive --help'");
}

TEST_CASE("hvprof's accepted commands, as typed requests", "[cli]") {
  SECTION("no arguments: the usage, as bad usage; --help and --version") {
    CHECK(Accept({}).kind == HvprofKind::kUsage);
    CHECK(Accept({"--help"}).kind == HvprofKind::kHelp);
    CHECK(Accept({"--version"}).kind == HvprofKind::kVersion);
    CHECK(Accept({"archive", "--help"}).kind == HvprofKind::kArchiveHelp);
    CHECK(control::HvprofUsage().find("Setup options (with --start-daemon)") != std::string::npos);
    CHECK(control::HvprofArchiveUsage().find("Usage: hvprof archive") != std::string::npos);
    CHECK(control::HvprofArchiveUsage().find("--session-dir arg (=/var/lib/hvprof)") != std::string::npos);
  }
  SECTION("--start-daemon with its setup") {
    const HvprofRequest r = Accept({"--start-daemon", "--platform=sim", "--scenario=two-guests", "-e", "CYCLES:100000",
                                    "-e", "LLC_MISSES", "--active-domains=1,web", "--passive-domains=all",
                                    "--callgraph=16", "-F", "997", "--sched", "--session-dir=/tmp/s"});
    CHECK(r.kind == HvprofKind::kAction);
    CHECK(r.action == HvprofAction::kStartDaemon);
    CHECK(r.setup.platform == "sim");
    CHECK(r.scenario == "two-guests");
    CHECK(r.setup.events == std::vector<std::string>{"CYCLES:100000", "LLC_MISSES"});
    CHECK(r.setup.active_domains == std::vector<std::string>{"1", "web"});
    CHECK(r.setup.passive_domains == std::vector<std::string>{"all"});
    CHECK(r.setup.callgraph == 16);
    CHECK(r.setup.rate == 997);
    CHECK(r.setup.sched);
    CHECK(r.setup.session_root == "/tmp/s");
    CHECK(r.setup.build_id_cache.empty());  // hvprofd's default for its user
    CHECK(r.setup.build_id_cache_bytes == 0);
    CHECK(r.run.hvprofd_path == "/opt/hvprof/bin/hvprofd");
    CHECK(r.run.hv_path == "/opt/hvprof/bin/hvprof-hv");
  }
  SECTION("the build-id cache: a directory or none, and its size") {
    const HvprofRequest r = Accept({"--start-daemon", "--platform=sim", "--build-id-cache=/srv/ids",
                                    "--build-id-cache-size=512M"});
    CHECK(r.setup.build_id_cache == "/srv/ids");
    CHECK(r.setup.build_id_cache_bytes == uint64_t{512} << 20);
    CHECK(Accept({"run", "--platform=sim", "--build-id-cache=none", "--", "true"}).setup.build_id_cache == "none");
  }
  SECTION("a guest's commands on the sim keep their own session root") {
    const HvprofRequest r = Accept({"--start", "--domain=2"});
    CHECK(r.action == HvprofAction::kStart);
    CHECK(r.setup.domain == 2);
    CHECK(r.setup.session_root == "/var/lib/hvprof/domain-2");
    CHECK(Accept({"--start", "--domain=2", "--session-dir=/s"}).setup.session_root == "/s");
  }
  SECTION("the other actions") {
    CHECK(Accept({"--save=before"}).save_name == "before");
    CHECK(Accept({"--run-sim=250ms"}).run_sim_ns == 250'000'000);
    CHECK(Accept({"--list-events", "--cpu-type=i386/arch_perfmon"}).cpu_type == "i386/arch_perfmon");
    CHECK(Accept({"-t"}).action == HvprofAction::kStop);
    CHECK(Accept({"--status", "--platform=xen", "--domain=3"}, Machine(true)).setup.domain == 3);
  }
  SECTION("hvprof run: the options before --, the workload after it untouched") {
    const HvprofRequest r = Accept({"run", "--platform=sim", "--duration=2s", "--repeat=3", "--baseline=before",
                                    "--fail-on-regression", "--json=out.json", "--", "make", "--jobs=2", "--"});
    CHECK(r.kind == HvprofKind::kRun);
    CHECK(r.run.duration_ns == 2'000'000'000);
    CHECK(r.run.repeat == 3);
    CHECK(r.run.baseline == "before");
    CHECK(r.run.fail_points == 0);
    CHECK(r.run.json_path == "out.json");
    CHECK(r.run.command == std::vector<std::string>{"make", "--jobs=2", "--"});
    CHECK(r.run.setup.platform == "sim");
    CHECK(r.run.hvprofd_path == "/opt/hvprof/bin/hvprofd");
  }
  SECTION("the platform chosen for the user is said before anything is refused") {
    hvprof::testing::TempDir dir;
    control::HvprofEnvironment xen = Machine(true);
    std::vector<std::string> said;
    xen.say = [&said](const std::string& text) { said.push_back(text); };
    auto refused = control::ParseHvprofRequest({"--start-daemon", "--run-dir=" + dir.File("run")}, xen);
    REQUIRE_FALSE(refused.has_value());  // a Xen guest without --domain
    REQUIRE(said.size() == 1);
    CHECK(said[0].rfind("--platform=xen: ", 0) == 0);
  }
  SECTION("hvprof archive") {
    const HvprofRequest r = Accept({"archive", "before", "-o", "before.tar", "--partial", "--session-dir=/s"});
    CHECK(r.kind == HvprofKind::kArchive);
    CHECK(r.archive.session == "before");
    CHECK(r.archive.output == "before.tar");
    CHECK(r.archive.session_root == "/s");
    CHECK(r.archive.options.partial);
    CHECK(r.archive.options.debuginfod);
  }
}

TEST_CASE("hvprof --continuous: its window, its budget and what it does not go with", "[cli][continuous]") {
  const HvprofRequest plain = Accept({"--start-daemon", "--platform=linux", "--continuous"});
  CHECK(plain.setup.window_ns == setup::kDefaultWindowNs);
  CHECK(plain.setup.keep_bytes == setup::kDefaultKeepBytes);
  CHECK(plain.setup.keep_age_ns == setup::kDefaultKeepAgeNs);
  const HvprofRequest given = Accept({"--start-daemon", "--platform=linux", "--continuous=10s", "--keep-size=500M",
                                      "--keep-age=2d", "--passive-domains=all"});
  CHECK(given.setup.window_ns == 10'000'000'000);
  CHECK(given.setup.keep_bytes == uint64_t{500} << 20);
  CHECK(given.setup.keep_age_ns == 2 * 86'400'000'000'000);
  // The sim's windows are of simulated time: they may be short.
  CHECK(Accept({"--start-daemon", "--platform=sim", "--continuous=50ms"}).setup.window_ns == 50'000'000);
  // The setup survives hvprofd's reading of daemonrc.json.
  auto reread = setup::SetupOptions::FromJson(given.setup.ToJson().dump(), "daemonrc.json");
  REQUIRE(reread.has_value());
  CHECK(reread.value().window_ns == given.setup.window_ns);
  CHECK(reread.value().keep_bytes == given.setup.keep_bytes);
  CHECK(reread.value().keep_age_ns == given.setup.keep_age_ns);

  RequireRefusal({"--start-daemon", "--platform=linux", "--continuous=50ms"}, "1 s to 1 day");
  RequireRefusal({"--start-daemon", "--platform=linux", "--continuous=2d"}, "1 s to 1 day");
  RequireRefusal({"--start-daemon", "--platform=linux", "--continuous=soon"}, "not a duration");
  RequireRefusal({"--start-daemon", "--platform=linux", "--keep-size=1G"}, "budget of --continuous");
  RequireRefusal({"--start-daemon", "--platform=linux", "--continuous", "--keep-size=1M"}, "less than 16 MiB");
  RequireRefusal({"--start-daemon", "--platform=linux", "--continuous=1h", "--keep-age=30m"}, "shorter than a window");
  RequireRefusal({"--start-daemon", "--platform=sim", "--continuous", "--active-domains=1"}, "--passive-domains");
  RequireRefusal({"--start-daemon", "--platform=sim", "--domain=1", "--continuous"}, "from dom0");
  RequireRefusal({"--start", "--continuous"}, "only goes with --start-daemon");
  RequireRefusal({"run", "--platform=sim", "--continuous"}, "goes with --start-daemon");
  // --push is hvprof run's; continuous windows are pushed by hvprof-push, not by an action.
  RequireRefusal({"--start-daemon", "--platform=sim", "--continuous", "--push=http://127.0.0.1:4040"}, "hvprof-push");
  RequireRefusal({"--start", "--push-tenant=fleet"}, "goes with `hvprof run`");
  RequireRefusal({"--status", "--push-app=x"}, "goes with `hvprof run`");
  // --reload takes the whole setup, as --start-daemon does.
  const auto reload = Accept({"--reload", "--platform=sim", "--continuous=30s", "--keep-size=4G"});
  CHECK(reload.action == HvprofAction::kReload);
  CHECK(reload.setup.window_ns == 30'000'000'000);
  CHECK(reload.setup.keep_bytes == uint64_t{4} << 30);
  RequireRefusal({"--stop", "--callgraph=4"}, "only goes with --start-daemon (or --reload)");
}
