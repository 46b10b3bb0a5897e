"""The refine and self arms' training data: which harvest programs are kept, where they are written, and that
nothing like the answer key gets in."""

from __future__ import annotations

import hashlib
import json

import pytest

from harness.arm_training import (ANSWER_KEY_SIMILARITY, answer_key_similarity, check_no_oracle, program_record,
                                  self_round_rows, write_self_data)
from harness.config import load_config
from harness.dataset import make_task
from harness.harvest import kept_programs, median_reward, refinement_requests
from harness.oracle import oracle_source, sft_target_source
from harness.run_folder import StepError

WEAK = "def is_legal_action(state, action):\n    return True\n"
BETTER = "def is_legal_action(state, action):\n    return action.startswith('click')\n"
# the shape of a base-model answer in the committed traces (frozen arm): the prompt's names, its own logic
MODEL_LIKE = """def is_legal_action(state, action):
    if action.startswith("click("):
        bid = action[len("click("):-1].strip("'")
        return "[" + bid + "]" in state
    if action.startswith("fill("):
        return "textbox" in state
    return False
"""


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


def row(code, **source):
    """A self-arm training-program record (harness.arm_training.program_record) from a harvest node."""
    return program_record({"round": 1, "kind": "rejection_sampling_sft", "harvest": "self-r1", "task_id": "t",
                           "node": 2, **source}, code, 0.6)


def near_copies() -> dict[str, str]:
    """Programs a model that saw the answer key writes: copies with a comment added, names changed, a line
    dropped, the tail cut off (as the SFT model's truncated answers are)."""
    compact, oracle = sft_target_source("compact"), oracle_source()
    renamed = compact.replace("verb", "kind").replace("args", "params").replace("line", "row")
    dropped = "\n".join(l for l in compact.splitlines() if "zero_size" not in l) + "\n"
    lines = compact.splitlines()
    cut = "\n".join(lines[: len(lines) * 2 // 3]) + "\n        return True\n"
    return {"oracle + comment": oracle + "\n# a comment does not hide it\n", "compact renamed": renamed,
            "compact less a line": dropped, "compact cut at two thirds": cut}


def test_a_program_similar_to_the_answer_key_is_refused_and_named():
    for what, program in near_copies().items():
        score, target = answer_key_similarity(program)
        assert score >= ANSWER_KEY_SIMILARITY, (what, score)
        with pytest.raises(StepError, match=rf"self arm: training program 1 \(round 1, harvest self-r1, task_id t, "
                                            rf"node 7\) is \d\.\d\d similar to the {target} program, the answer key"):
            check_no_oracle([row(BETTER), row(program, node=7)])
    assert answer_key_similarity(oracle_source()) == (1.0, "oracle")
    # programs of the model's own, with the prompt's signature and the page's vocabulary: accepted
    own = [WEAK, BETTER, MODEL_LIKE, "import re\n" + BETTER + "    return bool(re.search('click', action))\n"]
    assert max(answer_key_similarity(p)[0] for p in own) < 0.3
    check_no_oracle([row(p) for p in own])


def test_the_run_refuses_self_rows_with_a_program_similar_to_the_answer_key(tmp_path):
    """write_self_data is what step 03 calls before the self arm's GRPO (and with no training data): a row whose
    program is a near copy of the key fails it, and neither file is written."""
    programs = [row(BETTER), row(near_copies()["compact renamed"], node=4)]
    with pytest.raises(StepError, match=r"training program 1 .* similar to the compact program"):
        write_self_data(tmp_path, "trained", [{"round": 1, "kept": 2}], programs, 0.1, [])
    assert not (tmp_path / "self_data.json").exists() and not (tmp_path / "self_programs.jsonl").exists()


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


def test_a_round_that_keeps_nothing_gives_no_data_and_a_kept_one_gives_its_programs(task, tmp_path):
    cfg = load_config(env={"W8_PRESET": "smoke"})
    none, programs = self_round_rows(cfg, tmp_path, 1, harvest_of(task, [(0.0, True, False, WEAK)]), 0.0)
    assert (none, programs) == (None, [])
    data, programs = self_round_rows(cfg, tmp_path, 1, harvest_of(task, [(0.6, True, False, BETTER)]), 0.1)
    rows = [json.loads(line) for line in (data.sft_dir / "train.jsonl").read_text().splitlines()]
    assert data.sft_dir == tmp_path / "data" / "self-r1" / "sft" and len(rows) == 1
    assert BETTER.strip() in rows[0]["messages"][-1]["content"]
    assert programs == [{"round": 1, "kind": "rejection_sampling_sft", "harvest": "self-r1", "task_id": task.task_id,
                         "node": 0, "reward": 0.6, "gold": False, "model": "smollm2-135m", "page": task.page,
                         "seed": task.seed, "program_sha256": hashlib.sha256(BETTER.encode()).hexdigest(),
                         "code": BETTER}]


def test_self_data_rows_point_at_their_programs_and_one_without_a_harvest_is_refused(tmp_path):
    programs = [row(BETTER), row(WEAK, node=3)]
    path = write_self_data(tmp_path, "trained", [{"round": 1, "kept": 2}], programs, 0.1, [])
    saved = json.loads(path.read_text())
    lines = [json.loads(line) for line in (tmp_path / saved["programs_file"]).read_text().splitlines()]
    assert saved["status"] == "trained" and saved["n_rows"] == 2 and lines == programs
    for source in saved["rows"]:
        program = lines[source["program_row"]]
        assert "code" not in source and source["program_sha256"] == program["program_sha256"]
        assert hashlib.sha256(program["code"].encode()).hexdigest() == source["program_sha256"]
        assert {k: v for k, v in source.items() if k != "program_row"} == {k: v for k, v in program.items()
                                                                           if k != "code"}
    with pytest.raises(StepError, match="1 training row\\(s\\) without a harvest source"):
        write_self_data(tmp_path, "trained", [], programs + [{"round": 1, "task_id": "oracle", "code": WEAK}], 0.1, [])
    empty = write_self_data(tmp_path / "none", "no training data", [{"round": 1, "kept": 0}], [], 0.1, [])
    assert json.loads(empty.read_text())["rows"] == [] and (tmp_path / "none" / "self_programs.jsonl").read_text() == ""


def test_refinement_requests_come_from_the_harvests_own_parents(task):
    harvest = harvest_of(task, [(0.5, True, False, WEAK), (0.7, True, False, BETTER)])
    requests = refinement_requests(harvest)
    assert [r.parent_code for r in requests] == [WEAK] and requests[0].parent_reward == 0.5
