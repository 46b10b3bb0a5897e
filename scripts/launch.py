"""Launch r3 on GCP: `sky launch -c w8-biayn-r3 -y --down sky/r3.yaml` with the knobs: `make launch`.

    make launch                                   # knobs from W8_* env vars / make variables
    make launch W8_TRAIN_COUNT=1024 W8_ACCELERATORS=H100:8
    python scripts/launch.py --print              # show the command, run nothing

Every W8_* knob set in the environment goes as `--env NAME=VALUE` (W8_ACCELERATORS also
as --gpus); DAYTONA_API_KEY, when set, goes as `--secret DAYTONA_API_KEY` by name only, so
its value never appears in a command line or log. `sky` runs under the scoped GCP env
built from .gcp-service-account.json. `make launch` runs `make dry-run` first.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cloud import CloudError, launch_command, run_sky, sky_executable  # noqa: E402
from harness.config import ConfigError, load_config  # noqa: E402
from harness.pipeline import git_sha  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/launch.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--print", action="store_true", help="print the sky command and exit")
    args = parser.parse_args(argv)
    try:
        load_config()  # range-check every knob before anything is launched
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    env = {**os.environ, "W8_GIT_SHA": os.environ.get("W8_GIT_SHA") or git_sha()}
    cmd = launch_command(env)
    print("$ " + shlex.join(cmd), flush=True)
    if args.print:
        return 0
    if not os.environ.get("DAYTONA_API_KEY"):
        print("note: DAYTONA_API_KEY not set: the node's sandbox will be local processes", flush=True)
    try:
        sky_executable()
        proc = run_sky(cmd[1:], env=env)
    except CloudError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if proc.returncode == 0:
        print("launched; follow with `make watch`, collect with `make results RUN_ID=<run-id>`, end with `make down`")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
