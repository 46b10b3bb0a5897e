"""Watch the GCP run: cluster status, then its log streamed with the live steps_to_gold lines.

    python scripts/watch.py                    # = make watch
    python scripts/watch.py --all              # every log line, not only the pipeline's own
    python scripts/watch.py --no-follow        # what is there now, then exit

Runs `sky status` and `sky logs` for the cluster w8-biayn-r3 under the scoped GCP env.
The whole log is saved to .w8-biayn/logs/<cluster>.log (so `make results` works even
after the cluster is gone); shown are the step headers, `steps_to_gold` lines, errors
and one line per W8_RESULT artifact. Ends with the result parsed out of trace_compare.json
(steps frozen -> trained, shrunk or not) when the run got that far.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cloud import CLUSTER, CloudError, popen_sky, run_sky  # noqa: E402
from harness.files import REPO_ROOT, logs_dir  # noqa: E402
from harness.records import parse_result_lines, record_bytes, runs_in  # noqa: E402
SHOWN = ("steps_to_gold", "== ", "error", "Error", "r3 run ", "[0", "W8_RESULT_SKIPPED")


def show(line: str, everything: bool) -> str | None:
    """What to print for one log line (None: nothing)."""
    if "W8_RESULT {" in line:
        record = next(iter(parse_result_lines([line]).values()), None)
        return f"result: {record['file']} ({record['bytes']} bytes, run {record['run_id']})" if record else None
    if everything or any(mark in line for mark in SHOWN):
        return line
    return None


def final_result(lines: list[str]) -> str:
    runs = runs_in(lines)
    if not runs:
        return "no W8_RESULT lines yet"
    run_id = runs[-1]
    records = parse_result_lines(lines, run_id=run_id)
    if "trace_compare.json" not in records:
        return f"run {run_id}: {len(records)} artifact(s) so far ({', '.join(sorted(records))}); no compare yet"
    result = json.loads(record_bytes(records["trace_compare.json"]))
    head = next(c for c in result["comparisons"] if (c["a"], c["b"]) == ("trained", "frozen"))
    return (f"run {run_id}: steps_to_gold frozen {head['mean_b']:.2f} -> trained {head['mean_a']:.2f} over "
            f"{head['n_pairs']} paired searches (95% CI of the difference [{head['ci95'][0]:+.2f}, "
            f"{head['ci95'][1]:+.2f}]), shrunk {'yes' if result['shrunk'] else 'no'}; collect with: "
            f"make results RUN_ID={run_id}")


def stream(proc: subprocess.Popen, saved, everything: bool) -> list[str]:
    lines = []
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        saved.write(raw if raw.endswith("\n") else raw + "\n")
        saved.flush()
        lines.append(line)
        shown = show(line, everything)
        if shown is not None:
            print(shown, flush=True)
    proc.wait()
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/watch.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", default=CLUSTER)
    parser.add_argument("--job", help="sky job id (default: the latest)")
    parser.add_argument("--all", action="store_true", help="print every log line")
    parser.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    args = parser.parse_args(argv)
    logs_dir().mkdir(parents=True, exist_ok=True)
    log_path = logs_dir() / f"{args.cluster}.log"
    cmd = ["logs", args.cluster, *([args.job] if args.job else []), *(["--no-follow"] if args.no_follow else [])]
    try:
        status = run_sky(["status", args.cluster], capture_output=True, text=True, timeout=600)
        print((status.stdout + status.stderr).strip(), flush=True)
        with open(log_path, "a") as saved:
            saved.write(f"# sky logs {args.cluster} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
            proc = popen_sky(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            try:
                lines = stream(proc, saved, args.all)
            except KeyboardInterrupt:  # Ctrl-C stops watching, not the run
                proc.terminate()
                proc.wait()
                print("\nstopped watching (the run goes on)")
                lines = log_path.read_text(errors="replace").splitlines()
    except CloudError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired:
        print("error: sky status timed out (no network to GCP?)", file=sys.stderr)
        return 1
    print(final_result(lines))
    print(f"log saved: {log_path.relative_to(REPO_ROOT) if log_path.is_relative_to(REPO_ROOT) else log_path}")
    return proc.returncode or 0


if __name__ == "__main__":
    raise SystemExit(main())
