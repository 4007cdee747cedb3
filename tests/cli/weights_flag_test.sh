#!/usr/bin/env bash
# `--weights` on sluice serve and sluice worker: a bad file is refused with
# exit code 2 and a message naming the file and what is wrong, before
# anything serves. Usage: weights_flag_test.sh SLUICE_BIN
set -uo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

# expect NAME WANT_RC WANT_TEXT CMD...
expect() {
  local name=$1 want_rc=$2 want=$3
  shift 3
  local out rc
  out=$(timeout 60 "$@" </dev/null 2>&1)
  rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL $name: exit $rc (want $want_rc), output: $out"
    fail=1
  else
    echo "ok $name"
  fi
}

printf 'abc' > "$dir/short.safetensors"
printf '\x10\x00\x00\x00\x00\x00\x00\x00[1,2,3]         ' > "$dir/array.safetensors"
expect serve-missing 2 "$dir/none.safetensors: No such file" \
  "$bin" serve --weights "$dir/none.safetensors"
expect serve-truncated 2 "$dir/short.safetensors: truncated: 3 bytes" \
  "$bin" serve --weights "$dir/short.safetensors"
expect serve-not-object 2 "the header is not a JSON object" \
  "$bin" serve --weights "$dir/array.safetensors"
expect serve-bad-seed 2 "random:SEED takes a decimal seed" \
  "$bin" serve --weights random:abc
expect worker-truncated 2 "sluice worker: --weights: $dir/short.safetensors: truncated" \
  "$bin" worker --stage encode --orchestrator 127.0.0.1:1 --weights "$dir/short.safetensors"
exit $fail
