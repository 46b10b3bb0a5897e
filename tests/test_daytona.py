"""The Daytona backend with the real `daytona` SDK against a stub service on 127.0.0.1.

Nothing of the SDK is replaced: DAYTONA_API_URL points it at tests/daytona_stub.py, which
answers create/get/list/delete as the API does, hands out a toolboxProxyUrl pointing back at
itself, and runs each code-run's script with a chosen interpreter in a subprocess. Faults are
injected there (429 with Retry-After, 5xx, a slow answer, the sandbox gone, no network block).
The only test-side settings are the backend's retry waits (recorded instead of slept) and, where
the stub's subprocess can reach this machine's network, the probe's targets (a closed local
port and a name under .invalid); one test runs the default targets in an empty network
namespace. Model code here is our own test programs, run by the stub on this machine.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import socket
import sys
import threading
import uuid
from pathlib import Path

import pytest

from harness import daytona_faults, sandbox, sandbox_daytona
from harness.dataset import Example
from harness.sandbox import SandboxError, run_harness
from harness.daytona_faults import Backoff
from harness.sandbox_daytona import MAX_FAILED_PROGRAMS, RUN_MARGIN_S, DaytonaBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from daytona_stub import ERROR_SENTINEL, DaytonaStub, find_python, netns_prefix  # noqa: E402

KEY = "dtn-stub-key-" + uuid.uuid4().hex
PYTHON = find_python()  # an interpreter the runner can use on this machine (as root: a world-readable stdlib)
GOOD = "def is_legal_action(state, action):\n    return '27' in action\n"
EXAMPLES = [{"state": "[27] button 'Search'", "action": a} for a in ("click('27')", "click('99')", "noop()")]
GOOD_PREDICTIONS = (True, False, False)

pytestmark = pytest.mark.skipif(PYTHON is None, reason="no Python interpreter the runner can use as the stub's")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Env:
    """Stubs started on demand (the SDK talks to the last one) and the backend's recorded waits."""

    def __init__(self, monkeypatch):
        self.monkeypatch, self.stubs, self.delays = monkeypatch, [], []
        self.options = {"backoff": Backoff(attempts=4, base_s=0.01, cap_s=60.0, sleep=self.delays.append),
                        "probe_tcp": ("127.0.0.1", closed_port()), "probe_dns": "w8-probe.invalid"}
        self.backend_options()

    def stub(self, **options) -> DaytonaStub:
        stub = DaytonaStub(**{"python": PYTHON, **options}).start()
        self.stubs.append(stub)
        self.monkeypatch.setenv("DAYTONA_API_URL", stub.api_url)
        return stub

    def backend_options(self, **options) -> None:
        """What harness.sandbox's backend choice builds: the real DaytonaBackend with these settings."""
        self.options.update(options)
        self.monkeypatch.setattr(sandbox, "DaytonaBackend", functools.partial(DaytonaBackend, **self.options))


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("DAYTONA_API_KEY", KEY)
    sandbox.close()
    state = Env(monkeypatch)
    yield state
    sandbox.close()  # deletes through the stub: before the stubs stop
    for stub in state.stubs:
        stub.stop()


def our_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "harness.sandbox"]


