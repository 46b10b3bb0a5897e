"""Rendered SkyRL overrides validated by SkyRL's own config classes (GRPO and SFT), offline on a CPU."""

from __future__ import annotations

import pytest

from harness.dataset import PAGE
from harness.config import load_config
from harness.training_data import prepare_training_data
from helpers import REWARD
from harness.hparams import SKYRL
from harness.skyrl_config import (Lengths, Paths, SkyRLConfigError, check_budget, parse_accelerator,
                                  paths_for, plan_for, render_all, render_grpo, render_sft, validate_grpo,
                                  validate_overrides, validate_sft)

MODEL = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
BUDGET = 2560
LENGTHS = Lengths(prompt_max=1000, conversation_max=2600, answer_max=1400, exact=False, tokenizer="test")
PATHS = Paths(export="/tmp/w8-test/grpo", logs="/tmp/w8-test/grpo/logs")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_training_data(64, 8, tmp_path_factory.mktemp("rows"), "oracle", REWARD, 0, PAGE)


def render(data, accelerator, lengths=LENGTHS, n_train=None, nodes=1, max_steps=0):
    plan = plan_for(accelerator, MODEL, data.n_train if n_train is None else n_train, nodes)
    return (render_grpo(MODEL, plan, data, lengths, PATHS, epochs=2, budget=BUDGET, max_steps=max_steps,
                        run_name="r3-test"),
            render_sft(MODEL, plan, data, lengths, PATHS, steps=20, run_name="r3-test-sft"))


