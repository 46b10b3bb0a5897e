"""Collect a run's small artifacts into results/<run-id>/.

    python scripts/collect_results.py --run-dir .w8-biayn/runs/<run-id>   # a local run folder
    python scripts/collect_results.py --bucket gs://b/r3 --run-id ID      # <bucket>/runs/<run-id>/ (survives --down)
    python scripts/collect_results.py --log run.log [--run-id ID]         # W8_RESULT lines of a saved log
    python scripts/collect_results.py --sky [--run-id ID]                 # `sky logs w8-biayn-r3` (needs the cluster)
    make results RUN_ID=<run-id>                                          # tries them in that order

With --run-id alone: the local run folder, then the bucket (W8_BUCKET, or the preset's), then the
launch and watch logs saved under .w8-biayn/logs/, then `sky logs` (which has nothing after --down).
A gs:// bucket is read with google-cloud-storage in .venv-sky under the scoped GCP env.
Every log artifact travels as one `W8_RESULT {json}` line with its sha256 (a damaged line is
refused). A file already in results/<run-id>/ with other content is never overwritten. Errors,
storage errors included, are one line naming the path. Ends with one line: k files -> results/<run-id>/.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.bucket import BucketError, download, run_url  # noqa: E402
from harness.cloud import CLUSTER, CloudError, run_sky, scoped_env, sky_python  # noqa: E402
from harness.config import ConfigError, load_config  # noqa: E402
from harness.files import REPO_ROOT, logs_dir  # noqa: E402
from harness.pipeline import runs_root, small_artifacts  # noqa: E402
from harness.records import RecordError, emit_results, parse_result_lines, runs_in, write_results  # noqa: E402


def lines_from_run_dir(run_dir: Path) -> list[str]:
    """The same W8_RESULT lines run_r3.sh prints, made from the folder (one code path for both)."""
    buffer = io.StringIO()
    emit_results(run_dir, small_artifacts(run_dir), out=buffer)
    return buffer.getvalue().splitlines()


def lines_from_sky(cluster: str, job: str | None) -> list[str]:
    args = ["logs", cluster, *([job] if job else []), "--no-follow"]
    proc = run_sky(args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise CloudError(f"sky logs {cluster} failed: {tail}")
    return proc.stdout.splitlines()


def pick_run_id(runs: list[str], wanted: str | None) -> str:
    if wanted:
        if wanted not in runs:
            raise CloudError(f"no W8_RESULT lines of run {wanted!r} (found: {', '.join(runs) or 'none'})")
        return wanted
    if len(runs) != 1:
        raise CloudError(f"the log holds runs {', '.join(runs) or '(none)'}: pass --run-id (make results RUN_ID=...)")
    return runs[0]


def collect(lines: list[str], out_root: Path, run_id: str | None) -> tuple[str, list[Path]]:
    """Write the chosen run's records into out_root/<run-id>/; returns the run id and the files."""
    chosen = pick_run_id(runs_in(lines), run_id)
    return chosen, write_results(parse_result_lines(lines, run_id=chosen), out_root / chosen)


