"""Training rows from repair tasks: the refinement prompt of a parent, as the search shows it.

    from harness.repair_rows import repair_refine_rows, repair_sft_rows, check_repair_rows
    rows = repair_refine_rows(train_tasks, reward, bonus=0.2, penalty=0.2)   # SkyRL GRPO rows (refine kind)
    sft = repair_sft_rows(train_tasks, reward)                               # chat rows: prompt -> reference
    check_repair_rows(parquet_path)      # schema, the env's refinement path, the reference and the parent scored

A repair task's parent is scored in the sandbox on the task's examples and shown with the search's own failure
selection (harness.failures.failures_to_show, first attempt), so a row's prompt is the prompt node 1 of a
search from that parent gets (harness.repair_eval does that search). The GRPO row is harness.training_data's
refine_row: the env scores an answer on all of the task's examples, shown and unshown, and shapes it against
the parent (harness.rewards.refinement_reward). The SFT row answers the same prompt with the reference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from harness.dataset import DatasetError
from harness.env import HarnessLegalityEnv, row_refinement
from harness.failures import failures_to_show
from harness.prompts import build_refine_prompt
from harness.repair import RepairTask
from harness.rewards import RewardKnobs, Score, score_harness
from harness.training_data import SKYRL_COLUMNS, check_skyrl_parquet, fenced_answer, refine_row


def parent_as_shown(task: RepairTask, reward: RewardKnobs) -> tuple[Score, list[Any]]:
    """The parent's score in the sandbox and the failures the search's first refinement of it shows."""
    score = score_harness(task.parent, task.task.examples, reward.recall_weight, reward.timeout_s,
                          sandbox=reward.sandbox)
    return score, failures_to_show(score, task.task.examples)


def repair_refine_rows(tasks: Sequence[RepairTask], reward: RewardKnobs, bonus: float,
                       penalty: float) -> list[dict[str, Any]]:
    """One SkyRL refinement row per task (its source names the family and the property)."""
    rows = []
    for t in tasks:
        score, shown = parent_as_shown(t, reward)
        rows.append(refine_row(t.task, t.parent, shown, score.reward, reward, bonus, penalty,
                               source={"repair": t.family, "property": t.property, "task_id": t.task.task_id}))
    return rows


def repair_sft_rows(tasks: Sequence[RepairTask], reward: RewardKnobs) -> list[dict[str, Any]]:
    """One SFT chat row per task: the refinement prompt of its parent, then its reference as the answer."""
    rows = []
    for t in tasks:
        _, shown = parent_as_shown(t, reward)
        rows.append({"messages": build_refine_prompt(t.task, t.parent, shown) + [{"role": "assistant",
                                                                                   "content": fenced_answer(t.reference)}],
                     "task_id": t.task.task_id})
    return rows


def check_repair_rows(path: str | Path, tasks: Sequence[RepairTask]) -> dict[str, Any]:
    """A repair parquet read back as SkyRL reads it: its columns, each row's refinement fields (the env's own
    row_refinement), and on the first row the env's reward for the reference (gold, improved on the parent) and
    for the parent unchanged (not improved, penalised). DatasetError naming the first thing that is wrong."""
    import pyarrow.parquet as pq

    n = check_skyrl_parquet(path)
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        info = row["extra_info"]
        if row_refinement(info, info["task_id"]) is None:
            raise DatasetError(f"{path}: row {info['task_id']} is not a refinement row")
        if set(SKYRL_COLUMNS) - set(row):
            raise DatasetError(f"{path}: row {info['task_id']} lacks {sorted(set(SKYRL_COLUMNS) - set(row))}")
    first = rows[0]
    by_id = {t.task.task_id: t for t in tasks}
    task = by_id.get(first["extra_info"]["task_id"])
    if task is None:
        raise DatasetError(f"{path}: row {first['extra_info']['task_id']} is none of the repair tasks")
    extras = {k: v for k, v in first.items() if k not in ("prompt", "env_class")}
    reference = HarnessLegalityEnv(extras=extras).step(fenced_answer(task.reference))
    parent = HarnessLegalityEnv(extras=extras).step(fenced_answer(task.parent))
    if not (reference.get("metadata", {}).get("gold") and reference.get("metadata", {}).get("improved")):
        raise DatasetError(f"{path}: the env does not score row {task.task.task_id}'s reference gold and improved "
                           f"({json.dumps(reference.get('metadata', {}), default=str)[:200]})")
    if not parent.get("metadata", {}).get("identical") or parent["reward"] >= reference["reward"]:
        raise DatasetError(f"{path}: the env does not penalise row {task.task.task_id}'s parent unchanged")
    return {"rows": n, "reference_reward": reference["reward"], "parent_reward": parent["reward"],
            "task_id": task.task.task_id}
