"""The Daytona backend: each program runs in a remote Daytona sandbox, all its examples in one call.

    backend = DaytonaBackend(api_key=os.environ["DAYTONA_API_KEY"])
    backend.start()                  # create the sandbox: network blocked, ephemeral
    run = backend.run(request)       # one process.code_run with the runner script and the request
    backend.close()                  # delete it

The script is harness/sandbox_runner.py's own source plus a call of its one-shot runner,
so the remote side runs exactly the local runner. The key is read from the environment by
the caller and masked in every message (`mask`). harness.sandbox chooses this backend.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any

from harness.sandbox_protocol import RUNNER_PATH, HarnessRun, failed_run, parse_reply
from harness.sandbox_runner import RESULT_MARKER

log = logging.getLogger("harness.sandbox")


def _make_daytona_client(api_key: str) -> Any:
    """The SDK client (importing `daytona` costs seconds of CPU: only when the backend is chosen)."""
    import warnings
    from daytona import Daytona, DaytonaConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the SDK reads its own deprecated server_url
        return Daytona(DaytonaConfig(api_key=api_key))


def mask(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


class DaytonaBackend:
    """Runs each program in a Daytona sandbox: one `process.code_run` per program, all examples batched.

    `client` is a `daytona.Daytona` (built from DAYTONA_API_KEY when not given).
    The sandbox is created on first use with network_block_all and ephemeral,
    reused for later programs, and deleted by close().
    """

    def __init__(self, client: Any = None, api_key: str | None = None):
        self.api_key = api_key if api_key is not None else os.environ.get("DAYTONA_API_KEY", "")
        self.client = client if client is not None else _make_daytona_client(self.api_key)
        self.sandbox = None

    def start(self) -> None:
        """Create the remote sandbox (raises if the service cannot be reached)."""
        if self.sandbox is None:
            try:
                from daytona import CreateSandboxFromSnapshotParams
                params = CreateSandboxFromSnapshotParams(language="python", network_block_all=True, ephemeral=True)
            except ImportError:
                params = None  # a client without the SDK installed (e.g. a test double) takes defaults
            self.sandbox = self.client.create(params, timeout=60)

    def run(self, req: dict) -> HarnessRun:
        n, started = len(req["examples"]), time.monotonic()
        self.start()
        script = daytona_script(req)
        response = self.sandbox.process.code_run(script, timeout=int(math.ceil(req["timeout_s"] + 10)))
        wall = time.monotonic() - started
        text = str(getattr(response, "result", "") or "")
        lines = [ln for ln in text.splitlines() if ln.startswith(RESULT_MARKER)]
        if not lines:
            code = getattr(response, "exit_code", "?")
            return failed_run(n, f"daytona run gave no result (exit code {code})", wall, "daytona", infra=True)
        try:
            raw = json.loads(lines[-1][len(RESULT_MARKER):])
        except ValueError:
            return failed_run(n, "daytona run gave a malformed result", wall, "daytona", infra=True)
        return parse_reply(raw, n, wall, "daytona")

    def close(self) -> None:
        if self.sandbox is not None:
            try:
                self.client.delete(self.sandbox)
            except Exception as err:  # the service may be gone at exit; say so, masked
                log.warning("sandbox: could not delete the Daytona sandbox: %s",
                            mask(f"{type(err).__name__}: {err}", self.api_key)[:200])
            self.sandbox = None


def daytona_script(req: dict) -> str:
    """This file's source plus a call of its one-shot runner on the request."""
    import base64
    with open(RUNNER_PATH, encoding="utf-8") as f:
        source = f.read()
    payload = base64.b64encode(json.dumps(req).encode()).decode()
    return f"{source}\n\n_run_once({payload!r})\n"
