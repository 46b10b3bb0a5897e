"""The sandbox against hostile programs: one property per test.

Each test runs real model-style code through run_harness (real zygotes, real
namespaces where the machine has them) and checks that the run ends contained,
with a reason, and that nothing outside the sandbox changed. The Daytona backend's
tests (the real SDK against a stub service on 127.0.0.1) are in tests/test_daytona.py.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from harness import sandbox, sandbox_local
from harness.dataset import Example
from harness.sandbox import SANDBOX_UID_BASE, STDOUT_TAIL_CHARS, HarnessRun, run_harness

REPO = Path(__file__).resolve().parents[1]

STATE = textwrap.dedent("""\
    RootWebArea 'Enter Text', focused
    \t[12] heading 'Enter Text'
    \t[19] textbox 'From:', clickable, visible, focusable=True, editable='plaintext'
    \t[27] button 'Search', clickable, visible
    \t[31] combobox '', visible, hasPopup='menu', expanded=False
    \t\t[32] option 'Red', selected=False
""")
ACTIONS = ["click('27')", "click('99')", "fill('19', 'hi')", "select_option('31', 'Red')", "noop()", "scroll(0, 100)"]
EXAMPLES = [{"state": STATE, "action": a} for a in ACTIONS]

GOOD = textwrap.dedent("""\
    import re

    def is_legal_action(state, action):
        if action in ("noop()",) or action.startswith("scroll("):
            return True
        m = re.match(r"\\w+\\('(\\d+)'", action)
        return bool(m) and f"[{m.group(1)}]" in state
""")
GOOD_PREDICTIONS = (True, False, True, True, True, True)


def program(body: str) -> str:
    return textwrap.dedent(body)


def sandbox_processes() -> dict[int, int]:
    """host pid -> uid of every live process running under a sandbox uid."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
            if uid >= SANDBOX_UID_BASE:
                found[int(entry)] = uid
    return found


def pool_uids() -> set[int]:
    pool = sandbox._state["pool"]
    return {SANDBOX_UID_BASE + w.proc.pid for w in pool.idle} if pool else set()


@pytest.fixture(scope="module")
def isolation():
    info = sandbox.sandbox_info()
    if info["backend"] != "local":
        pytest.skip("the hostile suite exercises the local backend")
    return info


@pytest.fixture
def namespaced(isolation):
    if not isolation["namespaces"] or isolation["filesystem"] == "shared":
        pytest.fail(f"namespaces are expected on this machine (root, Linux); got {isolation}")
    return isolation


# ---- ordinary behaviour --------------------------------------------------

def test_good_program_gives_one_bool_per_example():
    r = run_harness(GOOD, EXAMPLES)
    assert isinstance(r, HarnessRun)
    assert (r.ok, r.error, r.predictions) == (True, "", GOOD_PREDICTIONS)
    assert r.example_errors == ("",) * len(EXAMPLES)
    assert r.wall_s > 0


def test_example_objects_cross_as_state_and_action_only():
    marker = f"LABEL-{uuid.uuid4().hex}"
    examples = [Example(state=STATE, action=a, legal=i % 2 == 0, error=marker, obs_id=marker)
                for i, a in enumerate(ACTIONS)]
    req = sandbox.build_request(GOOD, examples, 2.0, 0.5)
    assert marker not in repr(req)
    assert run_harness(GOOD, examples).predictions == GOOD_PREDICTIONS


@pytest.mark.parametrize("code, reason", [
    ("", "empty"),
    ("\x00\x01\x02binary", "NUL"),
    ("def something_else(state, action):\n    return True\n", "is_legal_action"),
    ("def is_legal_action(state):\n    return True\n", "positional argument"),
    ("def is_legal_action(state, action, page):\n    return True\n", "positional argument"),
    ("def is_legal_action(state, action)\n    return True\n", "syntax error at line 1"),
])
def test_invalid_programs_give_a_reason_not_an_exception(code, reason):
    r = run_harness(code, EXAMPLES)
    assert not r.ok and reason in r.error
    assert r.predictions == (None,) * len(EXAMPLES)