def test_stub_daytona_create_body_integer_timeout_and_the_key_only_in_authorization(env, caplog, capfd):
    stub = env.stub()
    marker = f"LABEL-{uuid.uuid4().hex}"
    examples = [Example(state=e["state"], action=e["action"], legal=True, error=marker) for e in EXAMPLES]
    caplog.set_level(logging.DEBUG)  # every logger, the SDK's and urllib3's included
    run = run_harness(GOOD, examples, timeout_s=1.5, backend="daytona")
    assert run.ok and run.backend == "daytona" and run.predictions == GOOD_PREDICTIONS, run

    body = stub.routed("create")[0]["body"]
    assert body["networkBlockAll"] is True and body["autoDeleteInterval"] == 0  # ephemeral
    assert body["autoStopInterval"] == sandbox_daytona.AUTO_STOP_MINUTES and body["ttlMinutes"] == 24 * 60
    assert body["labels"]["app"] == "agent-rein" and body["labels"]["w8-create"] and body["labels"]["w8-pid"]
    runs = stub.routed("code_run")
    assert len(runs) == 3  # the version check, the probe program, the program: one call with all its examples
    assert type(runs[-1]["body"]["timeout"]) is int and runs[-1]["body"]["timeout"] == 2 + RUN_MARGIN_S
    assert "_run_once(" in runs[-1]["body"]["code"] and marker not in runs[-1]["body"]["code"]  # no labels sent
    for request in stub.requests:
        headers = {k.lower(): v for k, v in request["headers"].items()}
        if request["route"] != "other":
            assert headers["authorization"] == f"Bearer {KEY}", request["path"]
        assert KEY not in request["path"] and KEY not in str(request["body"])
        assert all(KEY not in v for k, v in headers.items() if k != "authorization")
    assert KEY not in caplog.text and KEY not in "".join(capfd.readouterr())

    info = sandbox.sandbox_info("daytona")
    assert info["network_block_all"] is True and info["slots"] == 1 and info["cpu"] == 1
    assert set(info["probe"].values()) == {False} and info["isolation"]["remote"] is True
    assert info["python"] == info["isolation"]["python"]
    assert sandbox.sandbox_provenance()["daytona"]["sandbox"] == info["sandbox"] == stub.live()[0]


def test_stub_daytona_429_with_retry_after_and_each_5xx_are_retried_then_the_program_runs(env, caplog):
    stub = env.stub()
    assert run_harness(GOOD, EXAMPLES, backend="daytona").ok  # started
    stub.inject("code_run", status=429, headers={"Retry-After": "7"})
    with caplog.at_level(logging.DEBUG):
        run = run_harness(GOOD, EXAMPLES, backend="daytona")
    assert run.ok and run.predictions == GOOD_PREDICTIONS and env.delays == [7.0]  # the service's wait, honoured
    for status in (502, 503, 504):
        stub.inject("code_run", status=status)
    run = run_harness(GOOD, EXAMPLES, backend="daytona")
    assert run.ok and run.predictions == GOOD_PREDICTIONS
    backoff = env.delays[1:]
    assert len(backoff) == 3 and all(0.005 * 2 ** i <= d <= 0.01 * 2 ** i for i, d in enumerate(backoff)), backoff
    stub.inject("create", status=503)  # create retries too (the next sandbox)
    sandbox.close()
    assert run_harness(GOOD, EXAMPLES, backend="daytona").ok and len(env.delays) == 5
    assert sandbox.sandbox_info("daytona")["stats"]["retries"] == 1
    assert KEY not in caplog.text and ERROR_SENTINEL not in caplog.text
    assert all("\n" not in line for line in our_lines(caplog))


@pytest.mark.slow
def test_stub_daytona_a_read_timeout_on_code_run_is_retried(env):
    """The SDK's read timeout is code_run's timeout + 5 s: a 1 s program budget waits 6 s for an answer."""
    stub = env.stub()
    env.backend_options(run_margin_s=0)
    assert run_harness(GOOD, EXAMPLES, timeout_s=0.5, backend="daytona").ok
    stub.inject("code_run", delay_s=7.0)
    run = run_harness(GOOD, EXAMPLES, timeout_s=0.5, backend="daytona")
    assert run.ok and run.predictions == GOOD_PREDICTIONS and len(env.delays) == 1


def test_stub_daytona_a_sandbox_gone_404_or_410_is_recreated_once(env, caplog):
    stub = env.stub()
    assert run_harness(GOOD, EXAMPLES, backend="daytona").ok
    first = stub.live()[0]
    stub.expire(first)  # stopped when idle, then deleted: ephemeral
    with caplog.at_level(logging.WARNING, logger="harness.sandbox"):
        run = run_harness(GOOD, EXAMPLES, backend="daytona")
    assert run.ok and run.predictions == GOOD_PREDICTIONS
    second = stub.live()
    assert len(second) == 1 and second[0] != first and len(stub.routed("create")) == 2
    assert [line for line in our_lines(caplog) if "is gone" in line] == [
        f"sandbox: Daytona sandbox {first} is gone (NotFoundException 404: Not Found); creating a new one"]
    stub.inject("code_run", status=410)
    assert run_harness(GOOD, EXAMPLES, backend="daytona").ok
    info = sandbox.sandbox_info("daytona")
    assert info["stats"]["recreated"] == 2 and len(stub.routed("create")) == 3 and len(stub.live()) == 1
    assert info["network_block_all"] is True and set(info["probe"].values()) == {False}  # re-probed


