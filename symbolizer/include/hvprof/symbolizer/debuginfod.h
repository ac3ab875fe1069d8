// A client of debuginfod servers (libdebuginfod): images and their debug files by build-id, from
// the servers DEBUGINFOD_URLS names, through libdebuginfod's own cache (DEBUGINFOD_CACHE_PATH,
// by default ~/.cache/debuginfod_client). Nothing is asked when DEBUGINFOD_URLS is unset or
// empty.
//
//   HVPROF_TRY(client, Debuginfod::FromEnvironment());
//   if (client) { auto path = client->FindExecutable(build_id); ... }
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "hvprof/base/error.h"
#include "hvprof/base/unique_resource.h"

struct debuginfod_client;

namespace hvprof::symbolizer {

void EndDebuginfodClient(debuginfod_client* client);
using DebuginfodHandle = UniqueResource<debuginfod_client*, &EndDebuginfodClient, nullptr>;

class Debuginfod {
 public:
  // A client for the servers of DEBUGINFOD_URLS, or nullptr when it names none.
  static Result<std::unique_ptr<Debuginfod>> FromEnvironment();

  // The path of the file in the client's cache. kNotFound when no server has it; an error
  // naming the servers otherwise. A build-id asked for twice is asked once.
  Result<std::string> FindExecutable(std::string_view build_id);
  Result<std::string> FindDebuginfo(std::string_view build_id);
  const std::string& urls() const { return urls_; }

 private:
  enum class Kind { kExecutable, kDebuginfo };
  Result<std::string> Find(Kind kind, std::string_view build_id);

  DebuginfodHandle client_;
  std::string urls_;
  std::map<std::pair<Kind, std::string>, Result<std::string>> asked_;
};

}  // namespace hvprof::symbolizer
