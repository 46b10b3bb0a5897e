"""The value rules of the knob table (harness/config.py): each returns (check, the rule in words), which a
bad value's one-line error and --help show; yes_no and optional parse a knob's text.

    from harness.knob_rules import choice, int_range
    check, rule = int_range(0, 64)            # rule == "an integer in [0, 64]"
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from harness.rule_split import HOLDABLE, SplitError, parse_rules


def choice(*values: str):
    return (lambda v: v in values), "one of " + " | ".join(values)


def int_range(lo: int, hi: int | None = None):
    if hi is None:
        return (lambda v: v >= lo), f"an integer >= {lo}"
    return (lambda v: lo <= v <= hi), f"an integer in [{lo}, {hi}]"


def unit_open_closed():
    return (lambda v: 0.0 < v <= 1.0), "a number in (0, 1]"


def unit_closed():
    return (lambda v: 0.0 <= v <= 1.0), "a number in [0, 1]"


def positive():
    return (lambda v: v > 0), "a number > 0"


def accelerator_spec():
    # SkyPilot's own format rule (<name> or <name>:<count>, count > 0); `make dry-run` then runs the
    # string through SkyPilot's parser too. Unknown GPU names only fail at launch (catalog is online).
    def check(v: str) -> bool:
        m = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*(?::(\d+(?:\.\d+)?))?", v)
        return bool(m) and (m.group(1) is None or float(m.group(1)) > 0)
    return check, "a SkyPilot accelerator string <name>[:<count>], e.g. A100:8"


def worker_count():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return (lambda v: v is None or 1 <= v <= cores), f"'auto' or an integer from 1 to {cores} (this machine's cores)"


def rule_families():
    def ok(v: str) -> bool:
        try:
            return len(parse_rules(v)) >= 2
        except SplitError:
            return False
    return ok, f"two or more comma-separated families of {', '.join(HOLDABLE)}"


def bucket_uri():
    return (lambda v: v == "" or re.fullmatch(r"(gs|file)://[^\s]+", v) is not None), \
        "'' or a gs://bucket/prefix URI (file:// for tests)"


def yes_no(text: str) -> bool:
    """A yes/no knob: 1/0, true/false, yes/no (any case)."""
    value = str(text).strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no", ""):
        return False
    raise ValueError(text)


def optional(type_: Callable[[str], Any]) -> Callable[[str], Any]:
    """A number knob that may be left unset ('' or 'auto' -> None: the backend's value in harness/hparams.py)."""
    def parse(text: str) -> Any:
        return None if text is None or str(text).strip().lower() in ("", "auto") else type_(text)
    parse.__name__ = type_.__name__
    return parse


def optional_range(lo: float, hi: float, what: str = "a number"):
    return (lambda v: v is None or lo <= v <= hi), f"'auto' (the backend's value in harness/hparams.py) or {what} " \
        f"in [{lo:g}, {hi:g}]"


# The W8_ variables that are not knobs (not recorded in run_config.json, no flag): where files go and
# which tools run, read where they are used. Any other W8_ name in the environment is a typo and stops
# the program (unknown_env_error), so this list is the whole vocabulary together with KNOBS.
OTHER_ENV = {
    "W8_RESULTS_ROOT": "where scripts/run_r3.sh copies a run's small artifacts (results/; make smoke: "
                       ".w8-biayn/smoke-results)",
    "W8_RUNS_ROOT": "where run folders live (.w8-biayn/runs)",
    "W8_LOGS_DIR": "saved launch and watch logs (.w8-biayn/logs)",
    "W8_PYTHON": "the interpreter scripts/run_r3.sh runs the steps with",
    "W8_STEPS_DIR": "tests only: swaps the step scripts scripts/run_r3.sh runs",
    "W8_EMIT_RESULTS": "1: print W8_RESULT lines off a node too (on a node, SKYPILOT_NODE_RANK set, always)",
    "W8_GIT_SHA": "the git sha recorded where .git is absent (the launcher sends it to the node)",
    "W8_GCP_KEY_FILE": "the service-account JSON (.gcp-service-account.json)",
    "W8_CHROMIUM": "the Chromium executable of the harvest (/usr/bin/chromium)",
    "W8_CT2_CACHE": "where the ct2 operator keeps its converted models (each step sets <run>/cache/ct2; else .w8-biayn/ct2)",
    "W8_GGUF_CACHE": "where the llamacpp operator keeps its GGUF copies (each step sets <run>/cache/gguf; else "
                     ".w8-biayn/gguf)",
    "W8_FAKE_GPU_TRAINER": "tests only: the fake GPU trainer's result file (tests/fake_gpu)",
    "W8_TEST_SECRET": "tests only: a secret the sandbox must not leak",
}