def test_stub_daytona_consecutive_failures_fall_back_to_local_in_auto_mode_recorded(env, caplog):
    stub = env.stub()
    before = sandbox.sandbox_provenance()  # process-wide counts: compared as differences
    assert run_harness(GOOD, EXAMPLES, backend="auto").backend == "daytona"
    stub.inject("code_run", status=500, times=100)  # not retried: each program fails once
    with caplog.at_level(logging.WARNING, logger="harness.sandbox"):
        runs = [run_harness(GOOD, EXAMPLES, backend="auto") for _ in range(MAX_FAILED_PROGRAMS + 1)]
    failed, fallen, later = runs[:MAX_FAILED_PROGRAMS - 1], runs[MAX_FAILED_PROGRAMS - 1], runs[-1]
    assert all(r.backend == "daytona" and r.infra and not r.ok for r in failed)
    assert "ServiceException 500" in failed[0].error and ERROR_SENTINEL not in failed[0].error
    assert fallen.backend == later.backend == "local" and fallen.predictions == later.predictions == GOOD_PREDICTIONS
    provenance = sandbox.sandbox_provenance()
    runs = {k: v - before["runs"].get(k, 0) for k, v in provenance["runs"].items()}
    assert runs == {"daytona": MAX_FAILED_PROGRAMS, "local": 2}
    assert provenance["infra_failures"] - before["infra_failures"] == MAX_FAILED_PROGRAMS - 1
    fallbacks = provenance["fallbacks"][len(before["fallbacks"]):]
    assert len(fallbacks) == 1 and f"Daytona failed {MAX_FAILED_PROGRAMS} programs in a row" in fallbacks[0]["reason"]
    assert provenance["daytona"]["stats"]["failed_programs"] == MAX_FAILED_PROGRAMS
    assert stub.live() == []  # the sandbox is deleted once nothing uses it
    assert len([line for line in our_lines(caplog) if "locally from now on" in line]) == 1


def test_stub_daytona_explicitly_asked_never_falls_back_and_stops_with_one_line(env, caplog):
    stub = env.stub()
    assert run_harness(GOOD, EXAMPLES, backend="daytona").ok
    stub.inject("code_run", status=503, times=1000)
    with caplog.at_level(logging.WARNING, logger="harness.sandbox"):
        runs = [run_harness(GOOD, EXAMPLES, backend="daytona") for _ in range(MAX_FAILED_PROGRAMS - 1)]
        with pytest.raises(SandboxError) as stopped:
            run_harness(GOOD, EXAMPLES, backend="daytona")
        requests = len(stub.requests)
        with pytest.raises(SandboxError) as again:
            run_harness(GOOD, EXAMPLES, backend="daytona")
    assert all(r.infra and r.backend == "daytona" for r in runs)
    message = str(stopped.value)
    assert "\n" not in message and "ServiceException 503" in message and "after 4 tries" in message
    assert KEY not in message and ERROR_SENTINEL not in message and str(again.value) == message
    assert len(stub.requests) == requests  # the second call asked the service nothing
    assert len(stub.routed("code_run")) == 2 + 1 + (MAX_FAILED_PROGRAMS - 1) * 4 + 4 and stub.live() == []
    assert len([line for line in our_lines(caplog) if "not falling back" in line]) == 1


