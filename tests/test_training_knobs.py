"""The training knobs that give GRPO a chance: range-checked with their names, applied over the backend's
hyperparameters and recorded; SFT rows apart from GRPO prompts; the scratch folder; the search plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.dataset import PAGE
from harness.config import ConfigError, load_config
from harness.hparams import LOCAL, SKYRL, for_config, hparams_record
from harness.rewards import RewardKnobs
from harness.train_local import scratch_dir
from harness.traces import planned_arms, search_plan
from harness.training_data import prepare_training_data, sft_target_label, sft_target_of_config

REWARD = RewardKnobs(0.2, 0.9, 2.0, "local")


@pytest.mark.parametrize("env, message", [
    ({"W8_GRPO_GROUP_SIZE": "1"}, "W8_GRPO_GROUP_SIZE='1': expected 'auto'"),
    ({"W8_GRPO_GROUP_SIZE": "four"}, "W8_GRPO_GROUP_SIZE='four': expected 'auto'"),
    ({"W8_GRPO_LR": "0.5"}, "W8_GRPO_LR='0.5': expected 'auto'"),
    ({"W8_GRPO_TEMPERATURE": "0"}, "W8_GRPO_TEMPERATURE='0': expected 'auto'"),
    ({"W8_GRPO_KL_COEF": "-0.1"}, "W8_GRPO_KL_COEF='-0.1': expected 'auto'"),
    ({"W8_SFT_COUNT": "-2"}, "W8_SFT_COUNT='-2': expected an integer >= 0"),
    ({"W8_SFT_TARGET": "pool"}, "W8_SFT_TARGET='pool': expected one of auto | oracle | compact"),
    ({"W8_SFT_COUNT": "4", "W8_HARNESS_SFT_STEPS": "0"}, "W8_SFT_COUNT=4 with W8_HARNESS_SFT_STEPS=0"),
])
def test_bad_training_knob_names_its_variable(env, message):
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    assert str(err.value).startswith(message)


def test_grpo_knobs_override_the_backend_table_and_are_recorded():
    assert for_config(load_config(env={})) == LOCAL
    assert for_config(load_config(env={"W8_BACKEND": "skyrl"})) == SKYRL
    cfg = load_config(env={"W8_GRPO_GROUP_SIZE": "6", "W8_GRPO_LR": "2e-5", "W8_GRPO_TEMPERATURE": "auto",
                           "W8_GRPO_KL_COEF": "0.01"})
    hp = for_config(cfg)
    assert (hp.group_size, hp.grpo_lr, hp.grpo_temperature, hp.kl_coef) == (6, 2e-5, LOCAL.grpo_temperature, 0.01)
    record = hparams_record(cfg)
    assert record["group_size"] == 6 and record["set_by_knob"] == ["group_size", "grpo_lr", "kl_coef"]
    assert json.loads(json.dumps(record)) == record  # run_config.json holds it as is


def test_sft_rows_apart_from_grpo_prompts(tmp_path):
    data = prepare_training_data(4, 8, tmp_path, "compact", REWARD, 2, PAGE)
    rows = (data.sft_dir / "train.jsonl").read_text().splitlines()
    assert data.n_train == 4 and len(rows) == 2
    same = prepare_training_data(4, 8, tmp_path / "b", "compact", REWARD, 0, PAGE)
    assert len((same.sft_dir / "train.jsonl").read_text().splitlines()) == 4  # 0: the GRPO prompts' tasks
    page = {"W8_SPLIT": "page"}  # the target by name; under the rule split it is that program without H (below)
    assert sft_target_of_config(load_config(env=page)) == "compact"
    assert sft_target_of_config(load_config(env={**page, "W8_BACKEND": "skyrl"})) == "oracle"
    assert sft_target_of_config(load_config(env={**page, "W8_BACKEND": "skyrl", "W8_SFT_TARGET": "compact"})) == "compact"
    assert sft_target_label(load_config(env={})) == "compact without pointer, fill_editable"


def test_scratch_folder_is_emptied_at_start_and_removed_on_error(tmp_path):
    left = tmp_path / ".scratch"
    left.mkdir()
    (left / "stale.bin").write_bytes(b"x")  # what a kill -9 leaves
    with pytest.raises(RuntimeError):
        with scratch_dir(tmp_path) as path:
            assert path == left and not (path / "stale.bin").exists()
            raise RuntimeError("trainer crashed")
    assert not left.exists()


def test_search_plan_counts_arms_tasks_seeds_and_estimates_gpu_minutes_only_on_skyrl():
    cfg = load_config(env={"W8_HARNESS_SFT_STEPS": "2", "W8_GRPO_ONLY_ARM": "1", "W8_TRACE_TASKS": "3",
                           "W8_TRACE_SEEDS": "2", "W8_TRACE_MAX_ITERATIONS": "4"})
    plan = search_plan(cfg)
    assert plan["arms"] == ["frozen", "sft", "repair_sft", "trained", "grpo_only"] and plan["searches"] == 30
    assert plan["max_operator_calls"] == 30 * 5 and plan["gpu_minutes_estimate"] is None
    assert planned_arms(load_config(env={})) == ["frozen", "repair_sft", "trained"]  # the rule split: repair
    gpu = search_plan(load_config(env={"W8_PRESET": "gcp"}))
    assert gpu["gpu_minutes_estimate"] > 0 and "grpo_only" in gpu["arms"]


def test_grpo_knobs_reach_the_skyrl_overrides(tmp_path):
    from harness.skyrl_config import Lengths, render_all

    cfg = load_config(env={"W8_BACKEND": "skyrl", "W8_TRAIN_COUNT": "16", "W8_HARNESS_SFT_STEPS": "2",
                           "W8_GRPO_GROUP_SIZE": "4", "W8_GRPO_LR": "3e-6", "W8_GRPO_TEMPERATURE": "0.7",
                           "W8_GRPO_KL_COEF": "0", "W8_OPERATOR_MAX_NEW_TOKENS": "2560", "W8_ACCELERATORS": "A100:8"})
    rendered = render_all(cfg, "Qwen/Qwen2.5-Coder-1.5B-Instruct", tmp_path / "run", tmp_path / "data",
                          lengths=Lengths(prompt_max=1500, conversation_max=2800, answer_max=1300, exact=True,
                                          tokenizer="test"))
    for line in ("generator.n_samples_per_prompt=4", "trainer.policy.optimizer_config.lr=3e-06",
                 "generator.sampling_params.temperature=0.7", "trainer.algorithm.kl_loss_coef=0.0"):
        assert line in rendered.grpo, line
