#!/usr/bin/env bash
# `sluice eval` on the shipped weights, held-out split: the scores clear
# thresholds set under the measured figures (docs/models/sluice-reference.md),
# disaggregated and colocated score exactly the same (same bytes), and
# guidance 1.0 (no CFG) scores lower than the default. Every run
# must exit 0 and print the JSON fields. The shipped mirror adapter draws
# each scene mirrored: outputs mirrored back score the position right, and
# without the adapter they do not. Usage: eval_test.sh SLUICE_BIN
set -uo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

run() {  # NAME ARGS...: the JSON line, or exit 1
  local name=$1
  shift
  if ! timeout 300 "$bin" eval --prompts 48 --json "$@" >"$dir/$name.json" 2>"$dir/$name.err"; then
    echo "FAIL $name: exit $? ($*)"
    cat "$dir/$name.err"
    exit 1
  fi
  cat "$dir/$name.json"
}
run disagg --videos 4 --grid "$dir/grid.png"
run colocated --videos 4 --mode colocated
run unguided --videos 4 --guidance 1
run mirror --lora mirror --mirrored
run plain_mirrored --mirrored

/usr/bin/python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
r = {n: json.load(open(os.path.join(d, n + ".json"))) for n in ("disagg", "colocated", "unguided")}
fail = []
# Thresholds under the figures this run measures with the shipped weights
# (48 images and 4 videos: colour, position, background and direction
# 1.0, shape 0.87; model card). Shape's is the issue's target, 0.80: the
# weights of the 8x latent before these scored 0.77 here (0.73 on the
# model card's larger held-out draw).
want = {"color_accuracy": 0.90, "position_accuracy": 0.90, "background_accuracy": 0.95,
        "shape_accuracy": 0.80, "direction_accuracy": 0.75}
for name in ("disagg", "colocated", "unguided"):
    j = r[name]
    if j["samples"] != 52 or j["failed"] != 0 or j["images"] != 48 or j["videos"] != 4:
        fail.append(f"{name}: samples {j['samples']} failed {j['failed']}")
for k, low in want.items():
    if not r["disagg"][k] >= low:
        fail.append(f"disagg {k} {r['disagg'][k]} < {low}")
keys = [k for k in r["disagg"] if k.endswith("_accuracy")]
if [r["disagg"][k] for k in keys] != [r["colocated"][k] for k in keys]:
    fail.append(f"colocated scores differ: {r['colocated']}")
# CFG is real: without it (guidance 1) the scores are worse (colour +
# shape + position: 2.85 against 2.87; shape 0.85 against 0.87, colour and
# position 1.0 at both).
attrs = ("color_accuracy", "shape_accuracy", "position_accuracy")
guided = sum(r["disagg"][k] for k in attrs)
unguided = sum(r["unguided"][k] for k in attrs)
if not unguided < guided:
    fail.append(f"guidance 1 scores {unguided} (colour + shape + position), not below {guided}")
# The mirror adapter (model card: position 0.97, colour 0.98 over 64
# prompts mirrored back; the base model 0.55, half its objects being at
# the top, bottom or centre, which mirroring leaves in place).
m = {n: json.load(open(os.path.join(d, n + ".json"))) for n in ("mirror", "plain_mirrored")}
for n, j in m.items():
    if j["samples"] != 48 or j["failed"] != 0 or j["mirrored"] is not True:
        fail.append(f"{n}: samples {j['samples']} failed {j['failed']}")
if not m["mirror"]["position_accuracy"] >= 0.90 or not m["mirror"]["color_accuracy"] >= 0.90:
    fail.append(f"mirror adapter: {m['mirror']}")
if not m["plain_mirrored"]["position_accuracy"] <= 0.75:
    fail.append(f"without the adapter, mirrored outputs place objects right: {m['plain_mirrored']}")
if os.path.getsize(os.path.join(d, "grid.png")) < 1000:
    fail.append("grid.png missing or empty")
for f in fail:
    print("FAIL", f)
print("ok" if not fail else "")
sys.exit(1 if fail else 0)
PY