def test_stub_daytona_explicitly_asked_without_service_accepted_key_or_key_raises_one_line(env, monkeypatch):
    monkeypatch.setenv("DAYTONA_API_URL", f"http://127.0.0.1:{closed_port()}/api")
    with pytest.raises(SandboxError) as unreachable:
        run_harness(GOOD, EXAMPLES, backend="daytona")
    text = str(unreachable.value)
    assert text.startswith("Daytona unavailable: Daytona create: ") and "Max retries exceeded" in text
    assert "\n" not in text and KEY not in text and text.endswith("(unreachable: not retried)")
    assert env.delays == []  # connection refused: nothing listens there; waiting would only delay the fallback
    sandbox.close()
    auto = run_harness(GOOD, EXAMPLES, backend="auto")
    assert auto.backend == "local" and "Daytona unavailable" in sandbox.sandbox_provenance()["fallbacks"][-1]["reason"]
    sandbox.close()
    stub = env.stub()
    stub.inject("create", status=401)
    waits = len(env.delays)
    with pytest.raises(SandboxError, match="^Daytona unavailable: Daytona create: DaytonaAuthenticationError 401: "):
        run_harness(GOOD, EXAMPLES, backend="daytona")
    assert len(env.delays) == waits and len(stub.routed("create")) == 1  # a refused key is not retried
    sandbox.close()
    stub.inject("create", status=403)
    with pytest.raises(SandboxError, match="^Daytona unavailable: Daytona create: \\w+ 403: "):
        run_harness(GOOD, EXAMPLES, backend="daytona")
    assert len(env.delays) == waits and len(stub.routed("create")) == 2  # nor a forbidden one
    sandbox.close()
    monkeypatch.delenv("DAYTONA_API_KEY")
    with pytest.raises(SandboxError, match="^W8_SANDBOX=daytona but DAYTONA_API_KEY is not set$"):
        run_harness(GOOD, EXAMPLES, backend="daytona")


def test_stub_daytona_a_name_that_does_not_resolve_falls_back_at_once_said_once(env, monkeypatch, caplog):
    monkeypatch.setenv("DAYTONA_API_URL", "http://w8-daytona-stub.invalid/api")  # .invalid never resolves
    with caplog.at_level(logging.WARNING, logger="harness.sandbox"):
        runs = [run_harness(GOOD, EXAMPLES, backend="auto") for _ in range(3)]
    assert [r.backend for r in runs] == ["local"] * 3 and runs[0].predictions == GOOD_PREDICTIONS
    assert env.delays == []
    reason = sandbox.sandbox_provenance()["fallbacks"][-1]["reason"]
    assert "NameResolutionError" in reason and reason.endswith("(unreachable: not retried)")
    assert len([line for line in our_lines(caplog) if "Daytona unavailable" in line]) == 1  # the reason, once


def test_stub_daytona_a_sandbox_reported_without_the_block_is_refused_and_deleted(env):
    stub = env.stub(network_block_all=False)
    with pytest.raises(SandboxError, match="network_block_all=False") as refused:
        run_harness(GOOD, EXAMPLES, backend="daytona")
    created = stub.routed("create")
    assert len(created) == 1 and created[0]["body"]["networkBlockAll"] is True  # asked for, not granted
    assert stub.routed("code_run") == [] and stub.live() == [] and len(stub.deleted) == 1
    assert "\n" not in str(refused.value)
    sandbox.close()
    run = run_harness(GOOD, EXAMPLES, backend="auto")
    assert run.backend == "local"
    assert "network_block_all=False" in sandbox.sandbox_provenance()["fallbacks"][-1]["reason"]


def test_stub_daytona_a_probe_that_reaches_the_network_is_refused_and_the_sandbox_deleted(env):
    stub = env.stub()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        env.backend_options(probe_tcp=listener.getsockname(), probe_dns="localhost")
        with pytest.raises(SandboxError, match="the network probe reached tcp 127.0.0.1:.*, dns localhost"):
            run_harness(GOOD, EXAMPLES, backend="daytona")
    assert len(stub.routed("code_run")) == 2 and stub.live() == [] and len(stub.deleted) == 1


