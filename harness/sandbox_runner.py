"""The sandbox side of harness/sandbox.py: zygote set-up, the fork-server loop, a program's process.

Standard library only and no imports from the repo: a zygote is this file run
as `python -S -s -P -B harness/sandbox_runner.py --zygote`
(a fresh interpreter holding none of the caller's modules or data), and its
source text is what the Daytona backend ships into a remote sandbox
(`_run_once`). Protocol with the caller: one JSON request per line on stdin
({"code", "states", "examples": [[state index, action], ...], "timeout_s",
"per_example_s"}), one JSON reply per line on stdout ({"ok", "error",
"predictions", "errors", "out"}), after a first {"ready": true, "isolation": {...}}
line. harness/sandbox.py's docstring says what is and is not isolated.
"""

from __future__ import annotations

import gc
import json
import mmap
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback

# ---- limits (one program) ------------------------------------------------

MEMORY_LIMIT_BYTES = 1 << 29  # RLIMIT_AS of a program's process: 512 MiB
EXTRA_PROCESSES = 4  # a program may start this many processes; they die with it
FILE_SIZE_LIMIT_BYTES = 8 << 20  # RLIMIT_FSIZE; the private /tmp is also capped
TMP_SIZE = "32m"  # tmpfs size of the private /tmp
OPEN_FILES_LIMIT = 64
STDOUT_TAIL_CHARS = 2000  # printed output kept (the tail)
ERROR_CHARS = 300  # per-example error text
STREAM_CAP_BYTES = 1 << 20  # bytes a program's process may send to the zygote
ALARM_SLACK_S = 0.05  # the zygote kills an example this long after its own alarm should have fired
SANDBOX_UID_BASE = 1_800_000_000  # + host pid of the launcher: a uid no other process has
FUNCTION_NAME = "is_legal_action"
MAX_CODE_CHARS = 100_000  # the same bound as harness.interface
RESULT_MARKER = "W8_SANDBOX_RESULT "
RUNNER_MIN_PYTHON = (3, 7)  # the oldest interpreter the remote one-shot runner (_run_once) runs on
FALLBACK_DIR_PREFIX = "w8-sandbox-"  # the private temp dir when there is no private root
PRELOAD = ("re", "json", "string", "collections", "itertools", "functools", "math", "typing", "shutil")


class _ExampleTimeout(BaseException):
    """Raised by the per-example alarm; BaseException so `except Exception` in model code misses it."""


class _TailWriter:
    """sys.stdout/sys.stderr replacement that keeps only the last `cap` characters."""

    def __init__(self, cap: int):
        self.cap, self.text = cap, ""

    def write(self, s) -> int:
        s = s if isinstance(s, str) else str(s)
        self.text = (self.text + s[-self.cap:])[-self.cap:]
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _describe_exception(err: BaseException) -> str:
    """'line 12: KeyError: x', the line being the program's innermost frame."""
    try:
        line = ""
        for frame in traceback.extract_tb(err.__traceback__):
            if frame.filename == "<harness>":
                line = f"line {frame.lineno}: "
        text = f"{line}{type(err).__name__}: {err}"
    except BaseException:  # a hostile __str__ or __name__
        text = "exception that cannot be described"
    return text[:ERROR_CHARS]


def compile_program(code: str):
    """Compile in the zygote, before any fork (nothing runs; raises ValueError(reason) on failure).

    The parser is the one the caller's validation already ran on this text;
    compiling here spares every program process the compiler's memory copies.
    """
    try:
        return compile(code, "<harness>", "exec")
    except SyntaxError as err:
        raise ValueError(f"syntax error at line {err.lineno}: {err.msg}") from None
    except (ValueError, MemoryError, RecursionError, OverflowError) as err:
        raise ValueError(f"program cannot be compiled: {type(err).__name__}") from None


_REGEX_CHARS = frozenset("\\[]()*+?^$|{}")
WARM_REGEX_MAX = 64  # patterns compiled ahead per program


