#!/usr/bin/env bash
# The main job on the embedded default: `sluice serve --demo` starts every
# role in one process (store master, store node, orchestrator, encode /
# denoise / decode worker pools running the reference models on the CPU),
# submits demo images and a video over its HTTP API, writes the results
# under out/ and prints each job's latency and time to first frame.
# Installs what it needs and builds first. Extra arguments go to
# `sluice serve` (e.g. --colocated, --workers 6).
# Usage: scripts/run.sh [ARGS...]          (as root on Debian 12)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
exec build/bin/sluice serve --demo --out out "$@"
