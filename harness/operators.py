"""Mutation operators: a zero-shot harness for a task, or a refinement of one, as raw model text.

    from harness.operators import make_operator, operator_from_config
    op = make_operator("deterministic")              # or "hf", "ct2", "llamacpp", "vllm", "openai"
    gen = op.zero_shot(task, seed=0)                 # gen.text (raw), gen.prompt_tokens, gen.completion_tokens
    gen = op.refine(task, code, failures, seed=1)    # failures: harness.rewards.Failure, up to five shown

Every LLM operator asks with the prompts of harness.prompts and returns raw text plus
token counts; taking the code out of the text is harness.interface's job, done by the
caller. The LLM operators (hf: transformers, ct2: CTranslate2 on CPU, llamacpp: llama.cpp worker processes
on CPU, vllm: in-process vLLM, openai: any OpenAI-compatible endpoint over plain HTTP) import their
libraries only when built.
`deterministic` uses no model: it composes rules from harness.rules, for tests and smoke runs.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from harness.ct2 import CT2Error, ct2_model_dir
from harness.exports import quiet_transformers
from harness.gguf_export import GGUFError, gguf_for
from harness.llamacpp import LlamaCppEngine, LlamaCppError, import_llama_cpp, usable_cores
from harness.models import EMBEDDED, ModelError, find_embedded_gguf, resolve_model
from harness.prompts import MAX_FAILURES, build_refine_prompt, build_zero_shot_prompt
from harness.rules import active_rules, best_rule, compose_program

OPENAI_CONCURRENCY = 16  # requests in flight per round against an OpenAI-compatible endpoint


@dataclass(frozen=True)
class Generation:
    """One operator answer: the raw text and what it cost (wall_s: this answer's share of its batch)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0


@dataclass(frozen=True)
class Request:
    """What a search asks for next: a zero-shot harness (code None) or a refinement of `code`."""

    task: Any
    seed: int
    code: str | None = None
    failures: Sequence[Any] = ()
    attempt: int = 0  # earlier refinements of this same harness (the prompt says so)


class Operator:
    """A mutation operator: answers a batch of requests (zero-shot harnesses or refinements).

    `answer` is the one entry point; an operator answers its batch at once where it can
    (one padded generate for hf, one vLLM call, concurrent HTTP requests for openai), so
    the searches of a run advance in rounds. zero_shot/refine are one-request conveniences.
    """

    name = "operator"
    model = ""

    def answer(self, requests: Sequence[Request]) -> list[Generation]:
        raise NotImplementedError

    def zero_shot(self, task: Any, seed: int = 0) -> Generation:
        return self.answer([Request(task, seed)])[0]

    def refine(self, task: Any, code: str, failures: Sequence[Any], seed: int = 0, attempt: int = 0) -> Generation:
        return self.answer([Request(task, seed, code, failures, attempt)])[0]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model}

    def close(self) -> None:
        """Release what the operator holds (worker processes); a no-op for most."""


def messages_for(request: Request) -> list[dict[str, str]]:
    """The chat prompt of a request (harness.prompts)."""
    if request.code is None:
        return build_zero_shot_prompt(request.task)
    return build_refine_prompt(request.task, request.code, request.failures, request.attempt)


class ChatOperator(Operator):
    """An LLM operator: every request becomes chat messages; a batch goes to `complete_batch` at once."""

    def __init__(self, max_new_tokens: int = 512, temperature: float = 0.0):
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature

    def complete_batch(self, batch: list[list[dict[str, str]]], seeds: list[int]) -> list[Generation]:
        raise NotImplementedError

    def answer(self, requests: Sequence[Request]) -> list[Generation]:
        start = time.perf_counter()
        gens = self.complete_batch([messages_for(r) for r in requests], [r.seed for r in requests])
        share = (time.perf_counter() - start) / max(1, len(gens))
        return [Generation(g.text, g.prompt_tokens, g.completion_tokens, share) for g in gens]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "max_new_tokens": self.max_new_tokens,
                "temperature": self.temperature}


