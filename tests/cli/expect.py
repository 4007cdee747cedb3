#!/usr/bin/python3
"""Runs one command and decides a test by its exit code AND its output.

CTest's PASS_REGULAR_EXPRESSION ignores the exit code once set: a crash
after the expected line, or a sanitizer report (AddressSanitizer exits 1,
LeakSanitizer 23), would pass. This wrapper fails the test unless

  * the exit code is the one expected (--exit 0, the default; --exit
    nonzero: 1..125, a refusal, never a signal or a timeout),
  * every --match REGEX is found in stdout+stderr (Python re, DOTALL;
    `{POS}` stands for a number greater than zero, e.g. "gbps":{POS}),
  * no --absent REGEX is found, and
  * no sanitizer report appears in the output (--sanitizer-report: one
    must, for the canaries that prove the sanitizer build catches errors).

Exit 77 (a wrapped script's skip) is passed on for SKIP_RETURN_CODE.

Usage: expect.py [--exit 0|nonzero|N] [--match RE]... [--absent RE]... -- CMD ARG...
The command's output is echoed so the test log keeps it.
"""
import argparse
import re
import subprocess
import sys

# A number > 0 as printed by the CLI (JSON or text): 12, 0.5, 3e-05, 1.2e+03.
POSITIVE = r"(?:[0-9]*[1-9][0-9]*(?:\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*)(?:[eE][-+]?[0-9]+)?"

SANITIZER_REPORTS = [
    r"ERROR: AddressSanitizer",
    r"ERROR: LeakSanitizer",
    r"WARNING: ThreadSanitizer",
    r"runtime error: ",  # UndefinedBehaviorSanitizer
]


# A wrapped script's "dependency missing" exit; passed on for CTest's
# SKIP_RETURN_CODE (a test that does not declare it fails on it).
SKIPPED = 77


def expand(pattern):
    return pattern.replace("{POS}", POSITIVE)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exit", default="0", help="0 (default), nonzero, or a code")
    parser.add_argument("--match", action="append", default=[], help="regex that must appear")
    parser.add_argument("--absent", action="append", default=[], help="regex that must not")
    parser.add_argument("--sanitizer-report", action="store_true",
                        help="want a sanitizer report (the canaries of tests/sanitizer)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    if args.exit != "nonzero" and not args.exit.lstrip("-").isdigit():
        parser.error(f"--exit {args.exit!r}: want 0, nonzero or a number")

    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.decode("utf-8", errors="replace")
    sys.stdout.write(out)
    if out and not out.endswith("\n"):
        sys.stdout.write("\n")

    problems = []
    code = proc.returncode
    if code == SKIPPED:
        print("expect: SKIPPED (exit 77)")
        return SKIPPED
    if args.exit == "nonzero":
        if not 1 <= code <= 125:
            problems.append(f"exit code {code}, want a refusal (1..125)")
    elif code != int(args.exit):
        problems.append(f"exit code {code}, want {args.exit}")
    for pattern in args.match:
        if not re.search(expand(pattern), out, re.S):
            problems.append(f"output lacks /{pattern}/")
    for pattern in args.absent:
        if re.search(expand(pattern), out, re.S):
            problems.append(f"output has /{pattern}/")
    reports = [p for p in SANITIZER_REPORTS if re.search(p, out)]
    if reports and not args.sanitizer_report:
        problems.append(f"sanitizer report in the output (/{reports[0]}/)")
    elif not reports and args.sanitizer_report:
        problems.append("no sanitizer report in the output")
    if problems:
        for p in problems:
            print(f"expect: FAILED: {p}")
        return 1
    print("expect: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
