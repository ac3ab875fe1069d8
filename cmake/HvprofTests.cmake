# hvprof_add_test(NAME name SOURCES ... LIBS ...)
# Builds a Catch2 v2 test binary into build/tests/ and registers each test case with CTest.
# A test that needs something the machine lacks exits with code 77 under CTest, which CTest
# reports as skipped (see tests/support/skip.h). DEBUGINFOD_URLS is emptied: no test asks a
# debuginfod server but the one it starts itself.
include(Catch)

function(hvprof_add_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE hvprof_test_support ${ARG_LIBS})
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  catch_discover_tests(${ARG_NAME}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${ARG_TIMEOUT}
               ENVIRONMENT "HVPROF_UNDER_CTEST=1;DEBUGINFOD_URLS=;HVPROF_SOURCE_DIR=${PROJECT_SOURCE_DIR};HVPROF_BINARY_DIR=${CMAKE_BINARY_DIR}")
endfunction()
