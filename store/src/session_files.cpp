#include "hvprof/store/session_files.h"

#include <filesystem>

#include "hvprof/store/context_file.h"
#include "hvprof/store/sched_file.h"
#include "hvprof/store/session.h"

namespace hvprof::store {

void RemoveSessionFiles(const std::string& directory) {
  std::error_code ignored;
  for (const char* file : {kMetadataFile, kSamplesFile, kSchedFile, kAggregateFile, kContextFile}) {
    std::filesystem::remove(directory + "/" + file, ignored);
  }
  std::filesystem::remove_all(directory + "/" + kJitDirectory, ignored);
}

}  // namespace hvprof::store
