"""The programs the Daytona backend sends: the runner script, the version check, the network probe.

    from harness.daytona_programs import daytona_script, marker_line, PROBE_PROGRAM, VERSION_SCRIPT
    response = sandbox.process.code_run(daytona_script(request))
    marker_line(response)        # the runner's JSON reply line, or None

The runner script is harness/sandbox_runner.py's own source plus a call of its one-shot runner,
so the remote side runs the local runner's code on the sandbox's own Python. The version check
is valid on any Python (an old interpreter is named, not a SyntaxError); the probe program is a
harness whose verdicts say whether a TCP connect and a DNS lookup succeeded inside the sandbox.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from harness.sandbox_protocol import RUNNER_PATH
from harness.sandbox_runner import RESULT_MARKER

VERSION_SCRIPT = ('import sys\nsys.stdout.write("%s" + ".".join(str(v) for v in sys.version_info[:3]) + "\\n")\n'
                  % RESULT_MARKER)  # valid on any Python, so an old interpreter is named, not a SyntaxError

PROBE_PROGRAM = '''\
import socket
import threading

def _tcp():
    try:
        socket.create_connection(({host!r}, {port!r}), timeout=3).close()
        return True
    except Exception:
        return False

def _dns():
    found = []

    def look():
        try:
            found.append(bool(socket.getaddrinfo({name!r}, 443)))
        except Exception:
            found.append(False)

    worker = threading.Thread(target=look, daemon=True)
    worker.start()
    worker.join(5)
    return bool(found and found[0])

REACHED = {{"tcp": _tcp(), "dns": _dns()}}

def is_legal_action(state, action):
    return REACHED[action]
'''


def marker_line(response: Any) -> str | None:
    """The runner's result line in a code_run response (the last line after RESULT_MARKER), or None."""
    text = str(getattr(response, "result", "") or "")
    lines = [ln for ln in text.splitlines() if ln.startswith(RESULT_MARKER)]
    return lines[-1][len(RESULT_MARKER):] if lines else None


def daytona_script(req: dict) -> str:
    """The runner's source plus a call of its one-shot runner on the request."""
    with open(RUNNER_PATH, encoding="utf-8") as f:
        source = f.read()
    payload = base64.b64encode(json.dumps(req).encode()).decode()
    return f"{source}\n\n_run_once({payload!r})\n"
