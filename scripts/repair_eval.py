"""The held-in repair benchmark (the positive control): each task searched from its parent, per arm.

    python scripts/repair_eval.py --arm rule-library                                  # the ceiling, seconds
    W8_PRESET=study python scripts/repair_eval.py --arm frozen=smollm2-135m           # the base model
    W8_PRESET=study python scripts/repair_eval.py --arm sft=.w8-biayn/runs/<id>/sft/global_step_9/policy
    W8_REPAIR_HELDIN_FAMILIES=2 W8_REPAIR_HELDIN_TASKS_PER_FAMILY=1 python scripts/repair_eval.py \
        --arm rule-library --out /tmp/repair-eval                                      # tiny

An arm is NAME=MODEL (MODEL: smollm2-135m, an HF id or an export folder; the operator is W8_OPERATOR's, with
the search's decoding knobs) or `rule-library` (harness.repair_eval.RuleLibraryOperator, no model). The
tasks are the held-in benchmark the knobs make (harness.repair), or --tasks FILE (a repair_heldin.jsonl).
Every search has W8_REPAIR_BUDGET refinements and saves its state per node under <out>/<arm>/, so a killed
run resumes. <out>/repair_eval.json collects every arm run into that folder (an arm run again replaces its
entry): per arm and task the solved node, node 1's verdict and each refinement's mention of the rule's
property; per arm the summary; each arm against every other, paired over tasks (sign test). Ends with one
line per arm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config import add_flags, load_config_or_exit  # noqa: E402
from harness.files import WORK_DIR, atomic_write_json  # noqa: E402
from harness.operators import OperatorError, make_operator  # noqa: E402
from harness.repair import RepairError, RepairKnobs, RepairTask, make_side  # noqa: E402
from harness.repair_eval import (CEILING, RuleLibraryOperator, benchmark_knobs, evaluate_arms,  # noqa: E402
                                 summary_line)
from harness.rewards import RewardKnobs  # noqa: E402
from harness.rule_split import Design, SplitError  # noqa: E402
from harness.search import SearchKnobs, SearchStateError  # noqa: E402


def parse_arm(text: str) -> tuple[str, str]:
    name, _, model = text.partition("=")
    if text == CEILING:
        return CEILING, ""
    if not name or not model or not name.replace("_", "").replace("-", "").isalnum():
        raise SystemExit(f"error: --arm {text!r}: expected NAME=MODEL (e.g. frozen=smollm2-135m) or {CEILING}")
    return name, model


def load_tasks(path: str | None, cfg) -> list[RepairTask]:
    if path:
        try:
            return [RepairTask.from_json(json.loads(line)) for line in Path(path).read_text().splitlines() if line]
        except (OSError, ValueError, KeyError) as err:
            raise SystemExit(f"error: --tasks {path}: not a repair task file ({type(err).__name__}: {err})") from None
    try:
        return make_side("heldin", Design.of(cfg), RepairKnobs.from_config(cfg))
    except (RepairError, SplitError) as err:
        raise SystemExit(f"error: {err}") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description="The held-in repair benchmark per arm (harness/repair_eval.py).")
    parser.add_argument("--arm", action="append", required=True, help="NAME=MODEL or rule-library (repeatable)")
    parser.add_argument("--out", default=str(WORK_DIR / "repair" / "eval"), help="output folder [.w8-biayn/repair/eval]")
    parser.add_argument("--tasks", default=None, help="a repair_heldin.jsonl to search instead of the knobs' tasks")
    add_flags(parser)
    args = parser.parse_args(argv)
    cfg = load_config_or_exit(argv, parser=parser)
    arms = [parse_arm(a) for a in args.arm]
    tasks = load_tasks(args.tasks, cfg)
    knobs = SearchKnobs(cfg.repair_budget, cfg.search_c, cfg.search_seed, RewardKnobs.from_config(cfg))
    out = Path(args.out)
    result_path = out / "repair_eval.json"
    results = json.loads(result_path.read_text()) if result_path.exists() else {"arms": {}}
    print(f"held-in repair benchmark: {len(tasks)} tasks, budget {cfg.repair_budget} refinements", file=sys.stderr)
    makers = {name: (lambda: RuleLibraryOperator(tasks, Design.of(cfg).heldout_rules)) if name == CEILING else
              (lambda model=model: make_operator(cfg.operator, model, cfg.backend, cfg.operator_max_new_tokens,
                                                 cfg.operator_temperature, cfg.operator_base_url,
                                                 cfg.ct2_compute_type, cfg.gguf_type, cfg.operator_workers))
              for name, model in arms}
    try:
        evaluate_arms(makers, tasks, knobs, out, results, models={n: m or CEILING for n, m in arms},
                      progress=lambda s: print(s, file=sys.stderr, flush=True))
    except (OperatorError, SearchStateError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    results["knobs"] = benchmark_knobs(cfg, knobs, len(tasks))
    names = sorted(results["arms"])
    atomic_write_json(result_path, results)
    for name in names:
        print(summary_line(name, results["arms"][name]["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
