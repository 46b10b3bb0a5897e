"""GRPO's groups sampled by llama.cpp instead of HF generate: a TRL rollout_func for the local CPU trainer.

    from harness.grpo_rollout import rollout_for
    rollout = rollout_for("llamacpp", seed=0, first_step=0)   # None for "hf" (TRL's own generate)
    with rollout:
        trainer = GRPOTrainer(..., rollout_func=rollout)
        trainer.train()
    rollout.record   # per call: "sizes" (samples), "seconds" (sampling), "export_seconds"; rollout.summary()

Why: on 2 CPU cores HF generate was 94% of a GRPO step (860 s of 918 s for a group of 8 x <= 448 tokens);
llama.cpp in one single-thread worker per core (harness.llamacpp, the search's engine) sampled such a group
(8 x 429 tokens on average) in 79 s with the 2 cores shared by 4 other busy processes. The cost is an export
whenever the weights may have changed (6-8 s for SmolLM2-135M): the policy is saved as safetensors and written
as an F16 GGUF (harness.gguf_export; F16, not Q8_0, keeps the sampled distribution close to the trainer's
float32 one), and the workers are restarted on it.

What TRL (1.16, GRPOTrainer._generate) hands over: the generation batch as its RepeatSampler made it, each
prompt already repeated num_generations times (a group of 8 is 8 equal entries; dynamic sampling's replacement
groups come the same way), and it zips the answers with the batch's rows, so one completion comes back per entry.
Prompts are tokenized by the trainer's own _tokenize_prompts (chat template, add_generation_prompt), so the ids
sampled from are the ids the trainer scores. A completion keeps its end token when it stopped there (TRL counts a
completion without one as truncated) and is cut after the first of the trainer's eos ids (the workers stop on
the first of them only; SmolLM2 declares one, <|im_end|>).

logprobs: None. Without vLLM, TRL reads the sampler's logprobs only as `sampling_per_token_logps`, for vLLM's
importance-sampling correction (use_vllm only) and for off-policy sequence masking (off_policy_mask_threshold,
off here); the policy ratio uses logprobs the trainer computes itself. None is what TRL's own generate path
returns, so the loss is computed exactly as with the hf sampler; the F16 copy's small mismatch is not corrected.

Seeds: sample i of call c at step s draws seed sample_seed(seed, s, c, i), with s the absolute step (a resumed
run continues the numbering) and c counting the calls within a step (dynamic sampling's replacement groups), so
a run samples the same groups whatever the worker count (harness.llamacpp: an answer depends only on its prompt,
seed and model).
"""

from __future__ import annotations

import hashlib
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from harness.gguf_export import write_gguf
from harness.llamacpp import LlamaCppEngine, import_llama_cpp, usable_cores
from harness.models import find_embedded_gguf

SAMPLERS = ("hf", "llamacpp")  # W8_GRPO_SAMPLER: TRL's own generate, or llama.cpp on a GGUF of the policy


