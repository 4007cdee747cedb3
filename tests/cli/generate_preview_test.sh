#!/usr/bin/env bash
# `sluice generate --preview` against `sluice serve`: exits 0, prints a line
# per preview it wrote (the last step's among them) and leaves
# OUTPUT.preview.png, a 32x32 PNG (a pixel per latent cell), beside the
# 128x128 result.
# Usage: generate_preview_test.sh SLUICE_BIN
set -uo pipefail
bin=$1
dir=$(mktemp -d)
mkfifo "$dir/in"
"$bin" serve --http 127.0.0.1:0 --exit-on-stdin-eof <"$dir/in" >"$dir/serve.out" 2>"$dir/serve.err" &
server=$!
exec 3>"$dir/in"  # The server runs until this closes.
trap 'exec 3>&-; wait $server; rm -rf "$dir"' EXIT
url=""
for _ in $(seq 1 300); do  # Up to 30 s for its READY line.
  url=$(awk '$1 == "READY" && $2 == "serve" {print $3}' "$dir/serve.out")
  [ -n "$url" ] && break
  kill -0 $server 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "FAIL: sluice serve did not start"; cat "$dir/serve.err"; exit 1
fi
out=$(timeout 120 "$bin" generate --server "$url" --prompt "a large red circle on the left on a blue background" \
  --size 128x128 --preview -o "$dir/circle.png" 2>&1)
rc=$?
if [ "$rc" != 0 ] || ! grep -q "preview of step 12/12 -> $dir/circle.png.preview.png" <<<"$out"; then
  echo "FAIL: exit $rc, output: $out"; exit 1
fi
/usr/bin/python3 - "$dir/circle.png.preview.png" "$dir/circle.png" <<'PY'
import struct, sys
def size(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])
ok = size(sys.argv[1]) == (32, 32) and size(sys.argv[2]) == (128, 128)
print("ok" if ok else f"FAIL sizes {size(sys.argv[1])} {size(sys.argv[2])}")
sys.exit(0 if ok else 1)
PY
