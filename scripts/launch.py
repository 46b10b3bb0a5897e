"""Launch r3 on GCP: `sky launch -c w8-biayn-r3 -y --down sky/r3.yaml` with the knobs: `make launch`.

    make launch                                   # presets/gcp.env under the W8_* you set
    make launch W8_TRAIN_COUNT=1024 W8_ACCELERATORS=H100:8 W8_BUCKET=gs://my-bucket/r3
    make gpu-smoke                                # presets/gpu-smoke.env, then the results are collected
    W8_GCP_IAP=1 W8_GCP_VPC=w8-iap make launch    # SSH through IAP, internal IPs (docs/gpu-launch.md)
    python scripts/launch.py --print              # show the command, run nothing

The knobs are resolved as the node will resolve them (W8_PRESET under what you set), which
decide --gpus, --num-nodes and --image-id; every W8_* you set goes as `--env NAME=VALUE`;
DAYTONA_API_KEY and WANDB_API_KEY, when set, go as `--secret NAME` by name only, so their
values never appear in a command line or log. `sky` runs under the scoped GCP env built from
.gcp-service-account.json. The whole output (ours and sky's, which streams the node's set-up
and run) is kept in .w8-biayn/logs/launch-<preset>-<time>.log, also when the launch fails;
`--collect` then writes the run's W8_RESULT records from that log into the results folder.

You pay for every minute the cluster is up, and SkyPilot's `--down` is armed only after the
node's set-up succeeded. So:
  * as soon as the cluster is UP (before set-up), autodown is armed: `sky autostop -y -i 10
    --down` (idle = no job and no SSH session: if this machine goes away mid-set-up, SkyPilot
    tears the cluster down 10 idle minutes later);
  * when `sky launch` exits non-zero, or on Ctrl-C (SIGTERM, SIGHUP), the cluster's status is
    checked and it is torn down with `sky down -y`, unless W8_KEEP_CLUSTER=1;
  * the last line always says whether the cluster is still up and, when the launch printed
    SkyPilot's optimizer table, what it costs per hour to leave it.
Without W8_BUCKET a warning says, before anything is spent, that the results then live only in
the launch's output. `make launch` and `make gpu-smoke` run `make dry-run` first.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cloud import (AUTODOWN_IDLE_MINUTES, CLUSTER, CloudError, check_host_memory,  # noqa: E402
                           chosen_cost_per_hour, cluster_state, launch_command, load_service_account, popen_sky, run_sky, sky_executable)
from harness.cloud import GCLOUD_CONFIG_DIR  # noqa: E402
from harness.config import ConfigError, load_config  # noqa: E402
from harness.gcp_iap import write_config as write_iap_config  # noqa: E402
from harness.files import REPO_ROOT, WORK_DIR, logs_dir  # noqa: E402
from harness.pipeline import git_sha  # noqa: E402
from harness.records import parse_result_lines, runs_in, write_results  # noqa: E402

STATUS_POLL_S = 30  # how often the autodown arming looks at `sky status` when the output did not say "launched"
SKY_TIMEOUT_S = 600  # one `sky status` / `sky autostop`; `sky down` gets 3x


class Tee:
    """Print a line and append it to the launch log."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def __call__(self, line: str, err: bool = False) -> None:
        with self.lock:
            try:
                print(line, file=sys.stderr if err else sys.stdout, flush=True)
            except (OSError, ValueError):  # the terminal went away (SIGHUP): the log and the teardown go on
                pass
            self.file.write(line + "\n")


def preconditions(cfg, env: dict[str, str]) -> None:
    """What must hold before money is spent; CloudError/ConfigError in one line."""
    load_service_account()
    sky_executable()
    if cfg.backend != "skyrl":
        raise ConfigError(f"W8_BACKEND={cfg.backend}: a GCP launch trains with skyrl (use W8_PRESET=gcp or gpu-smoke)")
    if cfg.sandbox == "daytona" and not env.get("DAYTONA_API_KEY"):
        raise ConfigError("W8_SANDBOX=daytona but DAYTONA_API_KEY is not set in this shell: export it "
                          "(it travels as a SkyPilot secret) or use W8_SANDBOX=auto")
    memory = check_host_memory(cfg.backend, cfg.memory)
    if memory:
        raise ConfigError(memory)


