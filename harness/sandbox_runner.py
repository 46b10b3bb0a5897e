"""The sandbox side of harness/sandbox.py: a fork-server and the per-program runner.

Nothing here imports from `harness` or outside the standard library: this file
is started as `python -I -S sandbox_runner.py` (a fresh interpreter with no
site-packages and none of the caller's modules, so no labels in its memory),
and its source text is what the Daytona backend ships into a remote sandbox.

Local layout (root with Linux namespaces available):

    caller --pipes--> launcher P --fork--> zygote Z (pid 1 of a new pid namespace)
                                              |  per program: fork
                                              v
                                           child C: drops to an unprivileged uid,
                                           rlimits, runs the code on every example

- P unshares mount, network, pid, ipc and uts namespaces, then forks Z.
- Z builds a new root on a tmpfs (read-only binds of /usr, /lib*, the Python
  prefix; a tiny /dev; a size-capped writable /tmp), pivots into it and
  detaches the old root, so the repo, $HOME and the benchmark snapshot do not
  exist in its world. The network namespace has only a down loopback.
- Per program Z forks C. C closes every inherited descriptor, drops to a
  per-worker uid with no capabilities and no_new_privs, sets rlimits, compiles
  the code and runs each example under its own alarm, streaming one JSON line
  per example back to Z over a pipe.
- Z enforces the deadlines itself (poll with timeout, never threads): a
  per-example deadline (on expiry C is killed and a fresh child resumes at the
  next example) and the wall deadline of the whole call. After each program Z,
  as init of the pid namespace, SIGKILLs every process in it (kill(-1)), so
  nothing survives, setsid or not, and replaces /tmp if it was written.

Without namespaces (not root, or unshare refused) the same runner works with
rlimits, a private temp dir and process-group kills only; see README.

Wire format caller <-> Z: 4-byte big-endian length + UTF-8 JSON, both ways.
"""

import json
import os
import select
import signal
import struct
import sys
import time

FUNCTION_NAME = "is_legal_action"
CODE_FILENAME = "<harness>"
MAX_CHILD_BYTES = 4 << 20  # a child that sends more than this is killed (protocol flood)
MAX_ERROR_CHARS = 300

_NS_FLAGS = ("CLONE_NEWNS", "CLONE_NEWNET", "CLONE_NEWPID", "CLONE_NEWIPC", "CLONE_NEWUTS")
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


# ---- the per-program runner (runs inside child C) --------------------------

class _Timeout(BaseException):
    """Raised by SIGALRM inside an example; BaseException so `except Exception` in the code misses it."""


class _Tail:
    """A write-only text stream that keeps only the last `cap` characters."""

    def __init__(self, cap):
        self.cap, self.text, self.total = cap, "", 0

    def write(self, s):
        s = s if type(s) is str else str(s)
        self.total += len(s)
        self.text = (self.text + s[-self.cap:])[-self.cap:]
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False


