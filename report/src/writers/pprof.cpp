#include "hvprof/report/writers/pprof.h"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

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

// The profile's header: what was sampled, in which unit, at which period.
struct PprofHeader {
  bool nanoseconds = false;  // every event counted is CPU_CLOCK at one period: a second value, in ns
  int64_t period = 0;        // 0 unless every event counted has the same
};

PprofHeader WriteHeader(const Profile& profile, const StackFilter& filter, pb::Profile& out, Strings& strings) {
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
  PprofHeader header;
  header.nanoseconds = same_period && event->name == "CPU_CLOCK";
  auto* count = out.add_sample_type();
  count->set_type(strings.Index("samples"));
  count->set_unit(strings.Index("count"));
  if (header.nanoseconds) {
    auto* cpu = out.add_sample_type();
    cpu->set_type(strings.Index("cpu"));
    cpu->set_unit(strings.Index("nanoseconds"));
  }
  out.mutable_period_type()->set_type(strings.Index(event != nullptr ? StackEventName(profile, filter) : "samples"));
  out.mutable_period_type()->set_unit(strings.Index(header.nanoseconds ? "nanoseconds" : "count"));
  header.period = same_period ? static_cast<int64_t>(std::min<uint64_t>(event->count, INT64_MAX)) : 0;
  out.set_period(header.period);
  if (!m.profiling.empty()) out.set_time_nanos(static_cast<int64_t>(m.profiling.front().start_ns));
  if (SampledNs(m) != 0) out.set_duration_nanos(static_cast<int64_t>(SampledNs(m)));
  out.add_comment(strings.Index(fmt::format("hvprof session {} ({} on {})", m.session_id, m.platform, m.machine)));
  return header;
}

// Mappings by image, with the build-id the session recorded where it has one.
void WriteMappings(const Profile& profile, pb::Profile& out, Strings& strings) {
  std::unordered_map<std::string, std::string> build_ids;
  for (const auto& image : profile.metadata().images) build_ids[image.path] = image.build_id;
  for (const store::ContextImage& image : profile.context().images()) build_ids.emplace(image.path, image.build_id);
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
}

// Locations by frame and functions by symbol (and inlined functions by name and file), each
// made when a kept stack first uses it.
class Locations {
 public:
  Locations(const Profile& profile, pb::Profile& out, Strings& strings)
      : profile_(profile), out_(out), strings_(strings), function_id_(profile.symbols().size(), 0),
        location_id_(profile.frames().size(), 0) {}

  uint64_t Of(uint32_t frame) {
    if (location_id_[frame] != 0) return location_id_[frame];
    const Entry& entry = profile_.frames()[frame];
    auto* location = out_.add_location();
    location_id_[frame] = static_cast<uint64_t>(out_.location_size());
    location->set_id(location_id_[frame]);
    location->set_mapping_id(uint64_t{entry.image} + 1);
    location->set_address(entry.address);
    // One Line per function at the address, innermost first: the inlined ones, then the
    // function they were inlined into.
    if (entry.inlined != kNoIndex) {
      const InlineChain& chain = profile_.inline_chains()[entry.inlined];
      for (const InlinedCall& call : chain.calls) {
        auto* line = location->add_line();
        line->set_function_id(InlinedFunction(call));
        line->set_line(LineNumber(call.line));
      }
      auto* line = location->add_line();
      line->set_function_id(FunctionOf(entry.symbol));
      line->set_line(LineNumber(chain.outer_line));
    } else {
      location->add_line()->set_function_id(FunctionOf(entry.symbol));
    }
    return location_id_[frame];
  }

 private:
  uint64_t FunctionOf(uint32_t symbol) {
    if (function_id_[symbol] != 0) return function_id_[symbol];
    const Symbol& s = profile_.symbols()[symbol];
    auto* function = out_.add_function();
    function_id_[symbol] = static_cast<uint64_t>(out_.function_size());
    function->set_id(function_id_[symbol]);
    const std::string name =
        s.resolved || s.name.starts_with("[unknown in ") ? s.name : "[unknown] " + profile_.images()[s.image].name;
    function->set_name(strings_.Index(name));
    function->set_system_name(function->name());
    function->set_start_line(0);
    return function_id_[symbol];
  }
  uint64_t InlinedFunction(const InlinedCall& call) {
    const std::string file = call.line == kNoIndex ? std::string() : profile_.lines()[call.line].file;
    auto [it, added] = inlined_id_.try_emplace({call.function, file}, 0);
    if (added) {
      auto* function = out_.add_function();
      it->second = static_cast<uint64_t>(out_.function_size());
      function->set_id(it->second);
      function->set_name(strings_.Index(call.function));
      function->set_system_name(function->name());
      function->set_filename(strings_.Index(file));
    }
    return it->second;
  }
  int64_t LineNumber(uint32_t line) const { return line == kNoIndex ? 0 : profile_.lines()[line].line; }

