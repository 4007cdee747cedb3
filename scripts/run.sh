#!/usr/bin/env bash
# The main job on the embedded default. Until `sluice serve` lands this is
# the transfer engine benchmark: a target and an initiator process on
# loopback, tcp and shm, reads and writes, each against a baseline measured
# in the same run. Installs what it needs and builds first.
# Usage: scripts/run.sh            (as root on Debian 12)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
for transport in tcp shm; do
  for op in write read; do
    build/bin/sluice bench transfer --transport "$transport" --op "$op" \
      --block-size 16MiB --batch 8 --threads 1 --duration 3 --json
  done
done
