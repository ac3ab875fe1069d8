// The one JSON field reader every hvprof file format uses: its messages name the file, the
// field's path and what was expected, and it never converts a value into something else.
#include <catch2/catch.hpp>

#include "hvprof/base/json_fields.h"

using hvprof::ErrorKind;
using hvprof::json::Node;

namespace {

Node Parsed(const std::string& text) {
  auto node = Node::Parse(text, "f.json", ErrorKind::kCorrupt);
  REQUIRE(node.has_value());
  return std::move(node).value();
}

template <typename T>
std::string Message(const hvprof::Result<T>& result) {
  REQUIRE_FALSE(result.has_value());
  return result.error().message();
}

}  // namespace

TEST_CASE("json fields: syntax errors say where", "[base][json]") {
  auto bad = Node::Parse("{\"a\": [1, 2,, 3]}", "f.json", ErrorKind::kInvalidArgument);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().kind() == ErrorKind::kInvalidArgument);
  CHECK(bad.error().message() == "f.json: not valid JSON (syntax error at byte 13)");
  // Found by fuzzing: a number no double holds is an error, not an exception.
  auto huge = Node::Parse("{\"count\": 1e999}", "f.json", ErrorKind::kCorrupt);
  REQUIRE_FALSE(huge.has_value());
  CHECK(huge.error().message() == "f.json: not valid JSON (a number out of range)");
}

TEST_CASE("json fields: missing, wrong type and out of range name the path", "[base][json]") {
  const Node root = Parsed(R"({"domains": [{"id": 3, "name": "web", "vcpus": 70000, "weight": 1.5,
                                "neg": -2, "flag": "yes", "addr": "0x1G"}]})");
  auto domains = root.Array("domains", 10);
  REQUIRE(domains.has_value());
  const Node& d = domains.value()[0];
  CHECK(Message(d.Get<uint16_t>("pid")) == "f.json: domains[0].pid: required field is missing");
  CHECK(Message(d.Get<uint16_t>("name")) ==
        "f.json: domains[0].name: expected a whole number from 0 to 65535, got the string \"web\"");
  CHECK(Message(d.Get<uint16_t>("vcpus")) ==
        "f.json: domains[0].vcpus: expected a whole number from 0 to 65535, got 70000");
  CHECK(Message(d.Get<uint64_t>("weight")) == "f.json: domains[0].weight: expected a whole number, got 1.5");
  CHECK(Message(d.Get<uint32_t>("neg")) ==
        "f.json: domains[0].neg: expected a whole number from 0 to 4294967295, got -2");
  CHECK(Message(d.Get<bool>("flag")) == "f.json: domains[0].flag: expected true or false, got the string \"yes\"");
  CHECK(Message(d.Get<std::string>("id")) == "f.json: domains[0].id: expected a string, got 3");
  CHECK(Message(d.Member("addr").value().Address()).find("domains[0].addr: expected an address") !=
        std::string::npos);
  CHECK(Message(root.Array("domains", 0)) == "f.json: domains: has 1 entries; at most 0 are accepted");
  CHECK(Message(root.Get<int>("domains")) == "f.json: domains: expected a whole number from -2147483648 to "
                                             "2147483647, got a list");
  // Every error carries the document's kind.
  CHECK(d.Get<uint16_t>("pid").error().kind() == ErrorKind::kCorrupt);
}

TEST_CASE("json fields: values in range, fallbacks and addresses", "[base][json]") {
  const Node root = Parsed(R"({"id": 65535, "neg": -5, "big": 18446744073709551615, "hex": "0x7f00",
                             "bare": "7f00", "number": 32512, "ratio": 0.5, "nul": null})");
  CHECK(root.Get<uint16_t>("id").value() == 65535);
  CHECK(root.Get<int>("neg").value() == -5);
  CHECK(root.Get<uint64_t>("big").value() == UINT64_MAX);
  CHECK(Message(root.Get<int64_t>("big")).find("expected a whole number") != std::string::npos);
  CHECK(root.Get<uint32_t>("absent", 7u).value() == 7u);
  CHECK(root.Get("absent", "fallback").value() == "fallback");
  // Present with the wrong type is an error even when a fallback is given.
  CHECK(Message(root.Get<uint32_t>("nul", 7u)) == "f.json: nul: expected a whole number from 0 to 4294967295, got null");
  CHECK(root.Member("hex").value().Hex().value() == 0x7f00);
  CHECK(Message(root.Member("bare").value().Hex()).find("expected a hex number like \"0x1f\"") != std::string::npos);
  CHECK(root.Member("bare").value().Address().value() == 0x7f00);
  CHECK(root.Member("number").value().Address().value() == 0x7f00);
  CHECK(root.GetAddress("absent", 12).value() == 12);
  CHECK(root.Member("ratio").value().Number(0.0, 1.0).value() == 0.5);
  CHECK(Message(root.Member("ratio").value().Number(0.75, 1.0)) ==
        "f.json: ratio: expected a number from 0.75 to 1, got 0.5");
  CHECK(root.OptionalArray("absent", 3).value().empty());
}

TEST_CASE("json fields: long strings are refused, not truncated", "[base][json]") {
  const std::string long_name(5000, 'x');
  const Node root = Parsed("{\"name\": \"" + long_name + "\"}");
  CHECK(Message(root.Get<std::string>("name")) == "f.json: name: expected a string of at most 4096 bytes, got 5000 bytes");
  CHECK(root.Member("name").value().String(8192).value() == long_name);
}

TEST_CASE("json fields: a reader that names its file itself", "[base][json]") {
  const nlohmann::json document = nlohmann::json::parse(R"({"machine": {"cpus": 0}})");
  const Node root = Node::Root(document, "", ErrorKind::kInvalidArgument);
  auto machine = root.Member("machine");
  REQUIRE(machine.has_value());
  CHECK(Message(machine.value().Get<uint32_t>("pmu")) == "machine.pmu: required field is missing");
  CHECK(Message(machine.value().Member("cpus").value().Unsigned(1, 64)) ==
        "machine.cpus: expected a whole number from 1 to 64, got 0");
  CHECK(root.Fail("needs domain {}", 0).message() == "top level: needs domain 0");
}
