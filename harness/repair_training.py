"""The repair curriculum's training: the repair warm-start's SFT rows, the repair GRPO rows, the held-in checks.

    from harness.repair_training import warmstart_data, grpo_data, run_benchmark
    info = warmstart_data(cfg, run_dir, sft)      # sft(data, steps) -> export: <run>/data/repair_sft/stage{1,2}/
    data, info = grpo_data(cfg, run_dir)          # <run>/data/repair_grpo/train.parquet
    run_benchmark(cfg, run_dir, {"sft": export})  # <run>/repair_eval.json: the held-in benchmark per arm

The warm-start (the repair_sft arm) answers refinement prompts of train repair tasks (harness.repair: a parent
below gold, shown with the failures the search shows) with the program that fixes them. Its rows:
- repair rows: W8_REPAIR_SFT_ROWS tasks less the relabeled ones below, spread evenly over BINS equal-width
  bins of the parent's balanced accuracy (parents one rule below gold range from nearly gold to far from it),
  round-robin over the families inside a bin; each answered with the task's reference;
- relabeled rows (as SOAR does): after a first stage on half of the repair rows, that stage's export refines
  the parents of W8_REPAIR_SOAR_TASKS other synthetic train tasks once (one search node each, the search's own
  prompt and sampling); each valid program that is not gold and not the parent unchanged becomes a new parent,
  shown with its own failures and answered with ITSELF plus the task's rule (harness.repair.splice), kept only
  when that answer is gold on the task; the second stage trains on them and the other repair rows;
- the warm-start's zero-shot rows (W8_SFT_COUNT, in the first stage), so node 0 keeps its program.
Rows are shuffled with W8_TRAIN_SEED; one SFT step per row. The repair GRPO rows are W8_TRAIN_COUNT refinement
prompts of train repair tasks (harness.repair_rows.repair_refine_rows: the reward scores every example of the
task, shown and unshown, gold or the shaped improvement over the parent). A prompt the start model already
solves every time gives a group of equal rewards, which GRPO learns nothing from: with W8_GRPO_PREFILTER_SAMPLES
the start model first samples that many answers to each of twice as many prompts; the prompts whose rewards
differ come first, then those it never solves, and those it always solves are left out (pass_rate_filter).
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.arms import PREFILTER_POOL
from harness.dynamic_sampling import flat
from harness.env import HarnessLegalityEnv
from harness.failures import failures_to_show
from harness.files import atomic_write_json
from harness.interface import program_key
from harness.operators import Operator, operator_from_config
from harness.prompts import build_refine_prompt
from harness.repair import ANCHOR, RepairKnobs, RepairTask, make_side, splice
from harness.repair_eval import (CEILING, RootedOperator, RuleLibraryOperator, arm_summary, benchmark_knobs,
                                 evaluate_arm, evaluate_arms, summary_line)
from harness.repair_rows import repair_refine_rows, repair_sft_rows
from harness.rewards import RewardKnobs, score_harness
from harness.rule_split import Design
from harness.search import SearchKnobs, SearchSpec, run_searches
from harness.training_data import (TrainingData, fenced_answer, training_data_for, write_jsonl_rows,
                                   write_parquet_rows)

BINS = 4  # parent balanced-accuracy bins of the warm-start's repair rows


def bin_of(value: float, lo: float, hi: float, bins: int = BINS) -> int:
    """Which of `bins` equal-width bins of [lo, hi] holds value (hi goes to the last)."""
    if hi <= lo:
        return 0
    return min(bins - 1, int((value - lo) / (hi - lo) * bins))


def balanced_tasks(tasks: Sequence[RepairTask], n: int, rng: random.Random, bins: int = BINS) -> list[RepairTask]:
    """n distinct tasks spread evenly over `bins` bins of the parent's balanced accuracy, round-robin over the
    families inside each bin (family and task order seeded by rng). A bin with fewer tasks than its share gives
    the rest to the other bins; fewer than n tasks in all gives them all."""
    if not tasks:
        return []
    lo = min(t.parent_balanced_accuracy for t in tasks)
    hi = max(t.parent_balanced_accuracy for t in tasks)
    queues: list[list[list[RepairTask]]] = []
    for b in range(bins):
        by_family: dict[str, list[RepairTask]] = {}
        for t in tasks:
            if bin_of(t.parent_balanced_accuracy, lo, hi, bins) == b:
                by_family.setdefault(t.family, []).append(t)
        families = [rng.sample(group, len(group)) for _, group in sorted(by_family.items())]
        rng.shuffle(families)
        queues.append(families)
    out: list[RepairTask] = []
    while len(out) < n and any(any(f) for f in queues):
        for families in queues:  # one task per bin per pass: bins take turns
            families[:] = [f for f in families if f]
            if families and len(out) < n:
                out.append(families[0].pop())
                families.append(families.pop(0))  # the next family of this bin goes next
    return out


def bin_counts(tasks: Sequence[RepairTask], chosen: Sequence[RepairTask], bins: int = BINS) -> list[dict[str, Any]]:
    """Per bin of the train tasks' parent balanced accuracy: its range and how many chosen tasks fall in it."""
    lo = min(t.parent_balanced_accuracy for t in tasks)
    hi = max(t.parent_balanced_accuracy for t in tasks)
    width = (hi - lo) / bins
    return [{"bin": b, "from": round(lo + b * width, 3), "to": round(lo + (b + 1) * width, 3),
             "tasks": sum(bin_of(t.parent_balanced_accuracy, lo, hi, bins) == b for t in tasks),
             "chosen": sum(bin_of(t.parent_balanced_accuracy, lo, hi, bins) == b for t in chosen)}
            for b in range(bins)]