  const Profile& profile_;
  pb::Profile& out_;
  Strings& strings_;
  std::vector<uint64_t> function_id_;
  std::map<std::pair<std::string, std::string>, uint64_t> inlined_id_;
  std::vector<uint64_t> location_id_;
};

struct Label {
  int64_t key, str, num, unit;
};

// One Sample message, encoded straight into the output: its locations, values and labels.
void WriteSample(google::protobuf::io::CodedOutputStream& coded, std::span<const uint64_t> ids,
                 std::span<const int64_t> values, std::span<const Label> labels) {
  using google::protobuf::io::CodedOutputStream;
  using Wire = google::protobuf::internal::WireFormatLite;
  auto varint_field = [](uint32_t field, uint64_t value) {
    return value == 0 ? size_t{0} : CodedOutputStream::VarintSize32(field << 3) + CodedOutputStream::VarintSize64(value);
  };
  auto write_varint = [&coded](uint32_t field, uint64_t value) {
    if (value == 0) return;
    coded.WriteTag(Wire::MakeTag(static_cast<int>(field), Wire::WIRETYPE_VARINT));
    coded.WriteVarint64(value);
  };
  // Sizes first: every field of a message is preceded by its length.
  size_t ids_bytes = 0, values_bytes = 0;
  for (uint64_t id : ids) ids_bytes += CodedOutputStream::VarintSize64(id);
  for (int64_t value : values) values_bytes += CodedOutputStream::VarintSize64(static_cast<uint64_t>(value));
  size_t label_bytes[8];
  size_t body = 0;
  if (ids_bytes != 0) body += 1 + CodedOutputStream::VarintSize64(ids_bytes) + ids_bytes;
  body += 1 + CodedOutputStream::VarintSize64(values_bytes) + values_bytes;
  for (size_t l = 0; l < labels.size(); ++l) {
    const Label& label = labels[l];
    label_bytes[l] = varint_field(1, static_cast<uint64_t>(label.key)) + varint_field(2, static_cast<uint64_t>(label.str)) +
                     varint_field(3, static_cast<uint64_t>(label.num)) + varint_field(4, static_cast<uint64_t>(label.unit));
    body += 1 + CodedOutputStream::VarintSize64(label_bytes[l]) + label_bytes[l];
  }
  coded.WriteTag(Wire::MakeTag(2, Wire::WIRETYPE_LENGTH_DELIMITED));  // Profile.sample
  coded.WriteVarint64(body);
  if (ids_bytes != 0) {
    coded.WriteTag(Wire::MakeTag(1, Wire::WIRETYPE_LENGTH_DELIMITED));  // Sample.location_id, packed
    coded.WriteVarint64(ids_bytes);
    for (uint64_t id : ids) coded.WriteVarint64(id);
  }
  coded.WriteTag(Wire::MakeTag(2, Wire::WIRETYPE_LENGTH_DELIMITED));  // Sample.value, packed
  coded.WriteVarint64(values_bytes);
  for (int64_t value : values) coded.WriteVarint64(static_cast<uint64_t>(value));
  for (size_t l = 0; l < labels.size(); ++l) {
    const Label& label = labels[l];
    coded.WriteTag(Wire::MakeTag(3, Wire::WIRETYPE_LENGTH_DELIMITED));  // Sample.label
    coded.WriteVarint64(label_bytes[l]);
    write_varint(1, static_cast<uint64_t>(label.key));
    write_varint(2, static_cast<uint64_t>(label.str));
    write_varint(3, static_cast<uint64_t>(label.num));
    write_varint(4, static_cast<uint64_t>(label.unit));
  }
}

}  // namespace

