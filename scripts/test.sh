#!/usr/bin/env bash
# Builds sluice from scratch-or-cache and runs every test: the Release build's
# full ctest suite, then the transfer tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer. Installs missing Debian packages first.
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
# Clang's thread-safety analysis over the whole tree (analysis only).
scripts/check-thread-safety.sh build
ctest --test-dir build --output-on-failure -j "$jobs" -LE "gpu|rdma"

if [ "${SLUICE_SKIP_SANITIZERS:-0}" != "1" ]; then
  # -O1 -g1 (line tables): half the compile time of -O2 -g under ASan+UBSan,
  # with file:line in every report.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_SANITIZE=address \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
  cmake --build build-asan -j "$jobs"
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE "gpu|rdma|nosan"
fi
echo "all tests passed"
