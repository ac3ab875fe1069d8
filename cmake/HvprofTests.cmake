# hvprof_add_test(NAME name SOURCES ... LIBS ... [OPTIMIZED])
# Builds a Catch2 v2 test binary into build/tests/ and registers each test case with CTest.
# Its own code is compiled for debugging (hvprof_test_code) unless OPTIMIZED: for tests whose
# own code does the heavy work (thousands of simulated runs), which keep the build's level.
# A test that needs something the machine lacks exits with code 77 under CTest, which CTest
# reports as skipped (see tests/support/skip.h). DEBUGINFOD_URLS is emptied (catch_main.cpp): no
# test asks a debuginfod server but the one it starts itself.
include(Catch)

# hvprof_test_code(target): the target's own C++ code is compiled for debugging in the two tested
# builds (RelWithDebInfo): -Og with GCC, which keeps the warnings that need data flow, and -O0
# with clang, whose warnings do not depend on -O (the sanitizers check at any level). The
# programs and libraries under test keep the build's level. Nothing a test checks needs its own
# code optimized, and optimizing it cost: -Og took the normal build from 890 s to 655 s on 2
# cores, and clang compiles a test file under the sanitizers in half the time at -O0 as at -O1.
function(hvprof_test_code target)
  target_compile_options(${target} PRIVATE
    $<$<AND:$<CONFIG:RelWithDebInfo>,$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Og>
    $<$<AND:$<CONFIG:RelWithDebInfo>,$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>>:-O0>)
endfunction()

# hvprof_discover_tests(target [TIMEOUT seconds] [TEST_SPEC spec] [PROPERTIES ...]): registers each
# Catch test case of `target` (those `spec` selects, where given: a target may be discovered twice,
# with other properties for the cases of a tag) as one CTest entry, run with `-w NoTests` so an entry whose name matches no case
# fails instead of passing on nothing. The entries get HVPROF_UNDER_CTEST=1 (SkipTest exits 77;
# the tests' main, tests/support/catch_main.cpp, then empties DEBUGINFOD_URLS and logs each case
# it starts and each skip for scripts/check-test-count.py). One variable only: set_tests_properties
# takes ENVIRONMENT's value as one list element, and Catch's discovery splits a list into them.
function(hvprof_discover_tests target)
  cmake_parse_arguments(ARG "" "TIMEOUT;TEST_SPEC" "PROPERTIES" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set(spec)
  if(ARG_TEST_SPEC)
    set(spec TEST_SPEC "${ARG_TEST_SPEC}")
  endif()
  catch_discover_tests(${target} ${spec}
    EXTRA_ARGS -w NoTests
    PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT HVPROF_UNDER_CTEST=1 ${ARG_PROPERTIES})
endfunction()

function(hvprof_add_test)
  cmake_parse_arguments(ARG "OPTIMIZED" "NAME;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  if(NOT ARG_OPTIMIZED)
    hvprof_test_code(${ARG_NAME})
  endif()
  target_link_libraries(${ARG_NAME} PRIVATE hvprof_test_support ${ARG_LIBS})
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  hvprof_discover_tests(${ARG_NAME} TIMEOUT ${ARG_TIMEOUT})
endfunction()