def rule_block(task: RepairTask) -> str | None:
    """The guard a synthetic task's reference adds to its parent at the target-element slot (None: a real
    family, whose check is not one block at that slot)."""
    if not task.synthetic or ANCHOR not in task.parent:
        return None
    at = task.parent.index(ANCHOR) + len(ANCHOR)
    block = task.reference[at:at + len(task.reference) - len(task.parent)]
    return block if splice(task.parent, block) == task.reference else None


def relabeled(task: RepairTask, program: str, reward: RewardKnobs) -> dict[str, Any] | None:
    """A SOAR row from the model's own wrong program: the program as the parent, shown with its own failures,
    answered with the program plus the task's rule; None unless the program is valid, below gold, not the
    parent unchanged, holds the slot, and the relabeled answer is gold on the task in the sandbox."""
    block = rule_block(task)
    answer = splice(program, block) if block else None
    if answer is None or program_key(program) == program_key(task.parent):
        return None
    examples = task.task.examples
    own = score_harness(program, examples, reward.recall_weight, reward.timeout_s, sandbox=reward.sandbox)
    if not own.valid or own.balanced_accuracy >= reward.gold_threshold:
        return None
    fixed = score_harness(answer, examples, reward.recall_weight, reward.timeout_s, sandbox=reward.sandbox)
    if not (fixed.valid and fixed.balanced_accuracy >= reward.gold_threshold):
        return None
    shown = failures_to_show(own, examples)
    return {"messages": build_refine_prompt(task.task, program, shown) + [{"role": "assistant",
                                                                           "content": fenced_answer(answer)}],
            "task_id": task.task.task_id, "relabeled": True, "family": task.family,
            "program_balanced_accuracy": own.balanced_accuracy}


def own_refinements(operator: Operator, tasks: Sequence[RepairTask], knobs: SearchKnobs,
                    out_dir: Path) -> list[str | None]:
    """The operator's first refinement of each task's parent (one search node from the parent, the search's own
    prompt, failures and sampling; resumable per task under out_dir); None where nothing was extracted."""
    rooted = RootedOperator(operator, {t.task.task_id: t.parent for t in tasks})
    one = dataclasses.replace(knobs, max_iterations=1)
    specs = [SearchSpec(t.task, one, None, out_dir / (t.task.task_id.replace("/", "_") + ".state.json"),
                        label=f"[soar] {t.family} {t.task.obs_id}") for t in tasks]
    traces = [trace.to_trace() for trace in run_searches(specs, rooted, progress=None)]
    return [(trace["nodes"][1]["code"] or None) if len(trace["nodes"]) > 1 else None for trace in traces]


def model_operator(cfg: Any) -> Callable[[str], Operator]:
    """model -> the run's operator (W8_OPERATOR and its decoding knobs) on that model."""
    return lambda model: operator_from_config(cfg.replace(harness_model=model))


