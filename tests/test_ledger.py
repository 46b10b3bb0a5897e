"""The compute ledger: training and harvest wall time in their own columns, a harvest's real time recomputed from
a record that summed its side-by-side searches, and the warm-start counted (steps, rows, tokens of the rows step 02
trained on), with the headline's sentence on what equal compute matches. Run folders built here, the committed
studies' harvest records as cases."""

from __future__ import annotations

import json
import os

import pytest

from harness.config import load_config
from harness.ledger import equal_compute_line, harvest_wall, ledger_lines, sft_rows, training_ledger, warm_start
from harness.models import resolve_model
from harness.training_data import training_data_for


def test_the_ledger_keeps_training_and_harvest_wall_time_apart(tmp_path):
    """A self arm's metrics as step 03 writes them now: the fine-tunes' + GRPO's own wall time (trainer_wall_s), and
    each harvest's real wall time beside its worker-seconds; a metrics file from before trainer_wall_s keeps its
    train_wall_s."""
    harvests = [{"name": "self-r1", "nodes": 24, "searches": 12, "gold_nodes": 0, "wall_s": 300.0, "worker_s": 3500.0},
                {"name": "self-r2", "nodes": 24, "searches": 12, "gold_nodes": 0, "wall_s": 170.0, "worker_s": 2000.0}]
    metrics = {"group_size": 4, "steps": [{"step": 1}, {"step": 2}], "harvests": harvests,
               "train_wall_s": 1100.0, "trainer_wall_s": 300.0}
    (tmp_path / "self_metrics.json").write_text(json.dumps(metrics))
    book = training_ledger(tmp_path, "self")
    assert book == {"grpo_generations": 8, "harvest_generations": 48, "training_generations": 56,
                    "harvest_wall_s": 470.0, "harvest_wall_s_high": 470.0, "harvest_worker_s": 5500.0,
                    "harvest_wall_recomputed": False, "train_wall_may_hold_harvest": False, "sft_wall_s": 0.0,
                    "train_wall_s": 300.0}
    row = ledger_lines({"self": {"search_generations": 80, "completion_tokens": 10, "sandbox_evaluations": 80,
                                 "search_wall_s": 40.0, "planned_training_generations": 56, **book}}, 16)[2]
    assert row == "| self | 80 | 10 | 80 | 40 | 56 (8 + 48) | 56 | 300 | 470 (5500 worker-s) | 8.5 |"
    del metrics["trainer_wall_s"]
    (tmp_path / "self_metrics.json").write_text(json.dumps(metrics))
    older = training_ledger(tmp_path, "self")
    assert older["train_wall_s"] == 1100.0 and older["train_wall_may_hold_harvest"] is True
    assert ledger_lines({"self": {"search_generations": 80, "completion_tokens": 10, "sandbox_evaluations": 80,
                                  "search_wall_s": 40.0, "planned_training_generations": 56, **older}}, 16)[-1] == (
        "Training wall time of self: step 03's whole time for the arm, recorded before the training's own time was "
        "(trainer_wall_s); it holds the harvests if that invocation of step 03 searched them rather than found them "
        "saved.")


