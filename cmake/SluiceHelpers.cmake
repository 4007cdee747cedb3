# Layer roots. Sources include each other by layer path ("transfer/wire.h"),
# but no target sees all of src/: each layer is reached through a root of
# its own, <build>/layer-roots/<id>/<layer> -> src/<layer>, which the layer's
# libraries carry as a usage requirement. A root is visible to a consumer
# when the consumer does not follow the layer rule (tests and fuzz targets
# see the internals of every layer they link), or when the layer is among
# the consumer's SLUICE_INTERNALS (libraries: their own layer, common and
# the layers they list in INTERNALS; tools: sluice_internal_headers). So a
# layer that includes another's internals without declaring it, or that
# does not link it, fails to build.
function(_sluice_layer_root layer out)
  string(REPLACE "/" "_" id ${layer})
  set(root ${PROJECT_BINARY_DIR}/layer-roots/${id})
  if(NOT IS_SYMLINK ${root}/${layer})
    get_filename_component(parent ${root}/${layer} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${layer} ${root}/${layer} SYMBOLIC)
  endif()
  set(seen "$<IN_LIST:${layer},$<TARGET_PROPERTY:SLUICE_INTERNALS>>")
  set(unruled "$<NOT:$<BOOL:$<TARGET_PROPERTY:SLUICE_LAYER_RULE>>>")
  set(${out} "$<BUILD_INTERFACE:$<$<OR:${unruled},${seen}>:${root}>>" PARENT_SCOPE)
endfunction()

# The layer a target in this directory belongs to: its path under src/.
function(_sluice_current_layer out)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
  if(rel MATCHES "^\\.\\.")
    set(rel "")
  endif()
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()

# sluice_internal_headers(<target> LAYERS <layer> ...): a target outside
# src/ (a tool, the Python module) that follows the layer rule: it sees
# public headers, plus the internals of the listed layers it links.
function(sluice_internal_headers target)
  cmake_parse_arguments(ARG "" "" "LAYERS" ${ARGN})
  set_target_properties(${target} PROPERTIES SLUICE_LAYER_RULE ON SLUICE_INTERNALS "${ARG_LAYERS}")
endfunction()

# sluice_cc_library(NAME <n> [LAYER <path under src/>] [HDRS ...] [SRCS ...]
#                   [DEPS ...] [PUBLIC_DEPS ...] [INTERNALS <layer> ...])
# Creates target sluice_<n> with alias sluice::<n>. Always link the alias form.
# LAYER defaults to the directory's path under src/. The library sees its own
# layer's internals, common's, and those of the INTERNALS it lists (which it
# must also link); every other layer only through include/sluice/.
function(sluice_cc_library)
  cmake_parse_arguments(ARG "" "NAME;LAYER" "HDRS;SRCS;DEPS;PUBLIC_DEPS;INTERNALS" ${ARGN})
  set(target sluice_${ARG_NAME})
  if(NOT ARG_LAYER)
    _sluice_current_layer(ARG_LAYER)
  endif()
  _sluice_layer_root(${ARG_LAYER} root)
  if(ARG_SRCS)
    add_library(${target} STATIC ${ARG_SRCS} ${ARG_HDRS})
    target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_DEPS})
    target_compile_options(${target} PRIVATE ${SLUICE_WARNING_FLAGS})
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/include ${root})
    set_target_properties(${target} PROPERTIES SLUICE_LAYER_RULE ON
                          SLUICE_INTERNALS "${ARG_LAYER};common;${ARG_INTERNALS}")
  else()  # Header-only.
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE ${ARG_PUBLIC_DEPS} ${ARG_DEPS})
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR}/include ${root})
  endif()
  add_library(sluice::${ARG_NAME} ALIAS ${target})
endfunction()

