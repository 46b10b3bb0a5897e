"""The repair curriculum's training data (harness/repair_training.py) and dynamic sampling (harness/dynamic_sampling.py).

Real parts: the committed snapshot's repair tasks, the real sandbox, the real search. The operator that stands in
for the model in the relabeling harvest is a fixed-answer operator (the model's own run is the slow test and
`make smoke`). The dynamic-sampling subclass is exercised on a stand-in base class here (the mechanism: which
groups are kept) and on TRL's real GRPOTrainer in tests/test_train_local.py's slow test.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from harness.config import load_config
from harness.dynamic_sampling import DynamicSampling, flat, with_dynamic_sampling
from harness.operators import Generation, Operator
from harness.repair import ANCHOR, RepairKnobs, make_side, splice
from harness.repair_training import (BINS, balanced_tasks, bin_of, grpo_data, own_refinements, relabeled,
                                     rule_block, sampled_rewards, warmstart_data)
from harness.rewards import score_harness
from harness.rule_split import Design
from harness.search import SearchKnobs
from tests.helpers import REWARD

SMALL = {"W8_SPLIT": "rule", "W8_REPAIR_FAMILIES": "4", "W8_REPAIR_TASKS_PER_FAMILY": "6",
         "W8_REPAIR_HELDIN_FAMILIES": "2", "W8_REPAIR_HELDIN_TASKS_PER_FAMILY": "2", "W8_SANDBOX": "local",
         "W8_TRAIN_COUNT": "4", "W8_SFT_COUNT": "2", "W8_HARNESS_SFT_STEPS": "2", "W8_REPAIR_SFT_ROWS": "10", "W8_REPAIR_SOAR_TASKS": "3"}


@cache
def train_tasks():
    cfg = load_config(env=SMALL)
    return make_side("train", Design.of(cfg), RepairKnobs.from_config(cfg))


def test_bins_cover_the_range():
    assert bin_of(0.5, 0.5, 0.9) == 0 and bin_of(0.9, 0.5, 0.9) == BINS - 1 and bin_of(0.71, 0.5, 0.9) == 2
    assert bin_of(0.7, 0.7, 0.7) == 0


def test_balanced_tasks_spread_over_bins_and_families():
    tasks = train_tasks()
    lo = min(t.parent_balanced_accuracy for t in tasks)
    hi = max(t.parent_balanced_accuracy for t in tasks)
    chosen = balanced_tasks(tasks, 12, random.Random(0))
    assert len(chosen) == 12 and len({t.task.task_id for t in chosen}) == 12
    per_bin = Counter(bin_of(t.parent_balanced_accuracy, lo, hi) for t in chosen)
    available = Counter(bin_of(t.parent_balanced_accuracy, lo, hi) for t in tasks)
    for b in range(BINS):  # each bin gets its share, or all it has
        assert per_bin[b] >= min(available[b], 12 // BINS - 1), (per_bin, available)
    assert balanced_tasks(tasks, 12, random.Random(0)) == chosen  # seeded
    assert len(balanced_tasks(tasks, 10_000, random.Random(0))) == len(tasks)


def test_rule_block_rebuilds_every_synthetic_reference():
    tasks = train_tasks()
    synthetic = [t for t in tasks if t.synthetic]
    assert synthetic
    for t in synthetic:
        block = rule_block(t)
        assert block and block.startswith("    if ") and splice(t.parent, block) == t.reference
    assert all(rule_block(t) is None for t in tasks if not t.synthetic)


def wrong_program(parent: str) -> str:
    """The parent with a line of its own that changes nothing it decides (a model's 'different but wrong' answer)."""
    return parent.replace(ANCHOR, ANCHOR + "    seen = len(line)\n", 1)


def test_relabeled_row_answers_the_models_program_plus_the_rule():
    task = next(t for t in train_tasks() if t.synthetic)
    program = wrong_program(task.parent)
    row = relabeled(task, program, REWARD)
    assert row is not None and row["relabeled"]
    prompt, answer = row["messages"][-2]["content"], row["messages"][-1]["content"]
    assert "seen = len(line)" in prompt  # the model's own program is the parent shown
    fixed = answer.split("```python\n", 1)[1].rsplit("```", 1)[0]
    assert "seen = len(line)" in fixed and rule_block(task) in fixed
    score = score_harness(fixed, task.task.examples, REWARD.recall_weight, REWARD.timeout_s, sandbox="local")
    assert score.valid and score.balanced_accuracy >= REWARD.gold_threshold


def test_relabeled_refuses_what_is_not_a_wrong_program_of_its_own():
    task = next(t for t in train_tasks() if t.synthetic)
    assert relabeled(task, task.parent, REWARD) is None  # the parent unchanged
    assert relabeled(task, task.reference, REWARD) is None  # already gold
    assert relabeled(task, "def is_legal_action(state, action):\n    return True\n", REWARD) is None  # no slot
    real = next(t for t in train_tasks() if not t.synthetic)
    assert relabeled(real, wrong_program(real.parent), REWARD) is None  # a real family's check is not one block


class Fixed(Operator):
    """Answers every refinement with the parent plus a no-op line (a stand-in model)."""

    name, model = "deterministic", "fixed"

    def answer(self, requests):
        return [Generation("```python\n" + wrong_program(r.code) + "```\n") for r in requests]


def recording_sft(calls: list):
    """Stands in for the fine-tune (the real one runs in `make smoke` and the slow tests): records each stage's rows
    and steps, returns an export name."""
    def sft(data, steps):
        rows = [json.loads(line) for line in (data.sft_dir / "train.jsonl").read_text().splitlines()]
        calls.append((rows, steps))
        return f"export-{steps}"
    return sft


def test_warmstart_trains_two_stages_around_the_relabeling_harvest(tmp_path: Path):
    cfg = load_config(env=SMALL)
    calls, models = [], []
    info = warmstart_data(cfg, tmp_path, recording_sft(calls), operator_for=lambda m: models.append(m) or Fixed())
    (first, steps1), (second, steps2) = calls
    assert models == ["export-" + str(steps1)]  # stage 1's export writes the programs that get relabeled
    assert steps1 == len(first) == 2 + 5 and steps2 == steps1 + len(second)  # stage 2 resumes stage 1's export
    assert info["relabeled_rows"] == 3 and info["relabel_harvest"]["programs"] == 3
    assert sum(bool(r.get("relabeled")) for r in second) == 3 and not any(r.get("relabeled") for r in first)
    assert info["repair_rows"] + info["relabeled_rows"] == 10 and info["zero_shot_rows"] == 2
    assert info["rows"] == info["steps"] == len(first) + len(second) == 12
    assert sum(b["chosen"] for b in info["parent_bins"]) == info["repair_rows"]
    assert json.loads((tmp_path / "repair_sft_rows.json").read_text()) == info
    again = []
    warmstart_data(cfg, tmp_path / "again", recording_sft(again), operator_for=lambda m: Fixed())
    assert again == calls  # seeded by W8_TRAIN_SEED


def test_without_relabeling_tasks_the_warmstart_is_one_stage(tmp_path: Path):
    cfg = load_config(env={**SMALL, "W8_REPAIR_SOAR_TASKS": "0"})
    calls = []
    info = warmstart_data(cfg, tmp_path, recording_sft(calls), operator_for=lambda m: pytest.fail("no harvest"))
    assert len(calls) == 1 and calls[0][1] == 12 and info["stages"] == 1 and info["repair_rows"] == 10


def test_own_refinements_are_node_one_of_a_search_from_the_parent(tmp_path: Path):
    tasks = [t for t in train_tasks() if t.synthetic][:2]
    knobs = SearchKnobs(8, 20.0, 0, REWARD)
    programs = own_refinements(Fixed(), tasks, knobs, tmp_path)
    assert [p.strip() for p in programs] == [wrong_program(t.parent).strip() for t in tasks]


def test_grpo_rows_are_repair_refinement_prompts(tmp_path: Path):
    cfg = load_config(env=SMALL)
    data, info = grpo_data(cfg, tmp_path)
    import pyarrow.parquet as pq

    rows = pq.read_table(data.train_parquet).to_pylist()
    assert len(rows) == info["rows"] == 4 == data.n_train
    assert all(json.loads(r["extra_info"]["source"])["repair"] for r in rows)


class ByTask(Operator):
    """A stand-in model whose answer depends on the task: `never` tasks get a wrong program every time, `mixed`
    ones the reference on odd seeds and a wrong program on even ones, every other task its reference."""

    name, model = "deterministic", "by-task"

    def __init__(self, never: set, mixed: set):
        self.references = {t.task.task_id: t.reference for t in train_tasks()}
        self.never, self.mixed = never, mixed

    def answer(self, requests):
        def one(r):
            tid = r.task.task_id
            good = tid not in self.never and (tid not in self.mixed or r.seed % 2)
            return "```python\n" + (self.references[tid] if good else wrong_program(r.code)) + "```\n"
        return [Generation(one(r)) for r in requests]


def test_the_pass_rate_filter_keeps_the_prompts_whose_samples_differ(tmp_path: Path):
    cfg = load_config(env={**SMALL, "W8_GRPO_PREFILTER_SAMPLES": "4"})
    pool = balanced_tasks(train_tasks(), 8, random.Random(f"repair-grpo:{cfg.train_seed}"))
    ids = [t.task.task_id for t in pool]
    solved, mixed, never = set(ids[:4]), set(ids[4:6]), set(ids[6:])  # 4 always gold, 2 sometimes, 2 never
    models = []
    data, info = grpo_data(cfg, tmp_path, start="the-start",
                           operator_for=lambda m: models.append(m) or ByTask(never, mixed))
    import pyarrow.parquet as pq

    kept = [r["extra_info"]["task_id"] for r in pq.read_table(data.train_parquet).to_pylist()]
    record = info["prefilter"]
    assert models == ["the-start"] and record["candidates"] == 8 and record["generations"] == 32
    by_task = {t["task_id"]: t["rewards"] for t in record["tasks"]}
    assert [flat(by_task[i]) for i in ids] == [True] * 4 + [False] * 2 + [True] * 2  # 4 samples: seeds 1-4
    assert all(min(by_task[i]) > 1.0 for i in solved)  # gold plus the bonus every time: no GRPO signal
    assert record["with_signal"] == 2 == record["kept_with_signal"]
    # 4 rows: the 2 with signal, then the 2 never solved (lowest mean first); no always-solved prompt is trained on
    assert len(kept) == 4 == data.n_train and set(kept) == set(ids[4:]) and record["always_solved"] == 4
    # with room for 8 rows (a pool of 16), the always-solved prompts are still left out
    more, info8 = grpo_data(cfg.replace(train_count=8), tmp_path / "eight", start="the-start",
                            operator_for=lambda m: ByTask(never, mixed))
    unsolved = {t["task_id"] for t in info8["prefilter"]["tasks"]} & (mixed | never)
    assert more.n_train == len(unsolved) == info8["prefilter"]["kept"] < 8
    assert info8["prefilter"]["always_solved"] == 16 - len(unsolved)


def test_sampled_rewards_are_the_grpo_reward(tmp_path: Path):
    data, _ = grpo_data(load_config(env=SMALL), tmp_path)
    import pyarrow.parquet as pq

    row = pq.read_table(data.train_parquet).to_pylist()[0]
    task = next(t for t in train_tasks() if t.task.task_id == row["extra_info"]["task_id"])
    (gold, is_gold), (same, same_gold), (none, none_gold) = sampled_rewards(row, [task.reference, task.parent, None])
    assert gold > 1.0 > none and same < gold  # the reference: gold plus the improvement bonus; the parent: penalized
    assert (is_gold, same_gold, none_gold) == (True, False, False)


# ---- dynamic sampling -----------------------------------------------------------------------------

class Base:
    """Stands in for TRL's GRPOTrainer: its generation step scores a group with fixed rewards per prompt."""

    def __init__(self, rewards_by_task):
        self.rewards_by_task, self.last, self.asked = rewards_by_task, [], []
        self.model = type("M", (), {"training": True})()

    def _generate_and_score_completions(self, inputs):
        task = inputs[0]["extra_info"]["task_id"]
        self.asked.append(task)
        self.last = list(self.rewards_by_task[task])
        return {"task": task}


def rows(*names):
    return [{"extra_info": {"task_id": n}} for n in names]


def dynamic(sampling: DynamicSampling, rewards_by_task: dict) -> Base:
    """The stand-in trainer with dynamic sampling; the rewards it reads are its own latest group's."""
    trainer = None
    trainer = with_dynamic_sampling(Base, sampling, lambda: trainer.last)(rewards_by_task)
    return trainer


def test_flat_groups_are_replaced_and_recorded():
    sampling = DynamicSampling(rows("b", "c"), tries=3, seed=0)
    trainer = dynamic(sampling, {"a": [0.5] * 4, "b": [0.5] * 4, "c": [0.1, 0.9, 0.5, 0.5]})
    out = trainer._generate_and_score_completions(rows("a") * 4)
    assert out["task"] == "c" and trainer.asked[0] == "a"
    step = sampling.take_step()
    assert step["groups_sampled"] == len(trainer.asked) and step["groups_dropped"] == len(trainer.asked) - 1
    assert step["zero_variance_share_sampled"] == pytest.approx((len(trainer.asked) - 1) / len(trainer.asked))
    assert not step["kept_group_flat"] and step["groups"][-1]["rewards"] == [0.1, 0.9, 0.5, 0.5]
    assert sampling.take_step()["groups_sampled"] == 0


def test_the_last_try_is_kept_even_when_flat():
    sampling = DynamicSampling(rows("a"), tries=2, seed=0)
    trainer = dynamic(sampling, {"a": [1.0, 1.0]})
    trainer._generate_and_score_completions(rows("a") * 2)
    step = sampling.take_step()
    assert step["groups_sampled"] == 3 and step["groups_dropped"] == 2 and step["kept_group_flat"]
    assert step["zero_variance_share_sampled"] == 1.0


def test_no_tries_keeps_every_group():
    sampling = DynamicSampling(rows("a"), tries=0, seed=0)
    trainer = dynamic(sampling, {"a": [0.0, 0.0]})
    trainer._generate_and_score_completions(rows("a") * 2)
    assert sampling.take_step()["groups_sampled"] == 1
    assert flat([]) and flat([0.2, 0.2]) and not flat([0.2, 0.3])
    with pytest.raises(ValueError):
        DynamicSampling(rows("a"), tries=-1, seed=0)


def test_the_run_benchmark_writes_every_arm_beside_the_ceiling(tmp_path: Path):
    from harness.repair_training import run_benchmark
    from harness.split_check import write_repair_files

    cfg = load_config(env=SMALL)
    assert "repair_heldin.jsonl" in write_repair_files(cfg, tmp_path)
    lines = []
    results = run_benchmark(cfg, tmp_path, {"fixed": "a-model"}, operator_for=lambda m: Fixed(), progress=None,
                            say=lines.append)
    saved = json.loads((tmp_path / "repair_eval.json").read_text())
    assert set(saved["arms"]) == {"rule-library", "fixed"} == set(results["arms"])
    ceiling, fixed = saved["arms"]["rule-library"]["summary"]["all"], saved["arms"]["fixed"]["summary"]["all"]
    assert ceiling["first_refinement"] == ceiling["tasks"] > 0 and fixed["first_refinement"] == 0
    assert saved["paired"]["fixed vs rule-library"]["first_refinement"]["worse"] == ceiling["tasks"]
    assert saved["arms"]["fixed"]["model"] == "a-model" and len(lines) == 2 and lines[1].startswith("repair fixed:")
