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
    orchestrator_service runtime serve)
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
# dist-packages (the system's, for a package installing into /usr) and
# /usr/local/lib/python3.X/dist-packages (for a prefix of /usr/local).
if(SLUICE_BUILD_PYTHON)
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(_sluice_py_default lib/python3/dist-packages)
  else()
    set(_sluice_py_default lib/python3.11/dist-packages)
  endif()
  set(SLUICE_PYTHON_INSTALL_DIR ${_sluice_py_default} CACHE STRING
      "where the Python package goes, relative to the install prefix")
  install(DIRECTORY ${PROJECT_BINARY_DIR}/python/sluice DESTINATION ${SLUICE_PYTHON_INSTALL_DIR}
    COMPONENT runtime PATTERN "__pycache__" EXCLUDE)
endif()
