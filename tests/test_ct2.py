"""The ct2 operator: the embedded model converted to CTranslate2 for real, seeded per request, cached by content."""

from __future__ import annotations

import os

import pytest

from harness.config import ConfigError, load_config
from harness.ct2 import CT2Error, ct2_model_dir, source_key
from harness.dataset import make_task
from harness.models import resolve_model
from harness.operators import CT2Operator, OperatorError, Request, make_operator


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("ct2")


@pytest.fixture(scope="module")
def operator(cache):
    old = os.environ.get("W8_CT2_CACHE")
    os.environ["W8_CT2_CACHE"] = str(cache)
    try:
        yield make_operator("ct2", "smollm2-135m", max_new_tokens=24, temperature=0.8)
    finally:
        os.environ.pop("W8_CT2_CACHE") if old is None else os.environ.__setitem__("W8_CT2_CACHE", old)


@pytest.fixture(scope="module")
def task():
    return make_task("heldout", 2, 8)


def test_unknown_compute_type_and_ct2_on_the_gpu_node_are_refused_in_one_line(tmp_path):
    with pytest.raises(CT2Error, match="compute type 'int4': expected one of int8, int8_float32, float32"):
        ct2_model_dir(tmp_path, "int4")
    with pytest.raises(ConfigError, match="W8_CT2_COMPUTE_TYPE"):
        load_config(env={"W8_CT2_COMPUTE_TYPE": "fp16"})
    with pytest.raises(ConfigError, match="W8_OPERATOR=ct2 with W8_BACKEND=skyrl"):
        load_config(env={"W8_PRESET": "gcp", "W8_OPERATOR": "ct2"})


def test_a_folder_ctranslate2_cannot_convert_is_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(CT2Error, match=f"model {tmp_path}: CTranslate2 cannot convert it .*W8_OPERATOR=hf"):
        ct2_model_dir(tmp_path, "int8", cache=tmp_path / "cache")
    assert not any((tmp_path / "cache").glob("*")), "a failed conversion leaves no folder behind"


@pytest.mark.slow
def test_same_seed_same_program_other_seed_other_program(operator, task):
    first = [operator.zero_shot(task, seed=s).text for s in (3, 3, 4)]
    assert first[0] == first[1] and first[0] != first[2]
    assert operator.zero_shot(task, seed=3).text == first[0]  # and again, after other requests


@pytest.mark.slow
def test_an_answer_depends_on_its_request_not_on_its_round(operator, task):
    """A resumed search asks its remaining nodes in other rounds than the first run did: they must not change."""
    alone = operator.answer([Request(task, 11)])[0]
    together = operator.answer([Request(task, 5), Request(task, 11)])[1]
    assert (together.text, together.completion_tokens) == (alone.text, alone.completion_tokens)
    assert 0 < alone.completion_tokens <= 24 and alone.prompt_tokens > 100


@pytest.mark.slow
def test_the_copy_is_converted_once_and_again_when_the_weights_change(operator, cache, tmp_path):
    assert isinstance(operator, CT2Operator) and operator.ct2_dir.parent == cache
    assert operator.describe() == {"name": "ct2", "model": "smollm2-135m", "max_new_tokens": 24, "temperature": 0.8,
                                   "dtype": "int8", "generation_config": "ct2", "do_sample": True, "top_p": 1.0,
                                   "top_k": 0}
    stamp = (operator.ct2_dir / "model.bin").stat().st_mtime_ns
    assert ct2_model_dir(resolve_model("smollm2-135m"), "int8") == operator.ct2_dir  # found again, not redone
    assert (operator.ct2_dir / "model.bin").stat().st_mtime_ns == stamp
    src = tmp_path / "export"  # an export retrained at the same path: a new key, so a new copy
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"x")
    before = source_key(src)
    os.utime(src / "model.safetensors", ns=(1, 1))
    assert source_key(src) != before


@pytest.mark.slow
def test_a_damaged_copy_is_one_line_naming_the_model(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("W8_CT2_CACHE", str(tmp_path))
    model = resolve_model("smollm2-135m")
    target = tmp_path / f"smollm2-135m-instruct-{source_key(model)}-int8"
    target.mkdir()
    (target / "model.bin").write_bytes(b"not a model")
    with pytest.raises(OperatorError, match="CTranslate2 cannot load it"):
        make_operator("ct2", "smollm2-135m", max_new_tokens=8, temperature=0.5)
