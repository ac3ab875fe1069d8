#include "hvprof/setup/setup.h"

#include <grp.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>

#include "hvprof/base/files.h"
#include "hvprof/base/json_fields.h"
#include "hvprof/base/units.h"
#include "hvpmu/abi/ring.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace hvprof::setup {

using Json = nlohmann::json;

Result<uint32_t> CheckNumber(std::string_view option, int64_t value, std::string_view platform) {
  using hvpmu::ring::kMaxBacktraceDepth;
  using hvpmu::ring::kMaxCapacity;
  using hvpmu::ring::kMinCapacity;
  if (option == "buffer-size" && platform == "xen") {
    // Xen's own rings (the legacy ABI) take any size; Xen caps it further by its 32 pages.
    if (value < 0 || value > kMaxCapacity) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--buffer-size={}: Xen's rings hold 1 to {} samples (0 for the default; Xen caps it by "
                       "the domain's vCPUs, docs/xen.md)",
                       value, kMaxCapacity);
    }
  } else if (option == "buffer-size") {
    const bool power_of_two = value > 0 && (value & (value - 1)) == 0;
    if (value != 0 && (!power_of_two || value < kMinCapacity || value > kMaxCapacity)) {
      int64_t nearest = kMinCapacity;
      while (nearest < kMaxCapacity && nearest < value) nearest <<= 1;
      if (nearest > kMinCapacity && nearest - value > value - nearest / 2) nearest >>= 1;
      return MakeError(ErrorKind::kInvalidArgument,
                       "--buffer-size={}: samples per ring must be a power of two from {} to {} (0 for the "
                       "default); the nearest is {}",
                       value, kMinCapacity, kMaxCapacity, nearest);
    }
  } else if (option == "callgraph") {
    if (value < 0 || value > kMaxBacktraceDepth) {
      return MakeError(ErrorKind::kInvalidArgument, "--callgraph={}: call chains can be 0 to {} frames deep; the "
                       "nearest is {}", value, kMaxBacktraceDepth, value < 0 ? 0 : kMaxBacktraceDepth);
    }
  } else if (option == "poll-interval") {
    if (value < 0 || value > kMaxPollIntervalMs) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--poll-interval={}: drains are 1 to {} ms apart (0, the default, sizes it from the buffer "
                       "and the sample rate); the nearest is {}",
                       value, kMaxPollIntervalMs, value < 0 ? 0 : kMaxPollIntervalMs);
    }
  } else if (option == "rate") {
    if (value < 0 || value > kMaxRate) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--rate={}: samples per second per CPU are 1 to {} (0 for the default: {} on linux, "
                       "else the event's count); the kernel may allow fewer (kernel.perf_event_max_sample_rate)",
                       value, kMaxRate, kLinuxDefaultRate);
    }
  } else {
    return MakeError(ErrorKind::kInternal, "no range is known for --{}", option);
  }
  return static_cast<uint32_t>(value);
}

SettingsChange CompareSettings(const SetupOptions& running, const SetupOptions& wanted) {
  // daemonrc.json's keys by the option that sets them, where the two differ.
  static const std::map<std::string, std::string, std::less<>> kOptionOf = {
      {"window_ns", "--continuous"},          {"keep_bytes", "--keep-size"},
      {"keep_age_ns", "--keep-age"},          {"build_id_cache_bytes", "--build-id-cache-size"},
      {"events", "--event"},                  {"xen_image", "--xen"},
      {"hv_run_dir", "--run-dir"},            {"session_root", "--session-dir"},
      {"active_domains", "--active-domains"}, {"passive_domains", "--passive-domains"},
      {"poll_interval_ms", "--poll-interval"}};
  static constexpr std::string_view kLive[] = {"keep_bytes", "keep_age_ns", "build_id_cache_bytes", "verbose"};
  const nlohmann::json before = running.ToJson(), after = wanted.ToJson();
  SettingsChange change;
  for (const auto& [key, value] : after.items()) {
    if (before.contains(key) && before[key] == value) continue;
    const auto named = kOptionOf.find(key);
    std::string option = named != kOptionOf.end() ? named->second : "--" + key;
    std::replace(option.begin(), option.end(), '_', '-');
    const bool window = key == "window_ns" && running.continuous() && wanted.continuous();
    const bool live = window || std::find(std::begin(kLive), std::end(kLive), key) != std::end(kLive);
    (live ? change.live : change.restart).push_back(std::move(option));
  }
  return change;
}

