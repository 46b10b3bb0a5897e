"""Harvest the harness-legality snapshot from a real browser.

    make harvest                                        # all MiniWoB pages, 3 seeds each
    python scripts/harvest.py --pages click-button,enter-text --seeds 2 --workers 1   # tiny

Each worker process drives its own headless Chromium (harness/browser.py). Labeled
observations are appended to .w8-biayn/harvest/records.jsonl as they finish, so a crash
or Ctrl-C loses at most the observations in flight: rerun the same command to resume.
At the end the snapshot harness/data/harness_legality.jsonl.gz and its manifest are
rewritten atomically (temp file, then rename). Ends with labeled actions per second.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere

from harness import browser  # noqa: E402
from harness.files import atomic_write_json  # noqa: E402
from harness.dataset import MANIFEST_PATH, SNAPSHOT_PATH, split_of, write_snapshot  # noqa: E402
from harness.manifest import build_manifest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORK_DIR = ROOT / ".w8-biayn" / "harvest"


def _worker(jobs: mp.Queue, results: mp.Queue, actions_per_obs: int) -> None:
    try:
        with browser.PageSession() as session:
            results.put(("versions", session.versions))
            while (job := jobs.get()) is not None:
                page, seed, known_state = job
                try:
                    if known_state is not None and session.observe(page, seed).state == known_state:
                        results.put(("unchanged", f"{page}/{seed}"))
                        continue
                    record = browser.harvest_observation(session, page, seed, actions_per_obs)
                    results.put(("record", record))
                except Exception as err:  # one bad page must not stop the harvest
                    results.put(("dropped", {"obs_id": f"{page}/{seed}", "reason": f"{type(err).__name__}: {err}"[:300]}))
    except browser.BrowserMissing as err:
        results.put(("fatal", str(err)))


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut by a crash mid-write: that observation is simply redone
    return out


def _append(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def run(pages: list[str], seeds: int, actions_per_obs: int, workers: int, fresh: bool,
        out_dir: Path = SNAPSHOT_PATH.parent, work_dir: Path = WORK_DIR, recheck: bool = False) -> int:
    from tqdm import tqdm

    work_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    snapshot_path, manifest_path = out_dir / SNAPSHOT_PATH.name, out_dir / MANIFEST_PATH.name
    records_path, dropped_path = work_dir / "records.jsonl", work_dir / "dropped.jsonl"
    if fresh:
        for p in (records_path, dropped_path):
            p.unlink(missing_ok=True)
    done = {r["obs_id"]: r for r in _read_jsonl(records_path)}
    dropped = {d["obs_id"]: d for d in _read_jsonl(dropped_path)}
    jobs = [(p, s, None) for p in pages for s in range(1, seeds + 1) if f"{p}/{s}" not in done | dropped]
    if recheck:  # after a change to the state extraction: relabel only observations whose state changed
        jobs += [(r["page"], r["seed"], r["state"]) for r in done.values() if r["page"] in pages]
    print(f"harvest: {len(pages)} pages x {seeds} seeds, {len(done)} observations kept from a previous run, "
          f"{len(jobs)} to label with {workers} workers")
    versions = {}
    labeled, t0 = 0, time.time()
    if jobs:
        job_q, result_q = mp.Queue(), mp.Queue()
        for job in jobs:
            job_q.put(job)
        procs = [mp.Process(target=_worker, args=(job_q, result_q, actions_per_obs), daemon=True)
                 for _ in range(workers)]
        for proc in procs:
            job_q.put(None)
            proc.start()
        bar = tqdm(total=len(jobs), unit="obs", dynamic_ncols=True)
        remaining = len(jobs)
        try:
            while remaining:
                kind, payload = result_q.get()
                if kind == "fatal":
                    raise SystemExit(f"error: {payload}")
                if kind == "versions":
                    versions = payload
                    continue
                remaining -= 1
                bar.update(1)
                if kind == "unchanged":
                    bar.set_postfix(unchanged=payload)
                    continue
                if kind == "record":
                    _append(records_path, payload)
                    done[payload["obs_id"]] = payload
                    labeled += len(payload["actions"])
                else:
                    _append(dropped_path, payload)
                    dropped[payload["obs_id"]] = payload
                    done.pop(payload["obs_id"], None)  # a rechecked observation that no longer reproduces
                bar.set_postfix(actions_per_s=f"{labeled / (time.time() - t0):.1f}", dropped=len(dropped))
        finally:
            bar.close()
            for proc in procs:  # finished workers exit on their own; interrupted ones close Chromium first
                proc.join(timeout=1 if remaining else 10)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
    elapsed = time.time() - t0
    records = sorted(done.values(), key=lambda r: (r["page"], r["seed"]))
    for r in records:
        r["split"] = split_of(r["page"])
    if not records:
        raise SystemExit("error: no observation could be labeled; nothing written")
    write_snapshot(records, snapshot_path)
    manifest = build_manifest(records, list(dropped.values()), versions or _stored_versions(manifest_path),
                              {"seeds_per_page": seeds, "actions_per_obs": actions_per_obs})
    atomic_write_json(manifest_path, manifest, indent=1)
    rate = labeled / elapsed if labeled else 0.0
    print(f"harvest: {len(records)} observations ({manifest['totals']['actions']} labeled actions, "
          f"{len(dropped)} dropped) -> {snapshot_path}; this run labeled {labeled} actions in {elapsed:.0f} s "
          f"= {rate:.1f} labeled actions/s")
    return 0


def _stored_versions(manifest_path: Path) -> dict:
    try:
        return json.loads(manifest_path.read_text())["versions"]
    except (OSError, ValueError, KeyError):
        return {}


def _exit_on_sigterm() -> None:
    """A kill (not just Ctrl-C) unwinds through run()'s cleanup, so no worker or Chromium lingers."""
    import signal

    def handler(signum, frame):
        raise SystemExit(f"harvest: stopped by signal {signum}; rerun the same command to resume")

    signal.signal(signal.SIGTERM, handler)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", default="all", help="comma-separated MiniWoB page names, or 'all'")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per page (1..N)")
    parser.add_argument("--actions-per-obs", type=int, default=34, help="candidate actions labeled per observation")
    parser.add_argument("--workers", type=int, default=3, help="browser processes (one Chromium each)")
    parser.add_argument("--fresh", action="store_true", help="forget labeled observations of an earlier run")
    parser.add_argument("--out", type=Path, default=SNAPSHOT_PATH.parent, help="where the snapshot and manifest go")
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR, help="where labeled observations accumulate")
    parser.add_argument("--recheck", action="store_true",
                        help="re-observe every kept observation; relabel those whose state text changed")
    args = parser.parse_args()
    known = browser.page_classes()
    pages = sorted(known) if args.pages == "all" else [p.strip() for p in args.pages.split(",") if p.strip()]
    unknown = [p for p in pages if p not in known]
    if unknown:
        parser.error(f"unknown MiniWoB page(s): {', '.join(unknown)}")
    if args.seeds < 1 or args.actions_per_obs < 2 or args.workers < 1:
        parser.error("--seeds and --workers must be >= 1, --actions-per-obs >= 2")
    try:
        browser.chromium_path()
    except browser.BrowserMissing as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    _exit_on_sigterm()
    return run(pages, args.seeds, args.actions_per_obs, args.workers, args.fresh, args.out, args.work_dir,
               args.recheck)


if __name__ == "__main__":
    raise SystemExit(main())