class OperatorError(RuntimeError):
    """An operator cannot be built or reached; the message names the missing piece."""


def resolve_model_path(name: str) -> str:
    """harness.models.resolve_model, with its ModelError as a one-line OperatorError."""
    try:
        return str(resolve_model(name))
    except ModelError as err:
        raise OperatorError(f"model {name!r}: {err}") from None


class HFOperator(ChatOperator):
    """transformers AutoModelForCausalLM + the tokenizer's chat template, on CPU or one GPU.

    A batch is one left-padded `generate` call on a GPU (one request at a time on a CPU, where
    batching measured slower). Temperature 0 decodes greedily; otherwise it samples with torch
    seeded from the batch's seeds, so a batch's answers are reproducible on the same hardware,
    library versions and batch.
    """

    name = "hf"

    def __init__(self, model: str, max_new_tokens: int = 512, temperature: float = 0.0, device: str | None = None):
        super().__init__(max_new_tokens, temperature)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = model
        path = resolve_model_path(model)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        quiet_transformers()  # once per arm, silently: the arm's own line says which model searches
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
            self.lm = AutoModelForCausalLM.from_pretrained(path).to(self.device).eval()
        except Exception as err:  # SafetensorError, OSError, ValueError...: a damaged checkpoint, in one line
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise OperatorError(f"model {path}: cannot be loaded ({type(err).__name__}: {first}); if it is an "
                                "export, rerun its step with the same W8_RUN_ID") from None
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.padded = self.device != "cpu"  # one padded generate per round (scripts/bench/bench_batch.py measures both)

    def sampling(self) -> dict[str, Any]:
        """The generate() arguments of the decoding: greedy at temperature 0, else plain sampling."""
        if self.temperature <= 0:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_p": 1.0, "top_k": 0}

    def describe(self) -> dict[str, Any]:
        """The weights' dtype and every sampling argument: the compare refuses arms that decoded differently."""
        sampling = self.sampling()
        return {**super().describe(), "dtype": str(self.lm.dtype).removeprefix("torch."),
                "generation_config": "hf", "do_sample": sampling["do_sample"],
                "top_p": sampling.get("top_p"), "top_k": sampling.get("top_k")}

    def complete_batch(self, batch: list[list[dict[str, str]]], seeds: list[int]) -> list[Generation]:
        """One padded generate for the round on a GPU; on a CPU one request at a time: a padded batch of 6
        ran 0.93x one-by-one there (scripts/bench/bench_batch.py, 2 cores), and a batch waits for its longest answer."""
        if not self.padded and len(batch) > 1:
            return [g for messages, seed in zip(batch, seeds) for g in self.complete_batch([messages], [seed])]
        import torch

        texts = [self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in batch]
        inputs = self.tokenizer(texts, return_tensors="pt", add_special_tokens=False, padding=True).to(self.device)
        sampling = self.sampling()
        if sampling["do_sample"]:
            torch.manual_seed(hash(tuple(seeds)) % 2**31)
        with torch.no_grad():
            out = self.lm.generate(**inputs, max_new_tokens=self.max_new_tokens,
                                   pad_token_id=self.tokenizer.pad_token_id, **sampling)
        width = inputs["input_ids"].shape[1]
        return [Generation(self.tokenizer.decode(row[width:], skip_special_tokens=True), int(prompt.sum()),
                           self._answer_length(row[width:]))
                for row, prompt in zip(out, inputs["attention_mask"])]

    def _answer_length(self, new) -> int:  # up to and with its end-of-turn token (the rest is padding)
        ends = (new == self.tokenizer.eos_token_id).nonzero()
        return int(ends[0, 0]) + 1 if len(ends) else int(new.shape[0])


