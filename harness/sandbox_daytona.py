"""The Daytona backend: each program runs in a remote Daytona sandbox, all its examples in one call.

    backend = DaytonaBackend(api_key=os.environ["DAYTONA_API_KEY"])
    backend.start()          # create (network blocked, ephemeral, labelled), confirm the block, probe
    run = backend.run(req)   # one process.code_run with the runner script and the request
    backend.info()           # what start confirmed: block, probe, the runner's isolation report
    backend.close()          # delete what was created

The script (harness/daytona_programs.py) is harness/sandbox_runner.py's own source plus a call of its one-shot runner
(`_run_once`), so the remote side runs the local runner's code on the sandbox's own
Python (checked once at start against RUNNER_MIN_PYTHON), without rebuilding namespaces.

Faults (harness/daytona_faults.py reads them off the SDK's exceptions): each call is
retried with exponential backoff and jitter, honouring Retry-After, on 429/500/502/503/504 and
on timeouts and dropped connections; a refused connection, a name that does not resolve and a
refused key (401/403) are not retried: auto falls back to local in seconds; a sandbox
that answers 404/410 (stopped when idle, then deleted as ephemeral) is recreated once per
program. A create that timed out may have left a sandbox (DaytonaTimeoutError carries no
sandbox id in 0.210.0): each create carries a unique `w8-create` label, and whatever a
failed attempt left is listed by it and deleted (by close() if listing fails then).

A program the sandbox failed is an infra failure (HarnessRun.infra); after
MAX_FAILED_PROGRAMS such programs in a row `run` raises DaytonaDown and harness.sandbox
decides (fall back to local, or stop). A run that gave no result while the probe program
still runs is the program's doing (it broke its runner), not an infra failure. Programs
run at most `slots` at a time, sized to the sandbox's CPUs and memory. Errors are logged
as one line (type, status, first line), masked; no SDK object (DaytonaConfig's repr holds
the key) is ever printed or logged. check_service() is the doctor's reachability check.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable

from harness.daytona_faults import Backoff, classify, describe, may_have_reached, retry_after_s, status_of
from harness.sandbox_protocol import HarnessRun, SandboxError, build_request, failed_run, parse_reply
from harness.daytona_programs import PROBE_PROGRAM, VERSION_SCRIPT, daytona_script, marker_line
from harness.sandbox_runner import MEMORY_LIMIT_BYTES, RUNNER_MIN_PYTHON

log = logging.getLogger("harness.sandbox")

MAX_FAILED_PROGRAMS = 3  # programs in a row the sandbox failed (after retries) before DaytonaDown
AUTO_STOP_MINUTES = 30  # idle minutes before the service stops the sandbox (then deletes it: ephemeral)
TTL_MINUTES = 24 * 60  # the service destroys the sandbox this long after creation, whatever its state
CREATE_TIMEOUT_S = 120.0
DELETE_TIMEOUT_S = 30.0
RUN_MARGIN_S = 10  # code_run's timeout: the request's wall time plus this (the runner enforces the wall time)
LABEL_APP = "agent-rein"
PROBE_TCP = ("1.1.1.1", 53)  # a public address the probe must not reach
PROBE_DNS = "example.com"  # a public name the probe must not resolve
PROBE_TIMEOUT_S = 15.0
CLEANUP_ATTEMPTS = 3  # tries of a delete or list: cleanup must not hold a fallback or an exit for minutes

class DaytonaDown(SandboxError):
    """The Daytona sandbox failed MAX_FAILED_PROGRAMS programs in a row: not a property of the programs."""


class _Closed(Exception):
    """close() ran while a program waited or ran."""


class _CallFailed(Exception):
    """One SDK call failed for good (retries spent, or an error not worth retrying); str is one masked line."""

    def __init__(self, line: str, kind: str):
        super().__init__(line)
        self.kind = kind


def _make_daytona_client(api_key: str) -> Any:
    """The SDK client (importing `daytona` costs seconds of CPU: only when the backend is chosen).

    The API URL comes from DAYTONA_API_URL (the SDK reads it from the process environment).
    """
    import warnings
    from daytona import Daytona, DaytonaConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the SDK reads its own deprecated server_url
        return Daytona(DaytonaConfig(api_key=api_key))


def _sdk_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("daytona")
    except PackageNotFoundError:
        return "unknown"


class DaytonaBackend:
    """Runs each program in one shared Daytona sandbox; thread-safe.

    `client` is a `daytona.Daytona` (built from the key when not given); `backoff`,
    `probe_tcp`, `probe_dns`, `create_timeout_s` and `run_margin_s` are injectable for tests.
    """

    def __init__(self, api_key: str | None = None, client: Any = None, backoff: Backoff | None = None,
                 probe_tcp: tuple[str, int] = PROBE_TCP, probe_dns: str = PROBE_DNS,
                 create_timeout_s: float = CREATE_TIMEOUT_S, run_margin_s: int = RUN_MARGIN_S):
        self.api_key = api_key if api_key is not None else os.environ.get("DAYTONA_API_KEY", "")
        self.backoff = backoff or Backoff()
        self.probe_tcp, self.probe_dns = probe_tcp, probe_dns
        self.create_timeout_s, self.run_margin_s = create_timeout_s, run_margin_s
        self._client = client
        self._lock = threading.RLock()  # sandbox, slots, counters, info; held while creating
        self._sandbox: Any = None
        self._slots: threading.BoundedSemaphore | None = None
        self._closed = False
        self._failures = 0  # programs in a row the sandbox failed
        self._orphan_tokens: list[str] = []  # create labels whose sandbox may exist and could not be deleted
        self._info: dict[str, Any] = {}
        self.stats = {"created": 0, "recreated": 0, "retries": 0, "failed_programs": 0, "deleted": 0}

    # ---- life cycle --------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the sandbox if there is none: raises SandboxError (one line) if it cannot be used."""
        with self._lock:
            if self._closed:
                raise _Closed()
            if self._sandbox is None:
                if self._client is None:
                    try:
                        self._client = _make_daytona_client(self.api_key)
                    except Exception as err:
                        raise SandboxError(f"Daytona client: {describe(err, self.api_key)}") from None
                sandbox, info = self._create_checked()
                self._sandbox, self._info = sandbox, info
                if self._slots is None:  # sized by the first sandbox; a recreated one comes from the same snapshot
                    self._slots = threading.BoundedSemaphore(info["slots"])

    def info(self) -> dict:
        """What start confirmed: sandbox, resources, slots, the block, the probe, the runner's report."""
        with self._lock:
            return {**json.loads(json.dumps(self._info)), "stats": dict(self.stats)}

    def close(self) -> None:
        """Delete the sandbox and any sandbox a timed-out create may have left; later runs fail as closed."""
        with self._lock:
            self._closed = True
            sandbox, self._sandbox = self._sandbox, None
            tokens, self._orphan_tokens = self._orphan_tokens, []
        if sandbox is not None:
            self._delete(sandbox)
        for token in tokens:
            self._delete_labelled(token, keep=None)

    # ---- one program ---------------------------------------------------------------------------------
    def run(self, req: dict) -> HarnessRun:
        """Run one request; an infra failure is a failed HarnessRun, the MAX_FAILED_PROGRAMS-th in a row
        raises DaytonaDown. A concurrent close() gives a failed (infra) run, never an exception."""
        n, started = len(req["examples"]), time.monotonic()
        try:
            self.start()
            with self._slots:
                response = self._execute(req)
                line = marker_line(response)
                if line is None and self._canary_ok():
                    self._succeeded()  # the sandbox runs the probe: this program broke its own runner
                    code = getattr(response, "exit_code", None)
                    return failed_run(n, f"the program broke the remote runner (exit code {code})",
                                      time.monotonic() - started, "daytona")
        except _Closed:
            return failed_run(n, "the Daytona backend was closed while the program waited", time.monotonic() - started,
                              "daytona", infra=True)
        except (_CallFailed, SandboxError) as err:
            return self._failed(n, started, f"Daytona run failed: {err}")
        wall = time.monotonic() - started
        if line is None:
            code = getattr(response, "exit_code", None)
            return self._failed(n, started, f"daytona run gave no result (exit code {code})")
        try:
            raw = json.loads(line)
        except ValueError:
            return self._failed(n, started, "daytona run gave a malformed result")
        run = parse_reply(raw, n, wall, "daytona")
        if run.infra:
            return self._failed(n, started, run.error)
        self._succeeded()
        return run

    def _succeeded(self) -> None:
        with self._lock:
            self._failures = 0

    def _failed(self, n: int, started: float, line: str) -> HarnessRun:
        with self._lock:
            self._failures += 1
            self.stats["failed_programs"] += 1
            down = self._failures >= MAX_FAILED_PROGRAMS
        if down:
            raise DaytonaDown(f"Daytona failed {MAX_FAILED_PROGRAMS} programs in a row (last: {line})")
        log.warning("sandbox: %s", line)
        return failed_run(n, line, time.monotonic() - started, "daytona", infra=True)

    def _canary_ok(self) -> bool:
        """After a program gave no result: does the sandbox still run the probe program?"""
        try:
            return marker_line(self._execute(self._probe_request())) is not None
        except (_CallFailed, SandboxError):
            return False

    def _current(self) -> Any:
        with self._lock:
            if self._closed:
                raise _Closed()
            if self._sandbox is None:
                self.start()
            return self._sandbox

    def _execute(self, req: dict, sandbox: Any = None) -> Any:
        """One code_run of the runner on `req`, retried; on the shared sandbox (recreated once if gone)
        unless `sandbox` is given. Raises _CallFailed, _Closed or SandboxError (recreation failed)."""
        script = daytona_script(req)
        timeout = int(math.ceil(req["timeout_s"] + self.run_margin_s))
        return self._retry("code_run", lambda box: box.process.code_run(script, timeout=timeout), sandbox)

    def _retry(self, what: str, call: Callable[[Any], Any], target: Any = None, attempts: int | None = None,
               on_error: Callable[[BaseException], None] | None = None) -> Any:
        """call(target), retried with backoff (backoff.attempts tries, or `attempts`); target None: the
        shared sandbox, recreated once if gone. `on_error` sees every exception."""
        recreated, attempt = target is not None, 0
        attempts = min(attempts or self.backoff.attempts, self.backoff.attempts)
        while True:
            box = target if target is not None else self._current()
            try:
                return call(box)
            except Exception as err:
                kind, line = classify(err), describe(err, self.api_key)
                retry_after = retry_after_s(err)
                if on_error is not None:
                    on_error(err)
            if kind == "gone" and not recreated:
                recreated = True
                self._recreate(box, line)
                continue
            attempt += 1
            if kind != "retry" or attempt >= attempts:
                why = {"retry": f" (after {attempt} tries)", "unreachable": " (unreachable: not retried)"}
                raise _CallFailed(f"{what}: {line}{why.get(kind, '')}", kind)
            delay = self.backoff.delay(attempt - 1, retry_after)
            with self._lock:
                self.stats["retries"] += 1
            log.info("sandbox: Daytona %s: %s; retry %d in %.1fs", what, line, attempt, delay)
            self.backoff.sleep(delay)

    def _recreate(self, gone: Any, line: str) -> None:
        with self._lock:
            if self._closed:
                raise _Closed()
            if self._sandbox is not gone:
                return  # another thread already replaced it
            log.warning("sandbox: Daytona sandbox %s is gone (%s); creating a new one", gone.id, line)
            self._sandbox = None
            self._delete(gone)
            self.start()
            self.stats["recreated"] += 1

    # ---- create, check, delete ------------------------------------------------------------------------
    def _params(self, token: str) -> Any:
        try:
            from daytona import CreateSandboxFromSnapshotParams
        except ImportError as err:
            raise SandboxError(f"cannot request a network-blocked Daytona sandbox ({err}); not creating one") from None
        labels = {"app": LABEL_APP, "w8-host": socket.gethostname()[:60] or "unknown", "w8-pid": str(os.getpid()),
                  "w8-create": token}
        return CreateSandboxFromSnapshotParams(language="python", network_block_all=True, ephemeral=True,
                                               auto_stop_interval=AUTO_STOP_MINUTES, ttl_minutes=TTL_MINUTES,
                                               labels=labels)

    def _create(self) -> Any:
        """client.create, retried; a sandbox that a failed attempt may have left behind is found by its
        create label and deleted (the SDK's DaytonaTimeoutError carries no sandbox id)."""
        token = uuid.uuid4().hex[:16]
        params = self._params(token)
        reached: list[bool] = []  # per failed attempt: may it have created a sandbox anyway?
        try:
            sandbox = self._retry("create", lambda client: client.create(params, timeout=self.create_timeout_s),
                                  self._client, on_error=lambda err: reached.append(may_have_reached(err)))
        except _CallFailed as err:
            if any(reached):
                self._delete_labelled(token, keep=None)
            raise SandboxError(f"Daytona {err}") from None
        if any(reached):
            self._delete_labelled(token, keep=getattr(sandbox, "id", None))
        self.stats["created"] += 1
        return sandbox

    def _create_checked(self) -> tuple[Any, dict]:
        """Create, refuse a sandbox without the network block, check its Python, run the probe program."""
        sandbox = self._create()
        try:
            return sandbox, self._check(sandbox)
        except BaseException:
            self._delete(sandbox)
            raise

    def _check(self, sandbox: Any) -> dict:
        sid = getattr(sandbox, "id", "?")
        block = getattr(sandbox, "network_block_all", None)
        if block is not True:
            raise SandboxError(f"Daytona sandbox {sid} came back with network_block_all={block!r} (an organisation "
                               "policy can override it): deleted; no model code runs without the block")
        try:
            version_text = marker_line(self._retry("version check", lambda box: box.process.code_run(
                VERSION_SCRIPT, timeout=30), sandbox)) or ""
        except _CallFailed as err:
            raise SandboxError(f"Daytona sandbox {sid}: {err}") from None
        try:
            version = tuple(int(v) for v in version_text.strip().split("."))
        except ValueError:
            version = ()
        needed = ".".join(map(str, RUNNER_MIN_PYTHON))
        if len(version) < 2 or version[:2] < RUNNER_MIN_PYTHON:
            raise SandboxError(f"Daytona sandbox {sid}: its Python ({version_text.strip() or 'none found'}) is older "
                               f"than the runner needs ({needed}); pick a snapshot with Python >= {needed}")
        probe = self._probe(sandbox)
        cpu, memory = int(getattr(sandbox, "cpu", 1) or 1), float(getattr(sandbox, "memory", 1) or 1)
        slots = max(1, min(cpu, int(memory * (1 << 30) // MEMORY_LIMIT_BYTES)))
        return {"backend": "daytona", "sandbox": sid, "cpu": cpu, "memory_gib": memory, "slots": slots,
                "network_block_all": True, "network": "blocked: requested, reported by the service, and the probe "
                "program reached neither a TCP address nor DNS", "probe": probe["reached"],
                "python": version_text.strip(), "isolation": probe["isolation"], "sdk": f"daytona {_sdk_version()}",
                "auto_stop_minutes": AUTO_STOP_MINUTES, "ttl_minutes": TTL_MINUTES}

    def _probe_request(self) -> dict:
        code = PROBE_PROGRAM.format(host=self.probe_tcp[0], port=self.probe_tcp[1], name=self.probe_dns)
        examples = [{"state": "probe", "action": "tcp"}, {"state": "probe", "action": "dns"}]
        return build_request(code, examples, PROBE_TIMEOUT_S, 1.0)

    def _probe(self, sandbox: Any) -> dict:
        """The probe program, through the runner: neither the TCP connect nor the DNS lookup may succeed."""
        sid = getattr(sandbox, "id", "?")
        try:
            line = marker_line(self._execute(self._probe_request(), sandbox))
            raw = json.loads(line) if line is not None else None
        except _CallFailed as err:
            raise SandboxError(f"Daytona sandbox {sid}: the network probe failed: {err}") from None
        except ValueError:
            raw = None
        run = parse_reply(raw, 2, 0.0, "daytona")
        if raw is None or not run.ok:
            raise SandboxError(f"Daytona sandbox {sid}: the network probe program did not run "
                               f"({run.error or 'no result'}): deleted; the block is not confirmed")
        target = f"{self.probe_tcp[0]}:{self.probe_tcp[1]}"
        reached = {"tcp " + target: run.predictions[0], "dns " + self.probe_dns: run.predictions[1]}
        if run.predictions != (False, False):
            seen = ", ".join(k for k, v in reached.items() if v is not False)
            raise SandboxError(f"Daytona sandbox {sid}: the network probe reached {seen} despite network_block_all: "
                               "deleted; no model code runs there")
        isolation = raw.get("isolation") if isinstance(raw.get("isolation"), dict) else {}
        return {"reached": reached, "isolation": json.loads(json.dumps(isolation))}

    def _delete(self, sandbox: Any) -> None:
        """Delete, retried; a sandbox already gone counts as deleted. Failures are logged, masked."""
        try:
            self._retry("delete", lambda box: self._client.delete(box, timeout=DELETE_TIMEOUT_S), sandbox,
                        CLEANUP_ATTEMPTS)
        except _CallFailed as err:
            if err.kind != "gone":
                log.warning("sandbox: could not delete the Daytona sandbox %s: %s", getattr(sandbox, "id", "?"), err)
                return
        with self._lock:
            self.stats["deleted"] += 1

    def _delete_labelled(self, token: str, keep: str | None) -> None:
        """Delete every sandbox carrying this create label except `keep`; remember the label if listing fails."""
        try:
            from daytona import ListSandboxesQuery
            query = ListSandboxesQuery(labels={"w8-create": token})
            found = self._retry("list", lambda client: list(client.list(query)), self._client, CLEANUP_ATTEMPTS)
        except (_CallFailed, ImportError) as err:
            log.warning("sandbox: could not look for a Daytona sandbox left by a failed create: %s", err)
            with self._lock:
                self._orphan_tokens.append(token)
            return
        for sandbox in found:
            if getattr(sandbox, "id", None) != keep:
                log.warning("sandbox: deleting Daytona sandbox %s left by a failed create", sandbox.id)
                self._delete(sandbox)


def check_service(api_key: str, timeout_s: float = 10.0) -> tuple[bool | None, str]:
    """One authenticated request (list one sandbox), no retries: (True, text) reachable and the key
    accepted, (False, text) reached but refused, (None, text) not reachable. Creates nothing."""
    url = os.environ.get("DAYTONA_API_URL") or "https://app.daytona.io/api (the SDK's default)"
    try:
        from daytona import ListSandboxesQuery
        client = _make_daytona_client(api_key)
        next(iter(client.list(ListSandboxesQuery(limit=1), request_timeout=timeout_s)), None)
    except Exception as err:
        line, status = describe(err, api_key), status_of(err)
        if status in (401, 403):
            return False, f"{url} refused the key: {line}"
        if status is not None:
            return False, f"{url} answered with an error: {line}"
        return None, f"not reachable at {url}: {line}"
    return True, f"reachable at {url}, key accepted"
