"""Run model-written harness code on examples, isolated from the caller.

    from harness.sandbox import run_harness
    r = run_harness(code, [{"state": s, "action": a}, ...], timeout_s=2.0)
    r.ok, r.error, r.predictions, r.example_errors, r.wall_s, r.stdout_tail

Only `state` and `action` of each example leave the caller (an Example object
is reduced to those two fields here); labels never enter the process that runs
model code, so the caller scores the predictions. run_harness never raises
because of what the code does: every failure is a HarnessRun with a reason.
It raises SandboxError (one line) only when the sandbox itself cannot run
programs: a local worker that cannot start, or, with W8_SANDBOX=daytona asked
explicitly, a Daytona sandbox that cannot start (no key, service unreachable,
block not confirmed, Python too old) or that failed several programs in a
row; from then on every call raises it until close().

Local backend (harness/sandbox_local.py): a fork-server, a pool of zygote processes
(one per core) each in its own namespaces, a fresh process per program; what it does and
does not isolate is said there (and in docs/sandbox.md).

Daytona backend (harness/sandbox_daytona.py): W8_SANDBOX=daytona, or auto
with DAYTONA_API_KEY set. One Daytona sandbox per process, created with
network_block_all, ephemeral, an auto-stop, a TTL and labels; used only once
the service reports the block and a probe program inside reached neither a
TCP address nor DNS (sandbox_info() shows the probe and the runner's
isolation report). One `process.code_run` runs a whole program's examples
(sandbox_runner.py's one-shot runner, on the sandbox's own Python), at most
as many at once as the sandbox has CPUs. Transient errors are retried with
backoff, a vanished sandbox is recreated; a program the sandbox still failed
is an infra failure. In auto mode a sandbox that cannot start, or that fails
MAX_FAILED_PROGRAMS programs in a row, sends this and later programs to the
local backend with one log line; explicitly asked for, Daytona never falls
back (SandboxError instead). Every fallback is recorded in
sandbox_provenance(). The key is read from the env var only and masked in
every message.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any, Iterable

from harness.config import default
from harness.daytona_faults import describe, mask
from harness.sandbox_daytona import DaytonaBackend, DaytonaDown
from harness.sandbox_local import LocalPool
from harness.sandbox_protocol import (  # noqa: F401  (HarnessRun and SandboxError re-exported: the public API)
    RUNNER_PATH, HarnessRun, SandboxError, build_request, failed_run, parse_reply, text_problem,
)
from harness.sandbox_runner import (  # noqa: F401  (limits re-exported: tests and tools read them here)
    ERROR_CHARS, EXTRA_PROCESSES, FILE_SIZE_LIMIT_BYTES, MAX_CODE_CHARS, MAX_EXAMPLES, MEMORY_LIMIT_BYTES,
    OPEN_FILES_LIMIT, RESULT_MARKER, SANDBOX_UID_BASE, STDOUT_TAIL_CHARS,
)

log = logging.getLogger("harness.sandbox")


# ---- backend choice and the public API -----------------------------------

MODES = ("auto", "local", "daytona")  # W8_SANDBOX
# daytona_error: why Daytona, asked for explicitly, cannot run programs (every later call raises it)
_state: dict[str, Any] = {"pool": None, "daytona": None, "resolved": {}, "daytona_error": None}
_state_lock = threading.Lock()


def _choose_backend(mode: str) -> str:
    """local or daytona for the asked mode and DAYTONA_API_KEY (called under _state_lock).

    auto: Daytona when the key is set and its sandbox starts, else local with one log line and a
    recorded fallback. daytona: never local; SandboxError (one line) when it cannot start.
    """
    key = os.environ.get("DAYTONA_API_KEY", "")
    if mode == "local" or (mode == "auto" and not key):
        return "local"
    problem = _state["daytona_error"] or ("" if key else "W8_SANDBOX=daytona but DAYTONA_API_KEY is not set")
    if not problem and _state["daytona"] is not None:
        return "daytona"
    if not problem:
        backend = DaytonaBackend(api_key=key)
        try:
            backend.start()
            _state["daytona"] = backend
            return "daytona"
        except Exception as err:  # unreachable service, bad key, no block, old Python, SDK missing
            problem = "Daytona unavailable: " + mask(str(err) if isinstance(err, SandboxError) else describe(err, key),
                                                      key)
            backend.close()
    if mode == "daytona":
        if not _state["daytona_error"]:
            _state["daytona_error"] = problem
            log.error("sandbox: %s (W8_SANDBOX=daytona: not falling back to local)", problem)
        raise SandboxError(problem)
    log.warning("sandbox: %s; running harness code locally", problem)
    _note_fallback(problem)
    return "local"


def _local_pool() -> LocalPool:
    with _state_lock:
        if _state["pool"] is None:
            _state["pool"] = LocalPool(max(1, os.cpu_count() or 1))
        return _state["pool"]


def _backend(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"sandbox backend {mode!r}: expected one of {' | '.join(MODES)}")
    with _state_lock:
        if mode not in _state["resolved"]:
            _state["resolved"][mode] = _choose_backend(mode)
        return _state["resolved"][mode]


def _retire_daytona(mode: str, problem: str) -> bool:
    """Daytona stopped working: auto goes local for good; daytona raises from now on. The sandbox is
    deleted once no mode uses it (in-flight programs then end as infra failures). True for the first
    call per mode (the one that logs and records it)."""
    with _state_lock:
        first = _state["resolved"].get(mode) == "daytona"
        if mode == "daytona":
            _state["daytona_error"] = _state["daytona_error"] or problem
        _state["resolved"].pop(mode, None)
        if mode != "daytona":
            _state["resolved"][mode] = "local"
        backend = _state["daytona"]
        if backend is not None and "daytona" not in _state["resolved"].values():
            _state["daytona"] = None
            _provenance["daytona"] = backend.info()
        else:
            backend = None
    if backend is not None:
        backend.close()
    return first


def run_harness(code: str, examples: Iterable[Any], timeout_s: float | None = None,
                per_example_timeout_s: float | None = None, backend: str | None = None) -> HarnessRun:
    """Run `code` (Python source defining is_legal_action) on each example's (state, action).

    examples: dicts with "state" and "action", or objects with .state and
    .action (e.g. harness.dataset.Example; only those two fields are sent).
    timeout_s bounds the whole run (load + all examples); each example gets
    per_example_timeout_s (default: timeout_s / 4, at least 0.05 s). backend is
    W8_SANDBOX's value: auto | local | daytona. None takes the knob table's default
    (W8_SANDBOX_TIMEOUT_S, W8_SANDBOX); the pipeline always passes its knobs.
    Only cheap text checks run here; compiling, the function's presence and
    its arity are checked where the code runs (harness.interface.validate_code
    gives the full static diagnosis; harness.rewards calls it first).
    """
    examples = list(examples)
    started = time.monotonic()
    n = len(examples)
    if n > MAX_EXAMPLES:
        raise ValueError(f"at most {MAX_EXAMPLES} examples per run, got {n}")
    timeout_s = default("sandbox_timeout_s") if timeout_s is None else timeout_s
    mode = default("sandbox") if backend is None else backend
    per_example = per_example_timeout_s if per_example_timeout_s is not None else max(0.05, timeout_s / 4)
    req = build_request(code if isinstance(code, str) else "", examples, timeout_s, per_example)
    problem = text_problem(code)
    if problem:
        return failed_run(n, problem, time.monotonic() - started)
    _provenance["requested"].add(mode)
    try:
        run = _run_daytona(req, n, started, mode) if _backend(mode) == "daytona" else _run_local(req, n, started)
    except SandboxError:
        _count(None)
        raise
    _count(run)
    return run


def _run_local(req: dict, n: int, started: float) -> HarnessRun:
    reply, error = _local_pool().run(req)
    wall = time.monotonic() - started
    if reply is None:
        late = error.startswith("wall-time limit")  # the program's doing; a dead or garbled worker is ours
        return failed_run(n, error, wall, why="not finished: wall-time limit" if late else "not run", infra=not late)
    return parse_reply(reply, n, wall, "local")


def _run_daytona(req: dict, n: int, started: float, mode: str) -> HarnessRun:
    with _state_lock:
        backend = _state["daytona"]
    if backend is None:  # close() ran between choosing the backend and here
        return failed_run(n, "the Daytona backend was closed before the program ran", time.monotonic() - started,
                          "daytona", infra=True)
    try:
        return backend.run(req)
    except DaytonaDown as err:
        problem = mask(str(err), backend.api_key)
    except Exception as err:  # a fault of ours: one program's infra failure, never an exception out of here
        line = describe(err, backend.api_key)
        log.warning("sandbox: Daytona backend error: %s", line)
        return failed_run(n, f"Daytona backend error: {line}", time.monotonic() - started, "daytona", infra=True)
    first = _retire_daytona(mode, problem)
    if mode == "daytona":
        if first:
            log.error("sandbox: %s (W8_SANDBOX=daytona: stopping, not falling back to local)", problem)
        raise SandboxError(problem)
    if first:
        log.warning("sandbox: %s; running harness code locally from now on", problem)
        _note_fallback(problem)
    return _run_local(req, n, started)


# What actually ran in this process: programs per backend, sandbox (infra) failures, fallbacks,
# and the last Daytona sandbox's confirmed state.
_provenance: dict[str, Any] = {"requested": set(), "runs": {}, "infra_failures": 0, "fallbacks": [], "daytona": None}


def _count(run: HarnessRun | None) -> None:
    """One program done (None: the sandbox could not even start it)."""
    with _state_lock:
        if run is not None:
            _provenance["runs"][run.backend] = _provenance["runs"].get(run.backend, 0) + 1
        _provenance["infra_failures"] += 1 if run is None else int(run.infra)


_fallback_lock = threading.Lock()  # _note_fallback runs with and without _state_lock held


def _note_fallback(reason: str) -> None:
    with _fallback_lock:
        _provenance["fallbacks"].append({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "to": "local",
                                         "reason": reason})


def sandbox_provenance() -> dict:
    """Which backend ran this process's programs: what was asked, what is in use, counts per backend,
    sandbox failures, every fallback to local, and the Daytona sandbox's confirmed state (block, probe,
    Python, retries, recreations) if one was used (recorded in run_config.json and summary.md)."""
    with _state_lock:
        daytona = _state["daytona"].info() if _state["daytona"] is not None else _provenance["daytona"]
        with _fallback_lock:
            fallbacks = list(_provenance["fallbacks"])
        return {"requested": " + ".join(sorted(_provenance["requested"])) or "none",
                "backend": " + ".join(sorted(set(_state["resolved"].values()))) or None,
                "runs": dict(_provenance["runs"]), "infra_failures": _provenance["infra_failures"],
                "fallbacks": fallbacks, **({"daytona": daytona} if daytona else {})}


def merge_provenance(earlier: dict | None, later: dict | None) -> dict:
    """Two sandbox_provenance() records as one (earlier invocations', then this process's): what was asked and
    used joined, counts summed, fallbacks in order, the newest Daytona state. An arm's searches resumed in a new
    process keep the record of the programs its saved nodes ran (harness.traces)."""
    a, b = earlier or {}, later or {}

    def parts(key: str) -> set[str]:
        return {p for rec in (a, b) for p in str(rec.get(key) or "").split(" + ") if p and p != "none"}

    runs = dict(a.get("runs") or {})
    for backend, n in (b.get("runs") or {}).items():
        runs[backend] = runs.get(backend, 0) + n
    daytona = b.get("daytona") or a.get("daytona")
    return {"requested": " + ".join(sorted(parts("requested"))) or "none",
            "backend": " + ".join(sorted(parts("backend"))) or None, "runs": runs,
            "infra_failures": (a.get("infra_failures") or 0) + (b.get("infra_failures") or 0),
            "fallbacks": list(a.get("fallbacks") or []) + list(b.get("fallbacks") or []),
            **({"daytona": daytona} if daytona else {})}


def provenance_is_empty(record: dict | None) -> bool:
    """True when a record says nothing about where programs ran (none asked, no backend, no run)."""
    record = record or {}
    return not record.get("backend") and not record.get("runs") and record.get("requested") in (None, "", "none")


def sandbox_info(backend: str | None = None) -> dict:
    """Backend and what its isolation holds: for local, the workers' report (starts a worker if none ran
    yet); for daytona, the sandbox, the confirmed block, the probe and the runner's isolation report."""
    backend = _backend(default("sandbox") if backend is None else backend)
    if backend == "daytona":
        with _state_lock:
            daytona = _state["daytona"]
        return daytona.info() if daytona is not None else {"backend": "daytona", "closed": True}
    pool = _local_pool()
    if pool.isolation is None:
        pool._release(pool._acquire(), True)
    return {"backend": "local", "workers": pool.size, **(pool.isolation or {})}


def close() -> None:
    """Stop every worker and delete the Daytona sandbox; the next run starts afresh."""
    with _state_lock:
        pool, daytona = _state["pool"], _state["daytona"]
        _state.update(pool=None, daytona=None, resolved={}, daytona_error=None)
        if daytona is not None:
            _provenance["daytona"] = daytona.info()
    if pool is not None:
        pool.close()
    if daytona is not None:
        daytona.close()


def _forget_after_fork() -> None:
    """A forked caller must not share its parent's zygote pipes: start its own pool if it needs one."""
    _state.update(pool=None, daytona=None, resolved={}, daytona_error=None)


atexit.register(close)
os.register_at_fork(after_in_child=_forget_after_fork)
