"""make repair-report: the train repair tasks and the held-in repair benchmark, counted, written and rescored.

    python scripts/repair_report.py                                   # the knobs' defaults (rule split)
    W8_REPAIR_FAMILIES=2 W8_REPAIR_TASKS_PER_FAMILY=4 python scripts/repair_report.py --out /tmp/repair  # tiny

Writes <out>/repair_tasks.jsonl (train: train pages), <out>/repair_heldin.jsonl (the held-in benchmark:
held-out pages, families training never sees) and <out>/repair_counts.json (per family and side: tasks,
observations, the balanced-accuracy spread of parents and references; the knobs it was made with), each
atomically; the default <out> is .w8-biayn/repair/. Prints the counts, then rescores both files with
scripts/rescore_repair.py in a separate interpreter that imports none of the repo's code (every parent
must be below gold and every reference gold). Ends with one line: tasks, families, seconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config import add_flags, load_config_or_exit  # noqa: E402
from harness.files import WORK_DIR, atomic_write_json, atomic_write_text  # noqa: E402
from harness.repair import RepairError, RepairKnobs, counts, make_repair_tasks, record  # noqa: E402
from harness.rule_split import Design, SplitError  # noqa: E402

RESCORE = Path(__file__).resolve().parent / "rescore_repair.py"


def write_tasks(path: Path, tasks) -> None:
    atomic_write_text(path, "".join(json.dumps(t.to_json(), sort_keys=True) + "\n" for t in tasks))


def print_counts(rows: list[dict]) -> None:
    print(f"{'side':<7} {'source':<9} {'family':<48} {'tasks':>5} {'obs':>4} {'pages':>5}  parent ba min/med/max"
          f"   reference ba min")
    for r in rows:
        pb = r["parent_ba"]
        print(f"{r['side']:<7} {r['source'] + ('*' if r['madeup'] else ''):<9} {r['family']:<48} {r['tasks']:>5} "
              f"{r['observations']:>4} {r['pages']:>5}  {pb['min']:.3f}/{pb['median']:.3f}/{pb['max']:.3f}"
              f"        {r['reference_ba']['min']:.3f}")
    print("(* a made-up property, its name varying from task to task)")


def totals(rows: list[dict], side: str) -> dict:
    mine = [r for r in rows if r["side"] == side]
    synthetic = [r for r in mine if r["source"] == "synthetic"]
    made_up = sum(r["tasks"] for r in synthetic if r["madeup"])
    n_synth = sum(r["tasks"] for r in synthetic)
    return {"tasks": sum(r["tasks"] for r in mine), "families": len(mine), "synthetic_families": len(synthetic),
            "real_families": len(mine) - len(synthetic), "synthetic_tasks": n_synth,
            "madeup_share_of_synthetic_tasks": round(made_up / n_synth, 3) if n_synth else None}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description="Make, count and rescore the repair tasks (harness/repair.py).")
    parser.add_argument("--out", default=str(WORK_DIR / "repair"), help="output folder [.w8-biayn/repair]")
    add_flags(parser)
    args = parser.parse_args(argv)
    cfg = load_config_or_exit(argv, parser=parser)
    start = time.monotonic()
    try:
        design = Design.of(cfg)
        knobs = RepairKnobs.from_config(cfg)
        train, heldin = make_repair_tasks(design, knobs)
    except (RepairError, SplitError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    write_tasks(out / "repair_tasks.jsonl", train)
    write_tasks(out / "repair_heldin.jsonl", heldin)
    rows = counts(train + heldin)
    summary = {"made_with": record(knobs, design), "train": totals(rows, "train"), "heldin": totals(rows, "heldin"),
               "families": rows}
    atomic_write_json(out / "repair_counts.json", summary)
    print_counts(rows)
    for side in ("train", "heldin"):
        t = summary[side]
        print(f"{side}: {t['tasks']} tasks from {t['synthetic_families']} synthetic + {t['real_families']} real "
              f"families; made-up share of synthetic tasks {t['madeup_share_of_synthetic_tasks']}")
    rescored = subprocess.run([sys.executable, "-I", str(RESCORE), "--threshold", str(cfg.harness_gold_threshold),
                               str(out / "repair_tasks.jsonl"), str(out / "repair_heldin.jsonl")])
    print(f"repair-report: {len(train)} train and {len(heldin)} held-in tasks in {out} "
          f"({time.monotonic() - start:.1f}s)")
    return rescored.returncode


if __name__ == "__main__":
    raise SystemExit(main())
