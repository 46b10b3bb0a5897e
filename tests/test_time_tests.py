"""make test and make test-slow: the suite split by the `slow` marker, both run by CI, each ending with its
time beside the baseline (scripts/time_tests.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import time_tests  # noqa: E402


@pytest.mark.parametrize("seconds, text", [(0.4, "0 s"), (52.4, "52 s"), (60, "1 min 0 s"), (387, "6 min 27 s"),
                                           (179.6, "3 min 0 s")])
def test_format_duration(seconds, text):
    assert time_tests.format_duration(seconds) == text


@pytest.mark.parametrize("summary, tests", [
    ("582 passed, 27 deselected, 14 warnings in 169.35s (0:02:49)", 582),
    ("19 failed, 563 passed, 27 deselected, 14 warnings in 169.35s (0:02:49)", 582),
    ("1 failed, 2 passed, 3 skipped, 1 xfailed, 1 xpassed, 2 errors in 3.00s", 10),
    ("\x1b[32m\x1b[1m3 passed\x1b[0m\x1b[32m in 0.53s\x1b[0m", 3),
    ("ERROR: file or directory not found: tests/nope.py", 0),
])
def test_tests_run_counts_what_pytest_ran_not_what_it_deselected(summary, tests):
    assert time_tests.tests_run(summary) == tests


def test_the_timing_line_says_the_target_its_tests_time_load_and_baseline():
    line = time_tests.timing_line("test", 582, 112.4, 0.41, 1.2)
    assert line.startswith("make test: 582 tests in 1 min 52 s, load average 0.41 at start, 1.20 at end, ")
    assert "baseline: the whole suite in one make test, 609 tests in 6 min 27 s (quiet, 2026-12-04)" in line
    assert line.endswith("; target < 3 min")
    assert time_tests.timing_line("test-slow", 1, 5, 0, 0).startswith("make test-slow: 1 test in 5 s, ")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/time_tests.py", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_the_script_shows_pytests_output_then_the_timing_line_and_passes_its_status_through():
    ok = run("test", "--", "-q", "-p", "no:cacheprovider", "tests/test_layout.py::test_find_cycle_finds_one")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    lines = ok.stdout.strip().splitlines()
    assert re.fullmatch(r"1 passed in [0-9.]+s", lines[-2]) and lines[-1].startswith("make test: 1 test in ")
    missing = run("test-slow", "--", "-q", "-p", "no:cacheprovider", "tests/no-such-test-file.py")
    assert missing.returncode == 4  # pytest's usage error, not 0
    assert missing.stdout.strip().splitlines()[-1].startswith("make test-slow: 0 tests in ")


def test_make_test_and_make_test_slow_split_the_suite_by_the_slow_marker_and_ci_runs_both():
    planned = subprocess.run(["make", "-n", "test", "test-slow"], cwd=REPO, capture_output=True, text=True).stdout
    assert 'scripts/time_tests.py test -- -q -m "not slow"' in planned
    assert "scripts/time_tests.py test-slow -- -q -m slow" in planned
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("make ")]
    assert ci == ["make test", "make test-slow", "make smoke"]
