"""Tear the r3 cluster down and confirm with `sky status`: `make down`.

    python scripts/down.py [--cluster w8-biayn-r3]

Runs `sky down -y <cluster>` under the scoped GCP env, then `sky status <cluster>`; exits 0
only when the cluster is no longer listed. An already absent cluster counts as down.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cloud import CLUSTER, CloudError, run_sky  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/down.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", default=CLUSTER)
    args = parser.parse_args(argv)
    try:
        down = run_sky(["down", "-y", args.cluster], capture_output=True, text=True, timeout=1800)
        print((down.stdout + down.stderr).strip(), flush=True)
        status = run_sky(["status", args.cluster], capture_output=True, text=True, timeout=600)
    except CloudError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as err:
        print(f"error: `{' '.join(err.cmd[1:])}` timed out (no network to GCP?)", file=sys.stderr)
        return 1
    listing = status.stdout + status.stderr
    print(listing.strip())
    if status.returncode != 0:
        print(f"error: sky status failed (exit {status.returncode}); cannot confirm {args.cluster} is down",
              file=sys.stderr)
        return 1
    still_up = any(line.split()[:1] == [args.cluster] for line in listing.splitlines())
    if still_up:
        print(f"error: {args.cluster} is still listed by sky status", file=sys.stderr)
        return 1
    print(f"down: {args.cluster} is not listed by sky status")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
