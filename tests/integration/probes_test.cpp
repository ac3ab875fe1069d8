// The USDT probes of hvprofd and hvprof-hv (base/probes.h) against docs/probes.md: every probe
// the page lists is in its program's ELF notes with as many arguments as the page gives it, every
// probe of provider hvprof in the programs is on the page, and where bpftrace runs as root, probes
// of both daemons fire during a short simulated session.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "programs.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::testing::Binary;
using hvprof::testing::FindOnPath;
using hvprof::testing::ReadText;
using hvprof::testing::RunProgram;
using hvprof::testing::SkipTest;
using hvprof::testing::TempDir;

namespace {

struct DocumentedProbe {
  std::string program;  // hvprofd or hvprof-hv
  size_t arguments = 0;
};

// The rows of docs/probes.md's table: | `name` | program | `arg` (type) ... | where |.
std::map<std::string, DocumentedProbe> DocumentedProbes() {
  const std::string doc = ReadText(std::string(HVPROF_SOURCE_DIR) + "/docs/probes.md");
  REQUIRE(!doc.empty());
  std::map<std::string, DocumentedProbe> probes;
  static const std::regex row(R"(^\| `([a-z_]+)` \| (hvprofd|hvprof-hv) \| ([^|]*) \|)");
  static const std::regex argument(R"(`[a-z_]+` \()");
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    const std::string arguments = m[3].str();
    DocumentedProbe probe{m[2].str(), static_cast<size_t>(std::distance(
                                          std::sregex_iterator(arguments.begin(), arguments.end(), argument),
                                          std::sregex_iterator()))};
    INFO("probe " << m[1].str() << " is listed twice");
    CHECK(probes.emplace(m[1].str(), probe).second);
  }
  return probes;
}

struct NotedProbe {
  std::set<size_t> arguments;  // per site: how many
  bool semaphore = true;       // every site has one
};

// The probes of provider hvprof in `binary`'s .note.stapsdt, as `readelf -n` prints them.
std::map<std::string, NotedProbe> NotedProbes(const std::string& readelf_path, const std::string& binary) {
  const auto readelf = RunProgram({readelf_path, "-n", binary});
  INFO(readelf.err);
  REQUIRE(readelf.status == 0);
  std::map<std::string, NotedProbe> probes;
  std::istringstream lines(readelf.out);
  std::string provider, name;
  NotedProbe* current = nullptr;
  static const std::regex semaphore(R"(Semaphore: 0x0*([0-9a-f]*))");
  for (std::string line; std::getline(lines, line);) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    line.erase(0, start);
    if (line.rfind("Provider: ", 0) == 0) {
      provider = line.substr(10);
      current = nullptr;
    } else if (line.rfind("Name: ", 0) == 0 && provider == "hvprof") {
      current = &probes[line.substr(6)];
      current->arguments.insert(0);  // until an Arguments line says otherwise
    } else if (line.rfind("Location: ", 0) == 0 && current != nullptr) {
      std::smatch m;
      current->semaphore &= std::regex_search(line, m, semaphore) && !m[1].str().empty();
    } else if (line.rfind("Arguments: ", 0) == 0 && current != nullptr) {
      std::istringstream words(line.substr(11));
      size_t count = 0;
      for (std::string word; words >> word;) ++count;
      current->arguments.erase(0);
      current->arguments.insert(count);
    }
  }
  return probes;
}

}  // namespace

TEST_CASE("readelf -n lists every probe of docs/probes.md in hvprofd and hvprof-hv", "[probes][docs]") {
  const std::string readelf = FindOnPath("readelf");
  if (readelf.empty() && SkipTest("needs readelf (binutils)")) return;
  const auto documented = DocumentedProbes();
  std::map<std::string, size_t> per_program;
  for (const auto& [name, probe] : documented) ++per_program[probe.program];
  CHECK(per_program["hvprofd"] >= 4);
  CHECK(per_program["hvprof-hv"] >= 4);
  CHECK(documented.size() >= 8);
  for (const std::string program : {"hvprofd", "hvprof-hv"}) {
    const auto noted = NotedProbes(readelf, Binary(program));
    for (const auto& [name, probe] : documented) {
      if (probe.program != program) continue;
      INFO(program << ": probe hvprof:" << name);
      auto it = noted.find(name);
      REQUIRE(it != noted.end());
      INFO("docs/probes.md lists " << probe.arguments << " arguments; the sites have "
           << Catch::Detail::stringify(std::vector<size_t>(it->second.arguments.begin(), it->second.arguments.end())));
      CHECK(it->second.arguments == std::set<size_t>{probe.arguments});
      CHECK(it->second.semaphore);
    }
    for (const auto& [name, probe] : noted) {
      INFO(program << " has probe hvprof:" << name << ", which docs/probes.md does not list for it");
      auto it = documented.find(name);
      CHECK((it != documented.end() && it->second.program == program));
    }
  }
}