def _short(text, limit=MAX_ERROR_CHARS):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(exc):
    """`Type: message (line N)`, N being the program's own line where it was raised."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == CODE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    try:
        msg = str(exc)
    except BaseException:  # a hostile __str__
        msg = "<unprintable>"
    where = f" (line {line})" if line else ""
    return _short(f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__) + where


def _on_alarm(signum, frame):
    raise _Timeout()


def load_program(code):
    """Compile and execute the module body; return (function, "") or (None, reason)."""
    namespace = {"__name__": "harness_program", "__builtins__": __builtins__}
    try:
        exec(compile(code, CODE_FILENAME, "exec"), namespace)
    except _Timeout:
        return None, "load timed out (module body ran past the per-example limit)"
    except SyntaxError as exc:
        return None, _short(f"syntax error at line {exc.lineno}: {exc.msg}")
    except BaseException as exc:
        return None, "load failed: " + _describe(exc)
    fn = namespace.get(FUNCTION_NAME)
    if fn is None:
        return None, f"the program defines no {FUNCTION_NAME}"
    if not callable(fn):
        return None, f"{FUNCTION_NAME} is a {type(fn).__name__}, not a function"
    return fn, ""


def run_examples(fn, items, start, per_example_s, send):
    """Call fn on items[start:], one alarm each; send(["ex", i, pred, err]) after each."""
    for i in range(start, len(items)):
        state, action = items[i]
        pred, err = None, ""
        signal.setitimer(signal.ITIMER_REAL, per_example_s)
        try:
            out = fn(state, action)
            # type() not isinstance(): a fake __class__ must not pass as bool
            if type(out) is bool:
                pred = out
            else:
                err = f"returned {type(out).__name__}, not bool"
        except _Timeout:
            err = f"timeout: example ran past {per_example_s:g} s"
        except RecursionError:
            err = "RecursionError: maximum recursion depth exceeded"
        except BaseException as exc:
            try:
                err = _describe(exc)
            except BaseException:
                err = "exception (undescribable)"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        send(["ex", i, pred, err])


def program_main(job, start, out_fd):
    """Body of child C: load the program, run examples from `start`, report over out_fd, exit."""
    write = os.write

    def send(msg):
        data = (json.dumps(msg) + "\n").encode()
        while data:
            data = data[write(out_fd, data):]

    tail = _Tail(int(job.get("max_output_chars", 2000)))
    sys.stdout = sys.stderr = tail
    signal.signal(signal.SIGALRM, _on_alarm)
    per_example_s = float(job["per_example_timeout_s"])
    signal.setitimer(signal.ITIMER_REAL, per_example_s)
    try:
        fn, err = load_program(job["code"])
    except _Timeout:
        fn, err = None, "load timed out (module body ran past the per-example limit)"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    send(["load", err])
    if fn is not None:
        run_examples(fn, job["items"], start, per_example_s, send)
    send(["done", tail.text, tail.total])


# ---- privilege drop and limits (child C) -----------------------------------

def _libc():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc, ctypes


def set_limits(limits):
    import resource
    mb = 1 << 20
    table = (
        (resource.RLIMIT_AS, int(limits["memory_mb"]) * mb),
        (resource.RLIMIT_CPU, int(limits["cpu_s"])),
        (resource.RLIMIT_FSIZE, int(limits["file_mb"]) * mb),
        (resource.RLIMIT_NOFILE, int(limits["open_files"])),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_MEMLOCK, 0),
        (resource.RLIMIT_MSGQUEUE, 0),
    )
    for which, value in table:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            soft, hard = resource.getrlimit(which)  # cannot raise a hard limit: keep the lower one
            resource.setrlimit(which, (min(value, hard) if hard >= 0 else value,) * 2)
    if limits.get("uid") is not None:  # NPROC counts per real uid: only meaningful with our own uid
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["processes"]),) * 2)


def drop_privileges(uid, libc):
    """Become `uid` with no supplementary groups, no capabilities, and no way to regain any."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if libc is not None:
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def _close_fds_except(keep):
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != devnull:
            os.dup2(devnull, fd)
    keep = sorted(set(keep) | {0, 1, 2})
    low = 3
    for fd in keep:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 1 << 16)


def child_main(job, start, out_fd, setup):
    """Entry of child C right after fork: isolate, then run. Never returns."""
    try:
        os.setpgid(0, 0)
        _close_fds_except([out_fd])
        os.chdir(setup["tmp"])
        drop_privileges(setup.get("uid"), setup.get("libc"))
        set_limits({**job["limits"], "uid": setup.get("uid")})
        os.environ.clear()
        os.environ.update(setup["env"])
        program_main(job, start, out_fd)
    except BaseException:
        pass
    os._exit(0)


# ---- the zygote (Z) ---------------------------------------------------------