Result<void> CheckBudget(const SetupOptions& setup) {
  if (!setup.continuous()) return Ok();
  if (setup.keep_bytes != 0 && setup.keep_bytes < kMinKeepBytes) {
    return MakeError(ErrorKind::kInvalidArgument, "--keep-size: {} bytes keeps less than {} MiB, too little for the "
                     "windows: give more (e.g. 2G)", setup.keep_bytes, kMinKeepBytes >> 20);
  }
  if (setup.keep_age_ns != 0 && setup.keep_age_ns < setup.window_ns) {
    return MakeError(ErrorKind::kInvalidArgument, "--keep-age is shorter than a window ({} s): no window would stay",
                     static_cast<double>(setup.window_ns) / 1e9);
  }
  return Ok();
}

Result<void> CheckWindow(uint64_t window_ns, std::string_view platform) {
  const uint64_t least = platform == "sim" ? kMinSimWindowNs : kMinWindowNs;
  if (window_ns < least || window_ns > kMaxWindowNs) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "--continuous={}ms: a window lasts {} to 1 day{} (the default is {} s)", window_ns / 1'000'000,
                     platform == "sim" ? "1 ms" : "1 s", platform == "sim" ? " of simulated time" : "",
                     kDefaultWindowNs / 1'000'000'000);
  }
  return Ok();
}

Result<void> SetupOptions::CheckNumbers() const {
  HVPROF_TRYV(CheckNumber("buffer-size", buffer_size, platform));
  HVPROF_TRYV(CheckNumber("callgraph", callgraph, platform));
  HVPROF_TRYV(CheckNumber("poll-interval", poll_interval_ms, platform));
  HVPROF_TRYV(CheckNumber("rate", rate, platform));
  if (window_ns != 0) HVPROF_TRYV(CheckWindow(window_ns, platform));
  if (jit != "auto" && jit != "on" && jit != "off") {
    return MakeError(ErrorKind::kInvalidArgument, "--jit={}: say auto, on or off", jit);
  }
  return Ok();
}

bool SetupOptions::JitWanted() const { return jit == "on" || (jit == "auto" && platform != "sim"); }