def test_a_summed_harvest_record_gets_its_real_time_back():
    # results/study-b4-self-20261206, self-r1: 12 searches of 2 nodes side by side, none gold: each spans the harvest
    self_r1 = {"name": "self-r1", "nodes": 24, "searches": 12, "gold_nodes": 0, "wall_s": 3559.8}
    assert harvest_wall(self_r1) == {"low": pytest.approx(296.65), "high": pytest.approx(296.65), "worker_s": 3559.8,
                                     "recomputed": True}
    # results/study-b4-6arms-20261206, refine: 4 searches, 2 stopped at gold at node 0, the other 2 ran every round
    refine = {"name": "refine", "nodes": 12, "searches": 4, "gold_nodes": 2, "wall_s": 560.6}
    wall = harvest_wall(refine)
    assert (wall["low"], wall["high"]) == (pytest.approx(140.15), pytest.approx(280.3))
    book = {"search_generations": 56, "completion_tokens": 1, "sandbox_evaluations": 56, "search_wall_s": 9.0,
            "planned_training_generations": 40, "grpo_generations": 20, "harvest_generations": 12,
            "training_generations": 32, "harvest_wall_s": 140.2, "harvest_wall_s_high": 280.3,
            "harvest_worker_s": 560.6, "harvest_wall_recomputed": True, "sft_wall_s": 123.0, "train_wall_s": 793.2}
    lines = ledger_lines({"refine": book}, 16)
    assert lines[2] == "| refine | 56 | 1 | 56 | 9 | 32 (20 + 12) | 40 | 916 | 140-280 (561 worker-s, recomputed) | 5.5 |"
    assert any(line.startswith("Harvest wall time recomputed") for line in lines)


@pytest.fixture
def sft_run(tmp_path):
    """A run folder after step 02 on the study's knobs (12 SFT rows of the compact answer key, 9 steps), its rows
    written by step 02's own code; no export, so the base model's tokenizer counts them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_")}
    env.update({"W8_SFT_COUNT": "3", "W8_TRAIN_COUNT": "4", "W8_HARNESS_SFT_STEPS": "2",
                "W8_TRAIN_EXAMPLES_PER_OBS": "24"})
    cfg = load_config(env=env)
    training_data_for(cfg, tmp_path / "data")
    (tmp_path / "sft_metrics.json").write_text(json.dumps({"steps": [{"step": 1}, {"step": 2}], "batch_size": 1,
                                                           "train_rows": 3, "train_wall_s": 50.0}))
    return cfg, tmp_path


def test_the_warm_start_counts_the_rows_step_02_trained_on(sft_run):
    cfg, run_dir = sft_run
    written = sft_rows(cfg, run_dir)
    assert len(written) == 3 and written[0]["messages"][-1]["role"] == "assistant"
    (run_dir / "data" / "sft" / "train.jsonl").rename(run_dir / "elsewhere.jsonl")
    assert sft_rows(cfg, run_dir) == written  # a results folder's rows, rebuilt from the knobs: the same rows

    warm = warm_start(cfg, run_dir, ["frozen", "frozen_matched", "trained"])
    assert warm["frozen"] is None and warm["frozen_matched"] is None
    sft = warm["trained"]
    assert (sft["steps"], sft["batch"], sft["rows"]) == (2, 1, 3) and "answer key" in sft["on"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.harness_model))
    answer = written[0]["messages"][-1]["content"]
    one = len(tokenizer(answer)["input_ids"])
    assert 3 * one <= sft["answer_tokens"] <= 3 * (one + 4)  # the answer key's tokens and the turn's end, per row
    asked = sum(len(tokenizer(m["content"])["input_ids"]) for row in written for m in row["messages"][:-1])
    assert asked <= sft["prompt_tokens"] <= asked + 3 * 40  # the prompts' text and the template's role markers

    result = {"n_tasks": 16, "arms": {"frozen_matched": {"budget": 6}, "trained": {"budget": 4}}}
    line = equal_compute_line(result, {"trained": {"planned_training_generations": 20}}, warm)
    assert line.startswith("- **what equal compute matches**: frozen_matched is the frozen operator searched to a "
                           "budget of 6 instead of 4, the trained arm's sampling compute (20 planned training "
                           "generations over 16 tasks, rounded up). It is not given the warm-start: 2 SFT steps on 3 "
                           f"rows whose answers are the answer key (the oracle program, {sft['answer_tokens']:,} answer "
                           "tokens)")
    table = ledger_lines({}, 16, warm)
    assert f"| trained | SFT | {sft['on']} | 2 x 1 | 3 | {sft['prompt_tokens']:,} | {sft['answer_tokens']:,} |" in table