def _mount(libc, ctypes, src, target, fstype, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _bind_readonly(libc, ctypes, path, root):
    target = root + path
    if os.path.islink(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(libc, ctypes, path, target, None, _MS_BIND | _MS_REC)
    _mount(libc, ctypes, None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID)


def _mount_tmp(libc, ctypes, path, size_mb):
    _mount(libc, ctypes, "tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={int(size_mb)}m,mode=1777,nr_inodes=4096")


def build_root(libc, ctypes, visible, tmp_mb):
    """Pivot into a fresh tmpfs root that holds only `visible` (read-only) plus /dev bits and /tmp."""
    _mount(libc, ctypes, None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing propagates back to the host
    root = "/tmp"  # a mount point that exists everywhere; shadowed only inside this namespace
    _mount(libc, ctypes, "tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=755")
    for path in visible:
        if os.path.lexists(path):
            _bind_readonly(libc, ctypes, path, root)
    for dev in ("null", "zero", "urandom", "random"):
        _bind_readonly(libc, ctypes, "/dev/" + dev, root)
    os.makedirs(root + "/tmp", exist_ok=True)
    _mount_tmp(libc, ctypes, root + "/tmp", tmp_mb)
    os.makedirs(root + "/.old", exist_ok=True)
    machine = os.uname().machine
    if libc.syscall(_SYS_PIVOT_ROOT[machine], root.encode(), (root + "/.old").encode()) != 0:
        raise OSError(ctypes.get_errno(), "pivot_root failed")
    os.chdir("/")
    if libc.umount2(b"/.old", _MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "detaching the old root failed")
    os.rmdir("/.old")
    _mount(libc, ctypes, None, "/", None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _reap_all(pid_namespace, child_pid, uid):
    """Kill whatever the last program left running, then reap every child."""
    if pid_namespace:
        try:
            os.kill(-1, signal.SIGKILL)  # as init of the pid namespace: every process in it but us
        except ProcessLookupError:
            pass
    else:
        for target in (-child_pid,):
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if uid is not None:
            _kill_uid(uid)
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if not pid_namespace else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if pid_namespace:
                time.sleep(0.0002)  # killed processes still exiting; they are our children, wait for them
                continue
            return


def _kill_uid(uid):
    """Without a pid namespace: kill every process of the worker uid from a helper running as that uid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


class Zygote:
    """Z: reads jobs from fd 0, runs each in a fresh child, answers on fd 1."""

    def __init__(self, setup):
        self.setup = setup
        self.pid_namespace = setup["mode"] == "namespaces"

    def fresh_tmp(self):
        """Give the next program an empty /tmp (or a new private dir without namespaces)."""
        tmp = self.setup["tmp"]
        try:
            dirty = bool(os.listdir(tmp))
        except OSError:
            dirty = True
        if not dirty:
            return
        if self.pid_namespace:
            libc, ctypes = self.setup["libc"], self.setup["ctypes"]
            libc.umount2(tmp.encode(), _MNT_DETACH)
            _mount_tmp(libc, ctypes, tmp, self.setup["tmp_mb"])
        else:
            _rmtree_contents(tmp)

    def run_job(self, job):
        t0 = time.monotonic()
        n = len(job["items"])
        preds, errors = [None] * n, [""] * n
        deadline = t0 + float(job["timeout_s"])
        state = {"error": "", "stdout": "", "stdout_total": 0, "loaded": False}
        start = 0
        while start < n or not state["loaded"]:
            start = self.run_child(job, start, deadline, preds, errors, state)
            if state["error"] or start is None:
                break
        self.fresh_tmp()
        wall = time.monotonic() - t0
        return {"ok": not state["error"], "error": state["error"], "predictions": preds,
                "example_errors": errors, "stdout": state["stdout"],
                "stdout_total": state["stdout_total"], "wall_s": wall}

    def run_child(self, job, start, deadline, preds, errors, state):
        """Fork one child for items[start:]; return the index to resume at, or None when finished."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            child_main(job, start, w, self.setup)
        os.close(w)
        try:
            return self.watch_child(job, r, start, deadline, preds, errors, state)
        finally:
            os.close(r)
            _reap_all(self.pid_namespace, pid, self.setup.get("uid"))

    def watch_child(self, job, fd, start, deadline, preds, errors, state):
        """Read C's lines until done, death, flood or deadline; fill preds/errors."""
        per_example = float(job["per_example_timeout_s"]) + 0.05  # C's own alarm fires first if it can
        n, nxt, buf, total = len(job["items"]), start, b"", 0
        step_deadline = time.monotonic() + per_example
        while True:
            now = time.monotonic()
            limit = min(deadline, step_deadline)
            if now >= limit:
                if now >= deadline:
                    state["error"] = f"timeout: the program ran past the {job['timeout_s']:g} s wall limit"
                    _mark(errors, nxt, n, "not run: wall limit reached")
                    return None
                if not state["loaded"]:
                    state["error"] = "load timed out (module body ran past the per-example limit)"
                    return None
                errors[nxt] = f"timeout: example ran past {job['per_example_timeout_s']:g} s (killed)"
                return nxt + 1
            ready, _, _ = select.select([fd], [], [], limit - now)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # C exited (or closed the pipe) before saying done
                return self.child_vanished(nxt, n, errors, state)
            total += len(chunk)
            if total > MAX_CHILD_BYTES:
                state["error"] = "sandbox protocol flood: the program wrote too much to the result pipe"
                return None
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                verdict = self.take_line(line, nxt, n, preds, errors, state)
                if verdict == "bad":
                    state["error"] = "sandbox protocol violation: the program tampered with the result pipe"
                    return None
                if verdict == "done":
                    return None
                if verdict == "ex":
                    nxt += 1
                step_deadline = time.monotonic() + per_example

    def take_line(self, line, nxt, n, preds, errors, state):
        try:
            msg = json.loads(line)
            kind = msg[0]
        except (ValueError, TypeError, IndexError, KeyError):
            return "bad"
        if kind == "load" and len(msg) == 2 and isinstance(msg[1], str):
            state["loaded"] = True
            if msg[1]:
                state["error"] = _short(msg[1])
                return "done"
            return "load"
        if kind == "ex" and len(msg) == 4 and msg[1] == nxt and nxt < n and state["loaded"]:
            if msg[2] is not None and type(msg[2]) is not bool or not isinstance(msg[3], str):
                return "bad"
            preds[nxt], errors[nxt] = msg[2], _short(msg[3])
            return "ex"
        if kind == "done" and len(msg) == 3 and isinstance(msg[1], str) and isinstance(msg[2], int):
            if nxt != n:
                return "bad"
            state["stdout"], state["stdout_total"] = msg[1][-4000:], state["stdout_total"] + msg[2]
            return "done"
        return "bad"

    def child_vanished(self, nxt, n, errors, state):
        if not state["loaded"]:
            state["error"] = "load failed: the process exited while loading the program"
            return None
        if nxt >= n:
            return None
        errors[nxt] = "the process exited during this example"
        return nxt + 1

    def serve(self):
        while True:
            job = _read_frame(0)
            if job is None:
                return
            try:
                reply = self.run_job(job)
            except Exception as exc:  # a bug here must not wedge the caller: answer with the reason
                reply = {"ok": False, "error": "sandbox internal error: " + _short(repr(exc))}
            reply["id"] = job.get("id")
            _write_frame(1, reply)


def _mark(errors, start, n, text):
    for i in range(start, n):
        if not errors[i]:
            errors[i] = text


def _rmtree_contents(path):
    for entry in os.scandir(path):
        try:
            if entry.is_dir(follow_symlinks=False):
                _rmtree_contents(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def _read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_frame(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def _write_frame(fd, obj):
    body = json.dumps(obj).encode()
    data = struct.pack(">I", len(body)) + body
    while data:
        data = data[os.write(fd, data):]


# ---- start-up: launcher P and zygote Z ---------------------------------------

def _namespaces(libc):
    flags = 0
    for name in _NS_FLAGS:
        flags |= getattr(os, name)
    os.unshare(flags)


def _start_isolated(config, libc, ctypes):
    """In P: unshare, fork Z (pid 1 of the new pid namespace); P waits and mirrors Z's exit."""
    _namespaces(libc)
    pid = os.fork()
    if pid != 0:
        for fd in (0, 1):
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    build_root(libc, ctypes, config["visible"], config["tmp_mb"])
    return {"mode": "namespaces", "tmp": "/tmp", "uid": config["uid"], "libc": libc, "ctypes": ctypes,
            "tmp_mb": config["tmp_mb"], "env": config["env"]}


def _start_plain(config, reason):
    """No namespaces: a private temp dir, our own uid if we may, rlimits and group kills."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix="w8-sandbox-")
    uid = config.get("uid") if os.geteuid() == 0 else None
    if uid is not None:
        os.chown(tmp, uid, uid)
    os.chmod(tmp, 0o700)
    libc = None
    try:
        libc, _ = _libc()
    except OSError:
        pass
    return {"mode": "rlimits", "tmp": tmp, "uid": uid, "libc": libc, "env": {**config["env"], "TMPDIR": tmp},
            "reason": reason}


def zygote_main():
    """Entry point: read the start config frame, isolate, say hello, serve jobs."""
    config = _read_frame(0)
    setup = None
    reason = ""
    if config.get("isolation", "auto") != "plain":
        try:
            libc, ctypes = _libc()
            setup = _start_isolated(config, libc, ctypes)
        except (OSError, AttributeError, KeyError) as exc:
            reason = _short(f"{type(exc).__name__}: {exc}")
            if os.getpid() == 1:  # Z after the fork: cannot fall back in a half-built world
                _write_frame(1, {"hello": "failed", "reason": reason})
                os._exit(1)
    if setup is None:
        setup = _start_plain(config, reason or "namespaces not requested")
    import resource  # noqa: F401  (imported before the root moves: children need it)
    _write_frame(1, {"hello": setup["mode"], "reason": setup.get("reason", ""), "tmp": setup["tmp"]})
    Zygote(setup).serve()
    os._exit(0)


# ---- one-shot mode (the Daytona backend ships this file and calls it) ---------

def run_once(job):
    """Run one job in a forked child without namespaces; return the reply dict (for remote sandboxes)."""
    setup = _start_plain({"env": {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, "uid": None}, "one-shot")
    zygote = Zygote(setup)
    try:
        return zygote.run_job(job)
    finally:
        _rmtree_contents(setup["tmp"])
        os.rmdir(setup["tmp"])


if __name__ == "__main__" and sys.argv[1:] == ["--zygote"]:
    zygote_main()
