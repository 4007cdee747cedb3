#!/bin/bash
# Runs the cluster-mode block of the getting-started page (docs/getting-started.md)
# exactly as written (from a scratch directory where `build/bin/sluice` is
# this build's), then checks its output and stops every role it started. The orchestrator starts 2 s late
# there, as on a loaded host: a block that runs its client before the
# cluster serves (no `sluice wait`) fails here, as it did for users.
# Usage: readme_cluster_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
dir=$(mktemp -d /tmp/sluice-readme-XXXXXX)
mkdir -p "$dir/build/bin"
cat > "$dir/build/bin/sluice" <<SHIM
#!/bin/bash
if [ "\$1" = orchestrator ]; then sleep 2; fi
exec "$build/bin/sluice" "\$@"
SHIM
chmod +x "$dir/build/bin/sluice"
awk '/^## Cluster mode \(each role its own process\)/ {f=1; next}
     f && /^```sh/ {b=1; next}
     b && /^```/ {exit}
     b {print}' "$src/docs/getting-started.md" > "$dir/block.sh"
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