class CT2Operator(ChatOperator):
    """CTranslate2 (harness.ct2: the HF model converted once, int8 by default) + the HF tokenizer's chat template.

    For the CPU: on 2 cores it decodes faster than the hf operator's float32 torch (scripts/bench/bench_engines.py).
    Every request gets its own ctranslate2.Generator (~0.1 s to build from the converted folder): CTranslate2
    seeds a thread's random generator once, at its first use (src/random.cc: a thread_local std::mt19937
    from the seed set last), so only a fresh worker thread honours ctranslate2.set_random_seed. An answer
    then depends on its request and seed alone, not on the round or the requests before it: the same
    seeds give the same programs on rerun and after a resume, on the same machine and library versions.
    Temperature 0 decodes greedily; otherwise it samples from the whole vocabulary (top-k 0, top-p 1),
    the same distribution the hf operator samples from (its weights quantized unless compute_type float32).
    """

    name = "ct2"

    def __init__(self, model: str, max_new_tokens: int = 512, temperature: float = 0.0, compute_type: str = "int8"):
        super().__init__(max_new_tokens, temperature)
        from transformers import AutoTokenizer

        self.model, self.compute_type = model, compute_type
        path = resolve_model_path(model)
        quiet_transformers()
        start = time.perf_counter()
        try:
            self.ct2_dir = ct2_model_dir(path, compute_type)
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self._generator(0)  # the copy loads: a damaged one fails here, not mid-search
        except CT2Error as err:
            raise OperatorError(str(err)) from None
        except Exception as err:  # a damaged copy or tokenizer: one line
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise OperatorError(f"model {path}: CTranslate2 cannot load it ({type(err).__name__}: {first}); its "
                                f"converted copy is {getattr(self, 'ct2_dir', '?')}: delete it to convert again") from None
        self.load_s = time.perf_counter() - start  # conversion (first use) + load

    def _generator(self, seed: int):
        """A fresh Generator whose worker thread seeds its sampler with `seed` (see the class docstring)."""
        import ctranslate2

        ctranslate2.set_random_seed(int(seed) % 2**32)
        return ctranslate2.Generator(str(self.ct2_dir), device="cpu", compute_type=self.compute_type)

    def sampling(self) -> dict[str, Any]:
        if self.temperature <= 0:
            return {"sampling_topk": 1}
        return {"sampling_topk": 0, "sampling_topp": 1.0, "sampling_temperature": self.temperature}

    def describe(self) -> dict[str, Any]:
        """Engine, weights and sampling, so the compare refuses arms that decoded differently."""
        sampling = self.sampling()
        return {**super().describe(), "dtype": self.compute_type, "generation_config": "ct2",
                "do_sample": self.temperature > 0, "top_p": sampling.get("sampling_topp"),
                "top_k": sampling["sampling_topk"]}

    def complete_batch(self, batch: list[list[dict[str, str]]], seeds: list[int]) -> list[Generation]:
        return [self._one(messages, seed) for messages, seed in zip(batch, seeds)]

    def _one(self, messages: list[dict[str, str]], seed: int) -> Generation:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
        [result] = self._generator(seed).generate_batch(
            [self.tokenizer.convert_ids_to_tokens(ids)], max_length=self.max_new_tokens,
            include_prompt_in_result=False, end_token=self.tokenizer.eos_token, return_end_token=True,
            **self.sampling())
        new = result.sequences_ids[0]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return Generation(text, len(ids), len(new))