Result<std::optional<gid_t>> SetupOptions::SessionGroup() const {
  if (session_group.empty()) return std::optional<gid_t>();
  std::vector<char> buffer(16384);
  group entry {};
  group* found = nullptr;
  const int failed = ::getgrnam_r(session_group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (failed == 0 && found != nullptr) return std::optional<gid_t>(found->gr_gid);
  uint32_t number = 0;
  const char* end = session_group.data() + session_group.size();
  if (std::from_chars(session_group.data(), end, number).ptr == end && number != UINT32_MAX &&
      ::getgrgid_r(static_cast<gid_t>(number), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return std::optional<gid_t>(static_cast<gid_t>(number));
  }
  return MakeError(ErrorKind::kInvalidArgument,
                   "--session-group={}: no such group; give a group's name or number (`getent group` lists them)",
                   session_group);
}

Result<void> SetupOptions::ApplySessionPrivacy() const {
  HVPROF_TRY(group, SessionGroup());
  ::umask(group ? 027 : 077);
  return Ok();
}

Json SetupOptions::ToJson() const {
  return Json{{"platform", platform},
              {"domain", domain},
              {"hv_run_dir", hv_run_dir},
              {"session_root", session_root},
              {"xen_image", xen_image},
              {"vmlinux", vmlinux},
              {"no_vmlinux", no_vmlinux},
              {"active_domains", active_domains},
              {"passive_domains", passive_domains},
              {"passive_images", passive_images},
              {"events", events},
              {"buffer_size", buffer_size},
              {"callgraph", callgraph},
              {"poll_interval_ms", poll_interval_ms},
              {"rate", rate},
              {"jit", jit},
              {"sched", sched},
              {"verbose", verbose},
              {"session_group", session_group},
              {"build_id_cache", build_id_cache},
              {"build_id_cache_bytes", build_id_cache_bytes},
              {"window_ns", window_ns},
              {"keep_bytes", keep_bytes},
              {"keep_age_ns", keep_age_ns}};
}

namespace {

Result<std::vector<std::string>> Strings(const json::Node& root, std::string_view key) {
  HVPROF_TRY(list, root.OptionalArray(key, 4096));
  std::vector<std::string> out;
  for (const json::Node& item : list) {
    HVPROF_TRY(text, item.String());
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace

Result<SetupOptions> SetupOptions::FromJson(std::string_view text, const std::string& origin) {
  HVPROF_TRY(root, json::Node::Parse(text, origin, ErrorKind::kCorrupt));
  if (!root.IsObject()) return root.Fail("expected the setup as a JSON object, got {}", root.Describe());
  SetupOptions o;
  HVPROF_TRY(platform, root.Get("platform", o.platform.c_str()));
  HVPROF_TRY(domain, root.Get<uint16_t>("domain", 0));
  HVPROF_TRY(hv_run_dir, root.Get("hv_run_dir", ""));
  HVPROF_TRY(session_root, root.Get("session_root", o.session_root.c_str()));
  HVPROF_TRY(xen_image, root.Get("xen_image", ""));
  HVPROF_TRY(vmlinux, root.Get("vmlinux", ""));
  HVPROF_TRY(no_vmlinux, root.Get<bool>("no_vmlinux", false));
  HVPROF_TRY(active, Strings(root, "active_domains"));
  HVPROF_TRY(passive, Strings(root, "passive_domains"));
  HVPROF_TRY(passive_images, Strings(root, "passive_images"));
  HVPROF_TRY(events, Strings(root, "events"));
  HVPROF_TRY(buffer_size, root.Get<uint32_t>("buffer_size", 0));
  HVPROF_TRY(callgraph, root.Get<uint32_t>("callgraph", 0));
  HVPROF_TRY(poll, root.Get<uint32_t>("poll_interval_ms", 0));
  HVPROF_TRY(rate, root.Get<uint32_t>("rate", 0));
  HVPROF_TRY(verbose, root.Get<bool>("verbose", false));
  HVPROF_TRY(sched, root.Get<bool>("sched", false));
  HVPROF_TRY(jit, root.Get("jit", "auto"));
  HVPROF_TRY(session_group, root.Get("session_group", ""));
  HVPROF_TRY(build_id_cache, root.Get("build_id_cache", ""));
  HVPROF_TRY(build_id_cache_bytes, root.Get<uint64_t>("build_id_cache_bytes", 0));
  HVPROF_TRY(window_ns, root.Get<uint64_t>("window_ns", 0));
  HVPROF_TRY(keep_bytes, root.Get<uint64_t>("keep_bytes", 0));
  HVPROF_TRY(keep_age_ns, root.Get<uint64_t>("keep_age_ns", 0));
  o.platform = platform;
  o.domain = domain;
  o.hv_run_dir = hv_run_dir;
  o.session_root = session_root;
  o.xen_image = xen_image;
  o.vmlinux = vmlinux;
  o.no_vmlinux = no_vmlinux;
  o.active_domains = std::move(active);
  o.passive_domains = std::move(passive);
  o.passive_images = std::move(passive_images);
  o.events = std::move(events);
  o.buffer_size = buffer_size;
  o.callgraph = callgraph;
  o.poll_interval_ms = poll;
  o.rate = rate;
  o.verbose = verbose;
  o.sched = sched;
  o.jit = jit;
  o.session_group = session_group;
  o.build_id_cache = build_id_cache;
  o.build_id_cache_bytes = build_id_cache_bytes;
  o.window_ns = window_ns;
  o.keep_bytes = keep_bytes;
  o.keep_age_ns = keep_age_ns;
  // Someone may have edited it since --start-daemon checked the same numbers.
  HVPROF_TRYV(o.CheckNumbers());
  return o;
}

Result<SetupOptions> SetupOptions::Read(const std::string& path) {
  HVPROF_TRY(text, ReadFileToString(path, size_t{1} << 20, Links::kRefuse));
  return FromJson(text, path);
}

Result<EventSpec> ParseEventSpec(std::string_view text) {
  EventSpec spec;
  spec.text = text;
  if (text == "default") {
    spec.is_default = true;
    return spec;
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t colon = text.find(':', start);
    parts.emplace_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  auto fail = [&](std::string_view why) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "--event={}: {}; the form is NAME:COUNT[:UNITMASK[:KERNEL[:USER]]], e.g. "
                     "CPU_CLK_UNHALTED:100000 or LLC_MISSES:6000:demand:0:1",
                     text, why);
  };
  if (parts.size() > 5) return fail("wrong number of fields");
  if (parts[0].empty()) return fail("no event name");
  spec.name = parts[0];
  if (parts.size() == 1) return spec;  // NAME alone: its count comes from --rate
  auto count = ParseUnsigned(parts[1]);
  if (!count || count.value() == 0) return fail(fmt::format("'{}' is not a count", parts[1]));
  spec.count = count.value();
  if (parts.size() > 2) spec.unit_mask = parts[2];
  auto flag = [&](const std::string& value, bool* out, const char* what) -> Result<void> {
    if (value == "0" || value == "1") {
      *out = value == "1";
      return Ok();
    }
    return fail(fmt::format("the {} field must be 0 or 1, not '{}'", what, value));
  };
  if (parts.size() > 3) {
    HVPROF_TRYV(flag(parts[3], &spec.kernel, "kernel"));
  }
  if (parts.size() > 4) {
    HVPROF_TRYV(flag(parts[4], &spec.user, "user"));
  }
  if (!spec.kernel && !spec.user) return fail("counting neither kernel nor user counts nothing");
  return spec;
}

namespace {

// The count that makes `event` sample at `rate`: time-like events only.
Result<uint64_t> CountForRate(const hvpmu::EventDef& event, const SampleRate& rate, std::string_view text) {
  const std::string_view name = event.name;
  if (name == "CPU_CLOCK") return std::max<uint64_t>(1, uint64_t(1'000'000'000) / rate.hz);
  if (name == "CPU_CLK_UNHALTED") {
    if (rate.nominal_hz <= 0) {
      return MakeError(ErrorKind::kUnsupported,
                       "{}={}: this platform does not say its CPUs' clock, so no cycle count gives a rate; give "
                       "--event=CPU_CLK_UNHALTED:COUNT",
                       rate.option, rate.hz);
    }
    return std::max<uint64_t>(1, static_cast<uint64_t>(rate.nominal_hz / rate.hz));
  }
  return MakeError(ErrorKind::kInvalidArgument,
                   "--event={}: {} counts events, not time, so {} cannot set its count; give {}:COUNT", text, name,
                   rate.option, name);
}

std::string EventNames(const hvpmu::CpuEventTable& table) {
  std::string names;
  for (uint32_t i = 0; i < table.num_events; ++i) {
    if (!names.empty()) names += ", ";
    names += table.events[i].name;
  }
  return names;
}

}  // namespace

Result<std::vector<ResolvedEvent>> ResolveEvents(const std::vector<EventSpec>& specs,
                                                 const hvpmu::CpuEventTable& table,
                                                 const hvpmu::InitV2& pmu,
                                                 const std::optional<SampleRate>& rate) {
  std::vector<EventSpec> wanted = specs;
  if (wanted.empty()) wanted.push_back(EventSpec{"default", "", 0, "", true, true, true});
  std::vector<ResolvedEvent> resolved;
  std::vector<bool> used(pmu.num_counters, false);
  for (const EventSpec& spec : wanted) {
    ResolvedEvent event;
    event.sampled_by = table.sampled_by != nullptr ? table.sampled_by : "";
    const hvpmu::EventDef* def =
        hvpmu::FindEventByName(table, spec.is_default ? table.default_event : spec.name.c_str());
    if (def == nullptr) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--event={}: unknown event '{}' for {} (it has {}); `hvprof --list-events` "
                       "describes them",
                       spec.text, spec.name, table.cpu_type, EventNames(table));
    }
    event.event = def;
    event.count = spec.is_default ? table.default_count : spec.count;
    if (spec.count == 0 && rate) {
      HVPROF_TRY(from_rate, CountForRate(*def, *rate, spec.text));
      event.count = from_rate;
    } else if (spec.count == 0 && !spec.is_default) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--event={}: no count; give NAME:COUNT, or a rate with -F (--rate) for {}", spec.text,
                       std::string_view(def->name) == "CPU_CLOCK" || std::string_view(def->name) == "CPU_CLK_UNHALTED"
                           ? def->name
                           : "CPU_CLK_UNHALTED or CPU_CLOCK");
    }
    event.kernel = spec.kernel;
    event.user = spec.user;
    event.unit_mask = def->default_unit_mask;
    if (!spec.unit_mask.empty()) {
      bool found = false;
      for (uint8_t i = 0; i < def->num_unit_masks; ++i) {
        if (spec.unit_mask == def->unit_masks[i].name) {
          event.unit_mask = def->unit_masks[i].value;
          found = true;
        }
      }
      if (!found) {
        auto number = ParseUnsigned(spec.unit_mask);
        if (!number || number.value() > 0xFF) {
          std::string names;
          for (uint8_t i = 0; i < def->num_unit_masks; ++i) {
            names += fmt::format("{}{} ({:#04x})", i ? ", " : "", def->unit_masks[i].name,
                                 def->unit_masks[i].value);
          }
          return MakeError(ErrorKind::kInvalidArgument,
                           "--event={}: '{}' is not a unit mask of {}; it takes {}", spec.text,
                           spec.unit_mask, def->name, names);
        }
        event.unit_mask = static_cast<uint8_t>(number.value());
      }
    }
    if (!hvpmu::UnitMaskAllowed(*def, event.unit_mask)) {
      return MakeError(ErrorKind::kInvalidArgument, "--event={}: unit mask {:#04x} is not valid for {}",
                       spec.text, event.unit_mask, def->name);
    }
    for (uint8_t i = 0; i < def->num_unit_masks; ++i) {
      if (def->unit_masks[i].value == event.unit_mask) event.unit_mask_name = def->unit_masks[i].name;
    }
    if (spec.count == 0 && rate && (event.count < def->min_count || event.count == 0)) {
      // A rate the event cannot reach: say the fastest it can, and what samples faster.
      const double fastest = std::string_view(def->name) == "CPU_CLOCK"
                                 ? 1e9 / static_cast<double>(def->min_count)
                                 : rate->nominal_hz / static_cast<double>(def->min_count);
      return MakeError(ErrorKind::kInvalidArgument,
                       "{}={} asks {} for a sample every {} events, below its minimum of {}: it samples at most "
                       "{:.0f} times a second{}",
                       rate->option, rate->hz, def->name, event.count, def->min_count, fastest,
                       std::string_view(def->name) == "CPU_CLOCK"
                           ? ""
                           : fmt::format("; `-e CPU_CLOCK -F {}` samples by time, up to the kernel's limit",
                                         rate->hz));
    }
    if (event.count < def->min_count || event.count == 0) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--event={}: a count of {} is below {}'s minimum of {} (smaller counts "
                       "would flood the machine with interrupts)",
                       spec.text, event.count, def->name, def->min_count);
    }
    // A free fixed counter that counts exactly this event, else a free general counter.
    std::optional<uint32_t> counter;
    if (def->fixed_counter != hvpmu::kNoFixedCounter &&
        static_cast<uint32_t>(def->fixed_counter) < pmu.num_fixed_counters) {
      const uint32_t fixed = pmu.num_gp_counters + static_cast<uint32_t>(def->fixed_counter);
      if (!used[fixed]) counter = fixed;
    }
    for (uint32_t i = 0; !counter && i < pmu.num_gp_counters; ++i) {
      if (!used[i]) counter = i;
    }
    if (!counter) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--event={}: no counter left; {} has {} general-purpose and {} fixed "
                       "counters and {} events do not fit",
                       spec.text, table.cpu_type, pmu.num_gp_counters, pmu.num_fixed_counters,
                       wanted.size());
    }
    const bool fixed = *counter >= pmu.num_gp_counters;
    const uint64_t max_count = fixed ? (uint64_t{1} << (pmu.fixed_counter_width - 1)) : pmu.max_count;
    if (event.count > max_count) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "--event={}: a count of {} does not fit the counter (at most {})", spec.text,
                       event.count, max_count);
    }
    used[*counter] = true;
    event.counter = *counter;
    resolved.push_back(event);
  }
  return resolved;
}

