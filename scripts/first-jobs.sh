#!/usr/bin/env bash
# Times the first jobs a fresh `sluice serve` runs, one after another: the
# first job shows what a cold worker costs (connections, mappings).
# Usage: scripts/first-jobs.sh [STAGES] [JOBS] [PORT]
#   STAGES: reference (default) or a profile (flux-1024, wan2.1-480p, ...).
# Prints one line per job: its stage events in ms since submission.
set -euo pipefail
cd "$(dirname "$0")/.."
stages=${1:-reference} jobs=${2:-3} port=${3:-18123}
coproc SERVE { build/bin/sluice serve --http "127.0.0.1:$port" --workers 3 --stages "$stages" \
  --time-factor 0.01 --exit-on-stdin-eof 2>/dev/null; }
read -r _ <&"${SERVE[0]}"  # The banner: serving.
/usr/bin/python3 - "$port" "$jobs" <<'PY'
import json, sys, urllib.request
port, jobs = sys.argv[1], int(sys.argv[2])
base = f"http://127.0.0.1:{port}"
for i in range(1, jobs + 1):
    body = json.dumps({"prompt": f"first jobs {i}", "async": True}).encode()
    with urllib.request.urlopen(urllib.request.Request(
            f"{base}/v1/images/generations", data=body, method="POST"), timeout=60) as r:
        job = json.loads(r.read())["id"]
    with urllib.request.urlopen(f"{base}/v1/jobs/{job}/events", timeout=120) as r:
        events = [json.loads(l[6:]) for l in r.read().decode().splitlines() if l.startswith("data: ")]
    marks = [f"{e['type']}{'/' + e['stage'] if e['type'].startswith('stage') else ''}@{e['t_ms']:.0f}"
             for e in events if e["type"] != "step"]
    print(f"job {i}: " + " ".join(marks), flush=True)
PY
eval "exec ${SERVE[1]}>&-"  # Closing stdin stops the server.
wait
