// docs/errors.md must describe every engine error code, with its number and errno name.
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "hvpmu/abi/errors.h"

TEST_CASE("docs/errors.md lists every engine error code", "[errors][docs]") {
  std::ifstream file(std::string(HVPROF_SOURCE_DIR) + "/docs/errors.md");
  REQUIRE(file.good());
  std::stringstream contents;
  contents << file.rdbuf();
  const std::string doc = contents.str();
  int codes = 0;
#define CHECK_DOCUMENTED(name, number, errnum, message)                              \
  {                                                                                  \
    const std::string row = "| " #number " | `" #name "` |";                         \
    INFO("missing row: " << row);                                                    \
    CHECK(doc.find(row) != std::string::npos);                                       \
    CHECK(std::string(hvpmu::ErrorName(hvpmu::ErrorCode::k##name)) == #name);         \
    ++codes;                                                                         \
  }
  HVPMU_ERROR_TABLE(CHECK_DOCUMENTED)
#undef CHECK_DOCUMENTED
  CHECK(codes == 32);
}