def sample_seed(seed: int, step: int, call: int, index: int) -> int:
    """The llama.cpp seed of sample `index` of the `call`-th group sampled at `step` of a run seeded `seed`."""
    digest = hashlib.sha256(f"grpo-rollout:{seed}:{step}:{call}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 2**31


def end_at_eos(new_ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """A completion cut after its first end token (kept, as TRL's generate path keeps it); whole if it has none."""
    for position, token in enumerate(new_ids):
        if token in eos_ids:
            return list(new_ids[:position + 1])
    return list(new_ids)


def check_plain_sampling(trainer) -> None:
    """llama.cpp's workers sample with temperature only: a trainer asking for more is named, not half-served."""
    asked = {"top_p": (trainer.top_p, (1.0,)), "top_k": (trainer.top_k, (0, None)),
             "min_p": (trainer.min_p, (0.0, None)), "repetition_penalty": (trainer.repetition_penalty, (1.0,))}
    odd = [f"{name}={value}" for name, (value, plain) in asked.items() if value not in plain]
    if odd:
        raise ValueError(f"GRPO sampler llamacpp samples with temperature only; the trainer asks {', '.join(odd)}: "
                         "use sampler hf")


class LlamaCppRollout:
    """TRL rollout_func sampling each group with llama.cpp on an F16 GGUF of the trainer's current weights.

    Exports again whenever trainer.state.global_step differs from the last export's (an optimizer step may have
    moved the weights); groups of one step share the export. Its files go to <trainer output_dir>/llamacpp, the
    trainer's scratch folder; close() (or leaving `with`) stops the workers and deletes them.
    """

    def __init__(self, seed: int, first_step: int = 0, qtype: str = "F16", workers: int | None = None,
                 template: Path | None = None):
        import_llama_cpp()  # a missing llama-cpp-python is named before any model is loaded
        warnings.filterwarnings("ignore", message="You are using 'rollout_func'", category=UserWarning)
        self.seed, self.first_step, self.qtype = seed, first_step, qtype
        self.workers = workers or usable_cores()
        self.template = Path(template) if template else find_embedded_gguf()  # metadata and tokenizer of the copy
        self.engine: LlamaCppEngine | None = None
        self.folder: Path | None = None  # where exports go (the trainer's scratch folder)
        self.gguf: Path | None = None  # the newest export
        self.step: int | None = None  # the absolute step of the loaded export
        self.call = 0  # groups sampled at that step so far: the next one's call index
        self.record: dict[str, list] = {"sizes": [], "seconds": [], "export_seconds": []}
        self.exports: list[dict[str, Any]] = []  # one per GGUF written: step, file, bytes, seconds

    def __call__(self, prompts: list, trainer) -> dict[str, Any]:
        check_plain_sampling(trainer)
        step = self.first_step + trainer.state.global_step
        export_s = 0.0
        if step != self.step:
            export_s = self.export(trainer.model, Path(trainer.args.output_dir) / "llamacpp", step)
        call, self.call = self.call, self.call + 1
        prompt_ids = [list(ids) for ids in trainer._tokenize_prompts(prompts)[0]]
        requests = [(ids, sample_seed(self.seed, step, call, i)) for i, ids in enumerate(prompt_ids)]
        start = time.monotonic()
        answers = self.engine.generate(requests, trainer.max_completion_length, trainer.temperature,
                                       trainer.eos_token_ids[0])
        self.record["seconds"].append(time.monotonic() - start)
        self.record["sizes"].append(len(requests))
        self.record["export_seconds"].append(export_s)
        completions = [end_at_eos(new, trainer.eos_token_ids) for new, _ in answers]
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}

    def export(self, model, folder: Path, step: int) -> float:
        """The model as an F16 (qtype) GGUF in `folder`, served from now on; the seconds it took."""
        start = time.monotonic()
        self.folder = folder
        hf_dir = folder / "hf"
        shutil.rmtree(hf_dir, ignore_errors=True)
        model.save_pretrained(hf_dir)  # safetensors, the tied output head saved once
        gguf = folder / f"policy-step{step}-{self.qtype}.gguf"
        write_gguf(hf_dir, gguf, self.qtype, self.template)
        shutil.rmtree(hf_dir, ignore_errors=True)
        previous, self.gguf = self.gguf, gguf
        self.serve(gguf, step)
        if previous is not None and previous != gguf:
            previous.unlink(missing_ok=True)  # the workers on it are stopped: one export on disk at a time
        seconds = time.monotonic() - start
        self.exports.append({"step": step, "gguf": gguf.name, "bytes": gguf.stat().st_size,
                             "seconds": round(seconds, 2)})
        return seconds

    def serve(self, gguf: Path, step: int) -> None:
        """(Re)start the workers on `gguf` as the weights of `step`: that step's groups sample from it."""
        self.stop()
        self.engine = LlamaCppEngine(gguf, self.workers)
        self.step, self.call = step, 0

    def summary(self) -> dict[str, Any]:
        """The run's record for metrics.json: the GGUF type, the workers, every export, export seconds in all."""
        return {"gguf_type": self.qtype, "llamacpp_workers": self.workers, "gguf_exports": self.exports,
                "export_seconds": round(sum(self.record["export_seconds"]), 2)}

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def close(self) -> None:
        """Stop the workers and delete the export folder."""
        self.stop()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "LlamaCppRollout":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rollout_for(sampler: str, seed: int, first_step: int = 0) -> LlamaCppRollout | None:
    """train_grpo's sampler: None for "hf" (TRL's generate), a LlamaCppRollout for "llamacpp"; one-line errors
    for an unknown name or a missing llama-cpp-python (before any model is loaded)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"GRPO sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}")
    return LlamaCppRollout(seed, first_step) if sampler == "llamacpp" else None
