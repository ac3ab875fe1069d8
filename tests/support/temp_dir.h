// A temporary directory removed with everything in it when the test ends.
#pragma once

#include <filesystem>
#include <string>

namespace hvprof::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `contents` to File(name).
  void Write(const std::string& name, const std::string& contents) const;

 private:
  std::string path_;
};

}  // namespace hvprof::testing
