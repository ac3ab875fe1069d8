# Build options shared by every target: warnings, sanitizers, benchmarks, fuzzers.

set(HVPROF_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address,undefined' or 'thread'")
option(HVPROF_BUILD_BENCH "Build the benchmarks in bench/" ON)
option(HVPROF_BUILD_FUZZERS "Build libFuzzer targets (needs clang)" OFF)

add_compile_options(-Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor -Wimplicit-fallthrough)

if(HVPROF_SANITIZE STREQUAL "address,undefined")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(HVPROF_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
elseif(NOT HVPROF_SANITIZE STREQUAL "")
  message(FATAL_ERROR "HVPROF_SANITIZE must be empty, 'address,undefined' or 'thread'")
endif()
