"""The refine and self arms' training data: which harvest programs are kept, and that no answer key gets in."""

from __future__ import annotations

import json

import pytest

from harness.arm_training import check_no_oracle, self_round_rows, write_self_data
from harness.config import load_config
from harness.dataset import make_task
from harness.harvest import kept_programs, median_reward, refinement_requests
from harness.oracle import oracle_source, sft_target_source
from harness.pipeline import StepError

WEAK = "def is_legal_action(state, action):\n    return True\n"
BETTER = "def is_legal_action(state, action):\n    return action.startswith('click')\n"


def harvest_of(task, nodes):
    """A harvest record as harness.harvest writes it: one train-page search whose nodes are given as
    (reward, valid, gold, code[, balanced accuracy]); the balanced accuracy defaults to 0.75."""
    return {"name": "self-r1", "model": "smollm2-135m",
            "traces": [{"task": {"task_id": task.task_id, "split": "train", "seed": task.seed,
                                 "examples_per_obs": len(task.examples), "examples_hash": task.examples_hash},
                        "nodes": [{"index": i, "parent": None if i == 0 else 0, "reward": n[0], "valid": n[1],
                                   "gold": n[2], "code": n[3], "balanced_accuracy": (n + (0.75,))[4],
                                   "failures": [], "shown": []} for i, n in enumerate(nodes)]}]}


@pytest.fixture(scope="module")
def task():
    return make_task("train", 3, 8)


def test_the_answer_key_is_refused_and_named(task):
    for target, program in (("oracle", oracle_source()), ("compact", sft_target_source("compact"))):
        with pytest.raises(StepError, match=f"self arm: round 1 row 0 is the {target} program .*never train on"):
            check_no_oracle([program + "\n# a comment does not hide it\n"], ["round 1 row 0"])
    check_no_oracle([WEAK, BETTER], ["a", "b"])  # programs of the model's own: accepted


def test_gold_programs_win_else_the_top_quarter_above_the_base_median(task):
    nodes = [(0.5, True, False, WEAK), (0.7, True, False, BETTER), (0.2, True, False, WEAK + "# x"),
             (0.0, False, False, "def broken(")]
    harvest = harvest_of(task, nodes)
    assert median_reward(harvest) == pytest.approx(0.35)
    kept = kept_programs(harvest, floor=0.35)
    assert [k.code for k in kept] == [BETTER] and kept[0].source["node"] == 1
    assert kept_programs(harvest, floor=0.7) == []  # nothing strictly above the floor
    gold = harvest_of(task, nodes + [(0.95, True, True, BETTER + "# gold")])
    assert [k.gold for k in kept_programs(gold, floor=0.99)] == [True]  # gold counts whatever the floor


def test_a_constant_answer_is_never_kept_however_high_its_reward(task):
    # the composite reward pays a constant answer: `return True` scores 0.6 (balanced accuracy 0.5, recall 1),
    # `return False` 0.4; above a median of 0 and at the top of the harvest, it still teaches nothing
    always_false = "def is_legal_action(state, action):\n    return action in (None, 'None')\n"
    harvest = harvest_of(task, [(0.6, True, False, WEAK, 0.5), (0.4, True, False, always_false, 0.5),
                                (0.0, False, False, "")] * 3)
    assert median_reward(harvest) == pytest.approx(0.4) and kept_programs(harvest, floor=0.0) == []
    better = harvest_of(task, [(0.6, True, False, WEAK, 0.5), (0.52, True, False, BETTER, 0.583)])
    assert [k.code for k in kept_programs(better, floor=0.0)] == [BETTER]  # lower reward, but it discriminates


def test_a_round_that_keeps_nothing_gives_no_data_and_a_kept_one_points_at_its_rows(task, tmp_path):
    cfg = load_config(env={"W8_PRESET": "smoke"})
    none, sources = self_round_rows(cfg, tmp_path, 1, harvest_of(task, [(0.0, True, False, WEAK)]), 0.0)
    assert (none, sources) == (None, [])
    data, sources = self_round_rows(cfg, tmp_path, 1, harvest_of(task, [(0.6, True, False, BETTER)]), 0.1)
    rows = [json.loads(line) for line in (data.sft_dir / "train.jsonl").read_text().splitlines()]
    assert data.sft_dir == tmp_path / "data" / "self-r1" / "sft" and len(rows) == 1
    assert BETTER.strip() in rows[0]["messages"][-1]["content"]
    assert sources == [{"round": 1, "kind": "rejection_sampling_sft", "harvest": "self-r1", "task_id": task.task_id,
                        "node": 0, "reward": 0.6, "gold": False, "model": "smollm2-135m"}]


def test_self_data_lists_every_row_and_refuses_one_without_a_harvest(tmp_path):
    rows = [{"round": 1, "harvest": "self-r1", "task_id": "t", "node": 2, "reward": 0.6}]
    path = write_self_data(tmp_path, "trained", [{"round": 1, "kept": 1}], rows, 0.1, [])
    saved = json.loads(path.read_text())
    assert saved["status"] == "trained" and saved["n_rows"] == 1 and saved["rows"] == rows
    with pytest.raises(StepError, match="1 training row\\(s\\) without a harvest source"):
        write_self_data(tmp_path, "trained", [], rows + [{"round": 1, "task_id": "oracle"}], 0.1, [])


def test_refinement_requests_come_from_the_harvests_own_parents(task):
    harvest = harvest_of(task, [(0.5, True, False, WEAK), (0.7, True, False, BETTER)])
    requests = refinement_requests(harvest)
    assert [r.parent_code for r in requests] == [WEAK] and requests[0].parent_reward == 0.5