def warm_regex_cache(compiled) -> int:
    """Compile the program's regex-like string constants with `re` in the zygote (nothing runs).

    re's pattern cache is then inherited by every fork, so `re.match(r"...", s)`
    in the program finds its pattern compiled instead of running the regex
    compiler, and copying its memory, in each program's process. Only the
    real compiler builds the cache entries: a program cannot plant one.
    Returns how many were compiled.
    """
    import re
    stack, seen, warmed = [compiled], 0, 0
    while stack and seen < 10 * WARM_REGEX_MAX and warmed < WARM_REGEX_MAX:
        code = stack.pop()
        for const in code.co_consts:
            seen += 1
            if hasattr(const, "co_consts"):
                stack.append(const)
            elif type(const) is str and 1 < len(const) <= 2000 and not _REGEX_CHARS.isdisjoint(const):
                try:
                    re.compile(const)
                    warmed += 1
                except (re.error, RecursionError, MemoryError, OverflowError, ValueError):
                    pass
    return warmed


def _load_program(compiled):
    """Run the program's top level; return is_legal_action or raise ValueError(reason)."""
    namespace = {"__name__": "__harness__", "__builtins__": __builtins__}
    try:
        exec(compiled, namespace)
    except BaseException as err:
        raise ValueError(_describe_exception(err)) from None
    fn = namespace.get(FUNCTION_NAME)
    if fn is None:
        raise ValueError(f"no function {FUNCTION_NAME} defined after running the program")
    if not callable(fn):
        raise ValueError(f"{FUNCTION_NAME} is a {type(fn).__name__}, not a function")
    problem = _arity_problem(fn)
    if problem:
        raise ValueError(problem)
    return fn


def _arity_problem(fn) -> str:
    """Why fn(state, action) cannot be called, for plain functions ("" if it can, or if fn is not one).

    Reads the code object rather than inspect.signature: cheaper, and the
    program's process touches less memory (every touched page is a copy).
    """
    code = getattr(fn, "__code__", None)
    if code is None or not isinstance(getattr(fn, "__defaults__", None) or (), tuple):
        return ""
    positional = code.co_argcount - (1 if hasattr(fn, "__self__") else 0)
    required = positional - len(fn.__defaults__ or ())
    takes_varargs = bool(code.co_flags & 0x04)
    kw_defaults = getattr(fn, "__kwdefaults__", None) or {}
    kw_required = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    missing = [name for name in kw_required if name not in kw_defaults]
    if required > 2:
        return f"{FUNCTION_NAME} requires {required} positional arguments; it is called with 2 (state, action)"
    if positional < 2 and not takes_varargs:
        return f"{FUNCTION_NAME} takes {positional} positional argument(s); it is called with 2 (state, action)"
    if missing:
        return f"{FUNCTION_NAME} requires keyword-only argument(s) {', '.join(missing)}"
    return ""


def _set_limits(limits: list[tuple[int, int]]) -> None:
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass  # a hard limit already lower than ours stays


def set_zygote_limits() -> None:
    """The limits every program shares, set once on the zygote and inherited by each fork."""
    _set_limits([(resource.RLIMIT_AS, MEMORY_LIMIT_BYTES), (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT_BYTES),
                 (resource.RLIMIT_NOFILE, OPEN_FILES_LIMIT), (resource.RLIMIT_CORE, 0)])


def _set_program_limits(timeout_s: float) -> None:
    """The per-program ones: CPU follows the request's timeout; processes count per uid, so the
    zygote itself must stay outside that limit (in fallback mode its uid is the caller's)."""
    _set_limits([(resource.RLIMIT_CPU, int(timeout_s) + 2), (resource.RLIMIT_NPROC, 2 + EXTRA_PROCESSES)])


# A program's process reports through a shared page (no syscall per example)
# and its pipe (errors, load failure, done). Page layout: int64 index of the
# example in flight, float64 its monotonic start (0 while loading), then one
# byte per example: 0 none, 1 False, 2 True, 3 error (text sent on the pipe).
_PROGRESS = struct.Struct("<qd")
_RESULTS_AT = _PROGRESS.size
MAX_EXAMPLES = 8192
_SHM_BYTES = _RESULTS_AT + MAX_EXAMPLES


def _program_main(req: dict, start: int, out_fd: int, shm) -> None:
    """A program's process (forked with the request in memory): load the code, run examples[start:], report."""
    write, dumps, exit_now = os.write, json.dumps, os._exit  # bound before model code can patch them

    def emit(msg):
        data = (dumps(msg) + "\n").encode()
        while data:
            data = data[write(out_fd, data):]

    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)  # the zygote's request and reply pipes are fds 0 and 1: gone from here
    os.closerange(3, out_fd)
    os.closerange(out_fd + 1, 1 << 16)
    _set_program_limits(req["timeout_s"])
    out = _TailWriter(STDOUT_TAIL_CHARS)
    sys.stdout = sys.stderr = out
    try:
        fn = _load_program(req["compiled"])  # top-level code has the wall deadline only (the zygote's)
    except ValueError as err:
        emit({"load_error": str(err)[:ERROR_CHARS], "out": out.text})
        exit_now(0)
    _run_examples(fn, req, start, shm, emit)
    if out.text:
        emit({"done": True, "out": out.text})
    else:
        write(out_fd, b'{"done": true}\n')  # the common case, without the encoder
    exit_now(0)