def from_bucket(bucket: str, run_id: str, out_root: Path) -> list[Path]:
    """<bucket>/runs/<run-id>/ into out_root/<run-id>/: file:// here, gs:// in .venv-sky (google-cloud-storage)."""
    if not bucket.startswith("gs://"):
        return download(bucket, run_id, out_root / run_id)
    proc = subprocess.run([sky_python(), "-m", "harness.bucket", "download", bucket, run_id, str(out_root / run_id)],
                          cwd=REPO_ROOT, env={**scoped_env(), "PYTHONPATH": str(REPO_ROOT)}, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise BucketError((proc.stderr.strip().splitlines() or ["no output"])[-1].removeprefix("error: "))
    return sorted(p for p in (out_root / run_id).rglob("*") if p.is_file())


def configured_bucket(run_id: str | None = None) -> str:
    """W8_BUCKET as set here (env, else the preset's), else the one the run's launch passed (`--env W8_BUCKET=...` on
    the first line of a saved launch log that names the run); '' when there is none."""
    try:
        bucket = load_config().bucket
    except ConfigError:
        bucket = os.environ.get("W8_BUCKET", "")
    if bucket or not run_id:
        return bucket
    for log in sorted(logs_dir().glob("launch-*.log"), reverse=True):
        text = log.read_text(errors="replace")
        found = re.search(r"--env W8_BUCKET=(\S+)", text[:4000])  # the `$ sky launch ...` line
        if found and run_id in text:
            return found.group(1).strip("'\"")
    return ""


def auto_lines(run_id: str, cluster: str, job: str | None) -> tuple[list[str], str]:
    """A local run folder, else a log saved by `make watch` that holds the run, else `sky logs`."""
    run_dir = runs_root() / run_id
    if (run_dir / "run_config.json").is_file():
        return lines_from_run_dir(run_dir), str(run_dir)
    for log in sorted(logs_dir().glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        if run_id in runs_in(lines):
            return lines, str(log)
    return lines_from_sky(cluster, job), f"sky logs {cluster}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/collect_results.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--run-dir", type=Path, help="a local run folder .w8-biayn/runs/<run-id>")
    source.add_argument("--log", type=Path, help="a saved log holding W8_RESULT lines (e.g. from make watch)")
    source.add_argument("--sky", action="store_true", help=f"read `sky logs {CLUSTER}` (needs the cluster)")
    source.add_argument("--bucket", help="a gs:// (or file://) bucket prefix holding runs/<run-id>/ (W8_BUCKET)")
    parser.add_argument("--run-id", help="which run; alone, it is looked up in the run folders, the bucket, the "
                                         "saved logs, then sky logs")
    parser.add_argument("--job", help="sky job id (default: the cluster's latest)")
    parser.add_argument("--cluster", default=CLUSTER)
    parser.add_argument("--out-root", type=Path, default=REPO_ROOT / "results")
    args = parser.parse_args(argv)
    try:
        if args.bucket or (args.run_id and not (args.run_dir or args.log or args.sky)
                           and not (runs_root() / args.run_id / "run_config.json").is_file()
                           and configured_bucket(args.run_id)):
            bucket = args.bucket or configured_bucket(args.run_id)
            if not args.run_id:
                raise CloudError("--bucket needs --run-id (make results RUN_ID=...)")
            try:
                written = from_bucket(bucket, args.run_id, args.out_root)
                print(f"{len(written)} files from {run_url(bucket, args.run_id)} -> {args.out_root / args.run_id}/ "
                      f"({', '.join(p.name for p in written)})")
                return 0
            except BucketError as err:
                if args.bucket:
                    raise
                print(f"note: {err}; trying the saved launch logs", file=sys.stderr)
        if args.run_dir:
            if not (args.run_dir / "run_config.json").is_file():
                raise CloudError(f"{args.run_dir} is not a run folder (no run_config.json)")
            lines, where = lines_from_run_dir(args.run_dir), str(args.run_dir)
            args.run_id = args.run_id or args.run_dir.name
        elif args.log:
            if not args.log.is_file():
                raise CloudError(f"no log file {args.log}")
            lines, where = args.log.read_text(errors="replace").splitlines(), str(args.log)
        elif args.sky:
            lines, where = lines_from_sky(args.cluster, args.job), f"sky logs {args.cluster}"
        elif args.run_id:
            lines, where = auto_lines(args.run_id, args.cluster, args.job)
        else:
            raise CloudError("say which run: RUN_ID=<run-id> (or --run-dir / --bucket / --log / --sky)")
        run_id, written = collect(lines, args.out_root, args.run_id)
    except (CloudError, RecordError, BucketError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a storage error (disk full, read-only, permissions): one line naming the path
        where = f"{err.filename}: " if err.filename else ""
        print(f"error: {where}{' '.join(str(err.strerror or err).split())} (collecting into {args.out_root})",
              file=sys.stderr)
        return 1
    print(f"{len(written)} files from {where} -> {args.out_root / run_id}/ ({', '.join(p.name for p in written)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
