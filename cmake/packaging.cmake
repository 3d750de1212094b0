# libbraid.so and its installation: the embedding API (embed/include/braid/) as a shared
# library that exports only that API, its headers, a CMake package (find_package(braid) gives
# braid::braid) and a pkg-config file (braid.pc). See docs/embedding.md.
#
# The shared library is made from the static layer libraries: braid_embed is linked whole, so
# that every public function is in it; the lower layers are pulled in by what embed/ uses.
# Every object is already position-independent (CMAKE_POSITION_INDEPENDENT_CODE).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(BRAID_EXPORT_MAP ${CMAKE_CURRENT_LIST_DIR}/libbraid.map)
# The export map is its only source: the objects come from the static libraries.
add_library(braid_shared SHARED ${BRAID_EXPORT_MAP})
target_link_libraries(braid_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,braid_embed>")
target_link_options(braid_shared PRIVATE "LINKER:--version-script=${BRAID_EXPORT_MAP}"
                    "LINKER:--no-undefined")
target_include_directories(
  braid_shared INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/embed/include>
                         $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(
  braid_shared
  PROPERTIES OUTPUT_NAME braid
             EXPORT_NAME braid
             VERSION ${PROJECT_VERSION}
             SOVERSION 0
             LINKER_LANGUAGE CXX
             LINK_DEPENDS ${BRAID_EXPORT_MAP})

# Installation: headers, the library with its SONAME links, the CMake package, braid.pc.
set(BRAID_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/braid)
install(FILES ${CMAKE_SOURCE_DIR}/embed/include/braid/embed.h
              ${CMAKE_SOURCE_DIR}/embed/include/braid/braid_c.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/braid)
install(TARGETS braid_shared EXPORT braidTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT braidTargets NAMESPACE braid:: DESTINATION ${BRAID_CMAKE_DIR})

set(BRAID_PACKAGE_DIR ${CMAKE_BINARY_DIR}/package)
file(WRITE ${BRAID_PACKAGE_DIR}/braidConfig.cmake
     "# braid's CMake package: the imported target braid::braid (libbraid.so and its headers).\n"
     "include(\"\${CMAKE_CURRENT_LIST_DIR}/braidTargets.cmake\")\n")
# Within 0.x a newer library serves a program asked for an older one (the C ABI only grows);
# C++ programs are rebuilt against the version they run with (docs/embedding.md).
write_basic_package_version_file(${BRAID_PACKAGE_DIR}/braidConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${BRAID_PACKAGE_DIR}/braidConfig.cmake ${BRAID_PACKAGE_DIR}/braidConfigVersion.cmake
        DESTINATION ${BRAID_CMAKE_DIR})

# braid.pc finds its prefix from its own place (${pcfiledir}), so the installed tree can move
# and `cmake --install --prefix` needs no reconfiguring.
set(BRAID_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH BRAID_PC_TO_PREFIX /prefix/${BRAID_PKGCONFIG_DIR} /prefix)
string(REGEX REPLACE "/$" "" BRAID_PC_TO_PREFIX "${BRAID_PC_TO_PREFIX}")
file(WRITE ${BRAID_PACKAGE_DIR}/braid.pc
     "prefix=\${pcfiledir}/${BRAID_PC_TO_PREFIX}\n"
     "libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}\n"
     "includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}\n"
     "\n"
     "Name: braid\n"
     "Description: braid dataflow graph runtime, embedding API (C and C++)\n"
     "Version: ${PROJECT_VERSION}\n"
     "Libs: -L\${libdir} -lbraid\n"
     "Cflags: -I\${includedir}\n")
install(FILES ${BRAID_PACKAGE_DIR}/braid.pc DESTINATION ${BRAID_PKGCONFIG_DIR})

# embed_install: installs into a temporary prefix, builds examples/embed_c and
# examples/embed_cpp against it (find_package, and pkg-config for the C one) and runs them on
# the example MLP. Needs the default build (libbraid.so and the example models). Not in
# sanitizer builds: the examples are built without the sanitizer runtime libbraid.so needs.
if(BRAID_BUILD_TESTS AND BRAID_SANITIZE STREQUAL "")
  enable_testing()
  add_test(NAME embed_install
           COMMAND ${CMAKE_SOURCE_DIR}/tests/embed/install_test.sh ${CMAKE_BINARY_DIR}
                   ${CMAKE_SOURCE_DIR}/examples ${CMAKE_BINARY_DIR}/examples/models/mlp.braid
                   ${CMAKE_COMMAND} ${CMAKE_C_COMPILER} ${CMAKE_CXX_COMPILER} ${PKG_CONFIG_EXECUTABLE})
  set_tests_properties(embed_install PROPERTIES TIMEOUT 600 LABELS install)
endif()
