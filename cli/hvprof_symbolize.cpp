// hvprof-symbolize: addresses on stdin, one answer per line on stdout (see
// hvprof/symbolizer/output.h for the format). Thin main over hvprof_symbolizer.
//
//   hvprof-symbolize -e /usr/lib/debug/boot/xen-syms-4.17-amd64 --functions-only < addrs
//   hvprof-symbolize -e vmlinux --kallsyms /proc/kallsyms --inlines --json < addrs

#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "hvprof/base/log.h"
#include "hvprof/base/result.h"
#include "hvprof/base/version.h"
#include "hvprof/symbolizer/output.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace po = boost::program_options;
namespace sym = hvprof::symbolizer;

namespace {

struct CliOptions {
  std::string image;
  std::string kallsyms;
  std::string system_map;
  std::optional<uint64_t> kaslr_offset;
  std::optional<uint64_t> load_bias;
  std::string build_id;
  std::string debug_file;
  std::vector<std::string> debug_roots;
  sym::LookupOptions lookup;
  sym::PrintOptions print;
  bool timing = false;
};

hvprof::Result<uint64_t> ParseNumber(const std::string& option, const std::string& text) {
  uint64_t value = 0;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    if (sym::ParseHexAddress(text, &value)) return value;
  } else if (!text.empty() && text.size() <= 20 &&
             text.find_first_not_of("0123456789") == std::string::npos) {
    errno = 0;
    unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == 0) return static_cast<uint64_t>(v);
  }
  return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                           "--{}: '{}' is not a number (write hex with 0x)", option, text);
}

// Fills CliOptions from argv. Returns nullopt after printing help or the version.
hvprof::Result<std::optional<CliOptions>> ParseArguments(int argc, char** argv) {
  CliOptions o;
  std::string kaslr;
  std::string bias;
  bool inlines = false;
  bool functions_only = false;
  bool json = false;
  bool no_demangle = false;
  po::options_description desc(
      "Usage: hvprof-symbolize -e IMAGE [options] < addresses\n"
      "Reads hex addresses (with or without 0x), one per line, and prints one answer per line.\n"
      "Options");
  desc.add_options()
      ("help,h", "show this help")
      ("version", "print hvprof's version")
      ("exe,e", po::value(&o.image), "ELF image: executable, shared library, vmlinux, xen-syms")
      ("kallsyms", po::value(&o.kallsyms), "a /proc/kallsyms text (alone, or for what -e lacks)")
      ("system-map", po::value(&o.system_map), "a System.map text (alone, or for what -e lacks)")
      ("kaslr-offset", po::value(&kaslr),
       "kernel KASLR offset (runtime = link-time + offset) for -e vmlinux and --system-map; "
       "/proc/kallsyms needs none")
      ("load-bias", po::value(&bias), "load bias of a shared library or PIE given with -e")
      ("build-id", po::value(&o.build_id), "expected build-id (hex) of the -e image")
      ("debug-file", po::value(&o.debug_file), "separate debug file of the -e image")
      ("debug-root", po::value(&o.debug_roots)->composing(),
       "directory searched for debuginfo (repeatable; default /usr/lib/debug)")
      ("inlines,i", po::bool_switch(&inlines), "print inlined frames, innermost first")
      ("functions-only,f", po::bool_switch(&functions_only), "no source lines: symbol tables only")
      ("json", po::bool_switch(&json), "one JSON object per line")
      ("addresses,a", po::bool_switch(&o.print.print_address), "print each address first")
      ("demangle", "demangle C++ names (the default)")
      ("no-demangle", po::bool_switch(&no_demangle), "print C++ names as in the symbol table")
      ("timing", po::bool_switch(&o.timing), "print where the time went to stderr");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument, "{} (see --help)", e.what());
  }
  if (vm.count("help") != 0) {
    std::cout << desc << "\n";
    return std::optional<CliOptions>();
  }
  if (vm.count("version") != 0) {
    std::cout << "hvprof-symbolize (hvprof) " << hvprof::kVersion << "\n";
    return std::optional<CliOptions>();
  }
  if (o.image.empty() && o.kallsyms.empty() && o.system_map.empty()) {
    return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                             "no image: give -e IMAGE, --kallsyms FILE or --system-map FILE");
  }
  if (!o.kallsyms.empty() && !o.system_map.empty()) {
    return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                             "--kallsyms and --system-map exclude each other");
  }
  if (functions_only && inlines) {
    return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                             "--functions-only and --inlines exclude each other");
  }
  if (no_demangle && vm.count("demangle") != 0) {
    return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                             "--demangle and --no-demangle exclude each other");
  }
  if (o.image.empty() && (!o.build_id.empty() || !o.debug_file.empty() || !bias.empty())) {
    return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                             "--build-id, --debug-file and --load-bias describe the -e image");
  }
  if (!kaslr.empty()) {
    HVPROF_TRY(v, ParseNumber("kaslr-offset", kaslr));
    o.kaslr_offset = v;
  }
  if (!bias.empty()) {
    HVPROF_TRY(v, ParseNumber("load-bias", bias));
    o.load_bias = v;
  }
  if (o.kaslr_offset && o.load_bias && *o.kaslr_offset != *o.load_bias) {
    return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                             "--kaslr-offset and --load-bias both give the bias of -e: give one");
  }
  o.lookup.detail = functions_only ? sym::Detail::kFunctions
                    : inlines      ? sym::Detail::kInlines
                                   : sym::Detail::kLines;
  o.lookup.demangle = !no_demangle;
  o.print.style = json ? sym::OutputStyle::kJson : sym::OutputStyle::kText;
  return std::optional<CliOptions>(std::move(o));
}

