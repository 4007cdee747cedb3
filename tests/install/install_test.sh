#!/bin/bash
# `cmake --install` into a fresh prefix, then as a user would: the command
# runs from it, a project outside the tree builds against it with
# find_package(sluice), and the Python package imports from where it went.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
prefix=$(mktemp -d /tmp/sluice-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" > "$prefix.log" 2>&1 || { cat "$prefix.log"; exit 1; }
rm -f "$prefix.log"
test -x "$prefix/bin/sluice"
"$prefix/bin/sluice" --help | grep -q "serve"
test -f "$prefix/include/sluice/transfer/engine.h"
find "$prefix/lib" -name "libsluice.so*" | grep -q .
cmake -S "$src/tests/install/consumer" -B "$prefix/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$prefix/consumer" > /dev/null
out=$("$prefix/consumer/consumer")
echo "consumer: $out"
[[ $out == OK\ 127.0.0.1:*\ 127.0.0.1:* ]]
if [ -d "$build/python/sluice" ]; then
  site=$(ls -d "$prefix"/lib/python3*/dist-packages)
  test -f "$site/sluice/__init__.py"
  /usr/bin/python3 -c "import sys; sys.path.insert(0, '$site'); import sluice; \
assert sluice.__file__.startswith('$site'), sluice.__file__; print('python:', sluice.__file__)"
  # The default prefix (/usr/local) lands where /usr/bin/python3 looks.
  /usr/bin/python3 -c "import sys; assert '/usr/local/lib/python3.11/dist-packages' in sys.path"
fi
echo "install: OK"
