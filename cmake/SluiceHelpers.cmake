# sluice_cc_library(NAME <n> [HDRS ...] [SRCS ...] [DEPS ...] [PUBLIC_DEPS ...])
# Creates target sluice_<n> with alias sluice::<n>. Always link the alias form.
# Include paths of src/ stay PRIVATE to the target that owns them, so a layer
# that reaches into another's internals fails to build.
function(sluice_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "HDRS;SRCS;DEPS;PUBLIC_DEPS" ${ARGN})
  set(target sluice_${ARG_NAME})
  if(ARG_SRCS)
    add_library(${target} STATIC ${ARG_SRCS} ${ARG_HDRS})
    target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_DEPS})
    target_compile_options(${target} PRIVATE ${SLUICE_WARNING_FLAGS})
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/include
                                         PRIVATE ${PROJECT_SOURCE_DIR}/src)
  else()  # Header-only.
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE ${ARG_PUBLIC_DEPS} ${ARG_DEPS})
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR}/include)
  endif()
  add_library(sluice::${ARG_NAME} ALIAS ${target})
endfunction()

# sluice_cc_test(NAME <n> SRCS ... DEPS ... [LABELS gpu|rdma|slow] [TIMEOUT s])
# Tests see src/ so they can exercise internals of the layer they sit beside.
# Labels let CPU-only CI run `ctest -LE "gpu|rdma"`.
function(sluice_cc_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT SLUICE_BUILD_TESTS)
    return()
  endif()
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)
  target_include_directories(${ARG_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${ARG_NAME} PRIVATE ${SLUICE_WARNING_FLAGS})
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS)
    set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

# sluice_tsan_tests(<test> ...): tests of this directory (each built by the
# target of its name) that CI's ThreadSanitizer build also runs: they gain
# the label `tsan`, and the target `tsan_tests` builds them (with whatever
# each depends on, e.g. the `sluice` binary it starts).
function(sluice_tsan_tests)
  if(NOT SLUICE_BUILD_TESTS)
    return()
  endif()
  if(NOT TARGET tsan_tests)
    add_custom_target(tsan_tests)
  endif()
  foreach(t ${ARGN})
    get_test_property(${t} LABELS labels)
    if(NOT labels)
      set(labels "")
    endif()
    list(APPEND labels tsan)
    set_tests_properties(${t} PROPERTIES LABELS "${labels}")
    add_dependencies(tsan_tests ${t})
  endforeach()
endfunction()

# sluice_hot_path(<target> ...): libraries on the data path or computing
# payloads; they get SLUICE_HOT_PATH_FLAGS on top of the build's flags.
function(sluice_hot_path)
  foreach(t ${ARGN})
    target_compile_options(${t} PRIVATE ${SLUICE_HOT_PATH_FLAGS})
  endforeach()
endfunction()
