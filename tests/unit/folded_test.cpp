// The folded writer: one line per stack, root first, and no name can split a frame or a line.
#include <catch2/catch.hpp>

#include "hvprof/report/views/stacks.h"
#include "hvprof/report/writers/folded.h"

using namespace hvprof::report;

TEST_CASE("folded lines: frames root first, counts last, names that cannot break the format", "[report][stacks]") {
  NamedStacks stacks;
  stacks.names = {"dom0", "[kernel]", "do_syscall_64", "vfs_read", "[user]", "evil;name", "line\nbreak",
                  "2 (web-vm)", "\x1b[31mred"};
  stacks.modes = {kRootFrame, 1, 1, 1, 0, 0, 0, kRootFrame, 0};
  stacks.stacks = {{{0, 1, 2, 3}, 946, 0}, {{0, 4, 5, 6}, 3, 0}, {{7, 4, 8}, 1, 2}};
  CHECK(FormatFolded(stacks) ==
        "dom0;[kernel];do_syscall_64;vfs_read 946\n"
        "dom0;[user];evil:name;line\\x0abreak 3\n"
        "2 (web-vm);[user];\\x1b[31mred 1\n");
  CHECK(FormatFolded(NamedStacks{}).empty());
}

TEST_CASE("the names --stack-root accepts", "[report][stacks]") {
  CHECK(ParseStackRoot("domain").value() == StackRoot::kDomain);
  CHECK(ParseStackRoot("mode").value() == StackRoot::kMode);
  CHECK(ParseStackRoot("none").value() == StackRoot::kNone);
  auto bad = ParseStackRoot("cpu");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message().find("expected domain") != std::string::npos);
}