def _run_examples(fn, req: dict, start: int, shm, emit) -> None:
    """Call fn on examples[start:]; one interval timer for all, raising in an example that runs over."""
    states, examples, per_example = req["states"], req["examples"], req["per_example_s"]
    now, pack, current = time.monotonic, _PROGRESS.pack_into, [0.0]

    def on_alarm(signum, frame):
        if current[0] and now() - current[0] > per_example:
            raise _ExampleTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    tick = max(0.005, per_example / 8)
    signal.setitimer(signal.ITIMER_REAL, tick, tick)
    for i in range(start, len(examples)):
        state_index, action = examples[i]
        error, code = "", 0
        current[0] = started = now()
        pack(shm, 0, i, started)
        try:
            value = fn(states[state_index], action)
            # identity, not isinstance(): only the two bool singletons count
            code = 2 if value is True else 1 if value is False else 0
            if not code:
                error = f"returned {type(value).__name__}, not bool"
        except _ExampleTimeout:
            error = f"timed out after {per_example:g}s"
        except BaseException as err:
            error = _describe_exception(err)
        current[0] = 0.0
        if error:
            shm[_RESULTS_AT + i] = 3
            emit({"i": i, "e": error})
        else:
            shm[_RESULTS_AT + i] = code
    signal.setitimer(signal.ITIMER_REAL, 0)
    pack(shm, 0, len(examples), 0.0)


def _describe_status(status: int) -> str:
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        return f"process exited with code {code}" + (" (the program broke the runner)" if code == 70 else "")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        extra = " (CPU-time limit)" if sig == signal.SIGXCPU else " (file-size limit)" if sig == signal.SIGXFSZ else ""
        return f"process killed by {name}{extra}"
    return "process ended"


def _kill_program(pid: int) -> str:
    """SIGKILL the program's group and every other process the sweep may reach; reap them."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    status = "process ended"
    try:
        status = _describe_status(os.waitpid(pid, 0)[1])
    except ChildProcessError:
        pass
    _sweep()
    return status


_SWEEP = {"on": False}  # set by _isolate when kill(-1) can reach only the sandbox's own processes


def _sweep() -> None:
    """SIGKILL and reap every other process this zygote can signal: escaped grandchildren included.

    Safe only as init of our own pid namespace, or under a uid no other process
    has (kill(-1) reaches exactly those); otherwise a no-op.
    """
    if not _SWEEP["on"]:
        return
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


class _ProgramRun:
    """The zygote's record of one program: what came back, and why it stopped."""

    def __init__(self, n: int):
        self.predictions: list = [None] * n
        self.errors = [""] * n
        self.ok, self.error, self.out = True, "", ""

    def reply(self) -> dict:
        errors = self.errors if self.ok else [e or "not run" for e in self.errors]
        return {"ok": self.ok, "error": self.error, "predictions": self.predictions,
                "errors": errors, "out": self.out[-STDOUT_TAIL_CHARS:]}


def spawn_program(req: dict, start: int) -> tuple:
    """Fork the process that runs examples[start:]: (pid, result fd, pidfd, shared page)."""
    out_r, out_w = os.pipe()
    shm = mmap.mmap(-1, _SHM_BYTES)  # anonymous and shared: both sides see the child's writes
    pid = os.fork()
    if pid == 0:
        try:
            os.close(out_r)
            os.setpgid(0, 0)
            _program_main(req, start, out_w, shm)
        finally:
            os._exit(70)  # only if the program broke the runner itself
    os.close(out_w)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first, or already exited
    try:
        pidfd = os.pidfd_open(pid)  # readable once the process exits, even if a grandchild holds the pipe
    except (AttributeError, OSError):
        pidfd = -1
    return pid, out_r, pidfd, shm


