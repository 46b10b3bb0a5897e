"""Proof that a split means what it says, task by task (tests, `make benchmark-report`, the study's results),
and the files that let anyone rescore a program on a run's own tasks (heldout_tasks.jsonl, sft_target.py).

    from harness.split_check import check_split
    report = check_split(design, heldout_tasks, train_tasks, gold_threshold=0.9)
    report["rows"][0]   # per held-out task: the full oracle's, the restricted target's and a constant's
                        # balanced accuracy, how many of the first refinement prompt's failures depend on H,
                        # and the steps a rule-adding operator needs from the restricted program

Per held-out task:
- `full`: the full oracle's balanced accuracy (must be gold on every task, or the task is no test);
- `restricted`: the warm-start's target's (the compact program without H): below gold on most tasks is what
  makes the search necessary;
- `constant`: always-False, the floor every harness must beat;
- `shown_dependent`: of the failures the search's first refinement of the restricted target is shown (the same
  selection harness.search makes), how many depend on H: the feedback carries what is missing;
- `rule_operator_steps`: refinements the deterministic operator (harness.rules: adds the library rule that
  fixes most shown failures) needs from the restricted oracle to reach gold, None if not within 3: an operator
  that can add a rule from feedback does reach gold, so a model that does not is a finding about the model.
Train tasks: how many hold an example that depends on H (must be 0) and how many the restricted target is
gold on (must be all).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Sequence

from harness.dataset import Task
from harness.files import atomic_write_json, atomic_write_text
from harness.failures import failure_candidates, select_failures
from harness.interface import extract_code
from harness.operators import DeterministicOperator
from harness.oracle import sft_target_source
from harness.repair import RepairError, RepairKnobs, counts, make_repair_tasks, record
from harness.rewards import score_harness
from harness.run_folder import StepError
from harness.rule_split import Design, compact_program, curriculum_of, depends_on, restricted_rules
from harness.rules import compose_program
from harness.traces import trace_tasks
from harness.training_data import sft_target_of_config, train_tasks

CONSTANT = "def is_legal_action(state, action):\n    return False\n"
RULE_OPERATOR_BUDGET = 3


def task_row(design: Design, task: Task, threshold: float, sandbox: str | None = None) -> dict[str, Any]:
    """One held-out task's figures (module docstring), its programs run in `sandbox` (None: the knob's default)."""
    scored = partial(score_harness, sandbox=sandbox)
    heldout = design.heldout_rules
    target = compact_program(heldout)
    restricted = scored(target, list(task.examples))
    shown = select_failures(failure_candidates(restricted, task.examples), attempt=0)
    return {"task_id": task.task_id, "page": task.page,
            "n_dependent": sum(depends_on(heldout, e.state, e.action) for e in task.examples),
            "full": scored(compose_program(restricted_rules(())), list(task.examples)).balanced_accuracy,
            "restricted": restricted.balanced_accuracy,
            "constant": scored(CONSTANT, list(task.examples)).balanced_accuracy,
            "shown": len(shown), "shown_dependent": sum(depends_on(heldout, f.state, f.action) for f in shown),
            "rule_operator_steps": rule_operator_steps(design, task, threshold, sandbox)}


def rule_operator_programs(design: Design, task: Task, threshold: float,
                           sandbox: str | None = None) -> tuple[list[str], int | None]:
    """The rule-library operator's refinements of the restricted oracle, in order, until gold: (their programs,
    the refinements it took; None: not gold within RULE_OPERATOR_BUDGET)."""
    scored = partial(score_harness, sandbox=sandbox)
    operator, code = DeterministicOperator(), compose_program(restricted_rules(design.heldout_rules))
    programs: list[str] = []
    for step in range(RULE_OPERATOR_BUDGET + 1):
        score = scored(code, list(task.examples))
        if score.valid and score.balanced_accuracy >= threshold:
            return programs, step
        if step == RULE_OPERATOR_BUDGET:
            break
        shown = select_failures(failure_candidates(score, task.examples), attempt=0)
        code = extract_code(operator.refine(task, code, shown).text)
        programs.append(code)
    return programs, None


def rule_operator_steps(design: Design, task: Task, threshold: float, sandbox: str | None = None) -> int | None:
    """Refinements of the restricted oracle by the rule-library operator until gold (None: not in the budget)."""
    return rule_operator_programs(design, task, threshold, sandbox)[1]


def check_split(design: Design, heldout: Sequence[Task], train: Sequence[Task], threshold: float,
                sandbox: str | None = None) -> dict[str, Any]:
    """The per-task rows and the split's contract in numbers (module docstring); every program runs in `sandbox`
    (a run's W8_SANDBOX; None: the knob's default)."""
    scored = partial(score_harness, sandbox=sandbox)
    rows = [task_row(design, task, threshold, sandbox) for task in heldout]
    target = compact_program(design.heldout_rules)
    train_dependent = sum(any(depends_on(design.heldout_rules, e.state, e.action) for e in t.examples) for t in train)
    train_gold = sum(scored(target, list(t.examples)).balanced_accuracy >= threshold for t in train)
    n = len(rows)
    return {"design": design.record(), "gold_threshold": threshold, "rows": rows, "n_heldout": n,
            "full_gold": sum(r["full"] >= threshold for r in rows),
            "restricted_below_gold": sum(r["restricted"] < threshold for r in rows),
            "prompts_showing_h": sum(r["shown_dependent"] > 0 for r in rows),
            "rule_operator_gold": sum(r["rule_operator_steps"] is not None for r in rows),
            "n_train": len(train), "train_with_dependent": train_dependent, "train_restricted_gold": train_gold}


def report_lines(report: dict[str, Any]) -> list[str]:
    """The check as text: a table of held-out tasks and one line per contract."""
    out = [f"{'held-out task':<40} {'dep':>3} {'full':>5} {'restr':>6} {'const':>6} {'shown H':>8} {'rule op':>7}"]
    for r in report["rows"]:
        steps = "-" if r["rule_operator_steps"] is None else str(r["rule_operator_steps"])
        out.append(f"{r['page'][:40]:<40} {r['n_dependent']:>3} {r['full']:>5.3f} {r['restricted']:>6.3f} "
                   f"{r['constant']:>6.3f} {r['shown_dependent']:>3}/{r['shown']:<4} {steps:>7}")
    n, t = report["n_heldout"], report["gold_threshold"]
    out += [f"full oracle gold (>= {t}) on {report['full_gold']}/{n} held-out tasks; restricted target below gold on "
            f"{report['restricted_below_gold']}/{n}; first refinement prompt shows an H example on "
            f"{report['prompts_showing_h']}/{n}; the rule-library operator reaches gold from the restricted oracle "
            f"within {RULE_OPERATOR_BUDGET} refinements on {report['rule_operator_gold']}/{n}",
            f"train tasks: {report['train_with_dependent']}/{report['n_train']} hold an example that depends on H; "
            f"the restricted target is gold on {report['train_restricted_gold']}/{report['n_train']}"]
    return out


def task_rows(tasks: Sequence[Task], design: Design) -> list[dict[str, Any]]:
    """heldout_tasks.jsonl rows: enough to rescore any program on the study's own tasks (dependent: the example
    depends on the held-out rules; rule split only)."""
    rows = []
    for task in tasks:
        examples = [{"action": e.action, "legal": e.legal} | ({"dependent": depends_on(design.heldout_rules, e.state,
                                                                                     e.action)}
                                                           if design.kind == "rule" else {}) for e in task.examples]
        rows.append({"task_id": task.task_id, "page": task.page, "examples_hash": task.examples_hash,
                     "state": task.state, "examples": examples})
    return rows


def write_task_files(cfg: Any, run_dir: Path) -> list[str]:
    """<run>/heldout_tasks.jsonl (the trace tasks) and, under the rule split, <run>/split_check.json (the check
    above on those tasks and the run's GRPO train tasks); returns their names (step 01's outputs)."""
    design = Design.of(cfg)
    heldout = trace_tasks(cfg)
    text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in task_rows(heldout, design))
    atomic_write_text(Path(run_dir) / "heldout_tasks.jsonl", text)
    if design.kind != "rule":
        return ["heldout_tasks.jsonl"]
    train = train_tasks(cfg.train_count, cfg.train_examples_per_obs, design)
    atomic_write_json(Path(run_dir) / "split_check.json", check_split(design, heldout, train,
                                                                      cfg.harness_gold_threshold, cfg.sandbox))
    return ["heldout_tasks.jsonl", "split_check.json"]


def write_repair_files(cfg: Any, run_dir: Path) -> list[str]:
    """Under the repair curriculum: <run>/repair_heldin.jsonl (the held-in repair benchmark, one task a line) and
    <run>/repair_counts.json (tasks per family and side, balanced-accuracy spreads, the knobs they were made
    with): step 01's outputs, so they reach results/<run-id>/ (the train tasks stay under .w8-biayn/repair/)."""
    if curriculum_of(cfg) != "repair":
        return []
    design = Design.of(cfg)
    try:
        train, heldin = make_repair_tasks(design, RepairKnobs.from_config(cfg))
    except RepairError as err:
        raise StepError(str(err)) from None
    atomic_write_text(Path(run_dir) / "repair_heldin.jsonl",
                      "".join(json.dumps(t.to_json(), sort_keys=True) + "\n" for t in heldin))
    atomic_write_json(Path(run_dir) / "repair_counts.json",
                      {"made_with": record(RepairKnobs.from_config(cfg), design), "train_tasks": len(train),
                       "heldin_tasks": len(heldin), "families": counts(train + heldin)})
    return ["repair_heldin.jsonl", "repair_counts.json"]


def write_sft_target(cfg: Any, run_dir: Path) -> str:
    """<run>/sft_target.py: the program the warm-start teaches (step 02's output)."""
    atomic_write_text(Path(run_dir) / "sft_target.py", sft_target_source(sft_target_of_config(cfg)))
    return "sft_target.py"
