// The profiles guests publish to dom0 are untrusted input: every field is checked, and a bad
// one is refused with the field's path and what was expected.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "hvprof/report/published.h"

using hvprof::ErrorKind;
using hvprof::report::ParsePublished;
using hvprof::report::PublishedProfile;
using hvprof::report::SerializePublished;
using Json = nlohmann::json;

namespace {

Json Valid() {
  PublishedProfile p;
  p.domain = 3;
  p.name = "web";
  p.session_id = "00112233445566778899aabbccddeeff";
  p.hvprof_version = "0.1.0";
  p.cpu_type = "i386/arch_perfmon";
  p.samples = 30;
  p.events.push_back({5, "CPU_CLK_UNHALTED", 100000});
  p.symbols.push_back({0, "libz.so.1", "crc32", 0x7f10000047c0, true, {20}});
  p.hypervisor.push_back({0xffff82d0402f2662, {10}});
  return Json::parse(SerializePublished(p));
}

std::string Refusal(const Json& json, ErrorKind kind = ErrorKind::kCorrupt) {
  auto parsed = ParsePublished(json.dump(), 3);
  REQUIRE_FALSE(parsed.has_value());
  CHECK(parsed.error().kind() == kind);
  return parsed.error().message();
}

}  // namespace

TEST_CASE("published profiles: a valid one round-trips", "[report][published]") {
  auto parsed = ParsePublished(Valid().dump(), 3);
  REQUIRE(parsed.has_value());
  CHECK(parsed.value().samples == 30);
  CHECK(parsed.value().symbols.at(0).symbol == "crc32");
  CHECK(parsed.value().hypervisor.at(0).ip == 0xffff82d0402f2662);
}

TEST_CASE("published profiles: bad fields are named with what was expected", "[report][published][bad-input]") {
  const std::string origin = "the profile domain 3 published: ";
  Json missing = Valid();
  missing["symbols"][0].erase("image");
  CHECK(Refusal(missing) == origin + "symbols[0].image: required field is missing");

  Json wrong_type = Valid();
  wrong_type["symbols"][0]["samples"][0] = "20";
  CHECK(Refusal(wrong_type) == origin + "symbols[0].samples[0]: expected a whole number, got the string \"20\"");

  Json negative = Valid();
  negative["losses"]["ring_full"] = -1;
  CHECK(Refusal(negative) == origin + "losses.ring_full: expected a whole number, got -1");

  Json out_of_range = Valid();
  out_of_range["domain"] = 40000;
  CHECK(Refusal(out_of_range) == origin + "domain: expected a domain id from 0 to 32751, got 40000");

  Json bad_ip = Valid();
  bad_ip["hypervisor"][0]["ip"] = "ffff82d0402f2662";
  CHECK(Refusal(bad_ip).find(origin + "hypervisor[0].ip: expected a hex number like \"0x1f\"") == 0);

  Json counts = Valid();
  counts["symbols"][0]["samples"] = Json::array({1, 2});
  CHECK(Refusal(counts) == origin + "symbols[0].samples: has 2 counts for 1 events");

  Json mode = Valid();
  mode["symbols"][0]["mode"] = "hypervisor";
  CHECK(Refusal(mode) == origin + "symbols[0].mode: expected \"user\" or \"kernel\", got 'hypervisor'");
}

TEST_CASE("published profiles: whole-profile checks", "[report][published][bad-input]") {
  CHECK(Refusal(Json::parse("[1]")).find("expected a JSON object, got a list") != std::string::npos);
  auto syntax = ParsePublished("{\"format\":", 3);
  REQUIRE_FALSE(syntax.has_value());
  CHECK(syntax.error().message().find("the profile domain 3 published: not valid JSON") == 0);

  Json newer = Valid();
  newer["version"] = 2;
  CHECK(Refusal(newer, ErrorKind::kUnsupported).find("format version 2") != std::string::npos);

  Json other = Valid();
  other["domain"] = 4;
  CHECK(Refusal(other, ErrorKind::kPermissionDenied).find("claims to be domain 4's") != std::string::npos);

  // Counts chosen so their sum wraps to the total the profile claims: refused, never wrapped.
  Json wrapping = Valid();
  wrapping["symbols"][0]["samples"][0] = UINT64_MAX;
  wrapping["hypervisor"][0]["samples"][0] = 31;
  wrapping["samples"] = 30;
  CHECK(Refusal(wrapping) == "the profile domain 3 published: hypervisor[0]: samples: the counts add up to more "
                             "than 2^64");

  Json inflated = Valid();
  inflated["samples"] = 31;
  CHECK(Refusal(inflated).find("its rows hold 30 samples, its total says 31") != std::string::npos);
}
