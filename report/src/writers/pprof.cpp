#include "hvprof/report/writers/pprof.h"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "profile.pb.h"
#include "writers/common.h"

namespace hvprof::report {

namespace {

namespace pb = perftools::profiles;

// The string table: "" first, each string once.
class Strings {
 public:
  explicit Strings(pb::Profile& profile) : profile_(profile) { Index(""); }
  int64_t Index(const std::string& text) {
    auto [it, added] = index_.emplace(text, static_cast<int64_t>(index_.size()));
    if (added) profile_.add_string_table(text);
    return it->second;
  }

 private:
  pb::Profile& profile_;
  std::unordered_map<std::string, int64_t> index_;
};

Result<std::string> Gzip(const std::string& bytes) {
  z_stream stream{};
  // 15 window bits, +16 for a gzip header and trailer.
  // The fastest level, as Go's own profiles are written: the file is read once, by a tool.
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return MakeError(ErrorKind::kInternal, "zlib could not start compressing");
  }
  std::string out(deflateBound(&stream, static_cast<uLong>(bytes.size())), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int done = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (done != Z_STREAM_END) return MakeError(ErrorKind::kInternal, "zlib could not compress the profile");
  return out;
}

}  // namespace

Result<std::string> FormatPprof(const Profile& profile, const StackFilter& filter) {
  const store::SessionMetadata& m = profile.metadata();
  // The events counted: one, or several added up (--merge). Time and a period are only given when
  // every one of them is the same clock at the same period.
  std::vector<const store::EventRecord*> counted;
  for (const auto& e : m.events) {
    if (filter.SelectsEvent(e.counter)) counted.push_back(&e);
  }
  const store::EventRecord* event = counted.empty() ? nullptr : counted.front();
  bool same_period = event != nullptr;
  for (const store::EventRecord* e : counted) same_period &= e->name == event->name && e->count == event->count;
  // Hundreds of thousands of samples with their labels: one arena holds every message, where a
  // heap allocation each made malloc the cost of the whole writer.
  google::protobuf::Arena arena;
  pb::Profile& out = *google::protobuf::Arena::CreateMessage<pb::Profile>(&arena);
  Strings strings(out);
  const bool nanoseconds = same_period && event->name == "CPU_CLOCK";
  auto* count = out.add_sample_type();
  count->set_type(strings.Index("samples"));
  count->set_unit(strings.Index("count"));
  if (nanoseconds) {
    auto* cpu = out.add_sample_type();
    cpu->set_type(strings.Index("cpu"));
    cpu->set_unit(strings.Index("nanoseconds"));
  }
  out.mutable_period_type()->set_type(strings.Index(event != nullptr ? StackEventName(profile, filter) : "samples"));
  out.mutable_period_type()->set_unit(strings.Index(nanoseconds ? "nanoseconds" : "count"));
  const int64_t period = same_period ? static_cast<int64_t>(std::min<uint64_t>(event->count, INT64_MAX)) : 0;
  out.set_period(period);
  if (!m.profiling.empty()) out.set_time_nanos(static_cast<int64_t>(m.profiling.front().start_ns));
  if (SampledNs(m) != 0) out.set_duration_nanos(static_cast<int64_t>(SampledNs(m)));
  out.add_comment(strings.Index(fmt::format("hvprof session {} ({} on {})", m.session_id, m.platform, m.machine)));

  // Mappings by image, with the build-id the session recorded where it has one.
  std::unordered_map<std::string, std::string> build_ids;
  for (const auto& image : m.images) build_ids[image.path] = image.build_id;
  for (const auto& domain : m.domains) {
    for (const auto& process : domain.processes) {
      for (const auto& mapping : process.mappings) build_ids.emplace(mapping.path, mapping.build_id);
    }
  }
  for (size_t i = 0; i < profile.images().size(); ++i) {
    const Image& image = profile.images()[i];
    auto* mapping = out.add_mapping();
    mapping->set_id(i + 1);
    mapping->set_filename(strings.Index(image.path.empty() ? image.name : image.path));
    const auto id = build_ids.find(image.path);
    if (id != build_ids.end() && !id->second.empty()) mapping->set_build_id(strings.Index(id->second));
    // Every frame is named already (unresolved ones as such): pprof must not look for the files.
    mapping->set_has_functions(true);
  }
  // Functions by symbol, named only when used.
  std::vector<uint64_t> function_id(profile.symbols().size(), 0);
  auto function_of = [&](uint32_t symbol) {
    if (function_id[symbol] == 0) {
      const Symbol& s = profile.symbols()[symbol];
      auto* function = out.add_function();
      function_id[symbol] = static_cast<uint64_t>(out.function_size());
      function->set_id(function_id[symbol]);
      const std::string name =
          s.resolved || s.name.starts_with("[unknown in ") ? s.name
                                                           : "[unknown] " + profile.images()[s.image].name;
      function->set_name(strings.Index(name));
      function->set_system_name(function->name());
      function->set_start_line(0);
    }
    return function_id[symbol];
  };
  // Functions inlined into others, by name and file.
  std::map<std::pair<std::string, std::string>, uint64_t> inlined_id;
  auto inlined_function = [&](const InlinedCall& call) {
    const std::string file = call.line == kNoIndex ? std::string() : profile.lines()[call.line].file;
    auto [it, added] = inlined_id.try_emplace({call.function, file}, 0);
    if (added) {
      auto* function = out.add_function();
      it->second = static_cast<uint64_t>(out.function_size());
      function->set_id(it->second);
      function->set_name(strings.Index(call.function));
      function->set_system_name(function->name());
      function->set_filename(strings.Index(file));
    }
    return it->second;
  };
  auto line_number = [&](uint32_t line) -> int64_t { return line == kNoIndex ? 0 : profile.lines()[line].line; };
  // Locations by frame, made when a kept stack uses them.
  std::vector<uint64_t> location_id(profile.frames().size(), 0);
  auto location_of = [&](uint32_t frame) {
    if (location_id[frame] == 0) {
      const Entry& entry = profile.frames()[frame];
      auto* location = out.add_location();
      location_id[frame] = static_cast<uint64_t>(out.location_size());
      location->set_id(location_id[frame]);
      location->set_mapping_id(uint64_t{entry.image} + 1);
      location->set_address(entry.ip);
      // One Line per function at the address, innermost first: the inlined ones, then the
      // function they were inlined into.
      if (entry.inlined != kNoIndex) {
        const InlineChain& chain = profile.inline_chains()[entry.inlined];
        for (const InlinedCall& call : chain.calls) {
          auto* line = location->add_line();
          line->set_function_id(inlined_function(call));
          line->set_line(line_number(call.line));
        }
        auto* line = location->add_line();
        line->set_function_id(function_of(entry.symbol));
        line->set_line(line_number(chain.outer_line));
      } else {
        location->add_line()->set_function_id(function_of(entry.symbol));
      }
    }
    return location_id[frame];
  };
  const int64_t key_domain = strings.Index("domain"), key_domain_name = strings.Index("domain_name");
  const int64_t key_mode = strings.Index("mode"), key_pid = strings.Index("pid");
  const int64_t key_vcpu = strings.Index("vcpu"), key_pcpu = strings.Index("pcpu"), key_tid = strings.Index("tid");
  // A numeric label with neither a value nor a unit reads as absent: the unit keeps domain 0
  // and pid 0 selectable (-tagfocus=domain=0).
  const int64_t unit_id = strings.Index("id");
  std::unordered_map<uint16_t, int64_t> domain_names;
  for (const Stack& stack : profile.stacks()) {
    if (!filter.Selects(stack)) continue;
    auto* sample = out.add_sample();
    sample->mutable_location_id()->Reserve(static_cast<int>(stack.frames.size()));
    sample->mutable_label()->Reserve(7);
    for (uint32_t frame : stack.frames) sample->add_location_id(location_of(frame));
    const int64_t samples = static_cast<int64_t>(std::min<uint64_t>(stack.count, INT64_MAX));
    sample->add_value(samples);
    if (nanoseconds) sample->add_value(samples > INT64_MAX / std::max<int64_t>(period, 1) ? INT64_MAX : samples * period);
    auto* domain = sample->add_label();
    domain->set_key(key_domain);
    domain->set_num(stack.domain);
    domain->set_num_unit(unit_id);
    auto* name = sample->add_label();
    name->set_key(key_domain_name);
    auto known = domain_names.find(stack.domain);
    if (known == domain_names.end()) {
      known = domain_names.emplace(stack.domain, strings.Index(profile.DomainName(stack.domain))).first;
    }
    name->set_str(known->second);
    auto* mode = sample->add_label();
    mode->set_key(key_mode);
    mode->set_str(strings.Index(kModeNames[std::min<uint8_t>(stack.mode, 2)]));
    auto number = [&](int64_t key, int64_t value) {
      auto* label = sample->add_label();
      label->set_key(key);
      label->set_num(value);
      label->set_num_unit(unit_id);
    };
    if (stack.pid != 0xFFFFFFFF) number(key_pid, stack.pid);
    if (stack.tid != Stack::kUnknownThread) number(key_tid, stack.tid);
    if (stack.vcpu != Stack::kUnknownCpu) number(key_vcpu, stack.vcpu);
    if (stack.pcpu != Stack::kUnknownCpu) number(key_pcpu, stack.pcpu);
  }
  std::string bytes;
  if (!out.SerializeToString(&bytes)) return MakeError(ErrorKind::kInternal, "the profile could not be encoded");
  return Gzip(bytes);
}

}  // namespace hvprof::report