# sluice_cc_test(NAME <n> SRCS ... DEPS ... [LABELS gpu|rdma|slow] [TIMEOUT s] [SHARDS k]
#                [COST s])
# SHARDS k: k ctest entries <n>_shard<i> (gtest's GTEST_TOTAL_SHARDS and
# GTEST_SHARD_INDEX), so a long suite's cases run on k cores at once; the
# suite's tests must not share fixed ports or files.
# COST s: about the seconds each entry takes in its slowest CI stage, for a
# test of 30 s or more. `ctest -j` starts tests in descending cost; a clean
# clone has no measured costs, and without this it runs them in the order
# they are defined, which leaves the long integration suites for last and
# a core idle at the end of each stage.
# A test sees the internals of the layer it sits beside and of every layer
# it links (it does not follow the layer rule).
# Labels let CPU-only CI run `ctest -LE "gpu|rdma"`.
include(GoogleTest)
function(sluice_cc_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT;SHARDS;COST" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT SLUICE_BUILD_TESTS)
    return()
  endif()
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)
  _sluice_current_layer(layer)
  if(layer)
    _sluice_layer_root(${layer} root)
    target_include_directories(${ARG_NAME} PRIVATE ${root})
  endif()
  target_compile_options(${ARG_NAME} PRIVATE ${SLUICE_WARNING_FLAGS} ${SLUICE_TEST_FLAGS})
  # A sanitized build runs no test labelled nosan or gpu (scripts/test.sh:
  # -LE "gpu|rdma|nosan"), so such a binary is left out of its `all` and
  # lists no cases there (`cmake --build build-san --target X` still
  # builds it): CI compiles none of them under the sanitizers.
  set(sanitized_out FALSE)
  if(NOT SLUICE_SANITIZE STREQUAL "" AND "${ARG_LABELS}" MATCHES "(^|;)(nosan|gpu)(;|$)")
    set(sanitized_out TRUE)
    set_target_properties(${ARG_NAME} PROPERTIES EXCLUDE_FROM_ALL TRUE)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set(tests ${ARG_NAME})
  if(ARG_SHARDS)
    set(tests "")
    math(EXPR last "${ARG_SHARDS} - 1")
    foreach(i RANGE ${last})
      add_test(NAME ${ARG_NAME}_shard${i} COMMAND ${ARG_NAME})
      set_tests_properties(${ARG_NAME}_shard${i} PROPERTIES
        ENVIRONMENT "GTEST_TOTAL_SHARDS=${ARG_SHARDS};GTEST_SHARD_INDEX=${i}")
      list(APPEND tests ${ARG_NAME}_shard${i})
    endforeach()
  else()
    add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  endif()
  # The ctest entries of this binary, for sluice_tsan_tests.
  set_property(TARGET ${ARG_NAME} PROPERTY SLUICE_CTESTS "${tests}")
  # A GTEST_SKIP shows as Skipped, not Passed (scripts/test.sh fails on
  # any skip: CI installs every dependency a test can skip for).
  set_tests_properties(${tests} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
                       SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  if(ARG_LABELS)
    set_tests_properties(${tests} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  if(ARG_COST)
    set_tests_properties(${tests} PROPERTIES COST ${ARG_COST})
  endif()
  # Every case is a ctest test of its own as well (`ctest -R
  # AutoscalerTest` runs those cases, one process each), labelled `case`
  # beside the binary's labels. CI runs each binary whole instead
  # (`-LE case`): one process per binary, as suites whose fixtures start a
  # cluster once expect, and no process start per case. The cases are
  # listed when ctest starts (the binary's --gtest_list_tests).
  if(sanitized_out)
    return()
  endif()
  gtest_discover_tests(${ARG_NAME} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "case;${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
               SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
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
    get_target_property(ctests ${t} SLUICE_CTESTS)
    if(NOT ctests)
      set(ctests ${t})
    endif()
    foreach(c ${ctests})
      get_test_property(${c} LABELS labels)
      if(NOT labels)
        set(labels "")
      endif()
      list(APPEND labels tsan)
      set_tests_properties(${c} PROPERTIES LABELS "${labels}")
    endforeach()
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

# sluice_cli_test(NAME <n> [EXIT 0|nonzero|<code>] [TIMEOUT s] [LABELS ...] [SANITIZER_REPORT]
#                 [MATCH <regex>...] [ABSENT <regex>...] COMMAND <cmd> <arg>...)
# A command-line test decided by the exit code AND the output
# (tests/cli/expect.py): EXIT defaults to 0, `nonzero` is a refusal
# (1..125, not a signal); each MATCH regex (Python re; `{POS}` stands for a
# number > 0; write a literal [ or ] as \\x5b or \\x5d: an unpaired bracket
# breaks CMake's list splitting) must appear, no ABSENT one may, and a sanitizer report fails
# it (SANITIZER_REPORT: the test wants one, for the sanitizer canaries).
# A first COMMAND word naming a target runs that target's binary.
function(sluice_cli_test)
  cmake_parse_arguments(ARG "SANITIZER_REPORT" "NAME;EXIT;TIMEOUT" "LABELS;MATCH;ABSENT;COMMAND" ${ARGN})
  if(NOT SLUICE_BUILD_TESTS)
    return()
  endif()
  if(NOT ARG_COMMAND)
    message(FATAL_ERROR "sluice_cli_test(${ARG_NAME}): no COMMAND")
  endif()
  if(NOT DEFINED ARG_EXIT)
    set(ARG_EXIT 0)
  endif()
  list(POP_FRONT ARG_COMMAND program)
  if(TARGET ${program})
    set(program $<TARGET_FILE:${program}>)
  endif()
  set(checks --exit ${ARG_EXIT})
  if(ARG_SANITIZER_REPORT)
    list(APPEND checks --sanitizer-report)
  endif()
  foreach(re ${ARG_MATCH})
    list(APPEND checks "--match=${re}")
  endforeach()
  foreach(re ${ARG_ABSENT})
    list(APPEND checks "--absent=${re}")
  endforeach()
  add_test(NAME ${ARG_NAME}
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/expect.py ${checks} --
                   ${program} ${ARG_COMMAND})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS)
    set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()
