// Running the built programs (build/bin) from tests, capturing what they print.
#pragma once

#include <string>
#include <vector>

namespace hvprof::testing {

struct CommandResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs a program to completion, capturing its output; `environment` ("NAME=VALUE") is added to
// the child's.
CommandResult RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& environment = {});
// In a child process: adds `environment` to its own and runs `argv`; _exit(127) when it cannot.
[[noreturn]] void ExecProgram(const std::vector<std::string>& argv, const std::vector<std::string>& environment);
std::string Binary(const std::string& name);  // build/bin/NAME
// `name`'s path on PATH (an empty entry is the working directory), or "" when it is not there.
std::string FindOnPath(const std::string& name);
// What a file holds now, or "" where it cannot be read (a file another process is writing).
std::string ReadText(const std::string& path);

}  // namespace hvprof::testing