Result<std::vector<ResolvedEvent>> ResolveEventOptions(const std::vector<std::string>& options,
                                                       const hvpmu::CpuEventTable& table,
                                                       const hvpmu::InitV2& pmu,
                                                       const std::optional<SampleRate>& rate) {
  std::vector<EventSpec> specs;
  for (const std::string& text : options) {
    HVPROF_TRY(spec, ParseEventSpec(text));
    specs.push_back(spec);
  }
  return ResolveEvents(specs, table, pmu, rate);
}

store::EventRecord ToEventRecord(const ResolvedEvent& event) {
  return {event.counter,     event.event->name, event.event->code, event.unit_mask, event.unit_mask_name,
          event.count,       event.kernel,      event.user,        event.sampled_by};
}

Result<std::vector<std::string>> SplitList(std::string_view text, std::string_view option) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (item.empty()) {
      return MakeError(ErrorKind::kInvalidArgument, "--{}='{}': empty item in the list", option, text);
    }
    items.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

Result<std::vector<uint16_t>> ResolveDomains(const std::vector<std::string>& items,
                                             const std::vector<DomainInfo>& domains,
                                             std::string_view option, const std::vector<uint16_t>& others) {
  std::vector<uint16_t> ids;
  if (items.size() > 1 && std::find(items.begin(), items.end(), kAllDomains) != items.end()) {
    return MakeError(ErrorKind::kInvalidArgument, "--{}: '{}' stands alone (every domain but dom0 and those profiled "
                     "the other way); give it, or a list of domains", option, kAllDomains);
  }
  if (items.size() == 1 && items[0] == kAllDomains) {
    for (const DomainInfo& domain : domains) {
      if (domain.id != 0 && std::find(others.begin(), others.end(), domain.id) == others.end()) ids.push_back(domain.id);
    }
    return ids;
  }
  for (const std::string& item : items) {
    std::optional<uint16_t> found;
    for (const DomainInfo& domain : domains) {
      if (domain.name == item || std::to_string(domain.id) == item) found = domain.id;
    }
    if (!found) {
      std::string known;
      for (const DomainInfo& domain : domains) {
        known += fmt::format("{}{}", known.empty() ? "" : ", ", store::DomainName(domain.id, domain.name));
      }
      return MakeError(ErrorKind::kNotFound, "--{}: no domain '{}' on this host; it has {}",
                       option, item, known);
    }
    if (std::find(ids.begin(), ids.end(), *found) != ids.end()) {
      return MakeError(ErrorKind::kInvalidArgument, "--{}: domain '{}' is listed twice", option, item);
    }
    ids.push_back(*found);
  }
  return ids;
}

