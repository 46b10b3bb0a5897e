"""The local sandbox backend: a pool of zygote processes running harness/sandbox_runner.py.

    from harness.sandbox_local import LocalPool
    pool = LocalPool(size=2)
    reply, trouble = pool.run(request)     # harness.sandbox_protocol request -> (reply, "") or (None, reason)

Local backend: a fork-server. A pool of zygote processes (one per core,
started lazily), each a fresh `python -S -s -P` running this file (standard
library only, none of the caller's modules or data) in a scrubbed
environment. As root on Linux a zygote enters new mount, pid, network, ipc
and uts namespaces, pivots into a root holding only read-only /usr, /lib*,
/bin, /sbin, the Python installation, /dev/{null,zero,random,urandom} and a
small private tmpfs /tmp, detaches the old root, drops to a uid no other
process has (no capabilities, no_new_privs, dumpable=0) and installs a
seccomp filter (no namespaces, mounts, ptrace, bpf, io_uring, keyrings, ...).
Without root it tries the same inside a user namespace.

Per program the zygote compiles the code (nothing runs yet) and forks a
process in its own group with rlimits (address space, CPU, processes, file
size, open files, no core) that runs the top level and then every example
under one interval timer (an example that runs over its limit gets an
exception), recording results in a shared page and errors on a pipe. The
zygote enforces the per-example and wall deadlines itself with poll() and
SIGKILL (of the group, and as pid-namespace init of every other process, so
nothing survives), resumes in a fresh process after an example that hung or
killed its process, replies, then cleans up and wipes /tmp. The caller holds
its own deadline on the reply and SIGKILLs a late zygote, which takes its
whole pid namespace with it. No threads or asyncio timeouts are involved.

What holds (namespaces available, as here): the repo, $HOME and the benchmark
snapshot do not exist inside; no network (an empty network namespace); no
writes outside the private /tmp; no process survives a program; the caller's
memory and environment are out of reach (no /proc, another uid, no ptrace);
printed output is capped to a tail; one program cannot affect the next (a
fresh process each, /tmp wiped). What does not: the kernel itself (the
syscalls the filter allows are reachable by an unprivileged uid), CPU time
(shared with the caller), and the Python standard library, which model code
may import. Fallback (no namespaces: not root and no user namespaces): only
the rlimits, the process-group kill, the scrubbed environment and a private
working directory hold; the repo is readable and the network reachable;
sandbox_info() and a log line say so.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from harness import sandbox_runner
from harness.sandbox_protocol import RUNNER_PATH, SandboxError

REPLY_CAP_BYTES = 4 << 20  # bytes the caller reads from a zygote per program
REPLY_GRACE_S = 1.0  # the caller kills a zygote whose reply is this late
WORKER_START_TIMEOUT_S = 15.0


log = logging.getLogger("harness.sandbox")  # one logger for the sandbox, whichever backend

ENV_ALLOW = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
             "HOME": "/tmp", "TMPDIR": "/tmp", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}



class _Worker:
    """One zygote process and its pipes."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-s", "-P", "-B", RUNNER_PATH, "--zygote"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(ENV_ALLOW),
            cwd="/", close_fds=True, start_new_session=True)
        self.buf = bytearray()
        line = self._read_line(time.monotonic() + WORKER_START_TIMEOUT_S)
        try:
            self.isolation = json.loads(line)["isolation"] if line else None
        except (ValueError, KeyError, TypeError):
            self.isolation = None
        if not isinstance(self.isolation, dict):
            self.isolation = {}
            self.kill()
            raise SandboxError(f"sandbox worker did not start ({sys.executable} -S {RUNNER_PATH} --zygote)")

    def _read_line(self, deadline: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or len(self.buf) > REPLY_CAP_BYTES:
                return None
            if poller.poll(int(left * 1000) + 1):
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return None
                self.buf += chunk
        end = self.buf.index(b"\n")
        line = bytes(self.buf[:end])
        del self.buf[:end + 1]
        return line

    def run(self, req: dict) -> tuple[Any, str]:
        """Send one request: (reply object, "") or (None, "dead" | "died" | "late" | "garbled").

        "dead": the zygote was gone before the request (safe to retry elsewhere).
        """
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return None, "dead"
        deadline = time.monotonic() + req["timeout_s"] + REPLY_GRACE_S
        line = self._read_line(deadline)
        if line is None:
            return None, "late" if time.monotonic() >= deadline else "died"
        try:
            return json.loads(line), ""
        except ValueError:
            return None, "garbled"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the launcher's group: the zygote (pid-namespace init) with it, so every program too."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        fallback_dir = str(self.isolation.get("private_dir", ""))
        if os.path.basename(fallback_dir).startswith(sandbox_runner.FALLBACK_DIR_PREFIX) and \
                os.path.dirname(fallback_dir) == tempfile.gettempdir():
            shutil.rmtree(fallback_dir, ignore_errors=True)  # only the zygote's own temp dir, never another path


class LocalPool:
    """Zygote workers, started lazily up to `size`, shared by threads."""

    def __init__(self, size: int):
        self.size, self.idle, self.count = size, [], 0
        self.cond = threading.Condition()
        self.isolation: dict | None = None
        self.closed = False

    def _acquire(self) -> _Worker:
        while True:
            with self.cond:
                while not self.idle and self.count >= self.size:
                    self.cond.wait()
                if not self.idle:
                    self.count += 1
                    break
                worker = self.idle.pop()
            if worker.alive():
                return worker
            self._release(worker, False)  # died while idle (killed from outside): start another
        try:
            worker = _Worker()
        except BaseException:
            with self.cond:
                self.count -= 1
                self.cond.notify()
            raise
        self._note_isolation(worker.isolation)
        return worker

    def _note_isolation(self, info: dict) -> None:
        if self.isolation is None:
            self.isolation = info
            if not info.get("namespaces") or info.get("filesystem") == "shared":
                log.warning("sandbox: weak isolation (%s): only rlimits, process-group kill and a scrubbed env "
                            "hold; the repo is readable and the network reachable from model code",
                            info.get("reason") or "no private root")

    def _release(self, worker: _Worker, healthy: bool) -> None:
        with self.cond:
            if healthy and not self.closed:
                self.idle.append(worker)
                worker = None
            else:
                self.count -= 1
            self.cond.notify()
        if worker is not None:
            worker.kill()

    def run(self, req: dict) -> tuple[Any, str]:
        """(reply, "") or (None, reason); a zygote found dead before the request is replaced once."""
        for attempt in range(2):
            worker = self._acquire()
            reply, trouble = worker.run(req)
            self._release(worker, not trouble and worker.alive())
            if trouble != "dead":
                break
        if trouble == "late":
            return None, f"wall-time limit of {req['timeout_s']:g}s exceeded (sandbox worker killed)"
        if trouble:
            return None, f"sandbox worker {trouble} while running the program (replaced)"
        return reply, ""

    def close(self) -> None:
        with self.cond:
            self.closed = True
            idle, self.idle = self.idle, []
            self.count -= len(idle)
        for worker in idle:
            worker.kill()
