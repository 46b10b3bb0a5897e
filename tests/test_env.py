"""HarnessLegalityEnv: rewards on oracle and broken answers, extras unwrapping as SkyRL delivers them,
rows that cannot be scored, and the training rows' format (SkyRL parquet and SFT chat rows)."""

from __future__ import annotations

import json

import pytest

from harness.dataset import PAGE
from harness.dataset import DatasetError, examples_of, load_snapshot, make_task
from harness.env import EnvRowError, HarnessLegalityEnv, register_env
from harness.models import resolve_model
from harness.oracle import COMPACT_HARNESS, is_legal_action, oracle_source
from harness.prompts import build_zero_shot_prompt
from harness.rewards import RewardKnobs
from harness.training_data import (DATA_SOURCE, ENV_CLASS, SKYRL_COLUMNS, check_skyrl_parquet,
                                   prepare_training_data, skyrl_row, sft_row, training_data_for, write_parquet_rows)
from helpers import REWARD, fenced


@pytest.fixture(scope="module")
def task():
    return make_task("train", 3, 16)


@pytest.fixture(scope="module")
def extras(task):
    row = skyrl_row(task, REWARD)
    # what SkyRL's PromptDataset.__getitem__ hands the generator: the row minus prompt and env_class
    return {k: v for k, v in row.items() if k not in ("prompt", "env_class")}


@pytest.mark.parametrize("answer, reward, valid", [
    (fenced(oracle_source()), 1.0, 1.0),
    (fenced(COMPACT_HARNESS), 1.0, 1.0),
    (fenced("def is_legal_action(state, action):\n    return True"), 0.6, 1.0),  # BA 0.5, recall 1
    (fenced("def is_legal_action(state, action):\n    return False"), 0.4, 1.0),  # BA 0.5, recall 0
    (fenced("def is_legal_action(state, action):\n    return 1 / 0"), 0.0, 1.0),  # every example wrong
    (fenced("def is_legal_action(state):\n    return True"), 0.0, 0.0),  # wrong arity
    ("I am sorry, I cannot write code.", 0.0, 0.0),
    (fenced("def is_legal_action(state, action)\n    return True"), 0.0, 0.0),  # syntax error
])
def test_reward_table(extras, answer, reward, valid):
    env = HarnessLegalityEnv(extras=extras)
    out = env.step(answer)
    assert out["done"] is True and out["observations"] == []
    assert out["reward"] == pytest.approx(reward)
    metrics = env.get_metrics()
    assert metrics["valid"] == valid and metrics["reward"] == pytest.approx(reward)
    assert set(metrics) >= {"balanced_accuracy", "effective_recall", "valid", "gold"}
    assert (out["metadata"]["reason"] == "") == bool(valid)


def test_oracle_answer_is_gold_and_broken_answer_says_why(extras):
    env = HarnessLegalityEnv(extras=extras)
    env.step(fenced(oracle_source()))
    assert env.get_metrics()["gold"] == 1.0 and env.get_metrics()["balanced_accuracy"] == 1.0
    out = HarnessLegalityEnv(extras=extras).step("no code here")
    assert out["metadata"]["reason"] and out["metadata"]["task_id"] == extras["extra_info"]["task_id"]


def test_row_through_skyrl_dataset_class_and_skyrl_gym_make(tmp_path, task):
    """The nesting the trainer sees: parquet -> SkyRL's PromptDataset -> generator extras -> skyrl_gym.make."""
    import skyrl_gym
    from skyrl.train.dataset import PromptDataset
    from transformers import AutoTokenizer

    path = write_parquet_rows([skyrl_row(task, REWARD), skyrl_row(make_task("train", 4, 16), REWARD)],
                              tmp_path / "train.parquet")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    dataset = PromptDataset([str(path)], tokenizer, max_prompt_length=4096, num_workers=1)
    assert len(dataset) == 2
    messages, env_class, env_extras, _ = dataset[0]
    assert env_class == ENV_CLASS and messages == build_zero_shot_prompt(task)
    assert "extra_info" in env_extras and isinstance(env_extras["reward_spec"]["ground_truth"], str)
    register_env()
    register_env()  # idempotent
    env = skyrl_gym.make(env_class, env_config={}, extras={**env_extras, "max_turns": 1})
    assert env.row_id == task.task_id and len(env.examples) == len(task.examples)
    assert env.step(fenced(oracle_source()))["reward"] == pytest.approx(1.0)
    # reading our fields flat (the classic all-zero-reward bug) finds nothing: it must raise, not score 0
    with pytest.raises(EnvRowError, match=task.task_id):
        skyrl_gym.make(env_class, env_config={}, extras=env_extras["extra_info"])