def warmstart_data(cfg: Any, run_dir: Path, sft: Callable[[TrainingData, int], str],
                   operator_for: Any = None) -> dict[str, Any]:
    """The repair warm-start (module doc), trained through `sft(data, steps) -> export` (a fine-tune of the base
    model that resumes from its own newest export): its numbers, also in <run>/repair_sft_rows.json.

    Two stages when there are relabeling tasks (W8_REPAIR_SOAR_TASKS), as SOAR's rounds: stage 1 trains on the
    zero-shot rows and the first half of the repair rows; its export refines the relabeling tasks' parents once
    (a search node each, the run's operator: operator_for(model) -> Operator); every wrong program it writes
    that the task's rule fixes becomes a row; stage 2 resumes from stage 1's export on the other repair rows,
    the relabeled ones replacing as many of them, so the repair rows add up to W8_REPAIR_SFT_ROWS."""
    run_dir = Path(run_dir)
    reward = dataclasses.replace(RewardKnobs.from_config(cfg), sandbox="local")  # our own programs: no sandbox
    tasks = make_side("train", Design.of(cfg), RepairKnobs.from_config(cfg))
    rng = random.Random(f"repair-warmstart:{cfg.train_seed}")
    soar_tasks = balanced_tasks([t for t in tasks if t.synthetic], min(cfg.repair_soar_tasks, cfg.repair_sft_rows), rng)
    used = {t.task.task_id for t in soar_tasks}
    chosen = balanced_tasks([t for t in tasks if t.task.task_id not in used], cfg.repair_sft_rows, rng)
    zero_shot = training_data_for(cfg, run_dir / "data")
    zero = [json.loads(line) for line in (zero_shot.sft_dir / "train.jsonl").read_text().splitlines() if line]
    folder = run_dir / "data" / "repair_sft"
    half = len(chosen) // 2 if soar_tasks else len(chosen)
    first = zero + repair_sft_rows(chosen[:half], reward)
    rng.shuffle(first)
    export = stage_export(sft(stage_data(zero_shot, folder / "stage1", first), len(first)), len(first))
    harvest = {"tasks": len(soar_tasks), "programs": 0, "kept": 0, "wall_s": 0.0, "model": None}
    second: list[dict[str, Any]] = []
    repair = chosen[:half]  # the repair tasks trained on (their reference as the answer)
    if soar_tasks:
        operator_for = operator_for or model_operator(cfg)
        start = time.monotonic()
        operator = operator_for(export)
        try:
            programs = own_refinements(operator, soar_tasks, SearchKnobs.from_config(cfg),
                                       run_dir / "harvest" / "repair_sft")
        finally:
            operator.close()
        kept = [row for task, program in zip(soar_tasks, programs) if program
                for row in [relabeled(task, program, RewardKnobs.from_config(cfg))] if row]
        harvest.update(programs=sum(p is not None for p in programs), kept=len(kept), model=str(export),
                       wall_s=round(time.monotonic() - start, 1))
        rest = chosen[half:len(chosen) - len(kept)]
        repair = repair + rest
        second = repair_sft_rows(rest, reward) + kept
        rng.shuffle(second)
        sft(stage_data(zero_shot, folder / "stage2", second), len(first) + len(second))
    info = {"rows": len(first) + len(second), "steps": len(first) + len(second), "stages": 2 if soar_tasks else 1,
            "stage1_rows": len(first), "stage2_rows": len(second), "repair_rows": len(repair),
            "relabeled_rows": harvest["kept"], "zero_shot_rows": len(zero), "families": len({t.family for t in repair}),
            "relabel_harvest": harvest, "parent_bins": bin_counts(tasks, repair), "train_seed": cfg.train_seed}
    atomic_write_json(run_dir / "repair_sft_rows.json", info)
    return info


def stage_export(newest: str, step: int) -> str:
    """Stage 1's own export (global_step_<step>/policy beside the newest one the trainer returned): on a resume
    after stage 2 the newest is stage 2's, and the relabeling harvest must resume with the model it began with."""
    own = Path(newest).parent.parent / f"global_step_{step}" / "policy"
    return str(own) if own.is_dir() else str(newest)


def stage_data(base: TrainingData, folder: Path, rows: list[dict[str, Any]]) -> TrainingData:
    """One stage's SFT rows as <folder>/train.jsonl, in `base`'s TrainingData (its parquets: SkyRL's lengths)."""
    write_jsonl_rows(rows, folder / "train.jsonl")
    return dataclasses.replace(base, sft_dir=folder)