Result<store::ImageRecord> CheckImage(const std::string& path, const std::string& role,
                                      std::optional<uint16_t> domain) {
  store::ImageRecord record;
  record.role = role;
  record.domain = domain;
  record.path = path;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return MakeError(ErrorKind::kNotFound, "{} image {}: {}", role, path, std::strerror(errno));
  }
  char head[8] = {};
  file.read(head, sizeof head);
  const std::streamsize got = file.gcount();
  if (got == 0 && path != "/proc/kallsyms") {
    return MakeError(ErrorKind::kInvalidArgument, "{} image {} is empty", role, path);
  }
  symbolizer::ImageSpec spec;
  spec.path = path;
  if (got >= 4 && std::memcmp(head, "\x7f" "ELF", 4) == 0) {
    record.format = "elf";
  } else if (path.find("kallsyms") != std::string::npos) {
    record.format = "kallsyms";
    spec.format = symbolizer::ImageFormat::kKallsyms;
  } else {
    record.format = "system_map";
    spec.format = symbolizer::ImageFormat::kSystemMap;
  }
  symbolizer::Symbolizer symbolizer;
  auto info = symbolizer.Describe(spec);
  if (!info) {
    return MakeError(info.error().kind(),
                     "{} image {}: {}. Give an uncompressed ELF with symbols (xen-syms, vmlinux from "
                     "a -dbg package) or a System.map",
                     role, path, info.error().message());
  }
  if (info.value().symbol_count == 0) {
    return MakeError(ErrorKind::kInvalidArgument, "{} image {} has no symbols{}", role, path,
                     record.format == "kallsyms" ? " (kernel.kptr_restrict may hide them: run as root)" : "");
  }
  record.build_id = info.value().build_id;
  return record;
}

}  // namespace hvprof::setup