@pytest.mark.skipif(netns_prefix() is None, reason="`unshare -n` does not work here: no empty network namespace")
def test_stub_daytona_the_default_probe_targets_fail_in_an_empty_network_namespace(env):
    stub = env.stub(netns=True)
    env.backend_options(probe_tcp=sandbox_daytona.PROBE_TCP, probe_dns=sandbox_daytona.PROBE_DNS)
    assert run_harness(GOOD, EXAMPLES, backend="daytona").predictions == GOOD_PREDICTIONS
    assert sandbox.sandbox_info("daytona")["probe"] == {"tcp 1.1.1.1:53": False, "dns example.com": False}
    assert stub.prefix is not None


def test_stub_daytona_the_runner_works_on_an_older_python_and_a_too_old_one_is_named(env):
    older = find_python(below=(3, 12))
    if older is None:
        pytest.skip("no Python older than 3.12 (without os.unshare) that the runner can use here")
    env.stub(python=older)
    loop = "def is_legal_action(state, action):\n    while True:\n        pass\n"
    assert run_harness(GOOD, EXAMPLES, backend="daytona").predictions == GOOD_PREDICTIONS
    timed_out = run_harness(loop, EXAMPLES[:1], timeout_s=1.0, per_example_timeout_s=0.2, backend="daytona")
    assert timed_out.ok and "timed out" in timed_out.example_errors[0]
    info = sandbox.sandbox_info("daytona")
    assert tuple(int(v) for v in info["python"].split(".")[:2]) < (3, 12)
    assert info["isolation"]["namespaces"] is False and info["isolation"]["remote"] is True
    sandbox.close()
    ancient = find_python(below=sandbox_daytona.RUNNER_MIN_PYTHON, readable=False)
    if ancient is None:
        pytest.skip("no Python older than the runner's minimum to name")
    stub = env.stub(python=ancient)
    with pytest.raises(SandboxError, match=r"its Python \(.*\) is older than the runner needs"):
        run_harness(GOOD, EXAMPLES, backend="daytona")
    assert len(stub.routed("code_run")) == 1 and stub.live() == []


def test_stub_daytona_every_program_failing_stops_the_run_a_runner_killer_fails_alone(env):
    stub = env.stub()
    killer = ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
              "def is_legal_action(state, action):\n    return True\n")
    run = run_harness(killer, EXAMPLES, backend="daytona")
    assert not run.ok and not run.infra and run.error.startswith("the program broke the remote runner")
    assert run_harness(GOOD, EXAMPLES, backend="daytona").ok
    stub.python = "/bin/false"  # the sandbox's interpreter now fails every script: no program gives a result
    runs = [run_harness(GOOD, EXAMPLES, backend="daytona") for _ in range(MAX_FAILED_PROGRAMS - 1)]
    assert all(r.infra and "daytona run gave no result (exit code 1)" in r.error for r in runs)
    with pytest.raises(SandboxError, match=f"^Daytona failed {MAX_FAILED_PROGRAMS} programs in a row "
                                           r"\(last: daytona run gave no result \(exit code 1\)\)$"):
        run_harness(GOOD, EXAMPLES, backend="daytona")


def test_stub_daytona_32_threads_share_one_sandbox_at_most_as_many_at_once_as_it_has_cpus(env):
    stub = env.stub(cpu=2, memory=4)
    assert run_harness(GOOD, EXAMPLES, backend="daytona").ok
    results, errors = [], []

    def worker():
        try:
            results.append(run_harness(GOOD, EXAMPLES, timeout_s=1.0, backend="daytona"))
        except BaseException as err:  # recorded, asserted below
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(results) == 32
    assert all(r.ok and r.predictions == GOOD_PREDICTIONS for r in results)
    assert stub.max_active == 2 and len(stub.routed("create")) == 1  # bounded by the 2 CPUs, and used


def test_stub_daytona_a_create_that_times_out_leaves_no_orphan(env):
    stub = env.stub()
    env.backend_options(create_timeout_s=1.0)
    stub.inject("create", delay_s=1.5)  # the sandbox exists; the answer comes after the client gave up
    assert run_harness(GOOD, EXAMPLES, backend="daytona").ok
    creates, lists = stub.routed("create"), stub.routed("list")
    assert len(creates) == 2 and len(stub.deleted) == 1 and len(stub.live()) == 1
    assert lists and creates[0]["body"]["labels"]["w8-create"] in lists[0]["path"]
    assert sandbox.sandbox_info("daytona")["sandbox"] == stub.live()[0] != stub.deleted[0]


