#include "hvprof/linux/tracepoints.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <charconv>
#include <cerrno>
#include <cstring>
#include <optional>

#include "hvprof/base/files.h"

namespace hvprof::linux_host {

using hvprof::ErrorKind;
using hvprof::MakeError;

namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

bool ParseNumber(std::string_view text, uint32_t* value) {
  text = Trim(text);
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size();
}

// "KEY:VALUE" out of one ';'-separated item of a field line.
bool Item(std::string_view item, std::string_view key, std::string_view* value) {
  item = Trim(item);
  if (item.substr(0, key.size()) != key || item.size() <= key.size() || item[key.size()] != ':') {
    return false;
  }
  *value = item.substr(key.size() + 1);
  return true;
}

bool IsIdentifierChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The name a C declaration declares: "char prev_comm[16]" -> prev_comm, "pid_t pid" -> pid,
// "__data_loc char[] comm" -> comm.
std::string_view DeclaredName(std::string_view declaration) {
  declaration = Trim(declaration);
  if (!declaration.empty() && declaration.back() == ']') {
    const size_t open = declaration.rfind('[');
    if (open == std::string_view::npos) return {};
    declaration = Trim(declaration.substr(0, open));
  }
  size_t start = declaration.size();
  while (start > 0 && IsIdentifierChar(declaration[start - 1])) --start;
  return declaration.substr(start);
}

// A field's value in a raw record, sign-extended if the field is signed; false if it does not fit.
bool ReadInt(std::span<const uint8_t> raw, uint32_t offset, uint32_t size, bool is_signed, int64_t* value) {
  if (size == 0 || offset > raw.size() || size > raw.size() - offset) return false;
  const uint8_t* p = raw.data() + offset;
  switch (size) {
    case 1: {
      uint8_t v;
      std::memcpy(&v, p, 1);
      *value = is_signed ? static_cast<int8_t>(v) : v;
      return true;
    }
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      *value = is_signed ? static_cast<int16_t>(v) : v;
      return true;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      *value = is_signed ? static_cast<int32_t>(v) : static_cast<int64_t>(v);
      return true;
    }
    case 8: {
      int64_t v;
      std::memcpy(&v, p, 8);
      *value = v;
      return true;
    }
    default: return false;
  }
}

}  // namespace

const TracepointField* TracepointFormat::Find(std::string_view field) const {
  for (const TracepointField& f : fields) {
    if (f.name == field) return &f;
  }
  return nullptr;
}

hvprof::Result<TracepointFormat> ParseTracepointFormat(std::string_view text, std::string_view origin) {
  TracepointFormat format;
  bool have_id = false;
  size_t line_number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_number;
    line = Trim(line);
    if (line.substr(0, 5) == "name:") {
      format.name = std::string(Trim(line.substr(5)));
    } else if (line.substr(0, 3) == "ID:") {
      if (!ParseNumber(line.substr(3), &format.id)) {
        return MakeError(ErrorKind::kCorrupt, "{}:{}: the ID is not a number: '{}'", origin, line_number, line);
      }
      have_id = true;
    } else if (line.substr(0, 6) == "field:") {
      // field:TYPE NAME;\toffset:N;\tsize:N;\tsigned:N;
      std::string_view rest = line;
      std::string_view items[4];
      for (std::string_view& item : items) {
        const size_t semi = rest.find(';');
        if (semi == std::string_view::npos) {
          return MakeError(ErrorKind::kCorrupt, "{}:{}: a field line without its offset, size and signed: '{}'",
                           origin, line_number, line);
        }
        item = rest.substr(0, semi);
        rest = rest.substr(semi + 1);
      }
      TracepointField field;
      std::string_view declaration, offset, size, is_signed;
      if (!Item(items[0], "field", &declaration) || !Item(items[1], "offset", &offset) ||
          !Item(items[2], "size", &size) || !Item(items[3], "signed", &is_signed)) {
        return MakeError(ErrorKind::kCorrupt, "{}:{}: not a field:...; offset:...; size:...; signed:...; line: '{}'",
                         origin, line_number, line);
      }
      uint32_t signed_value = 0;
      if (!ParseNumber(offset, &field.offset) || !ParseNumber(size, &field.size) ||
          !ParseNumber(is_signed, &signed_value) || signed_value > 1) {
        return MakeError(ErrorKind::kCorrupt, "{}:{}: a field's offset, size or signed is not a number: '{}'",
                         origin, line_number, line);
      }
      field.is_signed = signed_value == 1;
      declaration = Trim(declaration);
      field.data_loc = declaration.substr(0, 10) == "__data_loc";
      field.name = std::string(DeclaredName(declaration));
      if (field.name.empty()) {
        return MakeError(ErrorKind::kCorrupt, "{}:{}: a field without a name: '{}'", origin, line_number, line);
      }
      format.fields.push_back(std::move(field));
    } else if (line.substr(0, 10) == "print fmt:") {
      break;  // the rest is the print format, not needed
    }
  }
  if (!have_id) return MakeError(ErrorKind::kCorrupt, "{}: no ID line", origin);
  if (format.fields.empty()) return MakeError(ErrorKind::kCorrupt, "{}: no field lines", origin);
  return format;
}

