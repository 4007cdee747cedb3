#!/bin/bash
# Runs the README's cluster-mode block exactly as written (from a scratch
# directory where `build` is this build), then checks its output and stops
# every role it started. Usage: readme_cluster_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
dir=$(mktemp -d /tmp/sluice-readme-XXXXXX)
ln -s "$build" "$dir/build"
awk '/^### Cluster mode \(each role its own process\)/ {f=1; next}
     f && /^```sh/ {b=1; next}
     b && /^```/ {exit}
     b {print}' "$src/README.md" > "$dir/block.sh"
test -s "$dir/block.sh"
cd "$dir"
(
  trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT
  set -e
  source ./block.sh
) > "$dir/out.log" 2>&1 || { cat "$dir/out.log"; exit 1; }
head -c 8 lighthouse.png | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a"
echo "readme cluster: OK ($(stat -c %s lighthouse.png) bytes)"
cd / && rm -rf "$dir"
