// What `hvprof --start-daemon` sets up, and the checks it makes before anything starts: event
// specs against the CPU's event table and counters, domain lists, and images.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvpmu/abi/ops.h"
#include "hvpmu/events.h"
#include "hvprof/base/result.h"
#include "hvprof/context/domains.h"
#include "hvprof/store/session.h"

namespace hvprof::setup {

// Bounds of the numeric options (the engine's, and a poll interval a human would choose).
inline constexpr uint32_t kMaxPollIntervalMs = 60000;
inline constexpr uint32_t kMaxRate = 1000000;  // -F: samples per second per CPU

// A numeric option ("buffer-size", "callgraph", "poll-interval") as typed, checked against
// what the platform's profiler accepts (hvprof's rings are powers of two, Xen's any size): refused with the option, the accepted range and, where one is near,
// the value to use instead; nothing is rounded or clamped silently.
Result<uint32_t> CheckNumber(std::string_view option, int64_t value, std::string_view platform);

// The setup options of --start-daemon, kept in SESSION_ROOT/daemonrc.json.
struct SetupOptions {
  std::string platform = "sim";
  uint16_t domain = 0;        // the domain this runs in: 0 is dom0 (the primary), else a guest
  std::string hv_run_dir;     // hvprof-hv's socket directory; empty: its default
  std::string session_root = store::kDefaultSessionRoot;
  std::string xen_image;      // --xen
  std::string vmlinux;        // --vmlinux; empty: what the platform says dom0 runs
  bool no_vmlinux = false;
  std::vector<std::string> active_domains;   // ids or names, as typed
  std::vector<std::string> passive_domains;
  std::vector<std::string> passive_images;   // by position with passive_domains
  std::vector<std::string> events;           // NAME:COUNT[:UNITMASK[:KERNEL[:USER]]] or "default"
  uint32_t buffer_size = 0;    // slots per ring; 0: the default
  uint32_t callgraph = 0;      // backtrace depth
  uint32_t poll_interval_ms = 0;  // 0: sized from ring capacity and sample rate
  // -F/--rate: samples per second per CPU for the events given without a count (and the default
  // event); 0: the platform's default rate (linux: kLinuxDefaultRate), else the event's count.
  uint32_t rate = 0;
  // --jit: copy the perf maps and jitdumps of sampled processes into the session. "auto": where
  // the agent's pids are this system's processes (linux, xen), not the sim's made-up ones.
  std::string jit = "auto";
  // --sched: also record scheduling (runstate changes, wake-ups, migrations) in the session.
  bool sched = false;
  bool verbose = false;
  // --session-group: a group that may read the sessions (directories 2750, files 0640); empty:
  // their owner alone (0700, 0600). They say which processes ran, what they mapped, and stacks.
  std::string session_group;
  // --build-id-cache: where hvprofd keeps copies of the images its sessions sample, by build-id
  // (buildid_cache::Cache); empty: the default for its user (buildid_cache::DefaultDirectory);
  // "none": no cache. --build-id-cache-size: the bytes it keeps (0: the default).
  std::string build_id_cache;
  uint64_t build_id_cache_bytes = 0;
  // --continuous[=WINDOW]: hvprofd profiles from its start and, every window_ns (0: not
  // continuous), closes the window into a saved session of its own without stopping the counters
  // (store/windows.h). --keep-size and --keep-age: the windows' budget (the command line fills in
  // the defaults; 0 here: no bound).
  uint64_t window_ns = 0;
  uint64_t keep_bytes = 0;
  uint64_t keep_age_ns = 0;
  bool continuous() const { return window_ns != 0; }

  // CheckNumber for each numeric field and --jit's value (a daemonrc.json may have been
  // edited).
  Result<void> CheckNumbers() const;
  // Whether --jit asks for JIT files on `platform`.
  bool JitWanted() const;
  // The group --session-group names (a name or a number), if any; an error naming it when there
  // is no such group.
  Result<std::optional<gid_t>> SessionGroup() const;
  // Makes what this process (and the hvprofd it starts) creates from now on private, or shared
  // read-only with SessionGroup: sets the umask (077 or 027).
  Result<void> ApplySessionPrivacy() const;

