"""Run one part of the test suite and end with its wall time beside the baseline: `make test`, `make test-slow`.

    python scripts/time_tests.py test -- -q -m "not slow" -n 2 --dist loadfile   # what make test runs
    python scripts/time_tests.py test-slow -- -q -m slow      # what make test-slow runs

Runs `python -m pytest <args>` from the repo root, shows its output as it comes, passes its exit
status through, and prints one last line: the target, the tests it ran, its wall time, the load
average at start and end, and the baseline. Other work on this 2-core VM slows a run, so a
figure compares with another only at a similar load; the baseline was taken quiet.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The whole suite in one target before it was split into make test and make test-slow (README, docs/measurements.md).
BASELINE = "the whole suite in one make test, 609 tests in 6 min 27 s (quiet, 2026-12-04)"
TARGETS = {"test": "target < 3 min", "test-slow": "make test + make test-slow run every test"}
OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def format_duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def tests_run(summary: str) -> int:
    """Tests pytest ran, from its last line ("19 failed, 563 passed, 27 deselected in 169.35s"): deselected excluded."""
    return sum(int(count) for count, _ in OUTCOME.findall(ANSI.sub("", summary)))


def timing_line(target: str, tests: int, wall_s: float, load_start: float, load_end: float) -> str:
    return (f"make {target}: {tests} test{'s' if tests != 1 else ''} in {format_duration(wall_s)}, "
            f"load average {load_start:.2f} at start, {load_end:.2f} at end, {os.cpu_count()} cores; "
            f"baseline: {BASELINE}; {TARGETS[target]}")


def run_pytest(args: list[str]) -> tuple[int, str]:
    """pytest's exit status and its last output line; its output goes to ours as it comes."""
    color = ["--color=yes"] if sys.stdout.isatty() else []  # a pipe would turn pytest's colours off
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *color, *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches pytest too: let it print its summary
    tail = b""
    while chunk := os.read(proc.stdout.fileno(), 4096):
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        tail = (tail + chunk)[-4096:]
    lines = tail.decode(errors="replace").strip().splitlines()
    return proc.wait(), lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/time_tests.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", choices=sorted(TARGETS), help="the make target this run is")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args(argv)
    load_start, start = os.getloadavg()[0], time.monotonic()
    status, summary = run_pytest(args.pytest_args)
    print(timing_line(args.target, tests_run(summary), time.monotonic() - start, load_start, os.getloadavg()[0]))
    return status


if __name__ == "__main__":
    sys.exit(main())