def test_function_deleted_at_load_time_is_reported():
    r = run_harness(GOOD + "\ndel is_legal_action\n", EXAMPLES)
    assert not r.ok and "no function is_legal_action" in r.error
    assert r.example_errors == ("not run",) * len(EXAMPLES)


def test_non_bool_returns_are_none_with_the_type():
    r = run_harness("def is_legal_action(state, action):\n    return 1 if 'click' in action else 'yes'\n", EXAMPLES)
    assert r.ok and r.predictions == (None,) * len(EXAMPLES)
    assert r.example_errors[0] == "returned int, not bool" and r.example_errors[4] == "returned str, not bool"


def test_exception_text_names_the_program_line():
    r = run_harness("def is_legal_action(state, action):\n    x = {}\n    return x[action]\n", EXAMPLES[:1])
    assert r.predictions == (None,) and r.example_errors[0].startswith("line 3: KeyError")


def test_regex_warming_compiles_pattern_constants_and_nothing_else():
    from harness.sandbox_runner import warm_regex_cache
    code = compile(program("""
        import re
        def is_legal_action(state, action):
            helper = lambda a: re.search(r"\\[(\\d+)\\]", a)
            return bool(re.match(r"^(\\w+)\\(", action)) and "plain text" in state and "((" != action
    """), "<harness>", "exec")
    assert warm_regex_cache(code) == 2  # "((" does not compile, "plain text" is no pattern


# ---- time ---------------------------------------------------------------

def test_infinite_loop_in_one_example_times_out_and_the_rest_still_run():
    code = program("""
        def is_legal_action(state, action):
            while action == "click('99')":
                pass
            return True
    """)
    r = run_harness(code, EXAMPLES, timeout_s=2.0, per_example_timeout_s=0.2)
    assert r.ok and r.predictions == (True, None, True, True, True, True)
    assert "timed out" in r.example_errors[1]


def test_infinite_loop_at_load_hits_the_wall_limit():
    r = run_harness("while True:\n    pass\ndef is_legal_action(state, action):\n    return True\n",
                    EXAMPLES, timeout_s=0.5)
    assert not r.ok and r.error == "wall-time limit of 0.5s exceeded while loading"
    assert not r.infra and r.example_errors == ("not finished: wall-time limit",) * len(EXAMPLES)


def test_ignoring_the_alarm_does_not_escape_the_example_deadline():
    code = program("""
        import signal
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        def is_legal_action(state, action):
            while True:
                pass
            return True
    """)
    r = run_harness(code, EXAMPLES[:3], timeout_s=2.0, per_example_timeout_s=0.1)
    # each example was stopped at its own 0.1 s deadline: had one escaped, the whole run would have
    # hit the 2 s wall limit instead (not ok, "wall-time limit" in r.error)
    assert r.ok and r.predictions == (None, None, None)
    assert all("timed out" in e for e in r.example_errors)


def test_catching_base_exception_does_not_escape_the_deadline():
    code = program("""
        def is_legal_action(state, action):
            while True:
                try:
                    while True:
                        pass
                except BaseException:
                    pass
            return True
    """)
    r = run_harness(code, EXAMPLES[:2], timeout_s=2.0, per_example_timeout_s=0.1)
    assert r.ok and r.predictions == (None, None)
    assert all("timed out" in e for e in r.example_errors)


def test_the_whole_run_is_bounded_by_the_wall_limit():
    code = "import time\ndef is_legal_action(state, action):\n    time.sleep(0.3)\n    return True\n"
    r = run_harness(code, EXAMPLES, timeout_s=0.8, per_example_timeout_s=0.5)
    assert not r.ok and "wall-time limit" in r.error
    assert r.predictions[:2] == (True, True) and r.predictions[-1] is None
    assert r.example_errors[-1] == "not finished: wall-time limit"


