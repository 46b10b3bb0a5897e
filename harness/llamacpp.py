"""llama.cpp generation in worker processes, one thread each: the llamacpp operator's engine.

    from harness.llamacpp import LlamaCppEngine
    engine = LlamaCppEngine("/path/model.gguf", workers=2)
    [(new_ids, wall_s), ...] = engine.generate([(prompt_ids, seed), ...], max_new_tokens=448,
                                               temperature=0.5, eos_id=2)
    engine.close()

Why processes and one thread each: on a CPU the parallelism is in processes, one per core. A
llama.cpp context with 2 threads ran 2.5-5x slower than with 1 on a shared 2-core machine (its
threads spin-wait for each other), and batching 4 sequences in one context gained nothing.

Why an answer depends only on its (prompt, seed) and the model, never on the worker count or on
the requests before it: every request starts from an empty context (no prompt-prefix reuse, whose
batch split could change a float), and its sampler is built from its own seed. A worker is one
thread, so its arithmetic is the same in any worker. Sampling is plain: temperature only (top-k
off, top-p 1, min-p 0, no repeat penalty), the distribution the hf operator samples from;
temperature 0 decodes greedily.

A worker that dies (killed, out of memory) fails the whole batch with LlamaCppError; the search
keeps every node it saved before the batch and resumes from them.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Sequence

N_CTX = 8192  # SmolLM2's trained context: prompt + answer must fit (checked per request)

_LLM = None  # the worker process's model (set by _load)
_LOAD_ERROR = ""  # why it could not be loaded (reported by _ready)


class LlamaCppError(RuntimeError):
    """llama.cpp cannot load a model or answer; one line naming the model or the fix."""


def import_llama_cpp():
    """The llama_cpp module, or a one-line LlamaCppError naming `make setup`."""
    try:
        import llama_cpp
    except Exception as err:  # ImportError, or a built library that does not load (OSError)
        raise LlamaCppError(f"the llamacpp operator needs llama-cpp-python, which does not import here "
                            f"({type(err).__name__}: {str(err).splitlines()[0][:120]}): run `make setup`") from None
    return llama_cpp


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _load(path: str, n_ctx: int) -> None:
    """Worker initializer: the model, one thread for prompt and answer (a failure is kept for _ready)."""
    global _LLM, _LOAD_ERROR
    try:
        _LLM = import_llama_cpp().Llama(path, n_ctx=n_ctx, n_threads=1, n_threads_batch=1, verbose=False)
    except Exception as err:  # a damaged or foreign file: ValueError from llama-cpp-python
        _LOAD_ERROR = f"llama.cpp cannot load {path} ({type(err).__name__}: {str(err).splitlines()[0][:160]})"


def _ready() -> str:
    return _LOAD_ERROR


def _generate(ids: Sequence[int], seed: int, max_new_tokens: int, temperature: float,
              eos_id: int) -> tuple[list[int], float]:
    """One answer from an empty context: the new token ids (with the end token when reached) and the wall time."""
    start = time.perf_counter()
    if len(ids) + max_new_tokens > _LLM.n_ctx():
        raise LlamaCppError(f"prompt of {len(ids)} tokens + {max_new_tokens} new ones exceed llama.cpp's "
                            f"context of {_LLM.n_ctx()}")
    _LLM.set_seed(int(seed) % 2**31)
    _LLM.reset()  # no prefix reuse: the answer must not depend on the request before it
    new: list[int] = []
    for token in _LLM.generate(list(ids), top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, temp=max(0.0, temperature),
                               repeat_penalty=1.0, reset=True):
        new.append(int(token))
        if token == eos_id or len(new) >= max_new_tokens:
            break
    return new, time.perf_counter() - start


class LlamaCppEngine:
    """A pool of `workers` processes, each holding the GGUF at `path` with one thread."""

    def __init__(self, path: str | Path, workers: int = 1, n_ctx: int = N_CTX):
        import_llama_cpp()  # a missing library is named before any process starts
        cores = usable_cores()
        if not 1 <= workers <= cores:
            raise LlamaCppError(f"W8_OPERATOR_WORKERS={workers}: expected 1 to {cores} (this machine's cores)")
        self.path, self.workers = Path(path), workers
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_load, initargs=(str(path), n_ctx))
        problem = self.pool.submit(_ready).result()  # a file llama.cpp cannot load is named here, not mid-search
        if problem:
            self.close()
            raise LlamaCppError(problem)

    def generate(self, requests: Sequence[tuple[Sequence[int], int]], max_new_tokens: int, temperature: float,
                 eos_id: int) -> list[tuple[list[int], float]]:
        """Every (prompt ids, seed) answered, in order; the workers take the requests one at a time."""
        futures = [self.pool.submit(_generate, list(ids), seed, max_new_tokens, temperature, eos_id)
                   for ids, seed in requests]
        try:
            return [f.result() for f in futures]
        except BrokenProcessPool:
            raise LlamaCppError(f"a llama.cpp worker died (killed, or out of memory) running {self.path.name}; "
                                "the search resumes from its saved nodes on a rerun") from None

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
