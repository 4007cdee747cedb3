#!/usr/bin/env bash
# `sluice bench preview`: exits 0 and prints its figures; previews leave the
# sampled latent unchanged, are real PNGs of 32x32 for 128x128, and their
# own time is a positive share of a job under the 2% bound (the with/without
# ratio is printed for the benchmark page; on a shared machine it is too
# noisy to bound here). Usage: bench_preview_test.sh SLUICE_BIN
set -uo pipefail
out=$(timeout 120 "$1" bench preview --rounds 3 --json)
rc=$?
if [ "$rc" != 0 ]; then
  echo "FAIL: exit $rc: $out"
  exit 1
fi
/usr/bin/python3 - "$out" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
ok = (j["same_latent"] is True and j["preview_width"] == 32 and j["preview_height"] == 32
      and j["preview_bytes"] > 100 and j["previews_per_job"] >= 2
      and 0 < j["cost_share"] < 0.02 and j["without_ms"] > 0 and j["with_ms"] > 0)
print(("ok " if ok else "FAIL ") + sys.argv[1])
sys.exit(0 if ok else 1)
PY
