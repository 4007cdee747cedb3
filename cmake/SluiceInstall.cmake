# What `cmake --install` puts in place, and the Debian package built from
# it (CPack DEB):
#   bin/sluice                          the command (every role, serve, bench)
#   include/sluice/...                  the public headers (standard C++ only)
#   lib/<multiarch>/libsluice.so        every layer's public API in one library
#   lib/<multiarch>/cmake/sluice/       find_package(sluice) -> sluice::sluice
#   <python dir>/sluice/                the Python package and its module,
#                                       where /usr/bin/python3 looks
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# One shared library for users: the layers whose API include/sluice/
# declares, whole, and what they need from the rest. Its dependencies
# (gRPC, protobuf, OpenSSL, ...) are resolved when it is linked, so a user
# needs only the headers and this file.
add_library(sluice_shared SHARED ${PROJECT_SOURCE_DIR}/cmake/sluice_library.cc)
set(_sluice_api_layers common device transfer store store_master cache connector
    orchestrator_service model_profiles runtime serve client)
set(_sluice_whole "-Wl,--whole-archive")
foreach(layer ${_sluice_api_layers})
  list(APPEND _sluice_whole $<TARGET_FILE:sluice_${layer}>)
  add_dependencies(sluice_shared sluice_${layer})
endforeach()
list(APPEND _sluice_whole "-Wl,--no-whole-archive")
# The archives whole, then as targets again: their own dependencies follow.
list(TRANSFORM _sluice_api_layers PREPEND sluice:: OUTPUT_VARIABLE _sluice_api_targets)
target_link_libraries(sluice_shared PRIVATE ${_sluice_whole} ${_sluice_api_targets})
target_include_directories(sluice_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(sluice_shared INTERFACE cxx_std_20)
set_target_properties(sluice_shared PROPERTIES OUTPUT_NAME sluice EXPORT_NAME sluice
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)

install(TARGETS sluice RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
# The reference model's weights, where the binary looks for them
# (<bin>/../share/sluice/models; reference::DefaultReferenceWeights).
install(FILES ${PROJECT_SOURCE_DIR}/models/sluice-reference.safetensors
  DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice/models COMPONENT runtime)
install(TARGETS sluice_shared EXPORT sluiceTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sluice DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT runtime)
set(_sluice_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
install(EXPORT sluiceTargets NAMESPACE sluice:: DESTINATION ${_sluice_cmake_dir}
  COMPONENT runtime)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sluiceConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sluiceConfig.cmake INSTALL_DESTINATION ${_sluice_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sluiceConfig.cmake ${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
  DESTINATION ${_sluice_cmake_dir} COMPONENT runtime)

# Python: Debian's /usr/bin/python3 finds packages in /usr/lib/python3/
# dist-packages (the system's: a prefix of /usr, as the Debian package has)
# and /usr/local/lib/python3.11/dist-packages (other prefixes, /usr/local
# first). Chosen when installing: CPack installs under a staging .../usr.
if(SLUICE_BUILD_PYTHON)
  set(SLUICE_PYTHON_INSTALL_DIR "" CACHE STRING
      "where the Python package goes, relative to the install prefix (empty: Debian's place)")
  install(CODE "
    set(py_dir \"${SLUICE_PYTHON_INSTALL_DIR}\")
    if(py_dir STREQUAL \"\" AND CMAKE_INSTALL_PREFIX MATCHES \"/usr$\")
      set(py_dir lib/python3/dist-packages)
    elseif(py_dir STREQUAL \"\")
      set(py_dir lib/python3.11/dist-packages)
    endif()
    file(INSTALL \"${PROJECT_BINARY_DIR}/python/sluice\"
         DESTINATION \"\${CMAKE_INSTALL_PREFIX}/\${py_dir}\"
         PATTERN __pycache__ EXCLUDE)
  " COMPONENT runtime)
endif()

# The Debian package (`cpack -G DEB` in the build directory): what
# `cmake --install` puts in place under /usr, its library dependencies
# found by dpkg-shlibdeps.
set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "sluice maintainers <sluice@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "disaggregated serving of diffusion models (encode, denoise, decode pools)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Python: the package goes where Debian's python3 looks; it needs python3.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3 (>= 3.11), python3 (<< 3.12)")
# Optional tools: ffmpeg muxes video results to MP4, gnuplot draws
# `sluice sim report`'s plots; without them, frames archives and no PNGs.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "ffmpeg, gnuplot-nox")
set(CPACK_GENERATOR DEB)
include(CPack)
