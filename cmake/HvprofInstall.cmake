# What `cmake --install` puts where (GNUInstallDirs, relative to the prefix), and the .deb CPack
# builds from the same rules (README, Install; scripts/test-package.sh tests both):
#   bin/                              the six programs (install(TARGETS) in cli/CMakeLists.txt)
#   share/hvprof/scenarios/           the simulator's scenarios, examples/*.json
#   share/man/man1, man8              a man page per program (and hvprof-archive), made from its --help by help2man
#   share/bash-completion/completions packaging/bash-completion/hvprof, under each program's name
#   lib/systemd/system                hvprofd.service, hvprof-hv.service and hvprof-push.service (packaging/systemd/)
#   share/doc/hvprof                  README.md, LICENSE and docs/
# packaging/ holds these sources; it is no library target.

set(HVPROF_PACKAGING ${PROJECT_SOURCE_DIR}/packaging)
# Programs and their man page sections: daemons in 8, as Debian files them.
set(HVPROF_PROGRAMS hvprof:1 hvprof-report:1 hvprof-symbolize:1 hvprof-hv:8 hvprofd:8 hvprof-push:8)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/hvprof/scenarios
        FILES_MATCHING PATTERN "*.json")
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

# Man pages: help2man runs each built program with --help and --version, and `hvprof archive`
# and `hvprof run` (hvprof-archive(1) and hvprof-run(1), as git names its commands' pages) with
# --help. Without help2man the build
# goes on without them; sanitized and cross builds (not what is installed, and their programs
# may not run here as the build runs them) make none.
find_program(HVPROF_HELP2MAN help2man)
find_program(HVPROF_GZIP gzip)
if(NOT HVPROF_SANITIZE STREQUAL "" OR CMAKE_CROSSCOMPILING)
  message(STATUS "man pages are not made in sanitized or cross builds")
elseif(HVPROF_HELP2MAN AND HVPROF_GZIP)
  set(pages)
  foreach(entry IN LISTS HVPROF_PROGRAMS ITEMS hvprof-archive:1 hvprof-run:1)
    string(REPLACE ":" ";" entry ${entry})
    list(GET entry 0 name)
    list(GET entry 1 section)
    if(name STREQUAL "hvprof-archive" OR name STREQUAL "hvprof-run")
      string(REPLACE "hvprof-" "" subcommand ${name})
      set(target hvprof)
      set(command "$<TARGET_FILE:hvprof> ${subcommand}" "--version-string=${name} (hvprof) ${PROJECT_VERSION}")
    else()
      set(target ${name})
      set(command $<TARGET_FILE:${name}>)
    endif()
    set(page ${CMAKE_BINARY_DIR}/man/man${section}/${name}.${section})
    add_custom_command(
      OUTPUT ${page}.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man/man${section}
      COMMAND ${HVPROF_HELP2MAN} --no-info --section=${section} --include=${HVPROF_PACKAGING}/man/${name}.h2m
              --output=${page} ${command}
      COMMAND ${HVPROF_GZIP} -9 -n -f ${page}
      DEPENDS ${target} ${HVPROF_PACKAGING}/man/${name}.h2m
      COMMENT "Writing the man page ${name}(${section}) from its --help"
      VERBATIM)
    list(APPEND pages ${page}.gz)
    install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  endforeach()
  add_custom_target(hvprof_man_pages ALL DEPENDS ${pages})
else()
  message(STATUS "help2man or gzip not found: man pages are not built or installed "
                 "(scripts/install-deps.sh installs help2man)")
endif()

# Bash completion: one file serves every program; bash-completion loads it by the command's name.
foreach(entry IN LISTS HVPROF_PROGRAMS)
  string(REGEX REPLACE ":.*" "" program ${entry})
  install(FILES ${HVPROF_PACKAGING}/bash-completion/hvprof
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME ${program})
endforeach()

# systemd units. They name the installed programs and /etc/default/hvprof, which depend on the
# prefix the files are installed to: `cmake --install --prefix` and CPack choose it after
# configuring, so the units are written at install time, with GNUInstallDirs' rule for /etc
# (the prefix /usr keeps its settings in /etc, any other in PREFIX/etc).
set(HVPROF_SYSTEMD_UNIT_DIR lib/systemd/system CACHE STRING
    "Where the systemd units go, relative to the prefix (systemd reads /usr/lib, /lib and /usr/local/lib)")
foreach(unit hvprofd hvprof-hv hvprof-push)
  set(written ${CMAKE_BINARY_DIR}/packaging/systemd/${unit}.service)
  install(CODE "
    set(HVPROF_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
      set(HVPROF_SYSCONFDIR /etc)
    else()
      set(HVPROF_SYSCONFDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}\")
    endif()
    configure_file(\"${HVPROF_PACKAGING}/systemd/${unit}.service.in\" \"${written}\" @ONLY)")
  install(FILES ${written} DESTINATION ${HVPROF_SYSTEMD_UNIT_DIR})
endforeach()

# The Debian package: `cpack -G DEB` in the build directory (scripts/test-package.sh).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hvprof)
set(CPACK_PACKAGE_VENDOR "hvprof")
set(CPACK_PACKAGE_CONTACT "hvprof maintainers <hvprof@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION "\
hvprof profiles a whole virtualized host (the hypervisor, dom0 and every guest) in the \
tradition of Xenoprof: on Xen 4.17 through xenoprof, on a Linux host through perf_event_open, \
or on a simulated machine. hvprof drives sessions; hvprof-report reports, compares and exports \
them (text, JSON, pprof, flame graphs); hvprof-hv is the hypervisor side on Linux and the \
simulator, hvprofd the agent, hvprof-push the sender of continuous profiles to Pyroscope, with a \
systemd unit for each daemon.")
# hvprof_VERSION_ARCH.deb, as Debian names packages.
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# dpkg-shlibdeps (dpkg-dev) works out the libraries' packages from the binaries.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The default scenario runs Debian's xen-syms; the sim's other images are on every system.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "xen-hypervisor-4.17-amd64-dbg, bash-completion")
set(CPACK_STRIP_FILES ON)
# Installed with DESTDIR under the prefix /usr (CPACK_INSTALL_PREFIX, whatever the build's
# CMAKE_INSTALL_PREFIX), so that the units are written for /usr.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# The package's own directory holds only its files (not the build's CMake and test trees).
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
include(CPack)
