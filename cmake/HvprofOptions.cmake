# Build options shared by every target: warnings, sanitizers, benchmarks, fuzzers.

set(HVPROF_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address,undefined' or 'thread'")
option(HVPROF_BUILD_BENCH "Build the benchmarks in bench/" ON)
option(HVPROF_BUILD_FUZZERS "Build libFuzzer targets (needs clang)" OFF)

add_compile_options(-Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor -Wimplicit-fallthrough)

if(HVPROF_SANITIZE STREQUAL "address,undefined")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  # GCC 12 reports false maybe-uninitialized warnings inside libstdc++ (std::regex, used by
  # Catch2) once the sanitizers change inlining.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
  # The vptr check needs typeinfo, which the engine (built without RTTI, as a hypervisor
  # would build it) does not emit; every other UBSan check stays on.
  add_compile_options(-fno-sanitize=vptr)
  add_link_options(-fsanitize=address,undefined)
  # -O1 with line tables only: what the sanitizers' reports need, and the build takes less than
  # half the time of -O2 -g (nlohmann::json's parser, instantiated in many files, dominates).
  set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -g1 -DNDEBUG" CACHE STRING "" FORCE)
  set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -g1 -DNDEBUG" CACHE STRING "" FORCE)
elseif(HVPROF_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
elseif(NOT HVPROF_SANITIZE STREQUAL "")
  message(FATAL_ERROR "HVPROF_SANITIZE must be empty, 'address,undefined' or 'thread'")
endif()
