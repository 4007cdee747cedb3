#!/usr/bin/env bash
# The device check: runs sluice's GPU tests and the benchmark rows a 2-core
# machine cannot settle, on a machine with a GPU, the CUDA toolkit and
# PyTorch but none of our Debian packages.
#
#   scripts/gpu-check.sh pack [BUILD] [PACK]
#       Here: collects the test and benchmark binaries of BUILD (default
#       build/) with every shared library they load (ldd) but glibc's own
#       and the GPU driver, which the GPU machine has, into the tarball
#       PACK (default build-gpu/pack.tar.xz, ~15 MiB: carry it).
#   scripts/gpu-check.sh run [PACK] [OUT]
#       There: unpacks PACK, runs each binary on the packed libraries (the
#       host's glibc must be at least Debian 12's 2.36; the check says so
#       when it is not; the tests re-execute themselves, so the binaries
#       run directly, not through a packed loader), and writes
#       OUT/summary.md (default $OUT, else ./gpu-check-out) with the
#       machine, each step's result and figures, and each step's log.
#       Finishes in under 6 minutes; each step has its own time limit.
set -euo pipefail
cd "$(dirname "$0")/.."

BINARIES=(cuda_backend_test sim_backend_test sluice)

pack() {
  local build=${1:-build} out=${2:-build-gpu/pack.tar.xz}
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  mkdir -p "$stage/bin" "$stage/lib" "$(dirname "$out")"
  for b in "${BINARIES[@]}"; do
    [ -x "$build/bin/$b" ] || { echo "gpu-check: $build/bin/$b is not built" >&2; return 1; }
    cp "$build/bin/$b" "$stage/bin/"
    # Every library it loads but glibc's and the GPU driver's.
    ldd "$build/bin/$b" | awk '/=> \// {print $3}' |
      grep -v -E '/(libc|libm|libdl|librt|libpthread|libresolv)\.so|/libcuda\.so|/libnvidia' |
      while read -r lib; do
        cp -L -n "$lib" "$stage/lib/"
      done
  done
  git rev-parse HEAD >"$stage/commit" 2>/dev/null || echo unknown >"$stage/commit"
  tar -C "$stage" -cJf "$out" .
  echo "gpu-check: packed ${BINARIES[*]} and $(ls "$stage/lib" | wc -l) libraries into $out ($(du -h "$out" | cut -f1))"
}

# run_step NAME SECONDS BINARY ARGS...: runs the packed BINARY with a time
# limit, its output in $out/NAME.log; appends a result line to the summary.
run_step() {
  local name=$1 limit=$2 binary=$3
  shift 3
  local start rc
  start=$(date +%s)
  set +e
  LD_LIBRARY_PATH="$libpath" timeout "$limit" "$dir/bin/$binary" "$@" >"$out/$name.log" 2>&1
  rc=$?
  set -e
  local took=$(($(date +%s) - start))
  local verdict=passed
  [ "$rc" = 0 ] || verdict="FAILED (exit $rc)"
  [ "$rc" = 124 ] && verdict="TIMED OUT after ${limit}s"
  echo "| $name | $verdict | ${took}s |" >>"$out/steps.md"
  return 0
}

run() {
  local tarball=${1:-build-gpu/pack.tar.xz}
  out=${2:-${OUT:-gpu-check-out}}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  dir=$(mktemp -d)
  tar -C "$dir" -xJf "$tarball"
  # The packed libraries first, then where hosts keep their GPU driver.
  libpath="$dir/lib"
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
    if [ -d "$d" ]; then libpath="$libpath:$d"; fi
  done

  : >"$out/steps.md"
  {
    echo "# sluice device check"
    echo
    echo "- commit: $(cat "$dir/commit")"
    echo "- date: $(date -u +%FT%TZ)"
    echo "- host: $(uname -r), $(nproc) cores, $(awk '/MemTotal/ {print int($2/1048576) " GiB"}' /proc/meminfo)"
    echo "- GPU: $(nvidia-smi -L 2>/dev/null | head -4 | tr '\n' ';' || echo 'nvidia-smi: none')"
    echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || echo unknown)"
    echo "- nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
    echo "- glibc: $(ldd --version 2>/dev/null | head -1) (the pack needs 2.36 or later)"
  } >"$out/summary.md"

  run_step cuda_backend_test 120 cuda_backend_test --gtest_color=no
  run_step sim_backend_test 60 sim_backend_test --gtest_color=no
  # Device rows (issue targets: devipc device->device >= 0.9x the backend's
  # own device copy; tcp device->device >= 0.8x tcp host->host of this run).
  local xfer=(sluice bench transfer --block-size 16MiB --batch 8 --duration 3 --json)
  run_step bench_transfer_devipc_d2d 60 "${xfer[@]}" --transport devipc --src-kind device \
    --dst-kind device --device cuda
  run_step bench_transfer_devipc_h2d 60 "${xfer[@]}" --transport devipc --src-kind host \
    --dst-kind device --device cuda
  run_step bench_transfer_tcp_d2d 60 "${xfer[@]}" --transport tcp --src-kind device \
    --dst-kind device --device cuda
  run_step bench_transfer_tcp_h2h 60 "${xfer[@]}" --transport tcp
  run_step bench_connector_cuda_p2p_chunks8 60 sluice bench connector --device cuda --mode p2p \
    --chunks 8 --chunk-dim 2 --json
  run_step bench_connector_cuda_store 60 sluice bench connector --device cuda --mode store --json
  # The CPU rows this project's 2-core machine cannot settle.
  run_step bench_store_put_shm_16MiB 90 sluice bench store --value-size 16MiB --op put \
    --transport shm --clients 1 --duration 3 --json
  run_step bench_connector_p2p_chunks8 90 sluice bench connector --mode p2p --chunks 8 \
    --chunk-dim 2 --json

  {
    echo
    echo "| step | result | time |"
    echo "|---|---|---|"
    cat "$out/steps.md"
    echo
    echo "## cuda_backend_test"
    echo '```'
    grep -m1 'no cuda device' "$out/cuda_backend_test.log" || true
    grep -E '^\[ *(OK|FAILED|PASSED) *\]' "$out/cuda_backend_test.log" | head -40 || true
    echo '```'
    for b in bench_transfer_devipc_d2d bench_transfer_devipc_h2d bench_transfer_tcp_d2d \
      bench_transfer_tcp_h2h bench_connector_cuda_p2p_chunks8 bench_connector_cuda_store \
      bench_store_put_shm_16MiB bench_connector_p2p_chunks8; do
      echo
      echo "## $b"
      echo '```'
      grep -E '^\{' "$out/$b.log" | tail -1 || tail -5 "$out/$b.log"
      echo '```'
    done
  } >>"$out/summary.md"
  rm -rf "$dir"
  cat "$out/summary.md"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *)
    echo "usage: scripts/gpu-check.sh pack [BUILD] [PACK] | run [PACK] [OUT]" >&2
    exit 2
    ;;
esac