def grpo_data(cfg: Any, run_dir: Path, sft_dir: Path | None = None, start: str | None = None,
              operator_for: Any = None) -> tuple[TrainingData, dict[str, Any]]:
    """<run>/data/repair_grpo/train.parquet: W8_TRAIN_COUNT repair refinement rows (balanced like the
    warm-start's, drawn with their own seed), the data of the trained arm's repair GRPO. With `start` (the model
    GRPO starts from) and W8_GRPO_PREFILTER_SAMPLES, the rows are chosen by pass_rate_filter from twice as many."""
    run_dir = Path(run_dir)
    reward = dataclasses.replace(RewardKnobs.from_config(cfg), sandbox="local")
    tasks = make_side("train", Design.of(cfg), RepairKnobs.from_config(cfg))
    k = cfg.grpo_prefilter_samples if start else 0
    pool = balanced_tasks(tasks, cfg.train_count * (PREFILTER_POOL if k else 1),
                          random.Random(f"repair-grpo:{cfg.train_seed}"))
    rows = repair_refine_rows(pool, reward, cfg.refine_improvement_bonus, cfg.refine_identical_penalty)
    prefilter = None
    if k:
        rows, prefilter = pass_rate_filter(cfg, run_dir, pool, rows, str(start), operator_for)
    kept = {r["extra_info"]["task_id"] for r in rows}
    chosen = [t for t in pool if t.task.task_id in kept]
    path = write_parquet_rows(rows, run_dir / "data" / "repair_grpo" / "train.parquet")
    base = training_data_for(cfg, run_dir / "data")
    info = {"rows": len(rows), "families": len({t.family for t in chosen}),
            "parent_bins": bin_counts(tasks, chosen), "parquet": str(path.relative_to(run_dir)),
            "prefilter": prefilter}
    return dataclasses.replace(base, train_parquet=path, n_train=len(rows), sft_dir=sft_dir or base.sft_dir), info


def sampled_rewards(row: dict[str, Any], programs: Sequence[str | None]) -> list[tuple[float, bool]]:
    """The GRPO reward (the env's, on the row) of each sampled program and whether it is gold; None (nothing
    extracted) scores as an answer without code does."""
    outs = [HarnessLegalityEnv(extras=row).step(fenced_answer(p) if p else "") for p in programs]
    return [(round(float(o["reward"]), 4), bool(o["metadata"]["gold"])) for o in outs]


