"""A stand-in for the Daytona service on 127.0.0.1, for the real `daytona` SDK to talk to.

    stub = DaytonaStub(python="/usr/bin/python3.11").start()   # DAYTONA_API_URL=stub.api_url
    stub.inject("code_run", status=429, headers={"Retry-After": "0"})
    ...
    stub.stop()

Standard library only (http.server in a thread). Routes, as the SDK calls them:
POST /api/sandbox (create: answers a started sandbox whose toolboxProxyUrl points back
here), GET /api/sandbox/<id> (refresh), GET /api/sandbox?labels=... (list), DELETE
/api/sandbox/<id>, and POST /toolbox/<id>/process/code-run, which runs the submitted
script with `python` in a subprocess (in an empty network namespace when `netns` is set
and `unshare` works) and answers {exitCode, result, artifacts}. Anything else (the SDK's
Socket.IO request among them) gets 404. Every request is recorded (method, path, headers,
body); `inject` queues faults per route: a status with headers, a delay before the answer,
taking effect after `after` matching calls, `times` times.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

ERROR_SENTINEL = "STUB-ERROR-BODY-DETAIL"  # in every error body and header: must never reach a log
REASONS = {404: "Not Found", 410: "Gone", 429: "Too Many Requests", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout", 401: "Unauthorized"}


def find_python(below: tuple[int, int] | None = None, at_least: tuple[int, int] | None = None,
                readable: bool = True) -> str | None:
    """An interpreter on this machine within the version bounds (and, with `readable`, one the runner
    can use here: as root the runner drops to a uid of its own before a program imports anything, so
    the interpreter's standard library must be readable by others; pyenv's under /root is not)."""
    for python, version, stdlib_readable in _interpreters():
        if (below and version >= below) or (at_least and version < at_least):
            continue
        if readable and os.geteuid() == 0 and not stdlib_readable:
            continue
        return python
    return None


@functools.lru_cache(maxsize=1)
def _interpreters() -> list[tuple[str, tuple[int, int], bool]]:
    """(path, (major, minor), stdlib readable by others) for the interpreters installed here (no shims)."""
    candidates = [sys.executable, *(f"{folder}/python3.{minor}" for folder in ("/usr/bin", "/usr/local/bin")
                                    for minor in range(14, 5, -1)),
                  *sorted((str(p) for p in Path.home().glob(".pyenv/versions/*/bin/python")), reverse=True)]
    found = []
    for python in dict.fromkeys(candidates):
        if not os.path.exists(python):
            continue
        try:
            done = subprocess.run([python, "-S", "-c", "import os, sys; print(sys.version_info[0], "
                                   "sys.version_info[1], os.path.realpath(os.__file__))"],
                                  capture_output=True, text=True, timeout=20)
            major, minor, stdlib = done.stdout.split(None, 2)
            found.append((python, (int(major), int(minor)), _readable_by_others(stdlib.strip())))
        except (OSError, ValueError, subprocess.TimeoutExpired):
            continue
    return found


def _readable_by_others(path: str) -> bool:
    mode_ok = os.stat(path).st_mode & 0o004
    folder = os.path.dirname(path)
    while mode_ok and folder not in ("/", ""):
        mode_ok = os.stat(folder).st_mode & 0o001
        folder = os.path.dirname(folder)
    return bool(mode_ok)


def netns_prefix() -> list[str] | None:
    """The command prefix that runs a process in an empty network namespace here, or None."""
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    for prefix in ([unshare, "-n"], [unshare, "-rn"]):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


class DaytonaStub:
    """The service: sandboxes, recorded requests, queued faults, code-runs in flight."""

    def __init__(self, python: str = sys.executable, cpu: int = 1, memory: int = 1,
                 network_block_all: bool | None = None, netns: bool = False):
        self.python, self.cpu, self.memory, self.netns = python, cpu, memory, netns
        self.network_block_all = network_block_all  # None: echo what create asked for
        self.requests: list[dict] = []
        self.sandboxes: dict[str, dict] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.faults: list[dict] = []
        self.calls: dict[str, int] = {}
        self.active = self.max_active = 0
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.prefix = netns_prefix() if netns else None

    # ---- control -------------------------------------------------------------------------
    def start(self) -> "DaytonaStub":
        stub = self

        class Handler(_Handler):
            owner = stub

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def api_url(self) -> str:
        return self.base + "/api"

    def inject(self, route: str, status: int | None = None, times: int = 1, after: int = 0,
               headers: dict | None = None, delay_s: float = 0.0) -> None:
        """Queue a fault on route (create, get, list, delete, code_run)."""
        with self.lock:
            self.faults.append({"route": route, "status": status, "times": times, "after": after,
                                "headers": dict(headers or {}), "delay_s": delay_s})

    def expire(self, sandbox_id: str) -> None:
        """The service deletes a sandbox by itself (idle auto-stop of an ephemeral one)."""
        with self.lock:
            self.sandboxes.pop(sandbox_id, None)

    def routed(self, route: str) -> list[dict]:
        return [r for r in self.requests if r["route"] == route]

    def live(self) -> list[str]:
        with self.lock:
            return list(self.sandboxes)

    # ---- what the handler asks ---------------------------------------------------------------
    def take_fault(self, route: str) -> dict | None:
        with self.lock:
            self.calls[route] = self.calls.get(route, 0) + 1
            for fault in self.faults:
                if fault["route"] != route or fault["times"] <= 0:
                    continue
                if fault["after"] > 0:
                    fault["after"] -= 1
                    continue
                fault["times"] -= 1
                return fault
        return None

    def create(self, body: dict) -> dict:
        sandbox_id = uuid.uuid4().hex[:12]
        block = body.get("networkBlockAll") if self.network_block_all is None else self.network_block_all
        sandbox = {
            "id": sandbox_id, "organizationId": "org-stub", "name": sandbox_id, "snapshot": "stub-python",
            "user": "daytona", "env": {}, "labels": dict(body.get("labels") or {}), "public": False,
            "networkBlockAll": bool(block), "kvm": False, "target": "us", "cpu": self.cpu, "gpu": 0,
            "memory": self.memory, "disk": 3, "state": "started", "desiredState": "started",
            "autoStopInterval": body.get("autoStopInterval"), "autoDeleteInterval": body.get("autoDeleteInterval"),
            "toolboxProxyUrl": self.base + "/toolbox",
        }
        with self.lock:
            self.sandboxes[sandbox_id] = sandbox
            self.created.append(sandbox_id)
        return sandbox

    def code_run(self, body: dict) -> dict:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        folder = tempfile.mkdtemp(prefix="w8-daytona-stub-")  # the script's /tmp too: removed after every run
        os.chmod(folder, 0o711)  # the runner, as root, drops to a uid of its own inside it
        try:
            path = os.path.join(folder, "main.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(body.get("code") or "")
            command = [*(self.prefix or []), self.python, path]
            try:
                done = subprocess.run(command, capture_output=True, text=True, cwd=folder, timeout=body.get("timeout"),
                                      env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": folder, "TMPDIR": folder})
                exit_code, out = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired as err:
                exit_code, out = None, str(err.stdout or "")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            with self.lock:
                self.active -= 1
        return {"exitCode": exit_code, "result": out, "artifacts": {"stdout": out, "charts": []}}


class _Handler(BaseHTTPRequestHandler):
    owner: DaytonaStub
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:  # noqa: A002  (http.server's signature)
        pass

    def _route(self, method: str, parts: list[str]) -> str:
        if parts[:2] == ["api", "sandbox"]:
            if len(parts) == 2:
                return {"POST": "create", "GET": "list"}.get(method, "other")
            if len(parts) == 3:
                return {"GET": "get", "DELETE": "delete"}.get(method, "other")
        if parts[:1] == ["toolbox"] and parts[2:] == ["process", "code-run"] and method == "POST":
            return "code_run"
        return "other"

    def _handle(self, method: str) -> None:
        stub = self.owner
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"raw": raw.decode(errors="replace")}
        route = self._route(method, parts)
        with stub.lock:
            stub.requests.append({"method": method, "path": self.path, "route": route,
                                  "headers": dict(self.headers.items()), "body": body})
        fault = stub.take_fault(route) if route != "other" else None
        if route == "create" and fault and fault["delay_s"] and not fault["status"]:
            created = stub.create(body)  # the service made the sandbox; its answer comes too late
            time.sleep(fault["delay_s"])
            return self._json(200, created)
        if fault and fault["delay_s"]:
            time.sleep(fault["delay_s"])
        if fault and fault["status"]:
            return self._error(fault["status"], fault["headers"])
        if route == "create":
            return self._json(200, stub.create(body))
        if route == "list":
            wanted = json.loads(parse_qs(url.query).get("labels", ["{}"])[0])
            with stub.lock:
                items = [s for s in stub.sandboxes.values() if wanted.items() <= s["labels"].items()]
            return self._json(200, {"items": items, "nextCursor": None})
        if route in ("get", "delete"):
            with stub.lock:
                sandbox = stub.sandboxes.get(parts[2])
                if sandbox is not None and route == "delete":
                    del stub.sandboxes[parts[2]]
                    stub.deleted.append(parts[2])
            if sandbox is None:
                return self._error(404, {})
            return self._json(200, {**sandbox, "state": "destroying" if route == "delete" else sandbox["state"]})
        if route == "code_run":
            with stub.lock:
                known = parts[1] in stub.sandboxes
            if not known:
                return self._error(404, {})
            return self._json(200, stub.code_run(body))
        return self._error(404, {})

    def _json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status, REASONS.get(status))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (a read timeout): nothing to answer

    def _error(self, status: int, headers: dict) -> None:
        payload = {"statusCode": status, "message": REASONS.get(status, "error"), "error": REASONS.get(status, ""),
                   "detail": ERROR_SENTINEL}
        self._json(status, payload, {"X-Stub-Detail": ERROR_SENTINEL, **headers})

    def do_GET(self) -> None:  # noqa: N802  (http.server's names)
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")
