# Build options shared by every target: warnings, sanitizers, benchmarks, fuzzers.

set(HVPROF_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address,undefined' or 'thread'")
option(HVPROF_BUILD_BENCH "Build the benchmarks in bench/" ON)
option(HVPROF_BUILD_FUZZERS "Build libFuzzer targets (needs clang); all code gets libFuzzer's coverage" OFF)

# Warnings are errors where the project asks for it: scripts/run-tests.sh, scripts/demo.sh and
# scripts/run-fuzz.sh (so CI and developers) turn HVPROF_WERROR on. A user's own
# `cmake -B build` shows warnings without failing on them: another compiler's new warning must
# not stop a build.
option(HVPROF_WERROR "Treat warnings as errors (the project's scripts and CI turn it on)" OFF)
set(HVPROF_WARNINGS -Wall -Wextra)
if(HVPROF_WERROR)
  list(APPEND HVPROF_WARNINGS -Werror)
endif()
add_compile_options(${HVPROF_WARNINGS} -Wshadow -Wnon-virtual-dtor -Wimplicit-fallthrough)

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
  # The runtime as a shared library, as GCC links it: the fake Xen libraries of the tests are
  # preloaded into programs that are not sanitized (the workloads of `hvprof run`), and find the
  # runtime (and the coverage counters' symbols) only that way.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libclang_rt.asan-x86_64.so
                    OUTPUT_VARIABLE hvprof_asan_runtime OUTPUT_STRIP_TRAILING_WHITESPACE)
    cmake_path(GET hvprof_asan_runtime PARENT_PATH hvprof_asan_runtime_dir)
    add_link_options(-shared-libsan -Wl,-rpath,${hvprof_asan_runtime_dir})
  endif()
  # -O1 with line tables only: what the sanitizers' reports need, and the build takes less than
  # half the time of -O2 -g (nlohmann::json's parser, instantiated in many files, dominates).
  # Asserts are on (no NDEBUG): every test and fuzzer run of this build checks them too.
  set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -g1" CACHE STRING "" FORCE)
  set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -g1" CACHE STRING "" FORCE)
elseif(HVPROF_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
elseif(NOT HVPROF_SANITIZE STREQUAL "")
  message(FATAL_ERROR "HVPROF_SANITIZE must be empty, 'address,undefined' or 'thread'")
endif()

# The fuzzers need coverage in the code they reach, which is every library: with fuzzers, all of
# it is built with libFuzzer's instrumentation (the programs and tests run as usual with it), so
# the sanitized build of scripts/run-tests.sh --asan is also the one scripts/run-fuzz.sh fuzzes.
if(HVPROF_BUILD_FUZZERS)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
