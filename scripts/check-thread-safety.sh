#!/usr/bin/env bash
# Compiles every C++ file of a configured build once more with Debian's
# clang-16, analysis only (-fsyntax-only), and -Werror=thread-safety: every
# SLUICE_GUARDED_BY member and SLUICE_REQUIRES function (src/common/mutex.h)
# is checked. Uses the build's compile_commands.json (generated sources must
# exist: run it after building).
# Usage: scripts/check-thread-safety.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json" >&2; exit 1; }
/usr/bin/python3 - "$build/compile_commands.json" <<'PY' | xargs -0 -n1 -P "$(nproc)" bash -c
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    args = shlex.split(e["command"])
    out = ["clang++-16"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT"):
            skip = True
            continue
        if a in ("-c", "-MD", "-fno-fat-lto-objects") or a.startswith("-flto"):
            continue
        out.append(a)
    out += ["-Wno-unknown-warning-option", "-fsyntax-only", "-Wthread-safety",
            "-Werror=thread-safety"]
    sys.stdout.write("cd " + shlex.quote(e["directory"]) + " && " + shlex.join(out) + "\0")
PY
echo "thread-safety analysis: clean"