@pytest.mark.parametrize("extras, match", [
    ({"extra_info": {"task_id": "train/x/seed1/n8"}}, "train/x/seed1/n8: reward_spec.ground_truth is missing"),
    ({"extra_info": {"task_id": "t2"}, "reward_spec": {"ground_truth": json.dumps({"state": "", "examples": []})}},
     "t2: reward_spec.ground_truth holds no labeled examples"),
    ({"extra_info": json.dumps({"task_id": "t3"}), "reward_spec": {"ground_truth": "{not json"}}, "t3: .*not the examples JSON"),
])
def test_rows_without_examples_fail_naming_the_row(extras, match):
    with pytest.raises(EnvRowError, match=match):
        HarnessLegalityEnv(extras=extras)


def test_skyrl_row_format(task):
    row = skyrl_row(task, RewardKnobs(recall_weight=0.3, gold_threshold=0.8, timeout_s=1.5, sandbox="local"))
    assert tuple(row) == SKYRL_COLUMNS
    assert row["data_source"] == DATA_SOURCE and row["env_class"] == ENV_CLASS
    assert row["prompt"] == build_zero_shot_prompt(task)  # node 0's prompt, exactly
    truth = json.loads(row["reward_spec"]["ground_truth"])
    assert [e["action"] for e in truth["examples"]] == [e.action for e in task.examples]
    assert row["extra_info"]["recall_weight"] == 0.3 and row["extra_info"]["n_examples"] == len(task.examples)


def test_sft_row_format_and_target(task):
    row = sft_row(task, "compact")
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["system", "user", "assistant"]
    assert row["messages"][:2] == build_zero_shot_prompt(task)
    answer = row["messages"][-1]["content"]
    assert answer.startswith("```python\n") and answer.endswith("\n```") and COMPACT_HARNESS.strip() in answer
    assert oracle_source().strip() in sft_row(task, "oracle")["messages"][-1]["content"]
    with pytest.raises(ValueError, match="unknown SFT target"):
        sft_row(task, "nonsense")


def test_compact_target_agrees_with_the_oracle_on_the_snapshot():
    """The compact SFT answer must keep the oracle's verdicts (it stands in for it on small models)."""
    namespace: dict = {}
    exec(COMPACT_HARNESS, namespace)
    compact = namespace["is_legal_action"]
    examples = [e for record in load_snapshot() for e in examples_of(record)]
    disagree = [e.action for e in examples if compact(e.state, e.action) != is_legal_action(e.state, e.action)]
    assert len(examples) > 100 and not disagree, disagree[:5]


def test_training_files_written_once_and_loadable(tmp_path):
    import datasets

    data = prepare_training_data(4, 8, tmp_path, "compact", REWARD, 0, PAGE)
    assert check_skyrl_parquet(data.train_parquet) == 4 and check_skyrl_parquet(data.eval_parquet) == data.n_eval
    stamp = data.train_parquet.stat().st_mtime_ns
    again = prepare_training_data(4, 8, tmp_path, "compact", REWARD, 0, PAGE)
    assert again == data and data.train_parquet.stat().st_mtime_ns == stamp  # reused, not rewritten
    sft = datasets.load_dataset(str(data.sft_dir), split="train")  # how SkyRL's SFT trainer and TRL load it
    assert len(sft) == 4 and sft[0]["messages"][-1]["role"] == "assistant"
    eval_pages = {json.loads(r["reward_spec"]["ground_truth"])["task_id"].split("/")[0]
                  for r in datasets.load_dataset("parquet", data_files=str(data.eval_parquet), split="train")}
    assert eval_pages == {"heldout"}


def test_parquet_with_missing_columns_is_named(tmp_path):
    path = write_parquet_rows([{"prompt": [{"role": "user", "content": "x"}], "env_class": ENV_CLASS}],
                              tmp_path / "bad.parquet")
    with pytest.raises(DatasetError, match=r"bad.parquet lacks column\(s\) data_source, reward_spec, extra_info"):
        check_skyrl_parquet(path)


