"""Launch r3 on GCP: `sky launch -c w8-biayn-r3 -y --down sky/r3.yaml` with the knobs: `make launch`.

    make launch                                   # presets/gcp.env under the W8_* you set
    make launch W8_TRAIN_COUNT=1024 W8_ACCELERATORS=H100:8
    make gpu-smoke                                # presets/gpu-smoke.env, then the results are collected
    python scripts/launch.py --print              # show the command, run nothing

The knobs are resolved as the node will resolve them (W8_PRESET under what you set), which
decides --gpus, --num-nodes and --image-id; every W8_* you set goes as `--env NAME=VALUE`;
DAYTONA_API_KEY and WANDB_API_KEY, when set, go as `--secret NAME` by name only, so their
values never appear in a command line or log. `sky` runs under the scoped GCP env built from
.gcp-service-account.json. The whole output (ours and sky's, which streams the node's set-up
and run) is kept in .w8-biayn/logs/launch-<preset>-<time>.log, also when the launch fails;
`--collect` then writes the run's W8_RESULT records from that log into the results folder.
`make launch` and `make gpu-smoke` run `make dry-run` first. Ends with one line: launched or
failed, and where the log is.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cloud import CloudError, launch_command, load_service_account, popen_sky, sky_executable  # noqa: E402
from harness.config import ConfigError, load_config  # noqa: E402
from harness.files import REPO_ROOT, WORK_DIR, logs_dir  # noqa: E402
from harness.pipeline import git_sha  # noqa: E402
from harness.records import parse_result_lines, runs_in, write_results  # noqa: E402


class Tee:
    """Print a line and append it to the launch log."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.file = open(path, "a", buffering=1)

    def __call__(self, line: str, err: bool = False) -> None:
        print(line, file=sys.stderr if err else sys.stdout, flush=True)
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


def stream(cmd: list[str], env: dict[str, str], tee: Tee) -> int:
    proc = popen_sky(cmd[1:], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    for line in proc.stdout:
        tee(line.rstrip("\n"))
    return proc.wait()


def collect(log: Path, results_root: Path, tee: Tee) -> None:
    lines = log.read_text(errors="replace").splitlines()
    runs = runs_in(lines)
    if not runs:
        tee(f"collect: no W8_RESULT records in {log.name} (the node did not start the pipeline)", err=True)
        return
    run_id = runs[-1]
    written = write_results(parse_result_lines(lines, run_id=run_id), results_root / run_id)
    tee(f"collect: {len(written)} files -> {results_root / run_id}/")


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
    except (CloudError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    tee = Tee(logs_dir() / f"launch-{cfg.preset or 'none'}-{stamp}.log")
    tee("$ " + shlex.join(cmd))
    if not env.get("DAYTONA_API_KEY"):
        tee("note: DAYTONA_API_KEY not set: the node's sandbox will be local processes")
    try:
        code = stream(cmd, env, tee)
    except CloudError as err:
        tee(f"error: {err}", err=True)
        return 1
    if args.collect:
        default = WORK_DIR / "gpu-smoke-results" if cfg.preset == "gpu-smoke" else REPO_ROOT / "results"
        collect(tee.path, args.results_root or Path(os.environ.get("W8_RESULTS_ROOT") or default), tee)
    if code == 0:
        tee(f"launched and finished; log {tee.path}; collect with `make results RUN_ID=<run-id>`, "
            "confirm teardown with `make down`")
    else:
        tee(f"error: sky launch exited {code}; the whole output is in {tee.path} "
            "(`make results RUN_ID=<run-id>` also reads saved logs)", err=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
