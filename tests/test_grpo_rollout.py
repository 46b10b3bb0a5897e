"""GRPO's groups sampled by llama.cpp (harness.grpo_rollout): seeds, end tokens, one-line errors, and the
rollout answering a real TRL GRPOTrainer's batch from the shipped GGUF (no export: the export and a whole
training step are the slow test in test_train_local.py)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from harness.grpo_rollout import LlamaCppRollout, check_plain_sampling, end_at_eos, rollout_for, sample_seed
from harness.llamacpp import LlamaCppError
from harness.models import find_embedded_gguf, resolve_model
from test_train_local import tiny_model

SAY_OK = [{"role": "user", "content": "Say only: ok"}]


def test_seeds_are_fixed_by_seed_step_call_and_sample_and_differ_in_each():
    base = sample_seed(0, 3, 1, 5)
    assert base == sample_seed(0, 3, 1, 5) and 0 <= base < 2**31
    others = {sample_seed(1, 3, 1, 5), sample_seed(0, 4, 1, 5), sample_seed(0, 3, 2, 5), sample_seed(0, 3, 1, 6)}
    assert base not in others and len(others) == 4
    assert len({sample_seed(0, 0, 0, i) for i in range(64)}) == 64  # a group's samples never share a seed


@pytest.mark.parametrize("new, eos, expected", [
    ([5, 6, 2], [2], [5, 6, 2]),          # stopped on the end token: kept, so TRL counts it as finished
    ([5, 6, 7], [2], [5, 6, 7]),          # cut by the token budget: no end token, TRL counts it as truncated
    ([5, 0, 6, 2], [2, 0], [5, 0]),       # any of the trainer's eos ids ends it, the rest is dropped
    ([2], [2], [2]),
    ([], [2], []),
])
def test_a_completion_ends_at_its_first_end_token(new, eos, expected):
    assert end_at_eos(new, eos) == expected


def plain(**asked):
    """The sampling attributes of a GRPOTrainer at GRPOConfig's defaults, with `asked` changed."""
    return SimpleNamespace(**{"top_p": 1.0, "top_k": 0, "min_p": None, "repetition_penalty": 1.0, **asked})


def test_only_temperature_sampling_is_served():
    check_plain_sampling(plain())
    check_plain_sampling(plain(top_k=None, min_p=0.0))
    with pytest.raises(ValueError, match=r"^GRPO sampler llamacpp samples with temperature only; the trainer asks "
                                         r"top_p=0.9, top_k=50: use sampler hf$"):
        check_plain_sampling(plain(top_p=0.9, top_k=50))


def test_sampler_names_and_a_missing_llama_cpp_are_one_line_errors(monkeypatch):
    assert rollout_for("hf", 0) is None
    with pytest.raises(ValueError, match=r"^GRPO sampler 'vllm': expected one of hf, llamacpp$"):
        rollout_for("vllm", 0)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # what an uninstalled package gives: ImportError
    with pytest.raises(LlamaCppError, match=r"^the llamacpp operator needs llama-cpp-python.*run `make setup`$"):
        rollout_for("llamacpp", 0)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """A real GRPOTrainer (a 2-layer model with SmolLM2's tokenizer, group 4, <= 24 new tokens, temperature 0.7)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    folder = tmp_path_factory.mktemp("rollout")
    path = tiny_model(folder, resolve_model("smollm2-135m"))
    args = GRPOConfig(output_dir=str(folder / "out"), per_device_train_batch_size=1, gradient_accumulation_steps=4,
                      num_generations=4, max_completion_length=24, temperature=0.7, use_cpu=True, report_to=[],
                      disable_tqdm=True)
    return GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[lambda completions, **k: [0.0]],
                       args=args, train_dataset=Dataset.from_list([{"prompt": SAY_OK}]),
                       processing_class=AutoTokenizer.from_pretrained(path))


def test_the_rollout_answers_each_entry_of_the_batch_with_the_trainers_prompt_ids(trainer):
    """TRL's batch is the group's prompt repeated (4 entries here): 4 completions come back, on the ids TRL's own
    tokenization gives, each ending on <|im_end|> or cut at the trainer's max_completion_length; logprobs None.
    A second call at the same step (a replacement group) draws other seeds; a new rollout repeats the first."""
    tokenizer = trainer.processing_class
    shipped = find_embedded_gguf()  # the base model as shipped: serve() without an export
    with LlamaCppRollout(seed=0, workers=1) as rollout:
        rollout.serve(shipped, trainer.state.global_step)
        first = rollout([SAY_OK] * 4, trainer)
        second = rollout([SAY_OK] * 4, trainer)
        assert (rollout.step, rollout.call, rollout.record["sizes"], rollout.exports) == (0, 2, [4, 4], [])
    with LlamaCppRollout(seed=0, workers=1) as again:
        again.serve(shipped, 0)
        assert again([SAY_OK] * 4, trainer)["completion_ids"] == first["completion_ids"]
    ids = tokenizer.apply_chat_template(SAY_OK, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert first["prompt_ids"] == [ids] * 4 == trainer._tokenize_prompts([SAY_OK] * 4)[0]
    assert first["logprobs"] is None and set(first) == {"prompt_ids", "completion_ids", "logprobs"}
    completions = first["completion_ids"] + second["completion_ids"]
    assert len(completions) == 8
    for new in completions:
        assert new and (new[-1] == tokenizer.eos_token_id or len(new) == 24) and tokenizer.eos_token_id not in new[:-1]
    assert any(new[-1] == tokenizer.eos_token_id for new in completions)
    assert second["completion_ids"] != first["completion_ids"]
