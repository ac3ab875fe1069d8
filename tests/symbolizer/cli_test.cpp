// hvprof-symbolize end to end: text and JSON answers, a kernel chain, and clear errors.

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace hvprof::symbolizer {
namespace {

using testing::FixturePaths;
using testing::Hex;
using testing::TempDir;

std::string Cli(const std::string& arguments, const std::string& input, int* status) {
  // Built by appending: GCC 12 at -O3 (Release) takes "'" + std::string for an overlapping
  // copy and fails the build with a false -Wrestrict.
  std::string command = "'";
  command += FixturePaths::Cli();
  command += "' ";
  command += arguments;
  command += " 2>&1";
  return testing::RunCommand(command, input, status);
}

TEST_CASE("symbolizer: hvprof-symbolize answers one line per input line", "[symbolizer][cli]") {
  testing::FixtureReport report = testing::RunFixture(FixturePaths::Pie(5));
  const auto& main = report.modules.at("main");
  std::string source = FixturePaths::SourceDir() + "/fixture_main.c";
  std::string input = Hex(report.functions.at("fixture_plain")) + "\n" + "not-an-address\n" +
                      Hex(report.sites.at("outer") - 1).substr(2) + "\n" + "0x10\n";
  int status = -1;
  std::string out = Cli("-e '" + main.path + "' --load-bias " + Hex(main.bias) + " -i", input,
                        &status);
  CHECK(status == 0);
  auto lines = testing::SplitLines(out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].rfind("fixture_plain+0x0 at ", 0) == 0);
  CHECK(lines[1] == "?? (invalid-input: not a hex address)");
  CHECK(lines[2].rfind("fixture_leaf at ", 0) == 0);
  CHECK(lines[2].find("fixture_main.c:" + std::to_string(testing::MarkLine(source, "leaf_call"))) !=
        std::string::npos);
  CHECK(lines[2].find(" inlined into fixture_middle at ") != std::string::npos);
  CHECK(lines[2].find(" inlined into fixture_outer+0x") != std::string::npos);
  CHECK(lines[3].rfind("?? (outside-image: ", 0) == 0);

  out = Cli("-e '" + main.path + "' --load-bias " + Hex(main.bias) + " --functions-only --json",
            input, &status);
  CHECK(status == 0);
  lines = testing::SplitLines(out);
  REQUIRE(lines.size() == 4);
  auto first = nlohmann::json::parse(lines[0]);
  CHECK(first["frames"][0]["function"] == "fixture_plain");
  CHECK(first["frames"][0].count("file") == 0);
  CHECK(nlohmann::json::parse(lines[1])["reason"] == "invalid-input");
  CHECK(nlohmann::json::parse(lines[2])["frames"][0]["function"] == "fixture_outer");
  CHECK(nlohmann::json::parse(lines[3])["reason"] == "outside-image");
}

TEST_CASE("symbolizer: hvprof-symbolize resolves a kernel through vmlinux, then kallsyms",
          "[symbolizer][cli]") {
  TempDir dir;
  dir.Write("kallsyms",
            "ffffffff81000000 T _stext\nffffffff81000100 T schedule\n"
            "ffffffffc0001000 t kvm_run\t[kvm]\n");
  int status = -1;
  std::string out = Cli("--kallsyms '" + dir.File("kallsyms") + "' -f -a",
                        "ffffffff81000104\nffffffffc0001010\n", &status);
  CHECK(status == 0);
  CHECK(out == "0xffffffff81000104: schedule+0x4\n0xffffffffc0001010: kvm_run+0x10 [kvm]\n");

  // The fixture as "vmlinux" covers its own range; the rest falls through to kallsyms.
  testing::FixtureReport report = testing::RunFixture(FixturePaths::Pie(5));
  const auto& main = report.modules.at("main");
  out = Cli("-e '" + main.path + "' --load-bias " + Hex(main.bias) + " --kallsyms '" +
                dir.File("kallsyms") + "' -f",
            Hex(report.functions.at("fixture_outer")) + "\nffffffffc0001010\n", &status);
  CHECK(status == 0);
  CHECK(out == "fixture_outer+0x0\nkvm_run+0x10 [kvm]\n");
}

TEST_CASE("symbolizer: hvprof-symbolize fails clearly on a bad image or bad arguments", "[symbolizer][cli]") {
  TempDir dir;
  dir.Write("vmlinuz", std::string("\x1f\x8b\x08\x00", 4) + std::string(100, 'x'));
  int status = -1;
  std::string out = Cli("-e '" + dir.File("vmlinuz") + "'", "0x1000\n", &status);
  CHECK(status == 1);
  CHECK(out.find("error:") != std::string::npos);
  CHECK(out.find("compressed kernel image") != std::string::npos);

  out = Cli("-e '" + dir.File("missing") + "'", "0x1000\n", &status);
  CHECK(status == 1);
  CHECK(out.find("No such file") != std::string::npos);

  out = Cli("-e '" + FixturePaths::Pie(5) + "' --build-id 00112233", "0x1000\n", &status);
  CHECK(status == 1);
  CHECK(out.find("expected 00112233") != std::string::npos);

  out = Cli("", "", &status);
  CHECK(status == 2);
  CHECK(out.find("no image") != std::string::npos);
  out = Cli("-e x --kallsyms a --system-map b", "", &status);
  CHECK(status == 2);
  out = Cli("-e x --load-bias 12ab", "", &status);
  CHECK(status == 2);
  CHECK(out.find("0x") != std::string::npos);
  out = Cli("--help", "", &status);
  CHECK(status == 0);
  CHECK(out.find("--kallsyms") != std::string::npos);
}

}  // namespace
}  // namespace hvprof::symbolizer
