# Every dependency comes from a Debian 12 package (see scripts/install-deps.sh).

find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBELF REQUIRED IMPORTED_TARGET libelf)
pkg_check_modules(LIBDW REQUIRED IMPORTED_TARGET libdw)
# libdebuginfod-dev: images and debug info by build-id from debuginfod servers (symbolizer/).
pkg_check_modules(LIBDEBUGINFOD REQUIRED IMPORTED_TARGET libdebuginfod)
# libarchive-dev: hvprof archive's tar files (archive/).
pkg_check_modules(LIBARCHIVE REQUIRED IMPORTED_TARGET libarchive)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Protobuf 3 REQUIRED)
# libcurl4-openssl-dev: push/ sends profiles to Pyroscope over HTTP(S).
find_package(CURL REQUIRED)
find_package(Catch2 2 REQUIRED)
if(HVPROF_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

find_path(XEN_INCLUDE_DIR xen/xenoprof.h)
if(NOT XEN_INCLUDE_DIR)
  message(FATAL_ERROR "libxen-dev headers not found: run scripts/install-deps.sh")
endif()

# systemtap-sdt-dev: <sys/sdt.h>, the USDT probes of hvprofd and hvprof-hv (base/probes.h,
# docs/probes.md). Header-only: the probes need nothing at run time.
find_path(SDT_INCLUDE_DIR sys/sdt.h)
if(NOT SDT_INCLUDE_DIR)
  message(FATAL_ERROR "sys/sdt.h not found (systemtap-sdt-dev): run scripts/install-deps.sh")
endif()
