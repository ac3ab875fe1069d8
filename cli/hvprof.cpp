// hvprof: the opcontrol-like command that drives profiling. Thin main: the command line is read
// by control::ParseHvprofRequest and carried out by control::RunHvprof.

#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/control/hvprof_command.h"
#include "hvprof/control/hvprof_request.h"
#include "hvprof/xen/xen_link.h"

using namespace hvprof;

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  // Messages name the command: `hvprof run: ...`, `hvprof archive: ...`, `hvprof: ...`.
  const std::string name =
      !args.empty() && (args[0] == "run" || args[0] == "record" || args[0] == "archive") ? "hvprof " + args[0] : "hvprof";
  try {
    const xen::XenHost host = xen::DetectXen();
    control::HvprofEnvironment environment;
    environment.xen_host = host.is_xen;
    environment.xen_guest = host.is_xen && !host.control_domain;
    environment.program_dir = ExecutableDirectory();
    environment.say = [&name](const std::string& text) { std::cerr << name << ": " << EscapeForTerminal(text) << "\n"; };
    auto request = control::ParseHvprofRequest(args, environment);
    if (!request) {
      std::cerr << name << ": " << request.error().message() << "\n";
      return 2;
    }
    return control::RunHvprof(request.value(), std::cout, std::cerr);
  } catch (const std::exception& error) {
    std::cerr << name << ": internal error: " << error.what() << "\n";
    return 1;
  }
}
