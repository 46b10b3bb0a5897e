"""SkyRL's SFT infra logs land under the run folder (SkyRL's own SFTConfig and bridge), so a failure's tails come home."""

from __future__ import annotations

import pytest

from harness.dataset import PAGE
from harness import records, skyrl_main
from harness.skyrl_config import Lengths, Paths, plan_for, render_sft
from harness.training_data import prepare_training_data
from helpers import REWARD

MODEL = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
LENGTHS = Lengths(prompt_max=1000, conversation_max=2600, answer_max=1400, exact=False, tokenizer="test")


@pytest.fixture(scope="module")
def sft_overrides(tmp_path_factory):
    data = prepare_training_data(8, 8, tmp_path_factory.mktemp("rows"), "oracle", REWARD, 0, PAGE)
    run = tmp_path_factory.mktemp("r3-run")
    paths = Paths(export=str(run / "sft"), logs=str(run / "sft" / "logs"))
    return render_sft(MODEL, plan_for("L4:1", MODEL, data.n_train, 1), data, LENGTHS, paths, steps=1,
                      run_name="r3-test-sft"), paths


@pytest.mark.slow
def test_sft_infra_logs_go_to_the_run_folder_not_skyrls_default(sft_overrides):
    overrides, paths = sft_overrides
    _, default = skyrl_main.sft_configs(overrides, None)
    assert default.trainer.log_path == "/tmp/skyrl-logs"  # the defect: SkyRL's default, never collected
    _, ours = skyrl_main.sft_configs(overrides, paths.logs)
    assert ours.trainer.log_path == paths.logs


def test_sft_entrypoint_takes_the_infra_log_folder(monkeypatch):
    seen = {}
    monkeypatch.setattr(skyrl_main, "main_sft", lambda overrides, metrics, logs=None: seen.update(
        overrides=overrides, metrics=metrics, logs=logs))
    assert skyrl_main.main(["sft", "--metrics", "m.jsonl", "--infra-logs", "/run/sft/logs", "num_steps=1"]) == 0
    assert seen == {"overrides": ["num_steps=1"], "metrics": "m.jsonl", "logs": "/run/sft/logs"}


def test_an_infra_log_under_the_run_folder_is_among_the_failure_tails(tmp_path):
    infra = tmp_path / "sft" / "logs" / "infra-261204_040000.log"
    infra.parent.mkdir(parents=True)
    infra.write_text("vllm engine failed to start\n")
    assert infra in records.failure_logs(tmp_path, ray_logs=tmp_path / "no-ray")
