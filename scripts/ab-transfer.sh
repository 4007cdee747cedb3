#!/usr/bin/env bash
# A/B of the transfer engine between two builds of `sluice` in one run:
# for each case (transport x op x block size) the two binaries alternate
# ROUNDS times, and the median GB/s (the bench's "gbps" field) of each and their ratio (B / A) are
# printed. Use it when a change touches the data path.
# Usage: scripts/ab-transfer.sh OLD_SLUICE NEW_SLUICE [ROUNDS] [SECONDS]
set -euo pipefail
a=$1
b=$2
rounds=${3:-5}
secs=${4:-1}
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
gbps() { "$1" bench transfer "${@:2}" --duration "$secs" --json | sed -n 's/.*"gbps":\([0-9.e+-]*\).*/\1/p'; }
printf "%-28s %10s %10s %7s\n" case a_GB/s b_GB/s b/a
for transport in tcp shm; do
  for op in read write; do
    for size in 64KiB 1MiB 16MiB; do
      args=(--transport "$transport" --op "$op" --block-size "$size" --batch 8)
      ra=() rb=()
      for ((i = 0; i < rounds; ++i)); do
        ra+=("$(gbps "$a" "${args[@]}")")
        rb+=("$(gbps "$b" "${args[@]}")")
      done
      ma=$(printf "%s\n" "${ra[@]}" | median)
      mb=$(printf "%s\n" "${rb[@]}" | median)
      printf "%-28s %10.2f %10.2f %7.3f\n" "$transport $op $size" "$ma" "$mb" \
        "$(awk -v x="$ma" -v y="$mb" 'BEGIN {print y / x}')"
    done
  done
done
