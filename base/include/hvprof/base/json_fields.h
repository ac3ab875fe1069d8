// Reading typed fields from a parsed JSON document, without exceptions, with errors that say
// where and what: "session.json: domains[2].pid: expected a whole number from 0 to 65535, got
// the string \"7\"". The store's session.json, the guests' published profiles and the sim's
// scenarios are all read through it, so every file hvprof reads reports a bad field the same way.
//
//   HVPROF_TRY(root, json::Node::Parse(text, "session.json", ErrorKind::kCorrupt));
//   HVPROF_TRY(pid, root.Get<uint16_t>("pid"));                // required
//   HVPROF_TRY(comm, root.Get<std::string>("comm", ""));       // optional, with a fallback
//   HVPROF_TRY(domains, root.Array("domains", kMaxDomains));   // bounded list
//   for (const json::Node& domain : domains) { ... }
//
// A Node refers into the document it came from: keep the document (or the root Node from
// Parse, which owns it) alive while its Nodes are used.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/base/result.h"

namespace hvprof::json {

using Value = nlohmann::json;

// Strings longer than this are refused unless a reader asks for another bound.
inline constexpr size_t kDefaultMaxString = 4096;

class Node {
 public:
  // Parses `text`; a syntax error becomes "ORIGIN: not valid JSON (...)". `origin` names the
  // file (or "the profile domain 3 published") in every message; `kind` is the ErrorKind of
  // every error this document's Nodes make (kCorrupt for files hvprof wrote, kInvalidArgument
  // for files the user wrote).
  static Result<Node> Parse(std::string_view text, std::string origin, ErrorKind kind);
  // A Node over a document someone else owns.
  static Node Root(const Value& value, std::string origin, ErrorKind kind);

  const Value& value() const { return *value_; }
  // "domains[2].pid"; empty at the root.
  const std::string& path() const { return path_; }
  const std::string& origin() const { return origin_; }
  // "ORIGIN: PATH", or "ORIGIN" at the root: where an error is. With an empty origin (a
  // reader that adds the file's name itself), "PATH", or "top level".
  std::string Where() const;

  bool IsObject() const { return value_->is_object(); }
  bool IsArray() const { return value_->is_array(); }
  // Elements of an array (0 for anything else).
  size_t Size() const { return value_->is_array() ? value_->size() : 0; }
  bool Has(std::string_view key) const;

  // A member that must be there: fails if this is not an object or lacks `key`.
  Result<Node> Member(std::string_view key) const;
  // A member that may be absent (but this must be an object when it is not null).
  std::optional<Node> OptionalMember(std::string_view key) const;
  // A member or element the caller has checked is there (Has(key); index < Size()).
  Node Checked(std::string_view key) const { return Child(value_->at(key), MemberPath(path_, key)); }
  Node Checked(size_t index) const { return Child(value_->at(index), fmt::format("{}[{}]", path_, index)); }
  // The elements of an array of at most `max` elements.
  Result<std::vector<Node>> Elements(size_t max) const;
  // Required and optional array members; an absent optional array is empty.
  Result<std::vector<Node>> Array(std::string_view key, size_t max) const;
  Result<std::vector<Node>> OptionalArray(std::string_view key, size_t max) const;

  // This value as a type. Integers are range-checked against the type (or low..high).
  Result<uint64_t> Unsigned(uint64_t low = 0, uint64_t high = UINT64_MAX) const;
  Result<int64_t> Signed(int64_t low = INT64_MIN, int64_t high = INT64_MAX) const;
  Result<double> Number(double low, double high) const;
  Result<bool> Bool() const;
  Result<std::string> String(size_t max_length = kDefaultMaxString) const;
  // A string of hex digits with a 0x prefix ("0x7f0000000000"), as hvprof writes addresses.
  Result<uint64_t> Hex() const;
  // An address written either as a whole number or as a hex string (with or without 0x).
  Result<uint64_t> Address() const;

  template <typename T>
  Result<T> As() const {
    if constexpr (std::is_same_v<T, bool>) {
      return Bool();
    } else if constexpr (std::is_same_v<T, std::string>) {
      return String();
    } else if constexpr (std::is_floating_point_v<T>) {
      return Number(std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max());
    } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      HVPROF_TRY(value, Unsigned(0, std::numeric_limits<T>::max()));
      return static_cast<T>(value);
    } else if constexpr (std::is_integral_v<T>) {
      HVPROF_TRY(value, Signed(std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
      return static_cast<T>(value);
    } else {
      static_assert(sizeof(T) == 0, "json::Node::As: unsupported type");
    }
  }

  // A required member as a type.
  template <typename T>
  Result<T> Get(std::string_view key) const {
    HVPROF_TRY(member, Member(key));
    return member.template As<T>();
  }
  // An optional member as a type, `fallback` when absent (present with the wrong type fails).
  template <typename T>
  Result<T> Get(std::string_view key, T fallback) const {
    const std::optional<Node> member = OptionalMember(key);
    if (!member) return fallback;
    return member->template As<T>();
  }
  // An optional member as a type, nullopt when absent (present with the wrong type fails): for
  // a member whose absence means something of its own, not a default.
  template <typename T>
  Result<std::optional<T>> GetOptional(std::string_view key) const {
    const std::optional<Node> member = OptionalMember(key);
    if (!member) return std::optional<T>();
    HVPROF_TRY(value, member->template As<T>());
    return std::optional<T>(std::move(value));
  }
  // An optional member holding an address (see Address()), `fallback` when absent.
  Result<uint64_t> GetAddress(std::string_view key, uint64_t fallback) const;
  // For string literals as fallbacks.
  Result<std::string> Get(std::string_view key, const char* fallback) const {
    return Get<std::string>(key, std::string(fallback));
  }

  // An error at this value: "ORIGIN: PATH: MESSAGE", of the document's kind.
  template <typename... Args>
  Error Fail(fmt::format_string<Args...> format, Args&&... args) const {
    return Error(kind_, fmt::format("{}: {}", Where(), fmt::format(format, std::forward<Args>(args)...)));
  }
  // What this value is, for messages: "a string (\"abc\")", "an object", "-3".
  std::string Describe() const;

 private:
  Node(std::shared_ptr<const Value> owned, const Value* value, std::string path, std::string origin,
       ErrorKind kind)
      : owned_(std::move(owned)), value_(value), path_(std::move(path)), origin_(std::move(origin)), kind_(kind) {}
  Node Child(const Value& value, std::string path) const { return Node(owned_, &value, std::move(path), origin_, kind_); }
  Error Expected(std::string_view what) const;
  static std::string MemberPath(const std::string& parent, std::string_view key) {
    return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
  }

  std::shared_ptr<const Value> owned_;  // set when Parse made the document
  const Value* value_;
  std::string path_;
  std::string origin_;
  ErrorKind kind_;
};

}  // namespace hvprof::json
