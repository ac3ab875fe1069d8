#include "hvprof/symbolizer/debuginfod.h"

#include <elfutils/debuginfod.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "elf_file.h"
#include "hvprof/base/escape.h"
#include "hvprof/symbolizer/types.h"

namespace hvprof::symbolizer {

void EndDebuginfodClient(debuginfod_client* client) { debuginfod_end(client); }

struct Debuginfod::Transfer {
  Limits limits;
  std::chrono::steady_clock::time_point started;
  long bytes = 0;
  std::string server;            // the URL being read, once libdebuginfod chose one
  enum { kNone, kTooBig, kTooSlow } stopped = kNone;
};

namespace {

// A number of an environment variable (libdebuginfod's own DEBUGINFOD_MAXSIZE, _MAXTIME), if set.
std::optional<uint64_t> EnvironmentNumber(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  uint64_t value = 0;
  const char* end = text + std::strlen(text);
  if (std::from_chars(text, end, value).ptr != end || value == 0) return std::nullopt;
  return value;
}

// libdebuginfod calls this about once a second while it waits or reads, with the bytes read so
// far: a download is stopped past the size or the time allowed.
int OnProgress(debuginfod_client* client, long done, long /*total*/) {
  auto* transfer = static_cast<Debuginfod::Transfer*>(debuginfod_get_user_data(client));
  if (transfer == nullptr) return 0;
  if (const char* url = debuginfod_get_url(client); url != nullptr) transfer->server = url;
  // Before a server is chosen, `done` counts the calls, not bytes.
  if (!transfer->server.empty()) transfer->bytes = done;
  if (!transfer->server.empty() && done >= 0 && static_cast<uint64_t>(done) > transfer->limits.max_bytes) {
    transfer->stopped = Debuginfod::Transfer::kTooBig;
    return 1;
  }
  const auto spent = std::chrono::steady_clock::now() - transfer->started;
  if (spent > std::chrono::seconds(transfer->limits.max_seconds)) {
    transfer->stopped = Debuginfod::Transfer::kTooSlow;
    return 1;
  }
  return 0;
}

}  // namespace

Result<std::unique_ptr<Debuginfod>> Debuginfod::FromEnvironment(Limits limits) {
  const char* urls = std::getenv("DEBUGINFOD_URLS");
  if (urls == nullptr || std::string_view(urls).find_first_not_of(" \t") == std::string_view::npos) {
    return std::unique_ptr<Debuginfod>();
  }
  if (auto bytes = EnvironmentNumber("DEBUGINFOD_MAXSIZE")) limits.max_bytes = *bytes;
  if (auto seconds = EnvironmentNumber("DEBUGINFOD_MAXTIME")) limits.max_seconds = *seconds;
  auto client = std::unique_ptr<Debuginfod>(new Debuginfod());
  client->client_.Reset(debuginfod_begin());
  if (!client->client_.valid()) {
    return ErrnoError(errno, "debuginfod: cannot start a client (libdebuginfod)");
  }
  client->shown_urls_ = EscapeForTerminal(RedactUrls(urls));
  client->limits_ = limits;
  client->transfer_ = std::make_unique<Transfer>();
  debuginfod_set_user_data(client->client_.get(), client->transfer_.get());
  debuginfod_set_progressfn(client->client_.get(), &OnProgress);
  return client;
}

Debuginfod::~Debuginfod() = default;

Result<std::string> Debuginfod::FindExecutable(std::string_view build_id) { return Find(Kind::kExecutable, build_id); }

Result<std::string> Debuginfod::FindDebuginfo(std::string_view build_id) { return Find(Kind::kDebuginfo, build_id); }

std::string Debuginfod::WrongFile(const std::string& path, const std::string& hex) {
  auto file = ElfFile::Open(path);
  if (!file) return "it is not an ELF file";
  const std::string theirs = BuildIdToHex(file.value()->build_id());
  if (theirs.empty()) return "it has no build-id, so nothing shows it is that file";
  if (theirs != hex) return fmt::format("its build-id is {}", theirs);
  return {};
}

Result<std::string> Debuginfod::Find(Kind kind, std::string_view build_id) {
  std::string hex;
  const char* what = kind == Kind::kExecutable ? "image" : "debug info";
  if (!NormalizeBuildIdHex(build_id, &hex) || hex.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "debuginfod: '{}' is not a build-id", EscapeForTerminal(build_id));
  }
  auto [it, added] = asked_.try_emplace({kind, hex}, Result<std::string>(std::string()));
  if (!added) return it->second;
  if (!gave_up_.empty()) {
    it->second = MakeError(ErrorKind::kIo, "debuginfod: the {} of build-id {} was not asked for: {}", what, hex, gave_up_);
    return it->second;
  }
  *transfer_ = Transfer{};
  transfer_->limits = limits_;
  transfer_->started = std::chrono::steady_clock::now();
  char* path = nullptr;
  // A build-id given as hex: length 0.
  const auto* id = reinterpret_cast<const unsigned char*>(hex.c_str());
  const int fd = kind == Kind::kExecutable ? debuginfod_find_executable(client_.get(), id, 0, &path)
                                           : debuginfod_find_debuginfo(client_.get(), id, 0, &path);
  const std::string server =
      transfer_->server.empty() ? shown_urls_ : EscapeForTerminal(RedactUrls(transfer_->server));
  if (fd >= 0) {
    ::close(fd);
    std::string file = path != nullptr ? path : "";
    std::free(path);
    if (file.empty()) {
      it->second = MakeError(ErrorKind::kIo, "debuginfod: the {} of build-id {} came without a path", what, hex);
      return it->second;
    }
    // Only the file asked for: one without a build-id, or with another, could be anything.
    if (const std::string wrong = WrongFile(file, hex); !wrong.empty()) {
      ::unlink(file.c_str());  // so that it is not found in the cache next time
      it->second = MakeError(ErrorKind::kCorrupt,
                             "debuginfod: {} sent a file as the {} of build-id {}, but {}; not used (and removed "
                             "from the cache {})",
                             server, what, hex, wrong, EscapeForTerminal(file));
      return it->second;
    }
    it->second = std::move(file);
    return it->second;
  }
  std::free(path);
  if (transfer_->stopped == Transfer::kTooBig || fd == -EFBIG) {
    it->second = MakeError(ErrorKind::kNoSpace,
                           "debuginfod: {} sent more than {} bytes as the {} of build-id {}; stopped and not used (set "
                           "DEBUGINFOD_MAXSIZE to allow more)",
                           server, limits_.max_bytes, what, hex);
  } else if (transfer_->stopped == Transfer::kTooSlow || fd == -ETIME) {
    gave_up_ = fmt::format("{} took more than {} s for the {} of build-id {} (set DEBUGINFOD_MAXTIME to allow more)",
                           server, limits_.max_seconds, what, hex);
    it->second = MakeError(ErrorKind::kIo, "debuginfod: {}; stopped, and no server is asked again", gave_up_);
  } else if (fd == -ENOENT) {
    it->second = MakeError(ErrorKind::kNotFound, "debuginfod: no server of DEBUGINFOD_URLS ({}) has the {} of build-id {}",
                           shown_urls_, what, hex);
  } else {
    it->second = MakeError(ErrorKind::kIo, "debuginfod: asking {} for the {} of build-id {} failed: {}", server, what,
                           hex, std::strerror(-fd));
  }
  return it->second;
}

}  // namespace hvprof::symbolizer