  nlohmann::json ToJson() const;
  // Reads what ToJson wrote (daemonrc.json), every field checked; `origin` names the file.
  static Result<SetupOptions> FromJson(std::string_view text, const std::string& origin);
  // daemonrc.json as hvprofd and --reload read it: `path`, never through a link, parsed by FromJson.
  static Result<SetupOptions> Read(const std::string& path);
};

// The rate the linux platform samples at when neither -e nor -F says: perf record's default,
// whose cost on a busy machine stays near 1%.
inline constexpr uint32_t kLinuxDefaultRate = 4000;
// Continuous mode's defaults (docs/continuous.md has the arithmetic). 99 samples a second per
// CPU when neither -e nor -F says: 5,940 a minute per busy CPU tell a function's share of 5% to
// within half a point, at a fortieth of perf record's default cost; 99, not 100, so that the
// samples do not beat with the 100 Hz and 1 kHz ticks of guests and timers.
inline constexpr uint32_t kContinuousDefaultRate = 99;
inline constexpr uint64_t kDefaultWindowNs = 60'000'000'000;
// The window's bounds: shorter ones cost a session's files and a save each; on the sim, whose
// time is simulated, any from 1 ms.
inline constexpr uint64_t kMinWindowNs = 1'000'000'000;
inline constexpr uint64_t kMinSimWindowNs = 1'000'000;
inline constexpr uint64_t kMaxWindowNs = 86'400'000'000'000;
inline constexpr uint64_t kDefaultKeepBytes = uint64_t{2} << 30;
inline constexpr uint64_t kDefaultKeepAgeNs = 7 * 86'400'000'000'000;
// Checks --continuous's window for `platform`.
Result<void> CheckWindow(uint64_t window_ns, std::string_view platform);

// What changes between the setup an hvprofd runs and a new one (`hvprof --reload`, or SIGHUP
// after daemonrc.json changed), by option name ("--keep-size"). `live`: what a running hvprofd
// takes on at once: --keep-size, --keep-age, --build-id-cache-size, --verbose, and --continuous's
// window (from the next window on; not continuous mode itself). `restart`: everything else, which
// only a new hvprofd can take (the counters, rings and domains are set up with it).
struct SettingsChange {
  std::vector<std::string> live;
  std::vector<std::string> restart;
  bool empty() const { return live.empty() && restart.empty(); }
};
SettingsChange CompareSettings(const SetupOptions& running, const SetupOptions& wanted);
// Continuous mode's budget as --start-daemon takes it: at least 16 MiB, and an age no shorter
// than a window (a daemonrc.json edited by hand and reloaded is checked so too).
inline constexpr uint64_t kMinKeepBytes = uint64_t{16} << 20;
Result<void> CheckBudget(const SetupOptions& setup);

struct EventSpec {
  std::string text;  // as typed, for messages
  std::string name;
  uint64_t count = 0;  // 0: from the sample rate (NAME alone, or "default" with a rate)
  std::string unit_mask;  // a name or a number; empty: the event's default
  bool kernel = true;
  bool user = true;
  bool is_default = false;  // "default": the CPU's default event and count
};

Result<EventSpec> ParseEventSpec(std::string_view text);

// An event placed on a logical counter.
struct ResolvedEvent {
  uint32_t counter = 0;
  const hvpmu::EventDef* event = nullptr;
  uint8_t unit_mask = 0;
  std::string unit_mask_name;
  uint64_t count = 0;
  bool kernel = true;
  bool user = true;
  std::string sampled_by;  // the table's: a timer, or "" for a hardware counter
};

// Checks every spec against the CPU's event table and places the events on counters: events
// that an Intel fixed counter counts go there while it is free, the rest on general counters.
// A sample rate, for events whose count it sets: samples per second per CPU, and the CPU's
// nominal clock (cycles per second; 0 when the platform does not say).
struct SampleRate {
  uint32_t hz = 0;
  double nominal_hz = 0;
  std::string option = "--rate";  // how the user asked for it, for messages
};
// With `rate`, the events without a count (and the default event) count to reach it: CPU_CLOCK
// (ns) every 1e9/hz, CPU_CLK_UNHALTED (cycles) every nominal_hz/hz.
Result<std::vector<ResolvedEvent>> ResolveEvents(const std::vector<EventSpec>& specs,
                                                 const hvpmu::CpuEventTable& table,
                                                 const hvpmu::InitV2& pmu,
                                                 const std::optional<SampleRate>& rate = std::nullopt);
// The same for --event options as typed.
Result<std::vector<ResolvedEvent>> ResolveEventOptions(const std::vector<std::string>& options,
                                                       const hvpmu::CpuEventTable& table,
                                                       const hvpmu::InitV2& pmu,
                                                       const std::optional<SampleRate>& rate = std::nullopt);
// A placed event as the session records it.
store::EventRecord ToEventRecord(const ResolvedEvent& event);

// "1,3,web-vm" -> {"1", "3", "web-vm"}; empty items are errors.
Result<std::vector<std::string>> SplitList(std::string_view text, std::string_view option);

// A domain the platform reports.
using DomainInfo = context::DomainInfo;
// Resolves ids or names against the platform's domains. The one item kAllDomains is every
// domain but dom0 and those in `others` (the domains profiled another way).
Result<std::vector<uint16_t>> ResolveDomains(const std::vector<std::string>& items,
                                             const std::vector<DomainInfo>& domains,
                                             std::string_view option, const std::vector<uint16_t>& others = {});
inline constexpr std::string_view kAllDomains = "all";

// Checks an image before profiling starts: it exists, is an uncompressed ELF or a symbol map,
// and has symbols. Returns what the session records about it (format, build-id).
Result<store::ImageRecord> CheckImage(const std::string& path, const std::string& role,
                                      std::optional<uint16_t> domain);

}  // namespace hvprof::setup