Result<std::string> FormatPprof(const Profile& profile, const StackFilter& filter) {
  // Hundreds of thousands of samples with their labels: one arena holds every message, where a
  // heap allocation each made malloc the cost of the whole writer.
  google::protobuf::Arena arena;
  pb::Profile& out = *google::protobuf::Arena::CreateMessage<pb::Profile>(&arena);
  Strings strings(out);
  const PprofHeader header = WriteHeader(profile, filter, out, strings);
  WriteMappings(profile, out, strings);
  Locations locations(profile, out, strings);
  const int64_t key_domain = strings.Index("domain"), key_domain_name = strings.Index("domain_name");
  const int64_t key_mode = strings.Index("mode"), key_pid = strings.Index("pid");
  const int64_t key_vcpu = strings.Index("vcpu"), key_pcpu = strings.Index("pcpu"), key_tid = strings.Index("tid");
  // A numeric label with neither a value nor a unit reads as absent: the unit keeps domain 0
  // and pid 0 selectable (-tagfocus=domain=0).
  const int64_t unit_id = strings.Index("id");
  // The samples are encoded straight into the output with protobuf's stream encoder, after the
  // rest of the profile: a message per sample and per label (seven each) made the memory they
  // took the cost of the whole writer. A first pass makes every Location and string they use.
  struct Pending {
    const Stack* stack;
    size_t first;  // into location_ids
    int64_t domain_name;
    int64_t mode;
  };
  std::vector<Pending> pending;
  std::vector<uint64_t> location_ids;
  std::unordered_map<uint16_t, int64_t> domain_names;
  int64_t mode_names[sample_mode::kCount];
  for (uint8_t mode = 0; mode < sample_mode::kCount; ++mode) {
    mode_names[mode] = strings.Index(std::string(sample_mode::Name(mode)));
  }
  for (const Stack& stack : profile.stacks()) {
    if (!filter.Selects(stack)) continue;
    auto known = domain_names.find(stack.domain);
    if (known == domain_names.end()) {
      known = domain_names.emplace(stack.domain, strings.Index(profile.DomainName(stack.domain))).first;
    }
    pending.push_back({&stack, location_ids.size(), known->second, mode_names[sample_mode::Byte(sample_mode::Of(stack.mode))]});
    for (uint32_t frame : stack.frames) location_ids.push_back(locations.Of(frame));
  }
  std::string bytes;
  if (!out.SerializeToString(&bytes)) return MakeError(ErrorKind::kInternal, "the profile could not be encoded");
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    Label labels[7];
    for (const Pending& p : pending) {
      const Stack& stack = *p.stack;
      size_t label_count = 0;
      labels[label_count++] = {key_domain, 0, stack.domain, unit_id};
      labels[label_count++] = {key_domain_name, p.domain_name, 0, 0};
      labels[label_count++] = {key_mode, p.mode, 0, 0};
      // A stack counted across processes has no pid to label.
      if (stack.pid != kNoPid && stack.pid != store::kAnyProcess) labels[label_count++] = {key_pid, 0, stack.pid, unit_id};
      if (stack.tid != kNoTid) labels[label_count++] = {key_tid, 0, stack.tid, unit_id};
      if (stack.vcpu != kUnknownPcpu) labels[label_count++] = {key_vcpu, 0, stack.vcpu, unit_id};
      if (stack.pcpu != kUnknownPcpu) labels[label_count++] = {key_pcpu, 0, stack.pcpu, unit_id};
      const int64_t samples = static_cast<int64_t>(std::min<uint64_t>(stack.count, INT64_MAX));
      int64_t values[2] = {samples, 0};
      size_t value_count = 1;
      if (header.nanoseconds) {
        const int64_t period = header.period;
        values[value_count++] = samples > INT64_MAX / std::max<int64_t>(period, 1) ? INT64_MAX : samples * period;
      }
      WriteSample(coded, std::span<const uint64_t>(location_ids.data() + p.first, stack.frames.size()),
                  std::span<const int64_t>(values, value_count), std::span<const Label>(labels, label_count));
    }
    if (coded.HadError()) return MakeError(ErrorKind::kInternal, "the profile's samples could not be encoded");
  }
  return Gzip(bytes);
}

}  // namespace hvprof::report
