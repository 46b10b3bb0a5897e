"""SkyRL's own code paths on the CPU, faked only where a GPU is needed (the vLLM engines, the FSDP trainer).

(a) SkyRL's SkyRLGymGenerator (our HarnessGenerator subclass) on real PromptDataset rows, a fake
    inference client answering the oracle, garbage and a cut program: the real env's rewards,
    SkyRL's environment/* metrics, our harness/* metrics, MetricsLog -> summarize_skyrl_metrics;
(b) harness.skyrl_main's GRPO entrypoint through a real local Ray: the env registers inside the
    Ray worker that trains (the GPU trainer faked in tests/fake_gpu/sitecustomize.py);
(c) SFT rows through SkyRL's own SFT tokenization with the rendered max_length: no row dropped,
    the whole answer trained on;
(d) summarize_skyrl_metrics fed SkyRL's real key names (timing/step is the step time, not the index);
plus the training guard against a broken sandbox and against batches with no valid program.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from harness.dataset import PAGE
from harness import sandbox, sandbox_local
from harness.dataset import make_task
from harness.env import register_env
from harness.metrics import skyrl_step_record, summarize_skyrl_metrics
from harness.models import resolve_model
from harness.rewards import score_harness
from harness.skyrl_main import MetricsLog, TrainingGuardError, group_stats, harness_generator_class
from harness.training_data import ENV_CLASS, prepare_training_data, skyrl_row, write_parquet_rows
from helpers import REWARD
from skyrl_fakes import GARBAGE, ORACLE, TRUNCATED, FakeInferenceClient, fenced

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    tasks = [make_task("train", 3, 12), make_task("train", 5, 12)]
    path = write_parquet_rows([skyrl_row(t, REWARD) for t in tasks], tmp_path_factory.mktemp("rows") / "t.parquet")
    return tasks, path


def skyrl_batch(path, tokenizer, n_samples: int):
    """Real SkyRL: PromptDataset -> collate -> prepare_generator_input, as RayPPOTrainer.train does."""
    from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_sampling_params_for_backend
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.dataset import PromptDataset
    from skyrl.train.generators.utils import prepare_generator_input

    cfg = SkyRLTrainConfig.from_cli_overrides(["trainer.max_prompt_length=4096"])  # generator.max_input_length
    dataset = PromptDataset([str(path)], tokenizer, max_prompt_length=4096, num_workers=1)
    prompts = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    batch, uids = prepare_generator_input(prompts, n_samples, get_sampling_params_for_backend(
        "vllm", cfg.generator.sampling_params), ENV_CLASS, "train", 1)
    return cfg, batch, uids


def generator_with(cfg, tokenizer, answers, no_valid="stop", guard_path=None):
    register_env()
    return harness_generator_class(no_valid, guard_path)(generator_cfg=cfg.generator, skyrl_gym_cfg=cfg.environment.skyrl_gym,
                                     inference_engine_client=FakeInferenceClient(tokenizer, answers),
                                     tokenizer=tokenizer)


def test_skyrl_generator_on_real_rows_fake_inference_scores_and_reports(rows, tokenizer, tmp_path):
    tasks, path = rows
    cfg, batch, uids = skyrl_batch(path, tokenizer, n_samples=4)
    out = asyncio.run(generator_with(cfg, tokenizer, [ORACLE, GARBAGE, TRUNCATED, ORACLE]).generate(
        batch, disable_tqdm=True))
    oracle_rewards = [score_harness(ORACLE.split("\n", 1)[1].rsplit("```", 1)[0], t.examples).reward for t in tasks]
    rewards = [sum(r) for r in out["rewards"]]  # SkyRL hands them on per token: the reward sits on the last one
    assert rewards == pytest.approx([oracle_rewards[0], 0, 0, oracle_rewards[0], oracle_rewards[1], 0, 0,
                                     oracle_rewards[1]])
    assert min(oracle_rewards) > 0.9
    metrics = out["rollout_metrics"]
    assert metrics["environment/valid"] == pytest.approx(0.5)  # SkyRL's aggregation of our env metrics
    assert metrics["environment/sandbox_failed"] == 0.0
    assert metrics["harness/zero_variance_groups"] == 0.0 and metrics["harness/groups"] == 2.0
    assert metrics["harness/valid_rate"] == pytest.approx(0.5)
    # the trainer would log these with its own keys; MetricsLog -> metrics.json keeps them per step
    from skyrl.train.utils.callbacks import CallbackInput

    log = MetricsLog(tmp_path / "metrics.jsonl")
    logs = {**metrics, "reward/avg_raw_reward": sum(rewards) / 8, "timing/step": 12.5,
            "timing/generate": 7.0, "policy/final_loss": 0.3, "trainer/global_step": 1}
    log.on_log(None, CallbackInput(global_step=1, epoch=0, total_steps=1, steps_per_epoch=1, logs=logs), None)
    summarize_skyrl_metrics(tmp_path / "metrics.jsonl", tmp_path, "grpo")
    [step] = json.loads((tmp_path / "metrics.json").read_text())["steps"]
    assert step["valid_rate"] == pytest.approx(0.5) and step["zero_variance_groups"] == 0.0
    assert step["step_time_s"] == 12.5 and step["timing"]["generate"] == 7.0 and step["loss"] == 0.3
    assert (tmp_path / "metrics.png").is_file()


def test_guard_stops_when_no_program_is_valid(rows, tokenizer):
    _, path = rows
    cfg, batch, _ = skyrl_batch(path, tokenizer, n_samples=2)
    generator = generator_with(cfg, tokenizer, [GARBAGE, TRUNCATED])
    asyncio.run(generator.generate(batch, disable_tqdm=True))  # the first empty batch may be bad luck
    with pytest.raises(TrainingGuardError, match="no valid program in any group of the first 2 batches"):
        asyncio.run(generator.generate(batch, disable_tqdm=True))


@pytest.fixture
def break_sandbox(monkeypatch):
    """Call it to break the local sandbox: its runner file is gone, so every program fails for the sandbox's
    reason. The sandbox is closed again after the test, whatever happened."""
    def breaker() -> None:
        sandbox.close()
        monkeypatch.setattr(sandbox_local, "RUNNER_PATH", str(TESTS / "no-such-runner.py"))  # the local runner
        monkeypatch.setenv("W8_SANDBOX", "local")
    yield breaker
    sandbox.close()


def test_guard_in_report_mode_lets_the_smoke_go_on_and_records_the_finding(rows, tokenizer, tmp_path):
    """gpu-smoke (W8_GUARD_NO_VALID=report): a model that writes no valid program is a finding, not a stop."""
    _, path = rows
    cfg, batch, _ = skyrl_batch(path, tokenizer, n_samples=2)
    guard = tmp_path / "guard.json"
    generator = generator_with(cfg, tokenizer, [GARBAGE, TRUNCATED], no_valid="report", guard_path=guard)
    for _ in range(3):  # past the batches that stop a run in "stop" mode
        asyncio.run(generator.generate(batch, disable_tqdm=True))
    finding = json.loads(guard.read_text())
    assert finding["batches_without_valid"] == [1, 2, 3] and finding["no_valid"] == "report"
    assert finding["finding"].startswith("the model wrote no valid program in 3 of 3 batches (last reason: ")


def test_guard_in_report_mode_still_stops_on_a_broken_sandbox(rows, tokenizer, break_sandbox, tmp_path):
    _, path = rows
    cfg, batch, _ = skyrl_batch(path, tokenizer, n_samples=2)
    break_sandbox()
    generator = generator_with(cfg, tokenizer, [ORACLE], no_valid="report", guard_path=tmp_path / "guard.json")
    with pytest.raises(TrainingGuardError, match="the sandbox failed on all 4 programs of batch 1"):
        asyncio.run(generator.generate(batch, disable_tqdm=True))


def test_guard_stops_on_a_broken_sandbox(rows, tokenizer, break_sandbox):
    """A sandbox whose runner cannot start (the file is gone): every program fails for the sandbox's
    reason, not its own; the first batch stops the run instead of training on zeros."""
    _, path = rows
    cfg, batch, _ = skyrl_batch(path, tokenizer, n_samples=2)
    break_sandbox()
    with pytest.raises(TrainingGuardError, match="the sandbox failed on all 4 programs of batch 1"):
        asyncio.run(generator_with(cfg, tokenizer, [ORACLE]).generate(batch, disable_tqdm=True))
    assert sandbox.sandbox_provenance()["infra_failures"] >= 4


def test_guard_stops_on_a_sandbox_lost_after_the_first_batches(rows, tokenizer, break_sandbox):
    """The sandbox check holds for every batch, not only the first ones the valid-rate check watches."""
    _, path = rows
    cfg, batch, _ = skyrl_batch(path, tokenizer, n_samples=2)
    generator = generator_with(cfg, tokenizer, [ORACLE])
    for _ in range(3):  # past GUARD_BATCHES
        asyncio.run(generator.generate(batch, disable_tqdm=True))
    break_sandbox()
    with pytest.raises(TrainingGuardError, match="the sandbox failed on all 4 programs of batch 4"):
        asyncio.run(generator.generate(batch, disable_tqdm=True))


def test_group_stats_counts_zero_variance_groups():
    stats = group_stats(["a", "a", "b", "b", "c", "c"], [1.0, 1.0, 0.0, 0.5, 0.0, 0.0],
                        [{"valid": 1.0}] * 2 + [{"valid": 1.0}, {"valid": 0.0}] + [{"valid": 0.0}] * 2)
    assert stats["zero_variance_groups"] == pytest.approx(2 / 3) and stats["valid_rate"] == pytest.approx(0.5)
    assert stats["reward_mean"] == pytest.approx(2.5 / 6)


def test_summarize_reads_skyrls_real_key_names(tmp_path):
    """A row as RayPPOTrainer logs it: its `step` is the index, `timing/step` the seconds (the old bug read
    the index as the step time)."""
    row = {"step": 3, "trainer/global_step": 3.0, "trainer/epoch": 0.0, "timing/step": 41.5,
           "timing/generate": 20.0, "timing/policy_train": 15.0, "reward/avg_raw_reward": 0.42,
           "reward/avg_pass_at_8": 0.9, "environment/valid": 0.75, "environment/balanced_accuracy": 0.6,
           "environment/sandbox_failed": 0.0, "harness/zero_variance_groups": 0.25, "harness/reward_std": 0.2,
           "policy/final_loss": -0.01, "policy/policy_kl": 0.002, "generate/avg_num_tokens": 800.0}
    record = skyrl_step_record(row)
    assert record["step"] == 3 and record["step_time_s"] == 41.5 and record["reward_mean"] == 0.42
    assert record["zero_variance_groups"] == 0.25 and record["kl"] == 0.002 and record["timing"]["policy_train"] == 15
    (tmp_path / "m.jsonl").write_text(json.dumps(row) + "\n" + json.dumps({"step": 0, "eval/reward": 0.1}) + "\n")
    data = json.loads(summarize_skyrl_metrics(tmp_path / "m.jsonl", tmp_path, "grpo").read_text())
    assert [s["step"] for s in data["steps"]] == [3] and data["evals"] == [{"step": 0, "eval/reward": 0.1}]


@pytest.mark.parametrize("target", ["oracle", "compact"])
def test_sft_rows_through_skyrls_tokenization_fit_max_length(tmp_path, tokenizer, target):
    """SkyRL's tokenize_chat_example drops a row longer than max_length without a word; with the rendered
    max_length every row survives and the loss covers the whole answer (SmolLM2's chat format: Qwen's
    tokenizer is not on this machine)."""
    from skyrl.train.sft_trainer import tokenize_chat_example

    from harness.skyrl_config import measure_lengths, render_sft, plan_for, Paths

    data = prepare_training_data(4, 24, tmp_path, target, REWARD, 0, PAGE)
    lengths = measure_lengths(str(resolve_model("smollm2-135m")), data)
    sft = render_sft("m", plan_for("L4:1", "m", 4, 1), data, lengths, Paths("e", "l"), 1, "r")
    max_length = int(next(o for o in sft if o.startswith("max_length=")).split("=")[1])
    rows = [json.loads(line) for line in (data.sft_dir / "train.jsonl").read_text().splitlines()]
    for row in rows:
        example = tokenize_chat_example(row, tokenizer, max_length, "messages")
        assert example is not None, f"{row['task_id']} dropped at max_length={max_length}"
        answer = tokenizer(row["messages"][-1]["content"], add_special_tokens=False)["input_ids"]
        assert example["num_actions"] >= len(answer)


@pytest.mark.slow
def test_grpo_entrypoint_registers_the_env_inside_a_ray_worker_fake_gpu_trainer(rows, tmp_path, monkeypatch):
    import ray

    from harness.config import load_config
    from harness.skyrl_config import render_all
    from harness.skyrl_main import main_grpo

    model = str(resolve_model("smollm2-135m"))
    cfg = load_config(env={"W8_BACKEND": "skyrl", "W8_ACCELERATORS": "L4:1", "W8_TRAIN_COUNT": "2",
                           "W8_TRAIN_EXAMPLES_PER_OBS": "12", "W8_OPERATOR_MAX_NEW_TOKENS": "2560"})
    rendered = render_all(cfg, model, tmp_path / "r3-ray", data_dir=tmp_path / "data")
    overrides = rendered.grpo + ["trainer.placement.colocate_all=false", "generator.n_samples_per_prompt=2",
                                 "trainer.eval_interval=0", "trainer.eval_before_train=false"]  # no eval rows: -40 s
    result = tmp_path / "worker.json"
    monkeypatch.setenv("W8_FAKE_GPU_TRAINER", str(result))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS / "fake_gpu"), str(TESTS), str(REPO)]))
    ray_tmp = tempfile.mkdtemp(prefix="w8ray", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
    try:
        main_grpo(overrides, str(tmp_path / "r3-ray" / "grpo" / "metrics.jsonl"))
    finally:
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    worker = json.loads(result.read_text())
    assert worker["pid"] != os.getpid() and worker["registered"]  # registered in the Ray worker itself
    assert worker["generator"] == "HarnessGenerator" and len(worker["rewards"]) == 4
    assert min(worker["rewards"]) > 0.9 and worker["metrics"]["harness/valid_rate"] == 1.0
    sandbox_record = json.loads((tmp_path / "r3-ray" / "grpo" / "sandbox.json").read_text())
    assert sandbox_record["runs"].get("local", 0) >= 4  # written by the worker: which backend ran the rewards
    assert sys.modules.get("skyrl_fakes") is not None


PARENT = "def is_legal_action(state, action):\n    return True\n"  # a real, weak parent


def test_skyrl_generator_on_a_mixed_batch_scores_refinements_and_counts_prompt_kinds(rows, tokenizer, tmp_path):
    """The refine and self arms' GRPO rows (zero-shot and refinement prompts in one parquet) through SkyRL's
    own PromptDataset and SkyRLGymGenerator: the refinement row's reward has the improvement bonus and the
    identical-child penalty, and harness/prompts_* counts the groups of each kind."""
    from harness.failures import failures_to_show
    from harness.training_data import refine_row

    tasks, _ = rows
    task = tasks[1]
    parent = score_harness(PARENT, task.examples, REWARD.recall_weight, REWARD.timeout_s, sandbox=REWARD.sandbox)
    refine = refine_row(task, PARENT, failures_to_show(parent, task.examples), parent.reward, REWARD, 0.2, 0.3,
                        attempt=1, source={"harvest": "refine", "task_id": task.task_id, "node": 1})
    path = write_parquet_rows([skyrl_row(tasks[0], REWARD), refine], tmp_path / "mixed.parquet")
    cfg, batch, _ = skyrl_batch(path, tokenizer, n_samples=2)
    out = asyncio.run(generator_with(cfg, tokenizer, [ORACLE, fenced(PARENT)]).generate(batch, disable_tqdm=True))
    rewards = [sum(r) for r in out["rewards"]]
    oracle = [score_harness(ORACLE.split("\n", 1)[1].rsplit("```", 1)[0], t.examples).reward for t in tasks]
    # zero-shot row: plain rewards; refinement row: the oracle child beats the parent (+0.2), the parent
    # unchanged is penalised (-0.3)
    weak = score_harness(PARENT, tasks[0].examples).reward
    assert rewards == pytest.approx([oracle[0], weak, oracle[1] + 0.2, parent.reward - 0.3])
    metrics = out["rollout_metrics"]
    assert metrics["harness/prompts_zero_shot"] == 1.0 and metrics["harness/prompts_refine"] == 1.0
    # SkyRL averages each env metric over the samples that report it: zero-shot samples carry no refinement
    # fields, so these are shares of the 2 refinement samples
    assert metrics["environment/identical"] == pytest.approx(0.5) and metrics["environment/improved"] == 0.5
