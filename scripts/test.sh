#!/usr/bin/env bash
# Builds sluice from scratch-or-cache and runs every test: the Release build's
# full ctest suite, then (Clang-16) every test again under AddressSanitizer +
# UndefinedBehaviorSanitizer with the thread-safety analysis and the fuzz
# targets. Installs missing Debian packages first.
# Usage: scripts/test.sh            (as root on Debian 12)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

# Formatting first: cheap, and names the files to fix.
unformatted=$(git ls-files '*.cc' '*.h' | xargs clang-format-16 --dry-run 2>&1 | grep -o '^[^:]*' | sort -u || true)
if [ -n "$unformatted" ]; then
  echo "not clang-format-16 clean (run: clang-format-16 -i FILE):" >&2
  echo "$unformatted" >&2
  exit 1
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs" -LE "gpu|rdma"

if [ "${SLUICE_SKIP_SANITIZERS:-0}" != "1" ]; then
  # One Clang-16 build does three jobs: AddressSanitizer + UBSan for every
  # test, -Werror=thread-safety over the whole tree (the annotated locks of
  # src/common/mutex.h), and the libFuzzer targets of fuzz/, which run as
  # tests labelled `fuzz` (SLUICE_FUZZ_SECONDS each). -O1 -g1 (line tables):
  # half the compile time of -O2 -g, with file:line in every report.
  cmake -S . -B build-san -G Ninja -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSLUICE_SANITIZE=address -DSLUICE_FUZZ=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
  cmake --build build-san -j "$jobs"
  ctest --test-dir build-san --output-on-failure -j "$jobs" -LE "gpu|rdma|nosan"
else
  # Without the Clang build, its thread-safety analysis on its own.
  scripts/check-thread-safety.sh build
fi
echo "all tests passed"
