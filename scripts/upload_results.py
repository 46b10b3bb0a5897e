"""Copy a run's small artifacts to <W8_BUCKET>/runs/<run-id>/ so they survive --down: run_r3.sh calls it.

    python scripts/upload_results.py --run-dir .w8-biayn/runs/<run-id> 01_frozen_trace   # after a step
    python scripts/upload_results.py --run-dir .w8-biayn/runs/<run-id> --failure 03_grpo  # after a failure
    python scripts/upload_results.py --run-dir .w8-biayn/runs/<run-id>                    # everything so far

What goes: run_config.json and the files the finished steps list as outputs (harness.pipeline.
small_artifacts: traces, metrics, summary.md, plots; never exports or checkpoints), or, with
--failure, the failure tails under <run>/failure/ (harness.records.emit_failure: our step logs,
SkyRL's logs under the run folder, Ray's). Without W8_BUCKET it does nothing. A bucket error is
one line naming the URL and exit 1; run_r3.sh warns and goes on (the W8_RESULT lines in the launch
output still carry the results). Ends with one line: k files -> <bucket>/runs/<run-id>/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.bucket import BucketError, run_url, upload  # noqa: E402
from harness.config import load_config_or_exit  # noqa: E402
from harness.pipeline import STEPS, small_artifacts  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/upload_results.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--failure", metavar="STEP", help="upload the failure tails of STEP instead")
    parser.add_argument("steps", nargs="*", help="finished steps (default: all)")
    args = parser.parse_args(argv)
    bucket = load_config_or_exit([]).bucket
    if not bucket:
        return 0
    unknown = [s for s in args.steps + ([args.failure] if args.failure else []) if s not in STEPS]
    if unknown:
        print(f"error: unknown step(s) {', '.join(unknown)} (steps: {', '.join(STEPS)})", file=sys.stderr)
        return 2
    if args.failure:
        folder = args.run_dir / "failure"
        names = sorted(f"failure/{p.name}" for p in folder.glob(f"failure-{args.failure}*") if p.is_file())
    else:
        names = small_artifacts(args.run_dir, args.steps or STEPS)
    try:
        copied = upload(args.run_dir, names, bucket)
    except BucketError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"bucket: {len(copied)} files -> {run_url(bucket, args.run_dir.name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