def status(cluster: str, env: dict[str, str]) -> str | None:
    """The cluster's state per `sky status` (None: not listed); CloudError when sky cannot say."""
    try:
        proc = run_sky(["status", cluster], env=env, capture_output=True, text=True, timeout=SKY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CloudError(f"`sky status {cluster}` timed out") from None
    if proc.returncode != 0:
        raise CloudError(f"`sky status {cluster}` exited {proc.returncode}: "
                         f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return cluster_state(proc.stdout + proc.stderr, cluster)


class AutodownArmer(threading.Thread):
    """Arms SkyPilot's idle autodown once the cluster is UP: when the launch output says so, or `sky status` does."""

    def __init__(self, cluster: str, env: dict[str, str], tee: Tee):
        super().__init__(daemon=True)
        self.cluster, self.env, self.tee = cluster, env, tee
        self.launched = threading.Event()  # set by the stream on SkyPilot's "Cluster launched" line
        self.finished = threading.Event()  # set when sky launch exited
        self.armed = False

    def run(self) -> None:
        while not self.finished.is_set() and not self.armed:
            self.launched.wait(STATUS_POLL_S)
            if self.finished.is_set():
                return
            try:
                if self.launched.is_set() or status(self.cluster, self.env) == "UP":
                    self.arm()
            except CloudError as err:
                self.tee(f"launch: autodown not armed yet ({err}); retrying", err=True)
                self.launched.clear()

    def arm(self) -> None:
        proc = run_sky(["autostop", self.cluster, "-i", str(AUTODOWN_IDLE_MINUTES), "--down", "-y"], env=self.env,
                       capture_output=True, text=True, timeout=SKY_TIMEOUT_S)
        if proc.returncode != 0:
            raise CloudError(f"sky autostop exited {proc.returncode}")
        self.armed = True
        self.tee(f"launch: autodown armed on {self.cluster}: SkyPilot tears it down after {AUTODOWN_IDLE_MINUTES} "
                 "idle minutes (no job, no SSH session), also if this machine goes away")


def stream(cmd: list[str], env: dict[str, str], tee: Tee, armer: AutodownArmer, lines: list[str]) -> tuple[int, bool]:
    """Run `sky launch`, tee its output; (exit code, interrupted by Ctrl-C / SIGTERM / SIGHUP)."""
    proc = popen_sky(cmd[1:], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            tee(line)
            if "Cluster launched" in line:
                armer.launched.set()
        return proc.wait(), False
    except KeyboardInterrupt:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # nothing may cut the teardown short now
            signal.signal(signum, signal.SIG_IGN)
        tee("launch: interrupted; stopping sky launch, then checking the cluster", err=True)
        proc.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reached it already; SIGTERM/SIGHUP did not
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return proc.returncode, True
    finally:
        armer.finished.set()


def teardown(cluster: str, env: dict[str, str], keep: bool, tee: Tee) -> tuple[str | None, str]:
    """After a failed or interrupted launch: status, then `sky down -y` unless keep; (state after, what was done)."""
    state = status(cluster, env)
    if state is None:
        return None, f"sky status does not list {cluster}: nothing was left running"
    if keep:
        return state, f"{cluster} is {state} and kept (W8_KEEP_CLUSTER=1)"
    tee(f"launch: {cluster} is {state}; tearing it down: sky down -y {cluster}")
    try:
        down = run_sky(["down", "-y", cluster], env=env, capture_output=True, text=True, timeout=3 * SKY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return status(cluster, env), f"`sky down -y {cluster}` timed out"
    for line in (down.stdout + down.stderr).strip().splitlines():
        tee(line)
    after = status(cluster, env)
    return after, (f"sky down -y {cluster} exited {down.returncode}; sky status "
                   f"{'lists it as ' + after if after else 'no longer lists it'}")


def final_line(cluster: str, state: str | None, done: str, cost: float | None) -> str:
    """The launch's last line: is the cluster still up, and what does leaving it cost."""
    if state is None:
        return f"cluster {cluster}: not running ({done})"
    price = f"about ${cost:.2f}/hour (SkyPilot's estimate for the chosen nodes)" if cost is not None else \
        "GPU prices per hour (the launch printed no optimizer table)"
    return f"cluster {cluster}: STILL {state}, billing {price} until `make down` ({done})"


def finish(cluster: str, env: dict[str, str], code: int, interrupted: bool, keep: bool, cost: float | None,
           tee: Tee) -> None:
    """What happens after sky launch exits: teardown on failure, and the final line in every case."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not stop `sky down` halfway
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if code != 0 or interrupted:
            state, done = teardown(cluster, env, keep, tee)
        else:
            state = status(cluster, env)
            done = (f"the run finished; SkyPilot's --down tears it down after 1 idle minute, confirm with `make down`"
                    if state else "the run finished and --down took it down")
        tee(final_line(cluster, state, done, cost), err=state is not None and code != 0)
    except CloudError as err:
        tee(f"cluster {cluster}: UNKNOWN, may be billing ({err}); run `make down` now", err=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def collect(log: Path, results_root: Path, tee: Tee) -> None:
    lines = log.read_text(errors="replace").splitlines()
    runs = runs_in(lines)
    if not runs:
        tee(f"collect: no W8_RESULT records in {log.name} (the node did not start the pipeline)", err=True)
        return
    run_id = runs[-1]
    written = write_results(parse_result_lines(lines, run_id=run_id), results_root / run_id)
    tee(f"collect: {len(written)} files -> {results_root / run_id}/")


def _raise_interrupt(signum, frame):  # SIGTERM / SIGHUP (terminal closed) take the Ctrl-C path: teardown
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/launch.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--print", action="store_true", help="print the sky command and exit")
    parser.add_argument("--collect", action="store_true", help="after the launch, collect its W8_RESULT records")
    parser.add_argument("--results-root", type=Path, default=None,
                        help="where --collect writes [W8_RESULTS_ROOT, else results/ (gpu-smoke: .w8-biayn/)]")
    args = parser.parse_args(argv)
    try:
        cfg = load_config()  # range-check every knob (preset included) before anything is launched
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    env = {**os.environ, "W8_GIT_SHA": os.environ.get("W8_GIT_SHA") or git_sha()}
    cmd = launch_command(env, cfg.as_dict())
    if args.print:
        print("$ " + shlex.join(cmd))
        return 0
    try:
        preconditions(cfg, env)
        if cfg.gcp_iap:  # SkyPilot's own GCP keys, in a config file only these sky calls read
            env["SKYPILOT_PROJECT_CONFIG"] = str(write_iap_config(cfg.gcp_vpc, GCLOUD_CONFIG_DIR))
    except (CloudError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    tee = Tee(logs_dir() / f"launch-{cfg.preset or 'none'}-{stamp}.log")
    if not cfg.bucket:
        tee("warning: W8_BUCKET is not set: the results live only in this launch's output (this log); if the "
            "connection drops, they go down with the cluster. Set W8_BUCKET=gs://<bucket>/<prefix> to keep them",
            err=True)
    if not env.get("DAYTONA_API_KEY"):
        tee("note: DAYTONA_API_KEY not set: the node's sandbox will be local processes")
    if cfg.gcp_iap:
        tee(f"note: IAP mode: VPC {cfg.gcp_vpc}, internal IPs, SSH through IAP (SKYPILOT_PROJECT_CONFIG="
            f"{env['SKYPILOT_PROJECT_CONFIG']}); `make doctor` checks the VPC's firewall")
    else:
        tee("note: SkyPilot's default GCP network opens tcp:22 to 0.0.0.0/0; W8_GCP_IAP=1 W8_GCP_VPC=<network> "
            "keeps SSH behind IAP (docs/gpu-launch.md)")
    tee("$ " + shlex.join(cmd))
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)
    armer = AutodownArmer(CLUSTER, env, tee)
    armer.start()
    lines: list[str] = []
    try:
        code, interrupted = stream(cmd, env, tee, armer, lines)
    except CloudError as err:
        tee(f"error: {err}", err=True)
        return 1
    if code != 0 or interrupted:
        tee(f"error: sky launch {'was interrupted' if interrupted else f'exited {code}'}; the whole output is in "
            f"{tee.path} (`make results RUN_ID=<run-id>` reads it, and the bucket)", err=True)
    if args.collect:
        default = WORK_DIR / "gpu-smoke-results" if cfg.preset == "gpu-smoke" else REPO_ROOT / "results"
        collect(tee.path, args.results_root or Path(os.environ.get("W8_RESULTS_ROOT") or default), tee)
    finish(CLUSTER, env, code, interrupted, cfg.keep_cluster, chosen_cost_per_hour(lines), tee)
    return code if code != 0 else (130 if interrupted else 0)


if __name__ == "__main__":
    raise SystemExit(main())
