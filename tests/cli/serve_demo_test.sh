#!/usr/bin/env bash
# The README's main command, `sluice serve --demo`: exits 0, all 5 jobs
# succeed, and the first image -- served through every stage pool of the
# disaggregated deployment -- has the golden SHA-256 of the shipped weights'
# picture for its request (tests/golden/reference-shipped.sha256, checked
# on its own by reference_golden_shipped).
# Usage: serve_demo_test.sh SLUICE_BIN SOURCE_DIR
set -uo pipefail
bin=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log=$(timeout 280 "$bin" serve --demo --out "$out" 2>&1)
rc=$?
echo "$log" | tail -5
if [ "$rc" != 0 ] || ! grep -q "demo: 5/5 jobs succeeded" <<<"$log"; then
  echo "FAIL: exit $rc, or not every demo job succeeded"; exit 1
fi
want=$(awk '$1 == "image_png" {print $2}' "$src/tests/golden/reference-shipped.sha256")
got=$(sha256sum "$out/image-1.png" | cut -d' ' -f1)
if [ -z "$want" ] || [ "$got" != "$want" ]; then
  echo "FAIL: image-1.png has SHA-256 $got, the golden image ${want:-(none)}"; exit 1
fi
for f in image-2.png image-3.png image-4.png video-5.mp4; do
  [ -s "$out/$f" ] || { echo "FAIL: $f missing or empty"; exit 1; }
done
echo "demo golden: OK"
