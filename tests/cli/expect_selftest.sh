#!/usr/bin/env bash
# tests/cli/expect.py decides the command tests; this checks that it fails
# each way a command test must fail -- with the expected line printed and
# a bad exit code, a crash, a sanitizer report, a zero figure, a missing
# line -- and passes only the good case.
# Usage: expect_selftest.sh
set -uo pipefail
expect="/usr/bin/python3 $(dirname "$0")/expect.py"
fails=0
check() {  # check WANT_RC DESCRIPTION EXPECT_ARGS...
  local want=$1 what=$2
  shift 2
  $expect "$@" >/dev/null 2>&1
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: $what: expect.py exited $rc, want $want"
    fails=$((fails + 1))
  fi
}
check 0 "the good case" --match 'ok' -- sh -c 'echo ok'
check 1 "exit code after the line" --match 'ok' -- sh -c 'echo ok; exit 3'
check 1 "a crash after the line" --match 'ok' -- sh -c 'echo ok; kill -SEGV $$'
check 1 "a sanitizer report with exit 0" --match 'ok' -- sh -c 'echo ok; echo "==1==ERROR: LeakSanitizer: detected memory leaks"'
check 1 "a zero figure" --match '"gbps":{POS}' -- sh -c 'echo "{\"gbps\":0.0}"'
check 0 "a positive figure" --match '"gbps":{POS}' -- sh -c 'echo "{\"gbps\":0.25}"'
check 1 "a missing line" --match 'ok' -- sh -c 'echo no'
check 1 "a refusal that exits 0" --exit nonzero --match 'bad flag' -- sh -c 'echo bad flag'
check 0 "a refusal" --exit nonzero --match 'bad flag' -- sh -c 'echo bad flag; exit 2'
check 1 "a refusal by signal" --exit nonzero --match 'bad flag' -- sh -c 'echo bad flag; kill -ABRT $$'
check 1 "a line that must be absent" --absent 'survived' -- sh -c 'echo survived'
check 77 "a skip passed on" --match 'x' -- sh -c 'exit 77'
if [ "$fails" != 0 ]; then
  exit 1
fi
echo "expect selftest: OK"
