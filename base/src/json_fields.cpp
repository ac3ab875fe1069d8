#include "hvprof/base/json_fields.h"

#include <cmath>

namespace hvprof::json {

namespace {

std::string Range(std::string_view what, uint64_t low, uint64_t high, uint64_t type_max) {
  if (low == 0 && high == type_max) return std::string(what);
  return fmt::format("{} from {} to {}", what, low, high);
}

}  // namespace

Result<Node> Node::Parse(std::string_view text, std::string origin, ErrorKind kind) {
  auto document = std::make_shared<Value>(Value::parse(text.begin(), text.end(), nullptr, false));
  if (document->is_discarded()) {
    // Parse again with exceptions only to learn where the syntax breaks.
    std::string detail = "syntax error";
    try {
      const Value ignored = Value::parse(text.begin(), text.end());
      (void)ignored;
    } catch (const Value::parse_error& error) {
      detail = fmt::format("syntax error at byte {}", error.byte);
    } catch (const Value::exception&) {
      // Well-formed but unrepresentable, like a number too large for a double (1e999).
      detail = "a number out of range";
    }
    return Error(kind, fmt::format("{}: not valid JSON ({})", origin, detail));
  }
  const Value* root = document.get();
  return Node(std::move(document), root, "", std::move(origin), kind);
}

Node Node::Root(const Value& value, std::string origin, ErrorKind kind) {
  return Node(nullptr, &value, "", std::move(origin), kind);
}

std::string Node::Where() const {
  if (origin_.empty()) return path_.empty() ? std::string("top level") : path_;
  return path_.empty() ? origin_ : fmt::format("{}: {}", origin_, path_);
}

bool Node::Has(std::string_view key) const { return value_->is_object() && value_->contains(key); }

std::string Node::Describe() const {
  switch (value_->type()) {
    case Value::value_t::null: return "null";
    case Value::value_t::object: return "an object";
    case Value::value_t::array: return "a list";
    case Value::value_t::boolean: return value_->get<bool>() ? "true" : "false";
    case Value::value_t::string: {
      const auto& text = value_->get_ref<const std::string&>();
      constexpr size_t kShown = 40;
      const Value shown = text.size() > kShown ? Value(text.substr(0, kShown) + "...") : Value(text);
      return fmt::format("the string {}", shown.dump(-1, ' ', true, Value::error_handler_t::replace));
    }
    case Value::value_t::number_float:
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned: return value_->dump();
    case Value::value_t::binary:
    case Value::value_t::discarded: break;
  }
  return "something else";
}

Error Node::Expected(std::string_view what) const { return Fail("expected {}, got {}", what, Describe()); }

Result<Node> Node::Member(std::string_view key) const {
  if (!value_->is_object()) return Expected(fmt::format("an object with the field '{}'", key));
  const auto it = value_->find(key);
  if (it == value_->end()) {
    const std::string where = MemberPath(path_, key);
    return Error(kind_, origin_.empty() ? fmt::format("{}: required field is missing", where)
                                        : fmt::format("{}: {}: required field is missing", origin_, where));
  }
  return Child(*it, MemberPath(path_, key));
}

std::optional<Node> Node::OptionalMember(std::string_view key) const {
  if (!value_->is_object()) return std::nullopt;
  const auto it = value_->find(key);
  if (it == value_->end()) return std::nullopt;
  return Child(*it, MemberPath(path_, key));
}

Result<std::vector<Node>> Node::Elements(size_t max) const {
  if (!value_->is_array()) return Expected("a list");
  if (value_->size() > max) return Fail("has {} entries; at most {} are accepted", value_->size(), max);
  std::vector<Node> elements;
  elements.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) {
    elements.push_back(Child((*value_)[i], fmt::format("{}[{}]", path_, i)));
  }
  return elements;
}

Result<std::vector<Node>> Node::Array(std::string_view key, size_t max) const {
  HVPROF_TRY(member, Member(key));
  return member.Elements(max);
}

Result<std::vector<Node>> Node::OptionalArray(std::string_view key, size_t max) const {
  if (!value_->is_object()) return Expected("an object");
  const std::optional<Node> member = OptionalMember(key);
  if (!member) return std::vector<Node>{};
  return member->Elements(max);
}

Result<uint64_t> Node::Unsigned(uint64_t low, uint64_t high) const {
  const std::string what = Range("a whole number", low, high, UINT64_MAX);
  // get<uint64_t>() of a float or a negative number is not what the file said: refuse both.
  if (!value_->is_number_unsigned()) return Expected(what);
  const auto number = value_->get<uint64_t>();
  if (number < low || number > high) return Expected(what);
  return number;
}

Result<int64_t> Node::Signed(int64_t low, int64_t high) const {
  const std::string what = low == INT64_MIN && high == INT64_MAX
                               ? std::string("a whole number")
                               : fmt::format("a whole number from {} to {}", low, high);
  if (!value_->is_number_integer()) return Expected(what);
  if (value_->is_number_unsigned() && value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return Expected(what);
  }
  const auto number = value_->get<int64_t>();
  if (number < low || number > high) return Expected(what);
  return number;
}

Result<double> Node::Number(double low, double high) const {
  const bool bounded = low != std::numeric_limits<double>::lowest() || high != std::numeric_limits<double>::max();
  const std::string what = bounded ? fmt::format("a number from {} to {}", low, high) : std::string("a number");
  if (!value_->is_number()) return Expected(what);
  const double number = value_->get<double>();
  if (!std::isfinite(number) || number < low || number > high) return Expected(what);
  return number;
}

Result<bool> Node::Bool() const {
  if (!value_->is_boolean()) return Expected("true or false");
  return value_->get<bool>();
}

Result<std::string> Node::String(size_t max_length) const {
  if (!value_->is_string()) return Expected("a string");
  const auto& text = value_->get_ref<const std::string&>();
  if (text.size() > max_length) {
    return Fail("expected a string of at most {} bytes, got {} bytes", max_length, text.size());
  }
  return text;
}

Result<uint64_t> Node::Hex() const {
  constexpr std::string_view kWhat = "a hex number like \"0x1f\"";
  if (!value_->is_string()) return Expected(kWhat);
  const auto& text = value_->get_ref<const std::string&>();
  if (text.size() < 3 || text.size() > 18 || (text.compare(0, 2, "0x") != 0 && text.compare(0, 2, "0X") != 0) ||
      text.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos) {
    return Expected(kWhat);
  }
  return std::stoull(text.substr(2), nullptr, 16);
}

Result<uint64_t> Node::Address() const {
  constexpr std::string_view kWhat = "an address, as a whole number or a hex string like \"0x7f0000000000\"";
  if (value_->is_number_unsigned()) return value_->get<uint64_t>();
  if (!value_->is_string()) return Expected(kWhat);
  std::string_view text = value_->get_ref<const std::string&>();
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
  if (text.empty() || text.size() > 16 || text.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
    return Expected(kWhat);
  }
  return std::stoull(std::string(text), nullptr, 16);
}

Result<uint64_t> Node::GetAddress(std::string_view key, uint64_t fallback) const {
  const std::optional<Node> member = OptionalMember(key);
  if (!member) return fallback;
  return member->Address();
}

}  // namespace hvprof::json