TEST_CASE("bpftrace sees probes of hvprofd and hvprof-hv fire in a simulated session", "[probes][bpftrace]") {
  if (::geteuid() != 0 && SkipTest("attaching a probe needs root")) return;
  const std::string bpftrace = FindOnPath("bpftrace");
  if (bpftrace.empty() && SkipTest("needs bpftrace (scripts/install-deps.sh)")) return;
  // Whether this kernel lets bpftrace attach a uprobe at all, asked of a library function every
  // system has: a kernel without uprobes or BPF (a container without CAP_BPF, say) cannot trace,
  // a skip; anything failing after that is hvprof's probes, a failure.
  const std::string libc_probe = "'" + bpftrace +
                                 "' -e 'uprobe:/lib/x86_64-linux-gnu/libc.so.6:getpid { } interval:ms:1 { exit(); }' "
                                 ">/dev/null 2>&1";
  if (std::system(libc_probe.c_str()) != 0 && SkipTest("bpftrace cannot attach a uprobe here (no uprobes or BPF)")) {
    return;
  }
  TempDir dir;
  const std::string hvprofd = Binary("hvprofd");
  const std::string hv = Binary("hvprof-hv");
  // Both daemons, each started by `hvprof run`: the probes are attached to the files, so they fire
  // in every process that runs them. The interval probe's first tick says all are attached.
  const std::string script =
      "usdt:" + hvprofd + ":hvprof:session__start { printf(\"session__start %s\\n\", str(arg2)); }\n"
      "usdt:" + hvprofd + ":hvprof:chunk__written { printf(\"chunk__written %d\\n\", arg1); }\n"
      "usdt:" + hv + ":hvprof:agent__connect { printf(\"agent__connect %d\\n\", arg0); }\n"
      "interval:ms:100 { printf(\"tick\\n\"); }\n";
  const std::string out = dir.File("bpftrace.out");
  const pid_t tracer = ::fork();
  REQUIRE(tracer >= 0);
  if (tracer == 0) {
    ::setpgid(0, 0);
    if (std::freopen(out.c_str(), "w", stdout) == nullptr || std::freopen((out + ".err").c_str(), "w", stderr) == nullptr) {
      ::_exit(126);
    }
    ::execl(bpftrace.c_str(), "bpftrace", "-B", "none", "-e", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto stop_tracer = [&] {
    ::kill(tracer, SIGINT);
    int status = 0;
    for (int i = 0; i < 600 && ::waitpid(tracer, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (::waitpid(tracer, &status, WNOHANG) == 0) {
      ::kill(tracer, SIGKILL);
      ::waitpid(tracer, &status, 0);
    }
    return status;
  };
  // Up to a minute for the probes to be attached, however busy the machine.
  bool attached = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!attached && std::chrono::steady_clock::now() < give_up) {
    attached = ReadText(out).find("tick") != std::string::npos;
    int status = 0;
    if (!attached && ::waitpid(tracer, &status, WNOHANG) == tracer) break;
    if (!attached) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!attached) stop_tracer();
  INFO("bpftrace: " << ReadText(out + ".err").substr(0, 1000));
  REQUIRE(attached);
  const auto run = RunProgram({Binary("hvprof"), "run", "--platform=sim", "--session-dir=" + dir.File("s"),
                               "--duration=200ms"});
  INFO(run.out << run.err);
  CHECK(run.status == 0);
  stop_tracer();
  const std::string traced = ReadText(out);
  INFO("bpftrace printed:\n" << traced.substr(0, 3000) << ReadText(out + ".err"));
  CHECK(traced.find("session__start sim\n") != std::string::npos);
  CHECK(traced.find("agent__connect 0\n") != std::string::npos);
  CHECK(traced.find("chunk__written ") != std::string::npos);
}