def _watch_program(req: dict, start: int, deadline: float, run: _ProgramRun) -> tuple[int | None, int | None]:
    """Run examples[start:] in a new process and follow it.

    Returns (index to resume at or None when finished, pid still to be killed
    or None): a process that reported "done" is left for clean_up() after the
    reply is sent; the others are killed here.
    """
    pid, out_r, pidfd, shm = spawn_program(req, start)
    watch = _Watch(req, start, deadline, shm)
    try:
        outcome = watch.follow(out_r, pidfd, run)
        status = "" if outcome == "done" else _kill_program(pid)
        watch.collect(run, outcome == "done")
    finally:
        for fd in (out_r, pidfd):
            if fd >= 0:
                os.close(fd)
        shm.close()
    if outcome == "done":
        return None, pid
    return _resume_index(outcome, status, watch, req, run), None


class _Watch:
    """Deadlines and progress of one program process, as the zygote sees them."""

    def __init__(self, req: dict, start: int, deadline: float, shm):
        self.n, self.start, self.index, self.shm = len(req["examples"]), start, start, shm
        self.deadline, self.example_deadline, self.loaded = deadline, deadline, False
        self.per_example = req["per_example_s"] + ALARM_SLACK_S
        self.errors: dict[int, str] = {}

    def _sync(self, now: float) -> None:
        """Read the shared page: which example runs, since when; move the example deadline."""
        index, started = _PROGRESS.unpack_from(self.shm, 0)
        if self.start <= index <= self.n and started == started:  # NaN-safe
            self.index = index
            self.loaded = self.loaded or started > 0 or index > self.start
            if started > 0:
                self.example_deadline = min(self.deadline, min(started, now) + self.per_example)
            else:
                self.example_deadline = self.deadline

    def follow(self, fd: int, pidfd: int, run: _ProgramRun) -> str:
        """Wait for the process to finish, misbehave, die or run out of time; return which."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if pidfd >= 0:
            poller.register(pidfd, select.POLLIN)
        buf, received = b"", 0
        while True:
            now = time.monotonic()
            if now >= self.deadline:
                return "wall"
            self._sync(now)
            if now >= self.example_deadline:
                return "example_timeout"
            # no message marks an example's start: look at the page again at least every per_example
            wake = min(self.example_deadline, now + self.per_example)
            events = poller.poll(int((wake - now) * 1000) + 1)
            if any(f == pidfd for f, _ in events):
                return self._drain(fd, buf, run)
            if not events:
                continue
            chunk = os.read(fd, 65536)
            received += len(chunk)
            if not chunk:
                return "eof"
            if received > STREAM_CAP_BYTES:
                return "flood"
            buf += chunk
            outcome, buf = self._lines(buf, run)
            if outcome:
                return outcome

    def _drain(self, fd: int, buf: bytes, run: _ProgramRun) -> str:
        """The process exited: take what it wrote before it did, without waiting on inheritors."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while poller.poll(0):
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            outcome, buf = self._lines(buf, run)
            if outcome:
                return outcome
        return "eof"

    def _lines(self, buf: bytes, run: _ProgramRun) -> tuple[str, bytes]:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                outcome = self._message(json.loads(line), run)
            except (ValueError, TypeError, KeyError, RecursionError):
                outcome = "bad"
            if outcome:
                return outcome, buf
        return "", buf

    def _message(self, msg: dict, run: _ProgramRun) -> str:
        if not isinstance(msg, dict):
            return "bad"
        if isinstance(msg.get("out"), str):
            run.out = (run.out + msg["out"])[-STDOUT_TAIL_CHARS:]
        if "load_error" in msg:
            run.ok, run.error = False, "program failed to load: " + str(msg["load_error"])[:ERROR_CHARS]
            return "load_error"
        if msg.get("done") is True:
            return "done"
        if type(msg.get("i")) is int and self.start <= msg["i"] < self.n and isinstance(msg.get("e"), str):
            self.errors[msg["i"]] = msg["e"][:ERROR_CHARS]
            return ""
        return "bad"

    def collect(self, run: _ProgramRun, done: bool) -> None:
        """Copy the results of finished examples from the page (all of them when done)."""
        self._sync(time.monotonic())
        end = self.n if done else self.index
        for i in range(self.start, end):
            code = self.shm[_RESULTS_AT + i]
            if code in (1, 2):
                run.predictions[i] = code == 2
            else:
                run.errors[i] = self.errors.get(i) or "broke the result stream"
        if done:
            self.index = self.n


