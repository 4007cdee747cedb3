#!/usr/bin/env bash
# Builds sluice from scratch-or-cache and runs every test: the Release build's
# full ctest suite (the chaos runs included), then (Clang-16) every test
# again under AddressSanitizer + UndefinedBehaviorSanitizer with the
# thread-safety analysis and the fuzz targets, then the transfer, store,
# connector and orchestrator suites under ThreadSanitizer. Installs missing
# Debian packages first.
# Usage: scripts/test.sh            (as root on Debian 12)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

# Every build is a unity build (batches of sources compiled as one): the
# headers of gRPC, Boost and protobuf are parsed once per batch, not once
# per file, which takes each build to about a third of its time.
unity=(-DCMAKE_UNITY_BUILD=ON)

# Runs ctest with the given arguments and then fails if CTest reports any
# test skipped: CI installs everything a test can skip for (root, iproute2,
# etcd, libnetfilter-queue, node, Debian's mirror), so a skip there hides a
# test that did not run. SLUICE_ALLOW_SKIPS=1 lets a developer's machine
# without them pass.
run_ctest() {
  local log rc=0
  log=$(mktemp)
  ctest "$@" 2>&1 | tee "$log" || rc=$?
  local skipped
  skipped=$(grep -E '\(Skipped\)$' "$log" || true)
  rm -f "$log"
  if [ -n "$skipped" ] && [ "${SLUICE_ALLOW_SKIPS:-0}" != "1" ]; then
    echo "tests skipped (install what they name, or SLUICE_ALLOW_SKIPS=1):" >&2
    echo "$skipped" >&2
    return 1
  fi
  return "$rc"
}

# Formatting first: cheap, and names the files to fix.
unformatted=$(git ls-files '*.cc' '*.h' | xargs clang-format-16 --dry-run 2>&1 | grep -o '^[^:]*' | sort -u || true)
if [ -n "$unformatted" ]; then
  echo "not clang-format-16 clean (run: clang-format-16 -i FILE):" >&2
  echo "$unformatted" >&2
  exit 1
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${unity[@]}" >/dev/null

sanitizers=1
[ "${SLUICE_SKIP_SANITIZERS:-0}" = "1" ] && sanitizers=0
if [ "$sanitizers" = 1 ]; then
  # Clang-16 build 1 does three jobs: AddressSanitizer + UBSan for every
  # test, -Werror=thread-safety over the whole tree (the annotated locks of
  # src/common/mutex.h), and the libFuzzer targets of fuzz/, which run as
  # tests labelled `fuzz` (10 s each, SLUICE_FUZZ_SECONDS). -O0 -g1 (line tables)
  # builds in half the time of -O1; the data-path and compute libraries
  # (sluice_hot_path() in CMake) get -O1 so tests moving real sizes keep
  # their pace. A binary whose tests are all nosan or gpu is not built
  # there (sluice_cc_test).
  san_flags=(-G Ninja "${unity[@]}" -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_BUILD_TYPE=RelWithDebInfo
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" -DSLUICE_HOT_PATH_FLAGS=-O1)
  # 10 s per fuzz target here: a smoke run of each (with its invariants)
  # that fits CI's time; longer campaigns run the targets by hand.
  cmake -S . -B build-san "${san_flags[@]}" -DSLUICE_SANITIZE=address -DSLUICE_FUZZ=ON \
    -DSLUICE_FUZZ_SECONDS=10 >/dev/null
  # Clang-16 build 2: ThreadSanitizer over the transfer, store, connector
  # and orchestrator suites (label `tsan`) and every process they start.
  cmake -S . -B build-tsan "${san_flags[@]}" -DSLUICE_SANITIZE=thread >/dev/null

  # The two sanitized builds compile one after the other in the background
  # at idle priority (SCHED_IDLE; nice 19 where that is refused) while the
  # Release build and the tests before each run: about a third of the two
  # cores sits idle while tests' processes wait on one another, sockets
  # and timers, and the compiler takes only that — a test's thread
  # preempts it whenever it wakes. Each build's output is printed when a
  # run needs it; a failed build fails the run.
  idle=(nice -n 19)
  if chrt --idle 0 true 2>/dev/null; then
    idle=(chrt --idle 0)
  fi
  rm -f build-san/build.rc build-tsan/build.rc
  (
    rc=0
    "${idle[@]}" ninja -C build-san -j "$jobs" >build-san/build.log 2>&1 || rc=$?
    echo "$rc" >build-san/build.rc
    rc=0
    "${idle[@]}" ninja -C build-tsan -j "$jobs" tsan_tests >build-tsan/build.log 2>&1 || rc=$?
    echo "$rc" >build-tsan/build.rc
  ) &
  builds=$!
  # Whatever ends the run stops the builds (ninja stops its compilers).
  trap 'pkill -P "$builds" 2>/dev/null || true; kill "$builds" 2>/dev/null || true' EXIT
fi

# sanitized_build DIR: waits for DIR's background build, prints its output,
# and fails when it failed.
sanitized_build() {
  while [ ! -e "$1/build.rc" ] && kill -0 "$builds" 2>/dev/null; do
    sleep 1
  done
  cat "$1/build.log"
  local rc
  rc=$(cat "$1/build.rc" 2>/dev/null || echo "none")
  if [ "$rc" != 0 ]; then
    echo "the build in $1 failed (exit $rc)" >&2
    return 1
  fi
}

cmake --build build -j "$jobs"
run_ctest --test-dir build --output-on-failure -j "$jobs" -LE "gpu|rdma|case"

if [ "$sanitizers" = 1 ]; then
  sanitized_build build-san
  # Undefined behaviour halts (the build has -fno-sanitize-recover); the
  # canaries of tests/sanitizer prove each kind of error fails a test.
  UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1" \
    run_ctest --test-dir build-san --output-on-failure -j "$jobs" -LE "gpu|rdma|nosan|case"

  # Each ThreadSanitizer report lands in build-tsan/tsan-reports and fails
  # the run; the suppressions in scripts/tsan.supp say why each is benign.
  sanitized_build build-tsan
  reports="$PWD/build-tsan/tsan-reports"
  rm -rf "$reports" && mkdir -p "$reports"
  tsan_ok=1
  # llvm-16 symbolizes the reports (the suppressions match function names).
  TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp log_path=$reports/report second_deadlock_stack=1 external_symbolizer_path=/usr/bin/llvm-symbolizer-16" \
    run_ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L tsan || tsan_ok=0
  if compgen -G "$reports/report*" >/dev/null; then
    cat "$reports"/report* >&2
    echo "ThreadSanitizer reported the races above" >&2
    tsan_ok=0
  fi
  [ "$tsan_ok" = 1 ]
else
  # Without the Clang build, its thread-safety analysis on its own.
  scripts/check-thread-safety.sh build
fi
echo "all tests passed"
