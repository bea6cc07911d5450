# install.cmake - what `cmake --install` puts under the prefix:
#   include/posenc.h
#   lib/libposenc.so.0.1.0, libposenc.so.0 -> .so.0.1.0, libposenc.so -> .so.0
#   lib/pkgconfig/posenc.pc
#   lib/cmake/posenc/{posencConfig,posencConfigVersion,posencTargets*}.cmake
#   bin/pe-bench (with PE_BUILD_BENCH; installed by bench/CMakeLists.txt,
#   component "Tools")
# Components: "Runtime" is the versioned library alone (what a program
# needs), "Development" the rest (what a build needs), as distributions
# split -dev packages.
# Included from the top-level CMakeLists.txt, after the posenc target exists.

include(CMakePackageConfigHelpers)

set(PE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/posenc" CACHE STRING
    "Where the posenc CMake package files go, relative to the prefix")

install(TARGETS posenc EXPORT posencTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    COMPONENT Runtime
    NAMELINK_COMPONENT Development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/posenc.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT Development)

# ---- CMake package: find_package(posenc CONFIG) -> posenc::posenc ----------
# The SONAME carries the major version, so a request for 0.x is satisfied by
# any 0.y.z >= 0.x: SameMajorVersion is the same promise the SONAME makes.
install(EXPORT posencTargets NAMESPACE posenc::
  DESTINATION ${PE_INSTALL_CMAKEDIR} COMPONENT Development)
configure_package_config_file(
  ${CMAKE_CURRENT_SOURCE_DIR}/cmake/posencConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/posencConfig.cmake
  INSTALL_DESTINATION ${PE_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/posencConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/posencConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/posencConfigVersion.cmake
  DESTINATION ${PE_INSTALL_CMAKEDIR} COMPONENT Development)

# ---- pkg-config: posenc.pc --------------------------------------------------
# libposenc is installed as a shared library only: its own DT_NEEDED entries
# bring in SLEEF, cJSON, hwloc and libm at run time, so `pkg-config --libs
# posenc` is just -lposenc (no overlinking of the consumer), and `--cflags`
# just the header's directory. The dependencies' link flags go in
# Libs.private, read only for --static. Not Requires.private: pkg-config
# (pkgconf) adds the Cflags of Requires.private packages to every --cflags,
# which leaked cJSON's -I/usr/include/cjson into every consumer, and the
# public header includes nothing but <stddef.h> and <stdint.h>.
set(_pe_private_ldflags ${SLEEF_LDFLAGS} ${CJSON_LDFLAGS})
if(HWLOC_FOUND)
  list(APPEND _pe_private_ldflags ${HWLOC_LDFLAGS})
endif()
list(APPEND _pe_private_ldflags -lm -pthread)
list(REMOVE_DUPLICATES _pe_private_ldflags)
list(JOIN _pe_private_ldflags " " PE_PC_LIBS_PRIVATE)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(PE_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(PE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(PE_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(PE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# The prefix is only known at install time (`cmake --install --prefix DIR`
# overrides the configured one), so the file is configured twice: now with
# everything but the prefix, then by the install script with the prefix
# the install actually uses (without DESTDIR, which packagers strip).
set(PE_PC_PREFIX "@PE_PC_PREFIX@")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/posenc.pc.in
  ${CMAKE_CURRENT_BINARY_DIR}/posenc.pc.stage @ONLY)
unset(PE_PC_PREFIX)
install(CODE "
  set(PE_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${CMAKE_CURRENT_BINARY_DIR}/posenc.pc.stage\"
                 \"${CMAKE_CURRENT_BINARY_DIR}/posenc.pc\" @ONLY)
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\"
       TYPE FILE FILES \"${CMAKE_CURRENT_BINARY_DIR}/posenc.pc\")
" COMPONENT Development)