def test_rows_carry_the_runs_reward_knobs_and_the_env_scores_with_them(tmp_path):
    """The bug this guards: local training built rows with hidden defaults (0.2 / 0.90 / 2.0) whatever
    W8_REWARD_RECALL_WEIGHT said, so GRPO optimised another reward than the search measured."""
    from harness.config import load_config

    cfg = load_config(env={"W8_REWARD_RECALL_WEIGHT": "0.5", "W8_HARNESS_GOLD_THRESHOLD": "0.8",
                           "W8_SANDBOX_TIMEOUT_S": "1.5", "W8_SANDBOX": "local", "W8_TRAIN_COUNT": "2"})
    data = training_data_for(cfg, tmp_path)  # what steps 02 and 03 call, on both backends
    import pyarrow.parquet as pq

    rows = pq.read_table(data.train_parquet).to_pylist()
    assert {(r["extra_info"]["recall_weight"], r["extra_info"]["gold_threshold"], r["extra_info"]["timeout_s"],
             r["extra_info"]["sandbox"]) for r in rows} == {(0.5, 0.8, 1.5, "local")}
    env = HarnessLegalityEnv(extras={k: v for k, v in rows[0].items() if k not in ("prompt", "env_class")})
    out = env.step(fenced("def is_legal_action(state, action):\n    return True"))
    assert out["reward"] == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)  # BA 0.5, recall 1, weighted at 0.5


def test_a_row_without_reward_knobs_is_refused_naming_the_knob(extras):
    info = {k: v for k, v in extras["extra_info"].items() if k != "recall_weight"}
    with pytest.raises(EnvRowError, match="lacks the reward knob 'recall_weight'"):
        HarnessLegalityEnv(extras={**extras, "extra_info": info})


# ---- refinement rows: the search's other prompt -----------------------------------------------------------

PARENT = "def is_legal_action(state, action):\n    return True\n"  # BA 0.5, recall 1: reward 0.6


@pytest.fixture(scope="module")
def parent(task):
    """A real parent: the program scored on the task, and the failures a refinement of it is shown."""
    from harness.failures import failures_to_show
    from harness.rewards import score_harness

    score = score_harness(PARENT, task.examples, REWARD.recall_weight, REWARD.timeout_s, sandbox=REWARD.sandbox)
    return score.reward, failures_to_show(score, task.examples)


def refine_extras(task, parent, bonus=0.2, penalty=0.3, code=PARENT):
    from harness.training_data import refine_row

    row = refine_row(task, code, parent[1], parent[0], REWARD, bonus, penalty, attempt=1,
                     source={"harvest": "refine", "task_id": task.task_id, "node": 3, "parent": 1, "model": "m"})
    return {k: v for k, v in row.items() if k not in ("prompt", "env_class")}


@pytest.mark.parametrize("a, b, same", [
    ("def f(s, a):\n    return True", "def f(s, a):\n    return True", True),
    ("def f(s, a):\n    return True", "def f(s,a):  # always\n\n\n        return True\n", True),  # spacing, comment
    ("def f(s, a):\n    return a == 'x'", 'def f(s, a):\n    return (a == "x")', True),  # quotes, parentheses
    ("def f(s, a):\n    return True", "def f(s, a):\n    return False", False),
    ("def f(s, a):\n    return True", "def f(s, a):\n    '''doc'''\n    return True", False),  # a docstring is code
    ("def f(s, a):\n    x = 1\n    return x", "def f(s, a):\n    y = 1\n    return y", False),  # renames count
    ("def f(s, a)\n    return True", "def f(s, a)\n    return True   \n\n", True),  # no parse: stripped lines
    ("def f(s, a)\n    return True", "def f(s, a)\n    return True  # c", False),
])
def test_program_key_table(a, b, same):
    """What "the parent's program unchanged" means: harness.interface.program_key (ast.unparse)."""
    from harness.interface import program_key

    assert (program_key(a) == program_key(b)) is same


