"""The repair curriculum's training alone (step 03's repair_sft and trained arms), then the held-in repair benchmark.

    W8_PRESET=study python scripts/bench/bench_repair_training.py --out .w8-biayn/repair-train-s0   # the study's recipe
    W8_PRESET=study W8_TRAIN_SEED=1 python scripts/bench/bench_repair_training.py --out .w8-biayn/repair-train-s1
    W8_PRESET=study W8_REPAIR_SFT_ROWS=80 python scripts/bench/bench_repair_training.py --stages sft --out /tmp/rt
    ... --into .w8-biayn/repair/eval-b2     # also compared there with the frozen and sft arms of scripts/repair_eval.py

What `make study` trains under the repair curriculum, without its searches of held-out tasks: --out is used as
a run folder. Step 01's held-in benchmark file (<out>/repair_heldin.jsonl, harness.split_check), then the
training functions of step 03 (harness.arm_training.TRAININGS) with step 03's own local trainers: repair_sft
(the repair warm-start: W8_REPAIR_SFT_ROWS repair rows, the relabeled ones among them, and the zero-shot rows)
and, with --stages sft,grpo, trained (repair GRPO from it, dynamic sampling, the held-in rate at step 0,
half-way and the end when W8_REPAIR_TRAIN_EVAL=1). Last, the held-in repair benchmark at W8_REPAIR_BUDGET
refinements for each export and the rule-library ceiling: <out>/repair_eval.json, as step 04 writes it
(harness.repair_training.run_benchmark). Everything resumes: a finished training or search is kept.
Each training's own record (the rows, the relabeling harvest, the GRPO prompts' pass-rate filter) is written to
<out>/<arm>_training.json. Ends with one line per arm, and the wall time of each part.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.arm_training import TRAININGS, Trainers  # noqa: E402
from harness.config import add_flags, load_config_or_exit  # noqa: E402
from harness.exports import newest_export  # noqa: E402
from harness.files import WORK_DIR, atomic_write_json  # noqa: E402
from harness.repair_eval import CEILING, pair_all  # noqa: E402
from harness.repair_training import run_benchmark  # noqa: E402
from harness.split_check import write_repair_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def step03():
    """scripts/03_grpo.py as a module: its local trainers are the ones this measures."""
    spec = importlib.util.spec_from_file_location("step03", ROOT / "scripts" / "03_grpo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def merge_into(folder: Path, results: dict, suffix: str) -> dict:
    """This run's model arms, renamed <arm><suffix>, added to <folder>/repair_eval.json; every pair compared."""
    path = folder / "repair_eval.json"
    merged = json.loads(path.read_text())
    ids = {r["task_id"] for r in next(iter(merged["arms"].values()))["tasks"]}
    for name, entry in results["arms"].items():
        if name == CEILING:
            continue
        if {r["task_id"] for r in entry["tasks"]} != ids:
            raise SystemExit(f"error: --into {folder}: its held-in tasks are not this run's (other knobs?)")
        merged["arms"][name + suffix] = entry
    merged["paired"] = pair_all(merged["arms"])
    atomic_write_json(path, merged)
    return merged


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(WORK_DIR / "repair-train"), help="the run-like output folder")
    parser.add_argument("--stages", default="sft,grpo", help="sft | sft,grpo [sft,grpo]")
    parser.add_argument("--into", default=None, help="also add the arms, named <arm>-s<W8_TRAIN_SEED>, to this "
                        "folder's repair_eval.json (scripts/repair_eval.py's: the same held-in tasks) and compare "
                        "them there with its other arms")
    add_flags(parser)
    args = parser.parse_args(argv)
    cfg = load_config_or_exit(argv, parser=parser)
    stages = args.stages.split(",")
    if stages not in (["sft"], ["sft", "grpo"]):
        print(f"error: --stages {args.stages}: expected sft or sft,grpo", file=sys.stderr)
        return 2
    if cfg.backend != "local":
        print("error: this bench trains with the local trainers (W8_BACKEND=local)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not write_repair_files(cfg, out):
        print("error: the repair curriculum is off (W8_CURRICULUM=none or the page split)", file=sys.stderr)
        return 2
    s03 = step03()
    trainers = Trainers(grpo=s03.train, sft=s03.rft)
    walls, models = {}, {}
    for arm, folder, stage in (("repair_sft", "repair_sft", "sft"), ("trained", "grpo", "grpo")):
        if stage not in stages:
            continue
        start = time.monotonic()
        done = TRAININGS[arm](cfg, out, trainers)
        atomic_write_json(out / f"{arm}_training.json", done.info)  # what step 03 puts in <arm>'s metrics file
        walls[arm] = round(time.monotonic() - start, 1)
        models[arm] = str(newest_export(out / folder))
        print(f"{arm}: {models[arm]} in {walls[arm]:.0f}s", flush=True)
    start = time.monotonic()
    results = run_benchmark(cfg, out, models, progress=None)
    walls["benchmark"] = round(time.monotonic() - start, 1)
    if args.into:
        merged = merge_into(Path(args.into), results, f"-s{cfg.train_seed}")
        for name in sorted(merged["paired"]):
            t = merged["paired"][name]["first_refinement"]
            print(f"{name}, first refinement over {t['tasks']} tasks: {t['better']} better, {t['worse']} worse, "
                  f"sign test {t['p_text']}")
    print(f"wall s: {walls}; train seed {cfg.train_seed}; -> {out / 'repair_eval.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
