"""HarnessLegalityEnv: rewards on oracle and broken answers, extras unwrapping as SkyRL delivers them,
rows that cannot be scored, and the training rows' format (SkyRL parquet and SFT chat rows)."""

from __future__ import annotations

import json

import pytest

from harness.dataset import (COMPACT_HARNESS, DATA_SOURCE, ENV_CLASS, SKYRL_COLUMNS, DatasetError,
                             check_skyrl_parquet, examples_of, load_snapshot, make_task, prepare_training_data,
                             skyrl_row, sft_row, write_parquet_rows)
from harness.env import EnvRowError, HarnessLegalityEnv, register_env
from harness.mutation import build_zero_shot_prompt
from harness.oracle import is_legal_action, oracle_source


def fenced(code: str) -> str:
    return "Here is the harness:\n```python\n" + code + "\n```"


@pytest.fixture(scope="module")
def task():
    return make_task("train", 3, 16)


@pytest.fixture(scope="module")
def extras(task):
    row = skyrl_row(task, recall_weight=0.2)
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

    from harness.train_local import resolve_model

    path = write_parquet_rows([skyrl_row(task), skyrl_row(make_task("train", 4, 16))], tmp_path / "train.parquet")
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
    row = skyrl_row(task, recall_weight=0.3, gold_threshold=0.8, timeout_s=1.5)
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
    with pytest.raises(DatasetError, match="unknown SFT target"):
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

    data = prepare_training_data(4, 8, tmp_path)
    assert check_skyrl_parquet(data.train_parquet) == 4 and check_skyrl_parquet(data.eval_parquet) == data.n_eval
    stamp = data.train_parquet.stat().st_mtime_ns
    again = prepare_training_data(4, 8, tmp_path)
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