class LlamaCppOperator(ChatOperator):
    """llama.cpp on a GGUF of the model (harness.gguf_export) in one-thread worker processes (harness.llamacpp).

    The prompt ids come from the HF tokenizer's chat template, as for hf and ct2, and the answer's ids are
    decoded by it: every engine sees the same ids and stops at the same end-of-turn token (<|im_end|>)."""

    name = "llamacpp"

    def __init__(self, model: str, max_new_tokens: int = 512, temperature: float = 0.0, gguf_type: str = "F16",
                 workers: int | None = None):
        super().__init__(max_new_tokens, temperature)
        from transformers import AutoTokenizer

        self.model = model
        try:
            import_llama_cpp()  # before any model loads or converts
            path = resolve_model_path(model)
            shipped = find_embedded_gguf(*EMBEDDED[model][:2]) if model in EMBEDDED else None
            self.gguf = gguf_for(path, gguf_type, shipped=shipped)  # the shipped base when it is that type
            self.gguf_type = gguf_type  # what gguf_for returns is of that type, shipped or copied
            quiet_transformers()
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.engine = LlamaCppEngine(self.gguf, workers or usable_cores())
        except (GGUFError, LlamaCppError) as err:
            raise OperatorError(str(err)) from None

    def describe(self) -> dict[str, Any]:  # the GGUF type is the dtype: compare refuses arms that differ in it
        return {**super().describe(), "dtype": self.gguf_type, "generation_config": "llamacpp",
                "do_sample": self.temperature > 0, "top_p": 1.0, "top_k": 0}

    def complete_batch(self, batch: list[list[dict[str, str]]], seeds: list[int]) -> list[Generation]:
        prompts = [self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False)
                   for m in batch]
        try:
            answers = self.engine.generate(list(zip(prompts, seeds)), self.max_new_tokens, self.temperature,
                                           self.tokenizer.eos_token_id)
        except LlamaCppError as err:  # a worker died: the round's answers are lost, the saved nodes are not
            raise OperatorError(str(err)) from None
        return [Generation(self.tokenizer.decode(new, skip_special_tokens=True), len(ids), len(new), wall)
                for ids, (new, wall) in zip(prompts, answers)]

    def close(self) -> None:
        self.engine.close()


# The engine settings SkyRL's own vLLM servers use (skyrl/backends/skyrl_train/inference_servers/
# utils.py, build_vllm_cli_args): bf16 weights (InferenceEngineConfig.model_dtype) and vLLM's own
# generation defaults instead of the model's generation_config.json. The frozen and the trained
# search both decode through this class, so both arms decode the same way, and the same way
# GRPO sampled; compare refuses traces whose operators differ in these fields.
VLLM_ENGINE_ARGS = {"dtype": "bfloat16", "generation_config": "vllm", "enable_prefix_caching": True,
                    "trust_remote_code": True}


class VLLMOperator(ChatOperator):
    """In-process `vllm.LLM` (GPU nodes); vllm is imported only when this is built."""

    name = "vllm"

    def __init__(self, model: str, max_new_tokens: int = 512, temperature: float = 0.0,
                 gpu_memory_utilization: float = 0.6):
        super().__init__(max_new_tokens, temperature)
        try:
            import vllm
        except ImportError:
            raise OperatorError("operator vllm needs the vllm package (the GPU node's SkyRL env)") from None
        self.model = model
        self._vllm = vllm
        self.llm = vllm.LLM(model=resolve_model_path(model), gpu_memory_utilization=gpu_memory_utilization,
                            **VLLM_ENGINE_ARGS)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dtype": VLLM_ENGINE_ARGS["dtype"],
                "generation_config": VLLM_ENGINE_ARGS["generation_config"]}

    def complete_batch(self, batch: list[list[dict[str, str]]], seeds: list[int]) -> list[Generation]:
        params = [self._vllm.SamplingParams(max_tokens=self.max_new_tokens, temperature=self.temperature, seed=seed)
                  for seed in seeds]
        outs = self.llm.chat(batch, params, use_tqdm=False)  # one call: vLLM batches the whole round
        return [Generation(o.outputs[0].text, len(o.prompt_token_ids or []), len(o.outputs[0].token_ids))
                for o in outs]