def pass_rate_filter(cfg: Any, run_dir: Path, pool: Sequence[RepairTask], rows: list[dict[str, Any]], start: str,
                     operator_for: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """At most W8_TRAIN_COUNT rows of `pool`, those most likely to give a GRPO group signal, as DAPO and Polaris filter
    prompts by the policy's pass rate: the start model refines each pool task's parent W8_GRPO_PREFILTER_SAMPLES
    times (a search node each with its own seed, the search's prompt and sampling; resumable under
    <run>/harvest/repair_grpo_filter); the rows whose sampled rewards differ come first, then the flat ones below
    gold by mean reward, lowest first (a group of 8 may still differ where 4 samples did not). A prompt solved
    every time is left out (its group is flat: DAPO drops such groups), so there may be fewer rows than
    W8_TRAIN_COUNT; only when every prompt is always solved are those the rows. Returns the rows and the record:
    every task's rewards, how many had signal."""
    k, began = cfg.grpo_prefilter_samples, time.monotonic()
    operator = (operator_for or model_operator(cfg))(start)
    knobs = SearchKnobs.from_config(cfg)
    try:
        samples = [own_refinements(operator, pool, dataclasses.replace(knobs, seed=knobs.seed + 1 + j),
                                   Path(run_dir) / "harvest" / "repair_grpo_filter" / f"sample{j}") for j in range(k)]
    finally:
        operator.close()
    scored = [sampled_rewards(row, [s[i] for s in samples]) for i, row in enumerate(rows)]
    rewards = [[r for r, _ in one] for one in scored]
    signal = [i for i, r in enumerate(rewards) if not flat(r)]
    solved = [i for i, one in enumerate(scored) if flat(rewards[i]) and all(gold for _, gold in one)]
    rest = sorted((i for i, r in enumerate(rewards) if flat(r) and i not in solved), key=lambda i: sum(rewards[i]) / k)
    keep = (signal + rest)[:cfg.train_count] or solved[:cfg.train_count]
    record = {"samples": k, "candidates": len(rows), "with_signal": len(signal), "always_solved": len(solved),
              "model": start,
              "kept": len(keep), "kept_with_signal": sum(i in signal for i in keep),
              "generations": k * len(rows), "wall_s": round(time.monotonic() - began, 1),
              "tasks": [{"task_id": row["extra_info"]["task_id"], "family": pool[i].family, "rewards": rewards[i],
                         "kept": i in keep} for i, row in enumerate(rows)]}
    return [rows[i] for i in keep], record


def heldin_first_refinement(cfg: Any, run_dir: Path, model: str, label: str,
                            operator_for: Any = None) -> dict[str, Any]:
    """The held-in repair benchmark (<run>/repair_heldin.jsonl, step 01's) at one refinement per task with
    `model` as the run's operator: its summary (harness.repair_eval.arm_summary) and per-task rows, the searches
    kept under <run>/repair_training_eval/<label>/ (resumable)."""
    tasks = heldin_tasks(run_dir)
    operator_for = operator_for or model_operator(cfg)
    knobs = SearchKnobs(1, cfg.search_c, cfg.search_seed, RewardKnobs.from_config(cfg))
    start = time.monotonic()
    operator = operator_for(model)
    try:
        rows = evaluate_arm(label, operator, tasks, knobs, Path(run_dir) / "repair_training_eval" / label,
                            progress=None)
    finally:
        operator.close()
    return {"model": str(model), "seconds": round(time.monotonic() - start, 1), "summary": arm_summary(rows),
            "tasks": rows}


def training_eval_point(cfg: Any, run_dir: Path, model: str, step: int, evals: list[dict[str, Any]],
                        say: Callable[[str], None] = lambda line: print(line, flush=True)) -> None:
    """One point of the trained arm's held-in repair rate during repair GRPO (heldin_first_refinement), added to
    `evals` and kept in <run>/repair_training_eval.json (W8_REPAIR_TRAIN_EVAL); one line said."""
    evals.append({"step": step, **(point := heldin_first_refinement(cfg, run_dir, model, f"grpo-step{step}"))})
    atomic_write_json(Path(run_dir) / "repair_training_eval.json", {"points": evals})
    s = point["summary"]
    say(f"[03_grpo] trained: held-in repair at GRPO step {step}: first refinement {s['all']['first_refinement']}/"
        f"{s['all']['tasks']} (synthetic {s['synthetic']['first_refinement']}/{s['synthetic']['tasks']})")


def heldin_tasks(run_dir: Path) -> list[RepairTask]:
    """The run's held-in repair benchmark (<run>/repair_heldin.jsonl, written by step 01)."""
    return [RepairTask.from_json(json.loads(line))
            for line in (Path(run_dir) / "repair_heldin.jsonl").read_text().splitlines() if line]


def run_benchmark(cfg: Any, run_dir: Path, models: dict[str, str], operator_for: Any = None, progress: Any = print,
                  say: Callable[[str], None] = lambda line: print(line, flush=True)) -> dict[str, Any]:
    """<run>/repair_eval.json: the held-in repair benchmark (W8_REPAIR_BUDGET refinements a task) for every arm
    (name -> its model) and the rule-library ceiling, each arm's searches under <run>/repair_eval/<arm>/
    (resumable), compared in pairs (harness.repair_eval.evaluate_arms)."""
    tasks = heldin_tasks(run_dir)
    operator_for = operator_for or model_operator(cfg)
    knobs = SearchKnobs(cfg.repair_budget, cfg.search_c, cfg.search_seed, RewardKnobs.from_config(cfg))
    makers = {CEILING: lambda: RuleLibraryOperator(tasks, Design.of(cfg).heldout_rules),
              **{arm: (lambda m=model: operator_for(m)) for arm, model in models.items()}}
    results: dict[str, Any] = {"arms": {}}
    for name, make in makers.items():  # one arm at a time, a line as each finishes
        evaluate_arms({name: make}, tasks, knobs, Path(run_dir) / "repair_eval", results,
                      models={CEILING: CEILING, **models}, progress=progress)
        say(f"repair {summary_line(name, results['arms'][name]['summary'])} ({results['arms'][name]['seconds']:.0f}s)")
    results["knobs"] = benchmark_knobs(cfg, knobs, len(tasks))
    atomic_write_json(Path(run_dir) / "repair_eval.json", results)
    return results