def test_a_stopped_worker_is_killed_by_the_caller_deadline():
    sandbox.sandbox_info()
    pool = sandbox._state["pool"]
    worker = pool._acquire()
    pool._release(worker, True)
    os.kill(worker.proc.pid, signal.SIGSTOP)  # the launcher...
    os.killpg(worker.proc.pid, signal.SIGSTOP)  # ...and the zygote: a zygote that never answers
    try:
        r = pool.run(sandbox.build_request(GOOD, EXAMPLES, 0.3, 0.1))
        assert r[0] is None and r[1] == "wall-time limit of 0.3s exceeded (sandbox worker killed)"
        assert worker.proc.poll() is not None  # killed by the caller's deadline, not left behind
    finally:
        try:
            os.killpg(worker.proc.pid, signal.SIGCONT)
        except OSError:
            pass
    assert run_harness(GOOD, EXAMPLES).predictions == GOOD_PREDICTIONS  # a fresh worker takes over


def test_a_worker_killed_between_programs_is_replaced_without_failing_the_next():
    sandbox.sandbox_info()
    pool = sandbox._state["pool"]
    both = [pool._acquire(), pool._acquire()]
    for worker in both:
        pool._release(worker, True)
    for worker in list(pool.idle):
        os.killpg(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait()
    r = run_harness(GOOD, EXAMPLES)
    assert r.ok and r.predictions == GOOD_PREDICTIONS


# ---- resources and process exits ----------------------------------------

def test_memory_bomb_fails_the_example_not_the_caller():
    code = "def is_legal_action(state, action):\n    x = bytearray(8 << 30)\n    return True\n"
    r = run_harness(code, EXAMPLES[:2])
    assert r.ok and r.predictions == (None, None)
    assert "MemoryError" in r.example_errors[0]


def test_rlimits_are_set_inside():
    code = program("""
        import resource
        def is_legal_action(state, action):
            limits = {
                "AS": resource.RLIMIT_AS, "CPU": resource.RLIMIT_CPU, "NPROC": resource.RLIMIT_NPROC,
                "FSIZE": resource.RLIMIT_FSIZE, "NOFILE": resource.RLIMIT_NOFILE, "CORE": resource.RLIMIT_CORE,
            }
            soft = {name: resource.getrlimit(which)[0] for name, which in limits.items()}
            expected = {"AS": %d, "CPU": 4, "NPROC": %d, "FSIZE": %d, "NOFILE": %d, "CORE": 0}
            if soft != expected:
                raise ValueError(str(soft))
            return True
    """ % (sandbox.MEMORY_LIMIT_BYTES, 2 + sandbox.EXTRA_PROCESSES, sandbox.FILE_SIZE_LIMIT_BYTES,
           sandbox.OPEN_FILES_LIMIT))
    r = run_harness(code, EXAMPLES[:1], timeout_s=2.0)
    assert r.predictions == (True,), r.example_errors


def test_fork_bomb_is_contained():
    code = program("""
        import os
        def is_legal_action(state, action):
            for _ in range(10000):
                os.fork()
            return True
    """)
    r = run_harness(code, EXAMPLES[:2], timeout_s=2.0)
    assert r.ok and r.predictions == (None, None)
    assert "BlockingIOError" in r.example_errors[0] or "process" in r.example_errors[0]
    assert run_harness(GOOD, EXAMPLES).predictions == GOOD_PREDICTIONS


def test_no_process_survives_a_program(namespaced):
    code = program("""
        import os, time
        def is_legal_action(state, action):
            if os.fork() == 0:
                os.setsid()
                signal_ok = __import__("signal")
                signal_ok.signal(signal_ok.SIGTERM, signal_ok.SIG_IGN)
                if os.fork() == 0:
                    while True:
                        time.sleep(1)
                os._exit(0)
            return True
    """)
    r = run_harness(code, EXAMPLES[:1])
    assert r.predictions == (True,)
    uids = pool_uids()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # clean-up runs right after the reply
        counts = [sum(1 for u in sandbox_processes().values() if u == uid) for uid in uids]
        if all(c <= 2 for c in counts):
            break
        time.sleep(0.05)
    assert all(c <= 2 for c in counts), counts  # each worker: its zygote and one spare, nothing else


def test_os_exit_in_an_example_fails_that_example_only():
    code = "import os\ndef is_legal_action(state, action):\n    if 'fill' in action:\n        os._exit(3)\n    return True\n"
    r = run_harness(code, EXAMPLES)
    assert r.ok and r.predictions == (True, True, None, True, True, True)
    assert r.example_errors[2] == "process exited with code 3"


def test_sys_exit_at_load_is_a_load_failure():
    r = run_harness("import sys\nsys.exit(0)\ndef is_legal_action(state, action):\n    return True\n", EXAMPLES)
    assert not r.ok and "SystemExit" in r.error


def test_segfault_fails_the_example():
    code = "import ctypes\ndef is_legal_action(state, action):\n    return ctypes.string_at(0) == b''\n"
    r = run_harness(code, EXAMPLES[:2])
    assert r.ok and r.predictions == (None, None)
    assert "SIGSEGV" in r.example_errors[0]


def test_deep_recursion_is_an_example_error():
    code = "def is_legal_action(state, action):\n    return is_legal_action(state, action)\n"
    r = run_harness(code, EXAMPLES[:2])
    assert r.ok and r.predictions == (None, None) and "RecursionError" in r.example_errors[0]


def test_unbounded_native_recursion_kills_only_the_example():
    code = program("""
        import sys
        sys.setrecursionlimit(10**7)
        def f(n):
            return f(n + 1) + 1
        def is_legal_action(state, action):
            return f(0) > 0
    """)
    r = run_harness(code, EXAMPLES[:2], timeout_s=3.0, per_example_timeout_s=1.0)
    assert r.ok and r.predictions == (None, None)
    assert r.example_errors[0]


# ---- output --------------------------------------------------------------

def test_printing_megabytes_keeps_a_capped_tail():
    code = "def is_legal_action(state, action):\n    print('x' * (4 << 20))\n    print('END')\n    return True\n"
    r = run_harness(code, EXAMPLES[:2])
    assert r.ok and r.predictions == (True, True)
    assert len(r.stdout_tail) <= STDOUT_TAIL_CHARS and r.stdout_tail.endswith("END\n")


def test_raw_writes_to_stdout_go_nowhere():
    code = "import os\ndef is_legal_action(state, action):\n    os.write(1, b'y' * (8 << 20))\n    return True\n"
    r = run_harness(code, EXAMPLES[:2])
    assert r.ok and r.predictions == (True, True) and r.stdout_tail == ""


def test_forged_messages_cannot_desynchronise_the_next_program():
    """A program may choose its own predictions (it returns them anyway), but nothing more."""
    reply = '{"ok": true, "error": "", "predictions": [false, false, false, false, false, false], ' \
            '"errors": ["", "", "", "", "", ""], "out": ""}'
    code = program(f"""
        import os
        def is_legal_action(state, action):
            for fd in range(0, 64):
                try:
                    os.write(fd, b'{{"i": 5, "e": "forged"}}\\n{{"done": true}}\\n' + {reply!r}.encode() + b'\\n')
                except OSError:
                    pass
            return True
    """)
    r = run_harness(code, EXAMPLES)
    assert len(r.predictions) == len(EXAMPLES) and all(p in (True, None) for p in r.predictions)
    for _ in range(3):
        assert run_harness(GOOD, EXAMPLES).predictions == GOOD_PREDICTIONS


# ---- what cannot be reached ---------------------------------------------

def test_a_canary_outside_the_private_tmp_is_unchanged(tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    code = program(f"""
        import os
        def is_legal_action(state, action):
            os.makedirs({str(tmp_path)!r}, exist_ok=True)
            with open({str(canary)!r}, "w") as f:
                f.write("overwritten")
            for path in ("/usr/canary", "/canary", {str(REPO / "canary")!r}):
                try:
                    open(path, "w").write("x")
                except OSError:
                    pass
            return True
    """)
    r = run_harness(code, EXAMPLES[:1])
    assert r.ok and r.predictions == (True,), r.error  # it ran, and wrote into its own private /tmp
    assert canary.read_text() == "original"
    assert not (REPO / "canary").exists() and not Path("/usr/canary").exists() and not Path("/canary").exists()


def test_private_tmp_is_wiped_between_programs(namespaced):
    write = "def is_legal_action(state, action):\n    open('/tmp/left-behind', 'w').write('x')\n    return True\n"
    read = "import os\ndef is_legal_action(state, action):\n    return os.path.exists('/tmp/left-behind')\n"
    for _ in range(3):  # both workers of the pool
        assert run_harness(write, EXAMPLES[:1]).predictions == (True,)
    for _ in range(3):
        assert run_harness(read, EXAMPLES[:1]).predictions == (False,)


def test_repo_and_snapshot_cannot_be_opened(namespaced):
    paths = [str(p) for p in sorted((REPO / "harness" / "data").glob("*"))] + [
        str(REPO / "harness" / "config.py"), str(REPO), "/work", str(Path.home() / ".bashrc"), "/proc/1/environ"]
    assert any(os.path.exists(p) for p in paths)
    code = program(f"""
        import os
        PATHS = {paths!r}
        def is_legal_action(state, action):
            for p in PATHS:
                try:
                    os.listdir(p) if os.path.isdir(p) else open(p, "rb").read(1)
                    raise RuntimeError("reached " + p)
                except OSError:
                    pass
            return True
    """)
    r = run_harness(code, EXAMPLES[:1])
    assert r.predictions == (True,), r.example_errors


def test_caller_environment_secrets_are_not_visible(monkeypatch):
    secret = f"s3cret-{uuid.uuid4().hex}"
    monkeypatch.setenv("W8_TEST_SECRET", secret)
    monkeypatch.setenv("DAYTONA_API_KEY_TEST", secret)
    sandbox.close()  # workers start afresh with this environment in the caller
    monkeypatch.setenv("W8_SANDBOX", "local")
    code = "import os\ndef is_legal_action(state, action):\n    print(dict(os.environ))\n    return True\n"
    r = run_harness(code, EXAMPLES[:1])
    assert r.predictions == (True,) and "PATH" in r.stdout_tail
    assert secret not in r.stdout_tail and "W8_TEST_SECRET" not in r.stdout_tail
    sandbox.close()


def test_network_connect_fails(namespaced):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    code = program(f"""
        import socket
        def is_legal_action(state, action):
            for host, port in (("127.0.0.1", {port}), ("1.1.1.1", 53), ("pypi.org", 443)):
                try:
                    socket.create_connection((host, port), timeout=0.2)
                    raise RuntimeError(f"connected to {{host}}")
                except OSError:
                    pass
            return True
    """)
    try:
        r = run_harness(code, EXAMPLES[:1])
    finally:
        listener.close()
    assert r.predictions == (True,), r.example_errors


def test_caller_memory_is_out_of_reach(namespaced):
    code = program(f"""
        import os
        def is_legal_action(state, action):
            for path in ("/proc/{os.getpid()}/mem", "/proc/self/maps", "/proc/1/environ"):
                try:
                    open(path, "rb").read(1)
                    raise RuntimeError("read " + path)
                except OSError:
                    pass
            return os.getuid() != 0
    """)
    r = run_harness(code, EXAMPLES[:1])
    assert r.predictions == (True,), r.example_errors


SYSTEM_TREES = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", sys.base_prefix)


def test_the_sandbox_root_holds_only_system_trees_dev_and_tmp(namespaced):
    code = "import os\ndef is_legal_action(state, action):\n    print(sorted(os.listdir('/')))\n    return True\n"
    r = run_harness(code, EXAMPLES[:1])
    top = set(eval(r.stdout_tail))
    allowed = {p.split("/")[1] for p in SYSTEM_TREES if os.path.lexists(p)} | {"dev", "etc", "tmp"}
    assert top <= allowed, top - allowed


def test_a_label_hunting_program_finds_no_label(namespaced):
    """Labels live in the caller (Example objects here): hunt in env, memory and every non-system file."""
    import hashlib
    marker = f"LABEL-{uuid.uuid4().hex}"
    examples = [Example(state=STATE, action=a, legal=True, error=marker) for a in ACTIONS]
    digest = hashlib.sha256(marker.encode()).hexdigest()  # the program holds only the hash, not the marker
    code = program(f"""
        import gc, hashlib, os, re
        SYSTEM = {SYSTEM_TREES!r}
        def reachable_text():
            yield repr(dict(os.environ))
            for obj in gc.get_objects():
                yield repr(obj)[:100000]
            for root, dirs, files in os.walk("/"):
                dirs[:] = [d for d in dirs if os.path.join(root, d) not in SYSTEM]
                for name in files:
                    try:
                        with open(os.path.join(root, name), "rb") as f:
                            yield f.read(1 << 20).decode("latin-1")
                    except OSError:
                        pass
        def is_legal_action(state, action):
            for text in reachable_text():
                for found in re.findall("LABEL" + "-[0-9a-f]{{32}}", text):
                    if hashlib.sha256(found.encode()).hexdigest() == {digest!r}:
                        return True
            return False
    """)
    r = run_harness(code, examples[:1], timeout_s=10.0, per_example_timeout_s=10.0)
    assert r.ok and r.predictions == (False,), r.example_errors


def test_namespace_mount_and_trace_syscalls_are_denied(namespaced):
    if not namespaced.get("seccomp"):
        pytest.fail(f"the seccomp filter is expected on x86_64: {namespaced}")
    code = program("""
        import ctypes, os, threading
        def is_legal_action(state, action):
            libc = ctypes.CDLL(None, use_errno=True)
            denied = []
            for flag in (os.CLONE_NEWUSER, os.CLONE_NEWNS, os.CLONE_NEWNET):
                try:
                    os.unshare(flag)
                except PermissionError:
                    denied.append("unshare")
            if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == -1 and ctypes.get_errno() == 1:
                denied.append("mount")
            if libc.ptrace(16, 1, None, None) == -1 and ctypes.get_errno() == 1:  # PTRACE_ATTACH
                denied.append("ptrace")
            ran = []
            thread = threading.Thread(target=lambda: ran.append(1))
            thread.start()
            thread.join()
            pid = os.fork()
            if pid == 0:
                os._exit(7)
            forked = os.waitpid(pid, 0)[1] >> 8 == 7
            return denied == ["unshare"] * 3 + ["mount", "ptrace"] and ran == [1] and forked
    """)
    r = run_harness(code, EXAMPLES[:1])
    assert r.predictions == (True,), r.example_errors


def test_signals_to_the_zygote_do_not_kill_the_worker(namespaced):
    code = program("""
        import os, signal
        def is_legal_action(state, action):
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSTOP):
                for pid in (1, -1, os.getppid()):
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
            return True
    """)
    before = {w.proc.pid for w in sandbox._state["pool"].idle} if sandbox._state["pool"] else set()
    r = run_harness(code, EXAMPLES[:1])
    assert r.ok and r.predictions == (True,)
    assert run_harness(GOOD, EXAMPLES).predictions == GOOD_PREDICTIONS
    after = {w.proc.pid for w in sandbox._state["pool"].idle}
    assert before <= after  # no worker had to be replaced


def test_patched_builtins_do_not_leak_into_the_next_program():
    code = program("""
        import builtins, json, re
        builtins.bool = lambda x: False
        builtins.isinstance = lambda *a: False
        json.dumps = lambda *a, **k: "garbage"
        re.match = lambda *a, **k: None
        def is_legal_action(state, action):
            return True
    """)
    run_harness(code, EXAMPLES)
    for _ in range(3):
        assert run_harness(GOOD, EXAMPLES).predictions == GOOD_PREDICTIONS


FALLBACK_PROBE = r'''
import json, logging, os, sys
sys.path.insert(0, sys.argv[1])
from harness import sandbox_runner
libc = __import__("ctypes").CDLL(None)
libc.prctl(38, 1, 0, 0, 0)  # no_new_privs, so an unprivileged filter may be installed
sandbox_runner._install_seccomp()  # this process and its zygotes: no unshare, so no namespaces
logging.basicConfig(level=logging.WARNING, format="%(message)s")
os.environ["W8_SANDBOX"] = "local"
from harness.sandbox import run_harness, sandbox_info, close
info = sandbox_info()
good = run_harness("import os\ndef is_legal_action(state, action):\n    return os.getcwd() == %r\n" % info["private_dir"],
                   [{"state": "s", "action": "a"}])
loop = run_harness("def is_legal_action(state, action):\n    while True:\n        pass\n    return True\n",
                   [{"state": "s", "action": "a"}] * 2, timeout_s=1.0, per_example_timeout_s=0.2)
close()
print(json.dumps({"info": info, "good": good.predictions, "loop": loop.example_errors,
                  "dir_left": os.path.exists(info["private_dir"])}))
'''


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="uses the x86_64 seccomp filter to take namespaces away")
def test_without_namespaces_the_fallback_holds_time_limits_and_says_so(tmp_path):
    """Namespaces taken away (seccomp denies unshare): a private temp dir, deadlines, one warning."""
    import json
    import subprocess
    probe = tmp_path / "probe.py"
    probe.write_text(FALLBACK_PROBE)
    done = subprocess.run([sys.executable, str(probe), str(REPO)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    info = result["info"]
    assert not info["namespaces"] and info["filesystem"] == "shared" and "namespaces unavailable" in info["reason"]
    assert "weak isolation" in done.stderr and done.stderr.count("weak isolation") == 1
    assert result["good"] == [True]  # programs run in the fresh private dir
    assert all("timed out" in e for e in result["loop"])
    assert not result["dir_left"]  # close() removed it


def test_weak_isolation_is_announced_when_namespaces_are_missing(isolation, caplog):
    pool = sandbox_local.LocalPool(1)
    with caplog.at_level(logging.WARNING, logger="harness.sandbox"):
        pool._note_isolation({"namespaces": False, "filesystem": "shared", "reason": "namespaces unavailable: EPERM"})
    assert len(caplog.records) == 1 and "weak isolation" in caplog.text and "EPERM" in caplog.text


NON_ROOT_PROBE = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["W8_SANDBOX"] = "local"
from harness.sandbox import run_harness, sandbox_info, close
CODE = """
import ctypes
def is_legal_action(state, action):
    libc = ctypes.CDLL(None, use_errno=True)
    header, caps = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
    no_caps = libc.syscall(125, header, caps) == 0 and not any(caps)  # capget
    try:
        open(PATH).read(1)
        return False
    except OSError:
        return no_caps
""".replace("PATH", repr(os.path.join(sys.argv[1], "harness", "config.py")))
run = run_harness(CODE, [{"state": "s", "action": "a"}])
print(json.dumps({"uid": os.getuid(), "info": sandbox_info(), "predictions": run.predictions}))
close()
'''


def _traversable_view_script(paths: list[str]) -> str:
    """Shell lines that make `paths` reachable for an unprivileged uid inside a private mount namespace."""
    lines = ["mount --make-rprivate /"]
    for i, path in enumerate(paths):
        blocked = next((a for a in Path(path).parents if a != Path("/") and not os.stat(a).st_mode & 0o001), None)
        if blocked is not None:
            view = f"/dev/shm/w8-view-{os.getpid()}-{i}"
            lines += [f"mkdir -p {view}", f"mount --bind {path} {view}",
                      f"mount -t tmpfs -o mode=755 tmpfs {blocked}", f"mkdir -p {path}", f"mount --bind {view} {path}"]
    return "\n".join(lines)


@pytest.mark.slow
def test_a_non_root_caller_gets_the_same_isolation_through_a_user_namespace(tmp_path):
    """Run the sandbox as uid 65534 (root only sets up the view); as non-root the whole suite covers it."""
    import json
    import shutil
    import subprocess
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("needs root to start an unprivileged caller; run as non-root, the suite itself covers this")
    probe = Path("/dev/shm") / f"w8-probe-{uuid.uuid4().hex}.py"
    probe.write_text(NON_ROOT_PROBE)
    probe.chmod(0o644)
    setup = _traversable_view_script([sys.base_prefix, str(REPO)])
    command = f"{setup}\ncd / && exec setpriv --reuid=65534 --regid=65534 --clear-groups {sys.executable} {probe} {REPO}"
    try:
        done = subprocess.run(["unshare", "-m", "bash", "-c", command], capture_output=True, text=True, timeout=120)
    finally:
        probe.unlink()
        for view in Path("/dev/shm").glob(f"w8-view-{os.getpid()}-*"):
            view.rmdir()  # empty outside the namespace that mounted onto it
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["uid"] == 65534
    info = result["info"]
    assert info["namespaces"] and info["filesystem"] == "pivot_root" and info["seccomp"], info
    assert result["predictions"] == [True]  # repo unreadable, no capabilities inside