def _resume_index(outcome: str, status: str, watch: _Watch, req: dict, run: _ProgramRun) -> int | None:
    index, n = watch.index, watch.n
    if outcome == "load_error":
        return None
    if outcome == "wall":
        run.ok = False
        run.error = f"wall-time limit of {req['timeout_s']:g}s exceeded" + ("" if watch.loaded else " while loading")
        for i in range(index, n):
            run.errors[i] = "not finished: wall-time limit"
        return None
    if not watch.loaded:
        run.ok = False
        run.error = {"eof": f"program failed to load: {status}", "flood": "program failed to load: output flood",
                     "bad": "program failed to load: it broke the result stream"}.get(outcome, status)
        return None
    if index >= n:
        return None  # every example answered; the process then died or misbehaved: the answers stand
    run.errors[index] = {
        "example_timeout": f"timed out after {req['per_example_s']:g}s",
        "eof": status, "flood": "flooded the result stream", "bad": "broke the result stream",
    }[outcome]
    return index + 1


def _wipe_dir(path: str) -> None:
    """Empty the private temp dir between programs (files of a killed program included)."""
    import shutil

    def unlock(func, p, exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, onerror=unlock)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def run_program(req: dict) -> tuple[dict, int | None]:
    """Run one request to the end: (reply dict, pid left for clean_up).

    The program resumes in a fresh process after an example that hung or died.
    """
    run = _ProgramRun(len(req["examples"]))
    deadline = time.monotonic() + req["timeout_s"]
    try:
        req["compiled"] = compile_program(req["code"])
    except ValueError as err:
        run.ok, run.error = False, f"program failed to load: {err}"
        return run.reply(), None
    warm_regex_cache(req["compiled"])
    start = 0
    while True:
        start, leftover = _watch_program(req, start, deadline, run)
        if start is None or start >= len(req["examples"]):
            return run.reply(), leftover


def clean_up(pid: int | None, private_dir: str | None) -> None:
    """After a reply: kill what is left of the program, empty the private dir."""
    if pid is not None:
        _kill_program(pid)
    _sweep()
    if private_dir:
        try:
            _wipe_dir(private_dir)
        except OSError:
            pass


# ---- zygote set-up: namespaces, private root, unprivileged uid -----------

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 1, 4, 38, 24
_SYSCALLS = {"x86_64": {"pivot_root": 155, "capset": 126}, "aarch64": {"pivot_root": 41, "capset": 91}}


