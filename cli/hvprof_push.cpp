// hvprof-push: pushes continuous mode's windows to a Grafana Pyroscope server as hvprofd closes
// them. A program of its own, not a part of hvprofd: hvprofd profiles as root with no network
// (hvprofd.service), while this one talks to the network with no privilege but reading the
// sessions (hvprof-push.service). Thin main over push::WindowPusher.

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/base/signals.h"
#include "hvprof/base/units.h"
#include "hvprof/base/version.h"
#include "hvprof/push/windows.h"

namespace po = boost::program_options;

namespace {

std::atomic<bool> g_stop{false};

void OnStop(int) { g_stop.store(true); }

constexpr const char* kUsage =
    "Usage: hvprof-push --url=URL [--session-dir=DIR] [options]\n\n"
    "Pushes the windows of continuous profiling (`hvprof --start-daemon --continuous`) to the Grafana Pyroscope\n"
    "server at URL as hvprofd closes them, until SIGTERM or SIGINT; with --once, what is waiting, then exits.\n\n"
    "Each window goes as one pprof series per domain, mode and event, labelled host, platform, domain,\n"
    "domain_name, mode (user, kernel, hypervisor) and event, covering the window's own start and end. The\n"
    "windows wait on disk until the server takes them: a failed push is tried again after --first-retry, then\n"
    "twice as long each time up to --max-retry, and a window the disk budget removes first is counted as not\n"
    "pushed, as is one the server refuses (HTTP 400, 413). What was pushed is kept in DIR/push.json, which a restart\n"
    "continues from and `hvprof --status` shows. Credentials: HVPROF_PUSH_USER and HVPROF_PUSH_PASSWORD in\n"
    "the environment (hvprof-push.service reads them from /etc/default/hvprof-push), never in the URL.\n"
    "docs/continuous.md, \"Pushing to Pyroscope\".\n\nOptions";

}  // namespace

int main(int argc, char** argv) {
  hvprof::SetLogPrefix("hvprof-push", true);
  try {
    std::string url, tenant, app, session_dir, first_retry, max_retry, poll, timeout;
    po::options_description described(kUsage);
    described.add_options()("help,h", "show this help")("version", "print hvprof's version")(
        "url", po::value(&url), "the Pyroscope server's base URL, e.g. http://127.0.0.1:4040 (required)")(
        "session-dir", po::value(&session_dir)->default_value(hvprof::store::kDefaultSessionRoot),
        "hvprofd's session directory, whose windows are pushed")(
        "app", po::value(&app)->default_value("hvprof"), "Pyroscope's application name (service_name)")(
        "tenant", po::value(&tenant), "the tenant (X-Scope-OrgID), for multi-tenant servers")(
        "timeout", po::value(&timeout)->default_value("30s"), "the longest one request may take")(
        "first-retry", po::value(&first_retry)->default_value("1s"), "the wait after a first failure")(
        "max-retry", po::value(&max_retry)->default_value("5m"), "the longest wait between attempts")(
        "poll", po::value(&poll)->default_value("1s"), "how often to look for a window closed since")(
        "once", "push the windows waiting (or fail at the first failure), then exit")(
        "from-oldest", "on a first run (no DIR/push.json yet), start with the oldest window kept, not the window in "
                       "progress");
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, described), values);
    po::notify(values);
    if (values.count("help") != 0) {
      std::cout << described << "\n";
      return 0;
    }
    if (values.count("version") != 0) {
      std::cout << "hvprof-push (hvprof) " << hvprof::kVersion << "\n";
      return 0;
    }
    if (url.empty()) {
      std::cerr << "hvprof-push: --url is required: the Pyroscope server's base URL\nTry 'hvprof-push --help'.\n";
      return 2;
    }
    hvprof::push::WindowPushOptions options;
    options.push = hvprof::push::PushFromCommandLine(url, tenant, app);
    options.paths = hvprof::store::SessionPaths{session_dir};
    options.start_oldest = values.count("from-oldest") != 0;
    struct Duration {
      const char* option;
      const std::string& text;
      std::chrono::milliseconds* into;
    };
    std::chrono::milliseconds timeout_ms{};
    for (const Duration& d : {Duration{"timeout", timeout, &timeout_ms}, Duration{"first-retry", first_retry, &options.first_retry},
                              Duration{"max-retry", max_retry, &options.max_retry}, Duration{"poll", poll, &options.poll}}) {
      auto parsed = hvprof::ParseDurationNs(d.text);
      if (!parsed || parsed.value() < 1'000'000) {
        std::cerr << "hvprof-push: --" << d.option << "=" << d.text << ": "
                  << (parsed ? "give at least 1ms" : parsed.error().message()) << "\n";
        return 2;
      }
      *d.into = std::chrono::milliseconds(parsed.value() / 1'000'000);
    }
    options.push.options.timeout_seconds = static_cast<double>(timeout_ms.count()) / 1000.0;

    auto log = [](bool error, const std::string& message) {
      hvprof::LogMessage(error ? hvprof::LogLevel::kError : hvprof::LogLevel::kWarning, message);
    };
    if (auto checked = hvprof::push::WindowPusher::Check(options); !checked) {
      std::cerr << "hvprof-push: " << checked.error().message() << "\n";
      return 2;
    }
    // One pusher per session directory, or two would push every window twice.
    auto lock = hvprof::LockPidFile(session_dir + "/" + std::string(hvprof::push::kPushLockFile));
    if (!lock) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", lock.error().message());
      return 1;
    }
    if (!lock.value()) {
      hvprof::Log(hvprof::LogLevel::kError, "another hvprof-push runs for {}", session_dir);
      return 1;
    }
    auto pusher = hvprof::push::WindowPusher::Open(std::move(options), log);
    if (!pusher) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", pusher.error().message());
      return 2;
    }
    hvprof::InstallStopHandler(&OnStop);
    if (values.count("once") != 0) {
      const hvprof::push::PushState before = pusher.value().state();
      pusher.value().PushWaiting(g_stop);
      const hvprof::push::PushState& s = pusher.value().state();
      std::cout << fmt::format("hvprof-push: {} windows pushed ({} series, {}), {} not pushed{}\n",
                               s.windows_pushed - before.windows_pushed, s.series_pushed - before.series_pushed,
                               hvprof::FormatBytes(s.bytes_pushed - before.bytes_pushed),
                               s.NotPushed() - before.NotPushed(),
                               s.failures != 0 ? "; the next failed: " + s.last_error : std::string());
      return s.failures != 0 ? 1 : 0;
    }
    hvprof::Log(hvprof::LogLevel::kInfo, "pushing the windows of {} to {}", session_dir, pusher.value().state().url);
    pusher.value().Run(g_stop);
    return 0;
  } catch (const po::error& error) {
    std::cerr << "hvprof-push: " << error.what() << "\nTry 'hvprof-push --help'.\n";
    return 2;
  } catch (const std::exception& error) {
    // Not a bad option (2, which the service does not restart on): a failure to try again.
    hvprof::Log(hvprof::LogLevel::kError, "{}", error.what());
    return 1;
  }
}
