// A client of debuginfod servers (libdebuginfod): images and their debug files by build-id, from
// the servers DEBUGINFOD_URLS names, through libdebuginfod's own cache (DEBUGINFOD_CACHE_PATH,
// by default ~/.cache/debuginfod_client). Nothing is asked when DEBUGINFOD_URLS is unset or
// empty. What a server sends is bounded (DEBUGINFOD_MAXSIZE bytes, DEBUGINFOD_MAXTIME seconds a
// file; Limits when they are unset), and used only if its build-id is the one asked for: a file
// without one, or with another, is removed from the cache and refused. Messages name the
// servers without the credentials their URLs may hold.
//
//   HVPROF_TRY(client, Debuginfod::FromEnvironment());
//   if (client) { auto path = client->FindExecutable(build_id); ... }
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "hvprof/base/result.h"
#include "hvprof/base/unique_resource.h"

struct debuginfod_client;

namespace hvprof::symbolizer {

void EndDebuginfodClient(debuginfod_client* client);
using DebuginfodHandle = UniqueResource<debuginfod_client*, &EndDebuginfodClient, nullptr>;

// What one file from a debuginfod server may take.
struct DebuginfodLimits {
  uint64_t max_bytes = uint64_t{2} << 30;  // a file (a kernel's debug info is under 1 GiB)
  uint64_t max_seconds = 120;              // a file; a server that takes longer is not asked again
};

class Debuginfod {
 public:
  using Limits = DebuginfodLimits;
  // A client for the servers of DEBUGINFOD_URLS, or nullptr when it names none.
  // DEBUGINFOD_MAXSIZE and DEBUGINFOD_MAXTIME, when set, replace `limits`.
  static Result<std::unique_ptr<Debuginfod>> FromEnvironment(Limits limits = {});
  ~Debuginfod();

  // The path of the file in the client's cache. kNotFound when no server has it; an error
  // naming the servers otherwise. A build-id asked for twice is asked once.
  Result<std::string> FindExecutable(std::string_view build_id);
  Result<std::string> FindDebuginfo(std::string_view build_id);
  // The servers, without credentials (user:password@ taken out), escaped for a terminal.
  const std::string& urls() const { return shown_urls_; }

  // What one download has done so far (libdebuginfod's progress callback).
  struct Transfer;

 private:
  enum class Kind { kExecutable, kDebuginfo };
  Debuginfod() = default;
  Result<std::string> Find(Kind kind, std::string_view build_id);
  // Why the file libdebuginfod put at `path` is not the one of `hex`; empty when it is.
  static std::string WrongFile(const std::string& path, const std::string& hex);

  DebuginfodHandle client_;
  std::string shown_urls_;
  Limits limits_;
  std::string gave_up_;  // why no server is asked any more (one was too slow)
  std::unique_ptr<Transfer> transfer_;
  std::map<std::pair<Kind, std::string>, Result<std::string>> asked_;
};

}  // namespace hvprof::symbolizer