namespace {

std::optional<std::string> MountedTracefs(const HostPaths& paths) {
  for (const char* relative : {"/kernel/tracing", "/kernel/debug/tracing"}) {
    const std::string dir = paths.sys + relative;
    struct stat st {};
    if (::stat((dir + "/events/sched").c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return dir;
  }
  return std::nullopt;
}

}  // namespace

hvprof::Result<std::string> FindTracefs(const HostPaths& paths) {
  if (auto dir = MountedTracefs(paths)) return *dir;
  // As perf does: where the host's tracefs is not mounted and we may mount it, mount it at its
  // usual place (never under a test's fake root).
  int mount_errno = 0;
  if (paths.sys == "/sys") {
    if (::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0) {
      if (auto dir = MountedTracefs(paths)) return *dir;
    } else {
      mount_errno = errno;
    }
  }
  return MakeError(mount_errno == EPERM ? ErrorKind::kPermissionDenied : ErrorKind::kUnsupported,
                   "--sched: tracefs is not mounted (neither {0}/kernel/tracing nor {0}/kernel/debug/tracing "
                   "has events/sched){1}: mount it with 'mount -t tracefs nodev {0}/kernel/tracing' as root, "
                   "or leave out --sched",
                   paths.sys,
                   mount_errno == 0 ? std::string() : fmt::format(" and mounting it failed ({})", std::strerror(mount_errno)));
}

hvprof::Result<TracepointFormat> ReadTracepoint(const std::string& tracefs, std::string_view system,
                                                std::string_view event) {
  const std::string path = tracefs + "/events/" + std::string(system) + "/" + std::string(event) + "/format";
  auto text = hvprof::ReadFileToString(path, 64 * 1024);
  if (!text) {
    const ErrorKind kind = text.error().kind();
    if (kind == ErrorKind::kPermissionDenied) {
      return MakeError(kind, "--sched: cannot read {}: {}; the tracepoints' formats are readable by root "
                             "(run hvprof-hv as root)",
                       path, text.error().message());
    }
    return MakeError(kind, "--sched: cannot read {}: {}", path, text.error().message());
  }
  return ParseTracepointFormat(text.value(), path);
}

SwitchedOut ClassifyPrevState(int64_t prev_state) {
  // The task state bits are the low byte (S D T t X Z P I on current kernels, the raw state on
  // kernels before 4.14); above them the kernel flags a preempted task that stays runnable.
  const auto state = static_cast<uint64_t>(prev_state) & 0xFF;
  if (state == 0) return SwitchedOut::kRunnable;
  if ((state & 0x30) != 0) return SwitchedOut::kOffline;  // EXIT_DEAD, EXIT_ZOMBIE
  return SwitchedOut::kBlocked;
}

hvprof::Result<SchedTracepoints> SchedTracepoints::FromFormats(
    const TracepointFormat& switch_format, const TracepointFormat& waking,
    const std::optional<TracepointFormat>& wakeup_new, const std::optional<TracepointFormat>& migrate) {
  SchedTracepoints points;
  // Every integer field hvprof reads, by name; a missing or odd-sized one is an error.
  auto slot = [](const TracepointFormat& format, std::string_view name) -> hvprof::Result<Slot> {
    const TracepointField* field = format.Find(name);
    if (field == nullptr || field->data_loc ||
        (field->size != 1 && field->size != 2 && field->size != 4 && field->size != 8)) {
      return MakeError(ErrorKind::kUnsupported,
                       "--sched: this kernel's {} tracepoint has no integer field '{}': hvprof cannot "
                       "read its records; leave out --sched",
                       format.name.empty() ? std::string("scheduler") : format.name, name);
    }
    return Slot{field->offset, field->size, field->is_signed};
  };
  auto event = [&](const TracepointFormat& format, std::initializer_list<std::string_view> names)
      -> hvprof::Result<Event> {
    Event e;
    e.name = format.name;
    e.id = format.id;
    HVPROF_TRY(common_type, slot(format, "common_type"));
    e.common_type = common_type;
    Slot* slots[] = {&e.a, &e.b, &e.c};
    size_t i = 0;
    for (std::string_view name : names) {
      if (i == std::size(slots)) break;
      HVPROF_TRY(s, slot(format, name));
      *slots[i++] = s;
    }
    return e;
  };
  HVPROF_TRY(sw, event(switch_format, {"prev_pid", "prev_state", "next_pid"}));
  points.events_[static_cast<uint32_t>(SchedTracepoint::kSwitch)] = std::move(sw);
  HVPROF_TRY(wake, event(waking, {"pid"}));
  // target_cpu is gone from the wake-up events on some kernels: optional.
  if (auto target = slot(waking, "target_cpu")) wake.b = target.value();
  points.events_[static_cast<uint32_t>(SchedTracepoint::kWaking)] = std::move(wake);
  if (wakeup_new) {
    HVPROF_TRY(fresh, event(*wakeup_new, {"pid"}));
    if (auto target = slot(*wakeup_new, "target_cpu")) fresh.b = target.value();
    points.events_[static_cast<uint32_t>(SchedTracepoint::kWakeupNew)] = std::move(fresh);
  }
  if (migrate) {
    HVPROF_TRY(move, event(*migrate, {"pid", "orig_cpu", "dest_cpu"}));
    points.events_[static_cast<uint32_t>(SchedTracepoint::kMigrate)] = std::move(move);
  }
  return points;
}

hvprof::Result<SchedTracepoints> SchedTracepoints::Read(const HostPaths& paths) {
  HVPROF_TRY(tracefs, FindTracefs(paths));
  HVPROF_TRY(switch_format, ReadTracepoint(tracefs, "sched", "sched_switch"));
  // sched_waking (4.3 and later) is traced in the waker's context; sched_wakeup, its fallback,
  // may come from the woken task's CPU later.
  auto waking = ReadTracepoint(tracefs, "sched", "sched_waking");
  if (!waking && waking.error().kind() == ErrorKind::kNotFound) {
    waking = ReadTracepoint(tracefs, "sched", "sched_wakeup");
  }
  if (!waking) return waking.error();
  std::optional<TracepointFormat> wakeup_new, migrate;
  if (auto format = ReadTracepoint(tracefs, "sched", "sched_wakeup_new")) wakeup_new = std::move(format.value());
  if (auto format = ReadTracepoint(tracefs, "sched", "sched_migrate_task")) migrate = std::move(format.value());
  return FromFormats(switch_format, waking.value(), wakeup_new, migrate);
}

std::optional<SchedTracepointRecord> SchedTracepoints::Decode(SchedTracepoint kind,
                                                              std::span<const uint8_t> raw) const {
  const Event& event = events_[static_cast<uint32_t>(kind)];
  if (event.id == 0) return std::nullopt;
  int64_t type = 0;
  const uint64_t type_mask =
      event.common_type.size >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * event.common_type.size)) - 1;
  if (!ReadInt(raw, event.common_type.offset, event.common_type.size, false, &type) ||
      (static_cast<uint64_t>(type) & type_mask) != (event.id & type_mask)) {
    return std::nullopt;  // another event's record, or garbage
  }
  auto read = [&](const Slot& slot, int64_t* value) {
    return ReadInt(raw, slot.offset, slot.size, slot.is_signed, value);
  };
  SchedTracepointRecord record;
  record.kind = kind;
  int64_t a = 0, b = 0, c = 0;
  if (!read(event.a, &a)) return std::nullopt;
  record.tid = static_cast<uint32_t>(a);
  switch (kind) {
    case SchedTracepoint::kSwitch:
      if (!read(event.b, &b) || !read(event.c, &c)) return std::nullopt;
      record.prev_state = b;
      record.next_tid = static_cast<uint32_t>(c);
      break;
    case SchedTracepoint::kWaking:
    case SchedTracepoint::kWakeupNew:
      if (event.b.size != 0) {
        if (!read(event.b, &b)) return std::nullopt;
        record.target_cpu = static_cast<int32_t>(b);
      }
      break;
    case SchedTracepoint::kMigrate:
      if (!read(event.b, &b) || !read(event.c, &c)) return std::nullopt;
      record.orig_cpu = static_cast<int32_t>(b);
      record.dest_cpu = static_cast<int32_t>(c);
      break;
  }
  return record;
}

}  // namespace hvprof::linux_host