def _libc():
    import ctypes
    return ctypes, ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src, target, fstype, flags, data=None) -> None:
    _, libc = _libc()
    enc = (lambda s: s.encode() if s is not None else None)
    _check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _bind_readonly(src: str, dst: str) -> None:
    _mount(src, dst, None, _MS_BIND)
    _mount(None, dst, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _enter_user_namespace() -> None:
    """Without root: become root of a new user namespace (our uid mapped to 0) to own the others."""
    uid, gid = os.getuid(), os.getgid()
    os.unshare(os.CLONE_NEWUSER)
    for name, text in (("uid_map", f"0 {uid} 1"), ("setgroups", "deny"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _build_root(new: str) -> None:
    """Mount the minimal read-only tree at `new` (a tmpfs in our private mount namespace)."""
    _mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,nr_inodes=4096,mode=755")
    prefixes = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    for path in ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache", *sorted(prefixes)]:
        if not os.path.lexists(path) or os.path.lexists(new + path):
            continue
        os.makedirs(os.path.dirname(new + path), exist_ok=True)
        if os.path.islink(path):
            os.symlink(os.readlink(path), new + path)
            continue
        if os.path.isdir(path):
            os.makedirs(new + path)
        else:
            open(new + path, "w").close()
        _bind_readonly(path, new + path)
    os.makedirs(new + "/dev")
    for dev in ("null", "zero", "random", "urandom"):
        open(f"{new}/dev/{dev}", "w").close()
        _mount(f"/dev/{dev}", f"{new}/dev/{dev}", None, _MS_BIND)
    os.makedirs(new + "/tmp")
    _mount("tmpfs", new + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={TMP_SIZE},nr_inodes=2048,mode=1777")


def _pivot_into(new: str) -> str:
    """Make `new` the root and detach the old one; chroot where pivot_root has no known number."""
    ctypes, libc = _libc()
    number = _SYSCALLS.get(os.uname().machine, {}).get("pivot_root")
    if number is None:
        os.chroot(new)
        os.chdir("/")
        return "chroot"
    os.makedirs(new + "/.old")
    _check(libc.syscall(number, new.encode(), (new + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old", _MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    _mount(None, "/", None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    return "pivot_root"


def _drop_capabilities() -> None:
    """Clear every capability (user-namespace mode, where setuid cannot drop them)."""
    ctypes, libc = _libc()
    for cap in range(64):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    number = _SYSCALLS.get(os.uname().machine, {}).get("capset")
    if number is None:
        raise OSError("capset: unknown syscall number")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.syscall(number, header, data), "capset")


# Syscalls a program never needs and that widen the kernel surface it can reach
# (namespaces, mounts, tracing, kernel modules, keyrings, bpf, io_uring, ...).
# x86_64 numbers; elsewhere no filter is installed and sandbox_info() says so.
_DENIED_X86_64 = {
    "ptrace": 101, "personality": 135, "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176, "kexec_load": 246, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "pivot_root": 155,
}
_CLONE, _CLONE3 = 56, 435
_CLONE_NEW_FLAGS = 0x7E020080  # NEWNS NEWCGROUP NEWUTS NEWIPC NEWUSER NEWPID NEWNET NEWTIME


def _seccomp_program() -> bytes:
    """A classic-BPF filter: deny the list with EPERM, clone3 with ENOSYS (libc falls back to clone,
    whose flags a filter can read), clone with namespace flags with EPERM, other ABIs killed."""
    import errno
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    deny, nosys = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    denied = sorted(_DENIED_X86_64.values())
    # layout: 0 ld arch, 1 jeq x86_64, 2 ret kill, 3 ld nr, 4 jge x32, then one jeq per denied nr,
    # jeq clone3, jeq clone, ret allow, ld args[0], jset flags, ret allow, ret deny, ret nosys
    first = 5
    clone3_at = first + len(denied)
    allow_at = clone3_at + 2
    flags_at, deny_at = allow_at + 1, allow_at + 4
    nosys_at = deny_at + 1
    code = [(ld, 0, 0, 4), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, kill), (ld, 0, 0, 0),
            (jge, deny_at - 5, 0, 0x40000000)]
    for i, nr in enumerate(denied):
        code.append((jeq, deny_at - (first + i) - 1, 0, nr))
    code.append((jeq, nosys_at - clone3_at - 1, 0, _CLONE3))
    code.append((jeq, flags_at - (clone3_at + 1) - 1, 0, _CLONE))
    code.append((ret, 0, 0, allow))
    code.append((ld, 0, 0, 16))  # args[0], low 32 bits: the clone flags
    code.append((jset, deny_at - (flags_at + 1) - 1, 0, _CLONE_NEW_FLAGS))
    code.append((ret, 0, 0, allow))
    code.append((ret, 0, 0, deny))
    code.append((ret, 0, 0, nosys))
    return b"".join(struct.pack("<HBBI", *insn) for insn in code)


def _install_seccomp() -> bool:
    """Install the filter on this process (inherited by every program); False where unsupported."""
    if os.uname().machine != "x86_64":
        return False
    ctypes, libc = _libc()
    program = _seccomp_program()
    buf = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    _check(libc.prctl(22, 2, ctypes.byref(fprog), 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    return True


def _drop_privileges(uid: int, in_user_ns: bool) -> None:
    _, libc = _libc()
    if in_user_ns:
        _drop_capabilities()
    elif os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # a root -> non-root change clears every capability
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace, no process_vm_readv from programs
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # set last: credential changes clear it


def _isolate(namespaces: bool = True) -> dict:
    """Enter namespaces, pivot into the private root, drop privileges. Returns what holds.

    Forks once: the launcher (the caller's child) waits, and its child, pid 1
    of the new pid namespace, returns from here to serve. Any step that fails
    is reported in "reason" and the rest go on from what is in place; without
    a private root the programs get a fresh temp dir ("private_dir", which the
    caller removes). namespaces=False skips the namespaces and the private root
    (the remote runner, inside a sandbox that already is one): the temp dir,
    the uid drop and the seccomp filter remain.
    """
    uid = SANDBOX_UID_BASE + os.getpid()  # host pid of the launcher: no other process has this uid
    info = {"namespaces": False, "filesystem": "shared", "uid": os.getuid(), "private_dir": ""}
    problems, in_user_ns = [], False
    if namespaces:
        try:
            if os.geteuid() != 0:
                _enter_user_namespace()
                in_user_ns = True
            os.unshare(os.CLONE_NEWNS | os.CLONE_NEWPID | os.CLONE_NEWNET | os.CLONE_NEWIPC | os.CLONE_NEWUTS)
            info["namespaces"] = True
        except OSError as err:
            problems.append(f"namespaces unavailable: {err}")
    if info["namespaces"]:
        _become_namespace_init()
        try:
            _enter_private_root(info)
        except OSError as err:
            problems.append(f"private root failed: {err}")
    if info["filesystem"] == "shared":
        import tempfile
        info["private_dir"] = tempfile.mkdtemp(prefix=FALLBACK_DIR_PREFIX)
        if os.geteuid() == 0 and not in_user_ns:
            os.chown(info["private_dir"], uid, uid)
    os.chdir(info["private_dir"])
    for name in PRELOAD:  # before the uid drop: the Python install may sit in a home only root can read
        __import__(name)
    try:
        _drop_privileges(uid, in_user_ns)
        info["uid"] = os.getuid()
        _SWEEP["on"] = os.getpid() == 1 or info["uid"] == uid
    except OSError as err:
        problems.append(f"privilege drop failed: {err}")
    try:
        info["seccomp"] = _install_seccomp()
    except OSError as err:
        info["seccomp"] = False
        problems.append(f"seccomp filter failed: {err}")
    os.umask(0o077)
    info["reason"] = "; ".join(problems)
    return info


def _enter_private_root(info: dict) -> None:
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    try:
        _build_root("/tmp")
    except OSError:
        _, libc = _libc()
        libc.umount2(b"/tmp", _MNT_DETACH)  # the fallback temp dir goes under the real /tmp: uncover it
        raise
    info["filesystem"] = _pivot_into("/tmp")
    info["private_dir"] = "/tmp"


def _become_namespace_init() -> None:
    """After unshare(CLONE_NEWPID) only a child enters the namespace: fork, and the parent waits."""
    pid = os.fork()
    if pid:
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)  # only the namespace init may hold the caller's pipes: EOF follows its death
        status = os.waitpid(pid, 0)[1]
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _read_line(fd: int, buf: bytearray) -> bytes | None:
    while b"\n" not in buf:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None
        buf += chunk
    end = buf.index(b"\n")
    line = bytes(buf[:end])
    del buf[:end + 1]
    return line


def _write_line(fd: int, obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _zygote_main() -> None:
    """Entry of a zygote: isolate, preload, say ready, then serve requests until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as namespace init, default-handled signals from inside are dropped
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    info = _isolate()
    set_zygote_limits()
    gc.collect()
    gc.freeze()  # programs' collections then skip the zygote's objects: fewer copy-on-write faults
    _write_line(1, {"ready": True, "isolation": info})
    buf = bytearray()
    while True:
        line = _read_line(0, buf)
        if line is None:
            os._exit(0)
        leftover = None
        try:
            reply, leftover = run_program(json.loads(line))
        except Exception as err:  # a bug here must not leave the caller waiting
            reply = {"fatal": f"{type(err).__name__}: {err}"[:ERROR_CHARS]}
        _write_line(1, reply)
        clean_up(leftover, info["private_dir"])  # while the caller reads the reply


def _run_once(request_b64: str) -> None:
    """Entry of the remote (Daytona) runner: run one request, print the reply after RESULT_MARKER.

    Runs on the sandbox's own interpreter (Python RUNNER_MIN_PYTHON or newer; nothing
    here needs os.unshare) and builds no namespaces: the remote sandbox is one. What it
    adds is what the local fallback has: a fresh temp dir, removed afterwards; as root,
    a uid no other process has (so the sweep reaches every process a program left);
    the seccomp filter; the rlimits; the process-group kill.
    """
    import base64
    import shutil
    req = json.loads(base64.b64decode(request_b64))
    info = _isolate(namespaces=False)
    info["python"], info["remote"] = "%d.%d.%d" % sys.version_info[:3], True
    set_zygote_limits()
    reply, leftover = run_program(req)
    clean_up(leftover, None)
    if info["private_dir"]:
        os.chdir("/")
        shutil.rmtree(info["private_dir"], ignore_errors=True)
    reply["isolation"] = info
    sys.stdout.write(RESULT_MARKER + json.dumps(reply) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__" and sys.argv[1:] == ["--zygote"]:
    _zygote_main()