@pytest.mark.slow
@pytest.mark.parametrize("accelerator, gpus, cpu_offload", [
    ("A100:8", 8, False), ("H100:8", 8, False), ("L4:1", 1, True), ("A100-80GB:4", 4, False), ("A100:1", 1, True),
])
def test_rendered_overrides_pass_skyrl_validation(data, accelerator, gpus, cpu_offload, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    grpo, sft = render(data, accelerator)
    summary = validate_overrides(grpo, sft, LENGTHS, BUDGET)
    assert summary["gpus"] == gpus == summary["engines"] * summary["tp"]
    assert summary["logger"] == "console" and summary["max_prompt_length"] >= LENGTHS.prompt_max
    assert summary["train_batch_size"] % summary["mini_batch"] == 0
    assert (summary["mini_batch"] * SKYRL.group_size // gpus) % summary["micro"] == 0
    assert f"trainer.policy.fsdp_config.cpu_offload={'true' if cpu_offload else 'false'}" in grpo
    assert "trainer.hf_save_interval=0" not in grpo and any(o.startswith("trainer.export_path=") for o in grpo)


@pytest.mark.slow
def test_wrong_key_is_rejected_with_skyrls_message(data):
    grpo, sft = render(data, "A100:8")
    with pytest.raises(SkyRLConfigError, match=r"Invalid fields \{'polcy'\} for TrainerConfig"):
        validate_grpo(grpo + ["trainer.polcy.optimizer_config.lr=1e-6"])
    with pytest.raises(SkyRLConfigError, match="SFT overrides: .*Invalid fields"):
        validate_sft(sft + ["optimizer_config.learning_rate=1e-5"])


@pytest.mark.slow
def test_impossible_combinations_fail_with_skyrls_checks(data):
    grpo, sft = render(data, "A100:8")
    with pytest.raises(SkyRLConfigError, match="must be the same when colocating"):
        validate_grpo(grpo + ["generator.inference_engine.num_engines=4"])
    with pytest.raises(SkyRLConfigError, match="divisible by policy_mini_batch_size"):
        validate_grpo(grpo + ["trainer.policy_mini_batch_size=24"])
    with pytest.raises(SkyRLConfigError, match="must be divisible by data-parallel size"):
        validate_sft(sft + ["batch_size=12"])
    with pytest.raises(SkyRLConfigError, match=r"has 64 rows < trainer.train_batch_size=128"):
        validate_grpo(grpo + ["trainer.train_batch_size=128", "trainer.policy_mini_batch_size=64"])
    long_prompts = Lengths(prompt_max=5000, conversation_max=2600, answer_max=1400, exact=True, tokenizer="qwen")
    with pytest.raises(SkyRLConfigError, match="longest prompt is 5000 tokens .* SkyRL would drop it"):
        validate_grpo(grpo, long_prompts)
    with pytest.raises(SkyRLConfigError, match="no global_step_N/policy export"):
        validate_grpo(grpo + ["trainer.hf_save_interval=-1"])
    with pytest.raises(SkyRLConfigError, match="max_generate_length=4096 but the search answers in "
                                               "W8_OPERATOR_MAX_NEW_TOKENS=2560"):
        validate_grpo(grpo + ["generator.sampling_params.max_generate_length=4096"], budget=BUDGET)


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_several_nodes_of_8_gpus_place_everything_on_every_gpu(data, nodes, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    grpo, sft = render(data, "A100:8", nodes=nodes, max_steps=3)
    summary = validate_overrides(grpo, sft, LENGTHS, BUDGET)
    assert summary["nodes"] == nodes and summary["engines"] * summary["tp"] == 8 * nodes
    assert f"trainer.placement.ref_num_nodes={nodes}" in grpo and f"placement.num_nodes={nodes}" in sft
    assert "trainer.max_training_steps=3" in grpo and "trainer.hf_save_interval=1" in grpo


def test_node_counts_the_placement_cannot_serve_are_named():
    with pytest.raises(SkyRLConfigError, match="W8_NUM_NODES=3 x A100:8 = 24 GPUs: use a node count"):
        plan_for("A100:8", MODEL, 512, 3)
    with pytest.raises(SkyRLConfigError, match="raise W8_TRAIN_COUNT to >= 8"):
        plan_for("A100:8", MODEL, 2, 4)


def test_one_token_budget_must_hold_the_sft_answer():
    check_budget(1400, LENGTHS)
    with pytest.raises(SkyRLConfigError, match=r"W8_OPERATOR_MAX_NEW_TOKENS=512 < the SFT answer's 1400 tokens "
                                               r"\(estimated: test tokens x 1.25\).*raise it to >= 1536"):
        check_budget(512, LENGTHS)


def test_exports_go_to_the_bucket_with_w8_bucket(tmp_path):
    local = paths_for(load_config(env={}), tmp_path / "r3-a", "grpo")
    assert local.export == str(tmp_path / "r3-a" / "grpo") and local.ckpt.endswith("grpo/ckpt")
    cfg = load_config(env={"W8_BACKEND": "skyrl", "W8_NUM_NODES": "2", "W8_BUCKET": "gs://b/p/"})
    remote = paths_for(cfg, tmp_path / "r3-a", "sft")
    assert remote.export == "gs://b/p/r3-a/sft" and remote.logs == str(tmp_path / "r3-a" / "sft" / "logs")


@pytest.mark.slow
def test_render_all_follows_the_knobs(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = load_config(env={"W8_PRESET": "gpu-smoke"})
    rendered = render_all(cfg, cfg.harness_model, tmp_path / "r3-x", data_dir=tmp_path / "rows", lengths=LENGTHS)
    assert "generator.sampling_params.max_generate_length=2560" in rendered.grpo
    assert "trainer.max_training_steps=1" in rendered.grpo and "num_steps=1" in rendered.sft
    assert f"trainer.log_path={tmp_path / 'r3-x' / 'grpo' / 'logs'}" in rendered.grpo
    monkeypatch.setenv("WANDB_API_KEY", "k")
    assert "trainer.logger=wandb" in render_all(cfg, cfg.harness_model, tmp_path / "r3-x", tmp_path / "rows",
                                                LENGTHS).grpo
    # W8_TRAIN_SEED seeds both SkyRL trainers, and SkyRL's own config classes take the keys
    seeded = render_all(cfg.replace(train_seed=3), cfg.harness_model, tmp_path / "r3-x", tmp_path / "rows", LENGTHS)
    assert "trainer.seed=3" in seeded.grpo and "seed=3" in seeded.sft and "trainer.seed=0" in rendered.grpo
    validate_overrides(seeded.grpo, seeded.sft, LENGTHS, 2560)


@pytest.mark.slow
def test_local_model_dir_without_config_json_is_named(data, tmp_path):
    grpo, _ = render(data, "L4:1")
    with pytest.raises(SkyRLConfigError, match=f"{tmp_path} has no config.json"):
        validate_grpo(grpo + [f"trainer.policy.model.path={tmp_path}"])


@pytest.mark.parametrize("spec, message", [
    ("T4:1", "pre-Ampere"), ("V100:8", "pre-Ampere"), ("Z9000:8", "unknown GPU Z9000"),
    ("A100:3", "3 GPUs"), ("A100:0.5", "whole count"), ("", "expected <GPU>:<count>"),
])
def test_accelerators_skyrl_cannot_use(spec, message):
    with pytest.raises(SkyRLConfigError, match=message):
        parse_accelerator(spec)


def test_plan_sizes_follow_the_node_and_the_rows():
    big = plan_for("H100:8", MODEL, 512, 1)
    assert (big.train_batch_size, big.num_engines, big.tensor_parallel, big.cpu_offload) == (64, 8, 1, False)
    small = plan_for("A100:8", MODEL, 6, 1)
    assert small.train_batch_size == 4 and small.train_batch_size <= 6  # never more than the rows
    assert plan_for("L4:2", "Qwen/Qwen2.5-Coder-7B-Instruct", 64, 1).tensor_parallel == 2
    with pytest.raises(SkyRLConfigError, match="needs tensor parallel"):
        plan_for("L4:1", "Qwen/Qwen2.5-Coder-7B-Instruct", 64, 1)
    four = plan_for("A100:8", MODEL, 512, 4)
    assert (four.total_gpus, four.num_engines, four.train_batch_size) == (32, 32, 256)
