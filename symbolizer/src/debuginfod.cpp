#include "hvprof/symbolizer/debuginfod.h"

#include <elfutils/debuginfod.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "hvprof/symbolizer/types.h"

namespace hvprof::symbolizer {

void EndDebuginfodClient(debuginfod_client* client) { debuginfod_end(client); }

Result<std::unique_ptr<Debuginfod>> Debuginfod::FromEnvironment() {
  const char* urls = std::getenv("DEBUGINFOD_URLS");
  if (urls == nullptr || std::string_view(urls).find_first_not_of(" \t") == std::string_view::npos) {
    return std::unique_ptr<Debuginfod>();
  }
  auto client = std::unique_ptr<Debuginfod>(new Debuginfod());
  client->client_.Reset(debuginfod_begin());
  if (!client->client_.valid()) {
    return ErrnoError(errno, "debuginfod: cannot start a client (libdebuginfod)");
  }
  client->urls_ = urls;
  return client;
}

Result<std::string> Debuginfod::FindExecutable(std::string_view build_id) { return Find(Kind::kExecutable, build_id); }

Result<std::string> Debuginfod::FindDebuginfo(std::string_view build_id) { return Find(Kind::kDebuginfo, build_id); }

Result<std::string> Debuginfod::Find(Kind kind, std::string_view build_id) {
  std::string hex;
  const char* what = kind == Kind::kExecutable ? "image" : "debug info";
  if (!NormalizeBuildIdHex(build_id, &hex) || hex.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "debuginfod: '{}' is not a build-id", build_id);
  }
  auto [it, added] = asked_.try_emplace({kind, hex}, Result<std::string>(std::string()));
  if (!added) return it->second;
  char* path = nullptr;
  // A build-id given as hex: length 0.
  const auto* id = reinterpret_cast<const unsigned char*>(hex.c_str());
  const int fd = kind == Kind::kExecutable ? debuginfod_find_executable(client_.get(), id, 0, &path)
                                           : debuginfod_find_debuginfo(client_.get(), id, 0, &path);
  if (fd >= 0) {
    ::close(fd);
    it->second = std::string(path != nullptr ? path : "");
    std::free(path);
    if (it->second.value().empty()) {
      it->second = MakeError(ErrorKind::kIo, "debuginfod: the {} of build-id {} came without a path", what, hex);
    }
    return it->second;
  }
  std::free(path);
  if (fd == -ENOENT) {
    it->second = MakeError(ErrorKind::kNotFound, "debuginfod: no server of DEBUGINFOD_URLS ({}) has the {} of build-id {}",
                           urls_, what, hex);
  } else {
    it->second = MakeError(ErrorKind::kIo, "debuginfod: asking {} for the {} of build-id {} failed: {}", urls_, what, hex,
                           std::strerror(-fd));
  }
  return it->second;
}

}  // namespace hvprof::symbolizer