class OpenAIOperator(ChatOperator):
    """Any OpenAI-compatible /v1/chat/completions endpoint (e.g. `vllm serve`).

    Plain HTTP with urllib (one client path, no SDK to pin). The API key comes from
    OPENAI_API_KEY if set (a local `vllm serve` needs none). Token counts come from the
    response's `usage`; an endpoint that omits it yields 0.
    """

    name = "openai"

    def __init__(self, model: str, base_url: str, max_new_tokens: int = 512, temperature: float = 0.0,
                 timeout_s: float = 300.0):
        super().__init__(max_new_tokens, temperature)
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.api_key = os.environ.get("OPENAI_API_KEY", "EMPTY")

    def _payload(self, messages: list[dict[str, str]], seed: int) -> dict[str, Any]:
        return {"model": self.model, "messages": messages, "max_tokens": self.max_new_tokens,
                "temperature": self.temperature, "seed": seed}

    def complete(self, messages: list[dict[str, str]], seed: int) -> Generation:
        body = json.dumps(self._payload(messages, seed)).encode()
        req = urllib.request.Request(self.base_url + "/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.api_key}"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read().decode())
        except urllib.error.HTTPError as err:
            raise OperatorError(f"openai endpoint {self.base_url} answered {err.code}: {err.reason}") from None
        except (urllib.error.URLError, TimeoutError) as err:
            raise OperatorError(f"openai endpoint {self.base_url} unreachable: {err}") from None
        usage = data.get("usage") or {}
        text = (data.get("choices") or [{}])[0].get("message", {}).get("content") or ""
        return Generation(text, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))

    def complete_batch(self, batch: list[list[dict[str, str]]], seeds: list[int]) -> list[Generation]:
        """The batch's requests concurrently (a server such as `vllm serve` batches them itself)."""
        with ThreadPoolExecutor(max_workers=min(OPENAI_CONCURRENCY, max(1, len(batch)))) as pool:
            return list(pool.map(self.complete, batch, seeds))


class DeterministicOperator(Operator):
    """Rule-based edits from a library of checks; no model.

    zero_shot: the minimal program (no rule: everything that parses is legal).
    refine: adds the library rule that fixes the most shown failures (ties: library order);
    if none fixes any, the next unused rule in library order; if all are used, the same
    program. Deterministic given its inputs (the seed is ignored). Token counts are 0.
    """

    name = "deterministic"
    model = "rule-library"

    def answer(self, requests: Sequence[Request]) -> list[Generation]:
        return [self._one(r) for r in requests]

    def _one(self, request: Request) -> Generation:
        start = time.perf_counter()
        if request.code is None:
            return Generation(_fence(compose_program([])), wall_s=time.perf_counter() - start)
        active = active_rules(request.code)
        rule = best_rule(active, list(request.failures)[:MAX_FAILURES])
        return Generation(_fence(compose_program(active + ([rule] if rule else []))),
                          wall_s=time.perf_counter() - start)


def _fence(code: str) -> str:
    return "```python\n" + code + "```\n"


OPERATORS = ("deterministic", "hf", "ct2", "llamacpp", "vllm", "openai")


def make_operator(name: str, model: str = "", backend: str = "local", max_new_tokens: int = 512,
                  temperature: float = 0.0, base_url: str = "", ct2_compute_type: str = "int8",
                  gguf_type: str = "F16", workers: int | None = None) -> Operator:
    """Build an operator by name; "auto" is llamacpp on the local backend and vllm on skyrl."""
    if name == "auto":
        name = "vllm" if backend == "skyrl" else "llamacpp"
    if name == "deterministic":
        return DeterministicOperator()
    if name == "hf":
        return HFOperator(model, max_new_tokens, temperature)
    if name == "ct2":
        return CT2Operator(model, max_new_tokens, temperature, ct2_compute_type)
    if name == "llamacpp":
        return LlamaCppOperator(model, max_new_tokens, temperature, gguf_type, workers)
    if name == "vllm":
        return VLLMOperator(model, max_new_tokens, temperature)
    if name == "openai":
        if not base_url:
            raise OperatorError("operator openai needs an endpoint: set W8_OPERATOR_BASE_URL (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIOperator(model, base_url, max_new_tokens, temperature)
    raise OperatorError(f"unknown operator {name!r}: expected auto or one of {', '.join(OPERATORS)}")


def operator_from_config(cfg: Any) -> Operator:
    """make_operator with the knobs operator, harness_model, backend, operator_* ."""
    return make_operator(cfg.operator, cfg.harness_model, cfg.backend, cfg.operator_max_new_tokens,
                         cfg.operator_temperature, cfg.operator_base_url, cfg.ct2_compute_type, cfg.gguf_type,
                         cfg.operator_workers)