@pytest.mark.parametrize("child, parent_r, child_code, parent_code, reward, improved, identical", [
    (0.9, 0.6, "def f(s, a):\n    return 1", PARENT, 0.9 + 0.2, True, False),  # better: the bonus
    (0.6, 0.6, "def f(s, a):\n    return 1", PARENT, 0.6, False, False),  # as good, not strictly above
    (0.6 + 1e-12, 0.6, "def f(s, a):\n    return 1", PARENT, 0.6 + 1e-12, False, False),  # float noise
    (0.4, 0.6, "def f(s, a):\n    return 0", PARENT, 0.4, False, False),  # worse: the plain reward
    (0.6, 0.6, PARENT, PARENT, 0.6 - 0.3, False, True),  # unchanged: the penalty
    (0.6, 0.6, "def is_legal_action(state, action):  # same\n\n    return True", PARENT, 0.3, False, True),
    (0.7, 0.6, PARENT, PARENT, 0.7 - 0.3, False, True),  # unchanged never counts as better (a flaky parent)
    (0.0, 0.6, "", PARENT, 0.0, False, False),  # no code at all: invalid, not "unchanged"
    (0.0, 0.0, "", "", 0.0, False, False),  # an empty parent and an empty child: nothing was repeated
    (0.2, 0.0, "def f(s, a):\n    return 1 / 0", "", 0.2 + 0.2, True, False),  # a parent without code, beaten
])
def test_refinement_reward_table(child, parent_r, child_code, parent_code, reward, improved, identical):
    from harness.rewards import refinement_reward

    out = refinement_reward(child, parent_r, child_code, parent_code, bonus=0.2, penalty=0.3)
    assert out.reward == pytest.approx(reward) and out.child_reward == child
    assert (out.improved, out.identical) == (improved, identical)


def test_refine_row_format(task, parent):
    from harness.prompts import build_refine_prompt
    from harness.training_data import ZERO_SHOT_FIELDS, refine_row

    row = refine_row(task, PARENT, parent[1], parent[0], REWARD, 0.2, 0.3, attempt=2,
                     source={"harvest": "refine", "node": 4})
    zero = skyrl_row(task, REWARD)
    assert tuple(row) == SKYRL_COLUMNS and row["env_class"] == ENV_CLASS
    assert row["prompt"] == build_refine_prompt(task, PARENT, parent[1], 2)  # the search's prompt, exactly
    assert "return True" in row["prompt"][1]["content"] and len(parent[1]) == 5
    assert row["reward_spec"] == zero["reward_spec"]  # the task's own examples
    info = row["extra_info"]
    assert list(info) == list(zero["extra_info"])  # one set of fields, in one order, for both kinds
    assert {k: info[k] for k in ZERO_SHOT_FIELDS} == {
        "prompt_kind": "refine", "parent_code": PARENT, "parent_reward": pytest.approx(0.6), "improvement_bonus": 0.2,
        "identical_penalty": 0.3, "attempt": 2, "source": json.dumps({"harvest": "refine", "node": 4}, sort_keys=True)}
    assert {k: v for k, v in info.items() if k not in ZERO_SHOT_FIELDS} == \
        {k: v for k, v in zero["extra_info"].items() if k not in ZERO_SHOT_FIELDS}
    assert zero["extra_info"]["prompt_kind"] == "zero_shot" and zero["extra_info"]["parent_reward"] == -1.0
    with pytest.raises(DatasetError, match=r"parent_reward None is not a reward in \[0, 1\]"):
        refine_row(task, PARENT, parent[1], None, REWARD, 0.2, 0.3)


def test_zero_shot_and_refinement_parquets_share_one_schema_and_round_trip(tmp_path, task, parent):
    """pyarrow infers a struct per file: a zero-shot file, a refinement file and a mix must come out with one
    schema (SkyRL's PromptDataset concatenates its files), and every field must survive the round trip."""
    import pyarrow.parquet as pq
    from skyrl.train.dataset import PromptDataset
    from transformers import AutoTokenizer

    from harness.training_data import refine_row

    zero = [skyrl_row(task, REWARD), skyrl_row(make_task("train", 4, 16), REWARD)]
    refine = [refine_row(task, PARENT, parent[1], parent[0], REWARD, 0.2, 0.3, attempt=a, source={"node": a})
              for a in (0, 1)]
    paths = {name: write_parquet_rows(rows, tmp_path / f"{name}.parquet")
             for name, rows in (("zero", zero), ("refine", refine), ("mixed", zero + refine))}
    schemas = {name: pq.read_schema(path) for name, path in paths.items()}
    assert schemas["zero"] == schemas["refine"] == schemas["mixed"]
    assert pq.read_table(paths["mixed"]).to_pylist() == zero + refine
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    dataset = PromptDataset([str(paths["zero"]), str(paths["refine"])], tokenizer, max_prompt_length=8192,
                            num_workers=1)
    assert [dataset[i][2]["extra_info"]["prompt_kind"] for i in range(4)] == ["zero_shot"] * 2 + ["refine"] * 2
    assert dataset[3][2]["extra_info"] == refine[1]["extra_info"]