std::vector<sym::ImageSpec> MakeChain(const CliOptions& o) {
  std::vector<sym::ImageSpec> chain;
  if (!o.image.empty()) {
    sym::ImageSpec elf;
    elf.path = o.image;
    elf.bias = o.load_bias.value_or(o.kaslr_offset.value_or(0));
    elf.expected_build_id = o.build_id;
    elf.debug_file = o.debug_file;
    chain.push_back(std::move(elf));
  }
  if (!o.kallsyms.empty() || !o.system_map.empty()) {
    sym::ImageSpec text;
    text.format = o.kallsyms.empty() ? sym::ImageFormat::kSystemMap : sym::ImageFormat::kKallsyms;
    text.path = o.kallsyms.empty() ? o.system_map : o.kallsyms;
    // /proc/kallsyms shows runtime addresses already; System.map shows link-time ones.
    text.bias = o.kallsyms.empty() ? o.kaslr_offset.value_or(0) : 0;
    chain.push_back(std::move(text));
  }
  return chain;
}

class Stopwatch {
 public:
  double Lap() {
    auto now = std::chrono::steady_clock::now();
    double seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return seconds;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

void ReportStatuses(const std::vector<sym::ImageStatus>& statuses) {
  for (const sym::ImageStatus& s : statuses) {
    for (const std::string& w : s.warnings) hvprof::Log(hvprof::LogLevel::kWarning, "{}", w);
    if (s.reason != sym::Reason::kNone && s.first_report) {
      hvprof::Log(hvprof::LogLevel::kWarning, "{}", s.detail);
    }
  }
}

hvprof::Result<void> Run(const CliOptions& options) {
  sym::SymbolizerOptions config;
  if (!options.debug_roots.empty()) config.debug_roots = options.debug_roots;
  sym::Symbolizer symbolizer(config);
  std::vector<sym::ImageSpec> chain = MakeChain(options);
  // Fail early, with the image's own error, rather than once per address.
  for (const sym::ImageSpec& spec : chain) {
    HVPROF_TRY(info, symbolizer.Describe(spec));
    for (const std::string& w : info.warnings) hvprof::Log(hvprof::LogLevel::kWarning, "{}", w);
  }

  // Function names: about 3.4k addresses per batch, enough to sort and deduplicate, few enough
  // that a batch's tables (frames, answers, formatted lines: about half a MiB) stay in the CPU's
  // cache and in the pages already touched. With lines, about 13k: the DWARF units a batch
  // needs are read together (on a second thread when there is a CPU for it). Either way an
  // interactive pipe is answered line by line. Output goes out every 256 KiB.
  const size_t chunk =
      options.lookup.detail == sym::Detail::kFunctions ? size_t{64} << 10 : size_t{256} << 10;
  std::string input(chunk, '\0');
  size_t filled = 0;
  sym::ParsedAddresses parsed;
  sym::OutputWriter writer(STDOUT_FILENO, size_t{256} << 10);
  sym::BatchPrinter printer(options.print);
  sym::BatchResult batch;  // reused: batches after the first cost no new memory
  double t_read = 0, t_parse = 0, t_symbolize = 0, t_print = 0;
  size_t total = 0;
  Stopwatch clock;
  for (;;) {
    if (filled == input.size()) input.resize(input.size() * 2);  // a very long line
    ssize_t n = ::read(STDIN_FILENO, input.data() + filled, input.size() - filled);
    if (n < 0) {
      if (errno == EINTR) continue;
      return hvprof::ErrnoError(errno, "cannot read addresses from stdin");
    }
    bool eof = n == 0;
    filled += static_cast<size_t>(n);
    t_read += clock.Lap();
    size_t consumed = sym::ParseAddressLines(std::string_view(input.data(), filled), eof, &parsed);
    t_parse += clock.Lap();
    if (!parsed.addresses.empty() || !parsed.invalid.empty()) {
      HVPROF_TRYV(symbolizer.Symbolize(chain, parsed.addresses, options.lookup, &batch));
      t_symbolize += clock.Lap();
      ReportStatuses(batch.images());
      HVPROF_TRYV(printer.Print(batch, parsed.invalid, &writer));
      HVPROF_TRYV(writer.Flush());
      total += batch.size() + parsed.invalid.size();
      t_print += clock.Lap();
    }
    std::memmove(input.data(), input.data() + consumed, filled - consumed);
    filled -= consumed;
    parsed.Clear();
    if (eof) break;
  }
  if (options.timing) {
    auto stats = symbolizer.cache_stats();
    std::fprintf(stderr,
                 "timing: %zu lines; read %.1f ms, parse %.1f ms, symbolize %.1f ms (sort, "
                 "dedupe, open, lookup), format+write %.1f ms; cache %zu images, %.1f MiB\n",
                 total, t_read * 1e3, t_parse * 1e3, t_symbolize * 1e3, t_print * 1e3,
                 stats.images, static_cast<double>(stats.bytes) / (1 << 20));
  }
  return hvprof::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  hvprof::SetLogPrefix("hvprof-symbolize", false);
  // Batches allocate and free the same few MiB over and over: keep that memory in the heap
  // rather than mapping and unmapping it (and faulting its pages in again) every batch.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  try {
    auto parsed = ParseArguments(argc, argv);
    if (!parsed) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", parsed.error().message());
      return 2;
    }
    if (!parsed.value().has_value()) return 0;
    auto ran = Run(*parsed.value());
    if (!ran) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", ran.error().message());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    hvprof::Log(hvprof::LogLevel::kError, "unexpected: {}", e.what());
    return 1;
  }
}
