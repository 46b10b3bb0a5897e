"""One process per run folder: an OS lock on <run>/.lock, held for the whole run.

    from harness.run_lock import lock_run, RunLocked
    lock_run(run_dir)            # or RunLocked: "run x is in use by pid 1234 (bash scripts/run_r3.sh) ..."
    lock_run(run_dir, fd=9)      # lock a descriptor the caller (scripts/run_r3.sh) holds open

Two runs of one id in one folder used to run side by side, write the same files and run the
machine out of memory. `fcntl.flock` locks belong to an open file: the kernel drops them when
the last descriptor closes, so a lock whose process was killed is simply free again (a stale
`.lock` file with a dead pid is taken over, nothing to clean up). scripts/run_r3.sh opens
`.lock` on descriptor 9 and has this module lock it; the lock then lives as long as the shell.
A step script run by that shell finds the lock held by its own ancestor and goes on; run alone,
it takes the lock itself. Standard library only (POSIX: Linux and macOS).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

LOCK_NAME = ".lock"
_HELD: list[IO[str]] = []  # lock files of this process, kept open: the lock lives as long as they do


class RunLocked(RuntimeError):
    """Another live process holds the run's lock; the message names it."""


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def ancestors() -> set[int]:
    """This process's parent, grandparent, ... (the parent alone where /proc is absent)."""
    found, pid = {os.getppid()}, os.getppid()
    while pid > 1 and (parent := _parent_of(pid)) is not None and parent not in found:
        found.add(parent)
        pid = parent
    return found


def describe(pid: int | None) -> str:
    """'pid 1234 (bash scripts/run_r3.sh)', the command line where /proc shows it."""
    if pid is None:
        return "another process"
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    return f"pid {pid}" + (f" ({command[:80]})" if command else "")


def holder(path: Path) -> tuple[int | None, str]:
    """(pid, since) recorded in a lock file: written by whoever holds it."""
    try:
        pid, _, since = path.read_text().strip().partition(" ")
        return int(pid), since
    except (OSError, ValueError):
        return None, ""


def lock_run(run_dir: str | Path, fd: int | None = None) -> None:
    """Take the run's lock for the rest of this process (fd given: for the process holding fd open).

    RunLocked when another live process holds it, unless that process is one of our ancestors
    (the run_r3.sh that started this step holds it for us).
    """
    path = Path(run_dir) / LOCK_NAME
    handle = os.fdopen(os.dup(fd), "a") if fd is not None else open(path, "a")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        pid, since = holder(path)
        if pid is not None and pid in ancestors():
            return
        raise RunLocked(f"run {Path(run_dir).name} is in use by {describe(pid)}"
                        f"{', since ' + since if since else ''}: wait for it to finish (or end it: kill {pid}), "
                        "or start another W8_RUN_ID") from None
    owner = os.getppid() if fd is not None else os.getpid()
    handle.seek(0)
    handle.truncate()
    handle.write(f"{owner} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    handle.flush()
    if fd is None:
        _HELD.append(handle)
    else:
        handle.close()  # the caller's descriptor keeps the lock