def test_mixed_rows_share_determinism_and_a_short_pool(task, parent):
    from harness.training_data import mixed_rows, refine_row, row_prompt_kind

    zero = [skyrl_row(make_task("train", s, 8), REWARD) for s in range(10)]
    refine = [refine_row(task, PARENT, parent[1], parent[0], REWARD, 0.2, 0.2, attempt=a) for a in range(6)]
    rows, info = mixed_rows(zero, refine, 0.3, 10, seed=0)
    assert [row_prompt_kind(r) for r in rows].count("refine") == 3 == info["n_refine"] and len(rows) == 10
    assert info == {"n_rows": 10, "n_refine": 3, "n_zero_shot": 7, "refine_wanted": 3, "refine_short": 0, "note": ""}
    assert mixed_rows(zero, refine, 0.3, 10, seed=0)[0] == rows  # deterministic
    assert mixed_rows(zero, refine, 0.3, 10, seed=1)[0] != rows
    assert len({json.dumps(r, sort_keys=True) for r in rows}) == 10  # no row twice
    rows, info = mixed_rows(zero, refine, 0.8, 10, seed=0)  # 8 wanted, 6 in the pool
    assert (info["n_refine"], info["n_zero_shot"], info["refine_short"]) == (6, 4, 2)
    assert info["note"] == "the refinement pool holds 6 rows: 6 of the 8 wanted (0.8 x 10), the other 2 zero-shot"
    assert [row_prompt_kind(r) for r in mixed_rows(zero, refine, 0.0, 5, 0)[0]] == ["zero_shot"] * 5
    with pytest.raises(DatasetError, match="mixed rows: 12 zero-shot rows needed .* the zero-shot pool holds 10"):
        mixed_rows(zero, [], 0.5, 12, 0)


def test_env_on_a_refinement_row_adds_the_bonus_and_the_penalty(task, parent):
    extras = refine_extras(task, parent, bonus=0.2, penalty=0.3)
    env = HarnessLegalityEnv(extras=extras)
    out = env.step(fenced(oracle_source()))
    assert out["reward"] == pytest.approx(1.0 + 0.2)  # the oracle beats the parent's 0.6
    m = env.get_metrics()
    assert (m["child_reward"], m["improved"], m["identical"], m["refine"]) == (pytest.approx(1.0), 1.0, 0.0, 1.0)
    assert m["reward"] == out["reward"] and m["parent_reward"] == pytest.approx(parent[0])
    assert out["metadata"]["prompt_kind"] == "refine"
    same = "def is_legal_action(state, action):\n    # nothing to fix\n    return True"
    out = HarnessLegalityEnv(extras=extras).step(fenced(same))  # the parent again, a comment added
    assert out["reward"] == pytest.approx(parent[0] - 0.3) and out["metadata"]["identical"] == 1.0
    out = HarnessLegalityEnv(extras=extras).step(fenced("def is_legal_action(state, action):\n    return False"))
    assert out["reward"] == pytest.approx(0.4) and out["metadata"]["improved"] == 0.0  # worse: plain reward
    out = HarnessLegalityEnv(extras=extras).step("no code")
    assert out["reward"] == 0.0 and out["metadata"]["identical"] == 0.0


def test_zero_shot_metrics_mark_the_kind_and_carry_no_refinement_fields(extras):
    env = HarnessLegalityEnv(extras=extras)
    out = env.step(fenced(oracle_source()))
    assert out["reward"] == pytest.approx(1.0) and out["metadata"]["prompt_kind"] == "zero_shot"
    assert env.get_metrics()["refine"] == 0.0 and not {"improved", "identical", "child_reward"} & set(env.get_metrics())


@pytest.mark.parametrize("change, match", [
    ({"prompt_kind": "refinement"}, r"prompt_kind='refinement', expected one of zero_shot, refine"),
    ({"parent_reward": None}, "refinement row with parent_reward=None, expected a number"),
    ({"parent_reward": 1.5}, r"parent_reward 1.5 outside \[0, 1\]"),
])
def test_a_refinement_row_the_env_cannot_score_is_refused_naming_the_row(task, parent, change, match):
    extras = refine_extras(task, parent)
    broken = {**extras, "extra_info": {**extras["extra_info"], **change}}
    with pytest.raises(EnvRowError, match=f"row {task.task_id}: .*{match}"):
        HarnessLegalityEnv(extras=broken)
    info = {k: v for k, v in extras["extra_info"].items() if k != "identical_penalty"}
    with pytest.raises(EnvRowError, match="lacks 'identical_penalty'"):
        HarnessLegalityEnv(extras={**extras, "extra_info": info})