def test_stub_daytona_close_deletes_what_was_created_even_while_threads_run(env):
    stub = env.stub(cpu=2, memory=4)
    results, errors, go = [], [], threading.Event()

    def worker():
        go.wait()
        for _ in range(4):
            try:
                results.append(run_harness(GOOD, EXAMPLES, backend="daytona"))
            except BaseException as err:  # recorded, asserted below
                errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    go.set()
    while not stub.routed("code_run"):
        threading.Event().wait(0.01)
    sandbox.close()  # while programs wait and run
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(results) == 24
    assert all(r.ok or r.infra for r in results) and any(r.ok for r in results)
    sandbox.close()
    assert len(stub.created) >= 2 and stub.live() == [] and sorted(stub.deleted) == sorted(stub.created)


def test_errors_are_one_masked_line_and_retry_after_dates_count():
    from daytona_toolbox_api_client.exceptions import ServiceException
    from urllib3 import HTTPResponse

    response = HTTPResponse(body=f'{{"message": "busy", "detail": "{ERROR_SENTINEL} {KEY}"}}'.encode(),
                            headers={"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT", "X-Detail": ERROR_SENTINEL},
                            status=503, reason="Service Unavailable")
    err = ServiceException(http_resp=response)
    assert ERROR_SENTINEL in str(err) and "\n" in str(err)  # what the toolbox client's own str() carries
    assert daytona_faults.describe(err, KEY) == "ServiceException 503: Service Unavailable"
    assert daytona_faults.classify(err) == "retry" and daytona_faults.retry_after_s(err) > 1e9
    assert daytona_faults.mask(f"auth failed for key {KEY} ({KEY})", KEY) == "auth failed for key *** (***)"


def load_doctor():
    path = Path(__file__).resolve().parents[1] / "scripts" / "doctor.py"
    spec = importlib.util.spec_from_file_location("w8_doctor", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stub_daytona_doctor_says_daytona_key_service_and_block_in_one_line_each(env, monkeypatch, capsys):
    doctor = load_doctor()
    monkeypatch.setattr(doctor, "DaytonaBackend", functools.partial(DaytonaBackend, **env.options))
    monkeypatch.setenv("DAYTONA_API_URL", f"http://127.0.0.1:{closed_port()}/api")

    def check() -> tuple[list[str], list[bool]]:
        report = doctor.Report()
        doctor.check_daytona(report)
        out = capsys.readouterr().out
        assert KEY not in out
        return out.splitlines(), report.results

    lines, results = check()  # offline: information, not a failure
    assert lines[0].startswith("--   daytona          DAYTONA_API_KEY is set") and results == []
    assert lines[1].startswith("--   daytona service  not reachable at http://127.0.0.1:") and len(lines) == 3
    assert lines[2] == "--   daytona block    not confirmed: the service was not reached"
    stub = env.stub()
    stub.inject("list", status=401)
    lines, results = check()
    assert lines[1].startswith("FAIL daytona service ") and "refused the key: " in lines[1] and results == [False]
    lines, results = check()
    assert lines[1].startswith("ok   daytona service  reachable at http://127.0.0.1:") and results == [True, True]
    assert lines[2].startswith("ok   daytona block    confirmed: sandbox ") and "reached neither 127.0.0.1:" in lines[2]
    assert stub.live() == [] and len(stub.deleted) == 1  # the doctor's sandbox is gone
    env.stub(network_block_all=False)
    lines, results = check()
    assert lines[2].startswith("FAIL daytona block    not confirmed: Daytona sandbox ") and results == [True, False]
    assert "network_block_all=False" in lines[2] and len(lines) == 3
    monkeypatch.delenv("DAYTONA_API_KEY")
    lines, results = check()
    assert lines == ["--   daytona          DAYTONA_API_KEY not set: the sandbox falls back to local processes "
                     "(optional)"]
