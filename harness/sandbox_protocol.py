"""What crosses the sandbox boundary, for every backend: the request out, the checked reply back.

    req = build_request(code, examples, timeout_s, per_example_s)   # code, states, actions, limits: no labels
    run = parse_reply(raw, n, wall_s, "local")                      # a HarnessRun, every field checked

Only each example's state and action leave the caller (labels never do), and nothing
from inside is trusted: the reply's types and lengths are checked before they become a
HarnessRun. `infra` marks a failure of the sandbox, not of the program (a run that
scored 0 because the sandbox broke says nothing about the code).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

from harness import sandbox_runner
from harness.sandbox_runner import ERROR_CHARS, MAX_CODE_CHARS, STDOUT_TAIL_CHARS

RUNNER_PATH = os.path.abspath(sandbox_runner.__file__)  # what a zygote runs, and what Daytona receives


class SandboxError(RuntimeError):
    """The sandbox itself cannot run (not a property of the program)."""



@dataclass(frozen=True)
class HarnessRun:
    """One program run on a list of examples.

    ok is False when the program could not be run as a whole (invalid, failed to
    load, wall-time limit, sandbox trouble); error then says why in one line.
    predictions has one entry per example: True/False, or None where that
    example failed (example_errors says why: exception, timeout, non-bool).
    """

    ok: bool
    error: str
    predictions: tuple[bool | None, ...]
    example_errors: tuple[str, ...]
    wall_s: float
    stdout_tail: str = ""
    backend: str = "local"
    infra: bool = False  # the sandbox failed, not the program: a score of 0 here says nothing about the code


def failed_run(n: int, error: str, wall_s: float, backend: str = "local", why: str = "not run",
            infra: bool = False) -> HarnessRun:
    return HarnessRun(False, error, (None,) * n, (why,) * n, wall_s, "", backend, infra)


def build_request(code: str, examples: Sequence[Any], timeout_s: float, per_example_s: float) -> dict:
    """The only data that crosses into the sandbox: code, states (deduplicated), actions, limits."""
    states: dict[str, int] = {}
    pairs = []
    for ex in examples:
        state, action = (ex["state"], ex["action"]) if isinstance(ex, dict) else (ex.state, ex.action)
        if not isinstance(state, str) or not isinstance(action, str):
            raise TypeError("each example needs a str state and a str action")
        pairs.append([states.setdefault(state, len(states)), action])
    return {"code": code, "states": list(states), "examples": pairs,
            "timeout_s": float(timeout_s), "per_example_s": float(per_example_s)}


def text_problem(code: Any) -> str:
    if not isinstance(code, str):
        return f"program must be text, got {type(code).__name__}"
    if not code.strip():
        return "empty program"
    if "\x00" in code:
        return "program contains NUL bytes"
    if len(code) > MAX_CODE_CHARS:
        return f"program is too long: {len(code)} characters > {MAX_CODE_CHARS}"
    return ""


def parse_reply(raw: Any, n: int, wall_s: float, backend: str) -> HarnessRun:
    """Trust nothing from inside: check every field's type and length."""
    if not isinstance(raw, dict):
        return failed_run(n, "sandbox reply was not an object", wall_s, backend, infra=True)
    if "fatal" in raw:
        return failed_run(n, f"sandbox error: {str(raw['fatal'])[:ERROR_CHARS]}", wall_s, backend, infra=True)
    preds, errors = raw.get("predictions"), raw.get("errors")
    if not (isinstance(preds, list) and isinstance(errors, list) and len(preds) == n == len(errors)
            and all(p is None or type(p) is bool for p in preds) and all(isinstance(e, str) for e in errors)
            and type(raw.get("ok")) is bool and isinstance(raw.get("error"), str)):
        return failed_run(n, "sandbox reply malformed", wall_s, backend, infra=True)
    out = raw.get("out") if isinstance(raw.get("out"), str) else ""
    return HarnessRun(raw["ok"], raw["error"][:ERROR_CHARS + 60], tuple(preds),
                      tuple(e[:ERROR_CHARS] for e in errors), wall_s, out[-STDOUT_TAIL_CHARS:], backend)
