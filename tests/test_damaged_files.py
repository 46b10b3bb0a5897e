"""Damaged and unwritable files are named in one line with the fix, never used silently (issue 20).

Real files throughout: a real safetensors export cut short, a real training-data cache with its
train.jsonl truncated, a trace file cut mid-JSON, a folder this user cannot write.
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import pytest

from harness.dataset import PAGE
from harness import markers
from harness.config import load_config
from harness.exports import ExportError, check_export
from harness.files import StorageError, atomic_write_bytes, storage_error
from harness.models import ModelError, resolve_model
from harness.records import RecordError, write_results
from harness.rewards import RewardKnobs
from harness.traces import load_traces
from harness.training_data import prepare_training_data


def write_export(policy: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    policy.mkdir(parents=True)
    (policy / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": torch.arange(4096, dtype=torch.float32), "b": torch.ones(16)}, str(policy / "model.safetensors"))
    return policy


def test_a_truncated_export_is_named_by_the_check_the_model_resolver_and_the_marker(tmp_path):
    policy = write_export(tmp_path / "grpo" / "global_step_1" / "policy")
    assert check_export(policy) == policy and resolve_model(str(policy)) == str(policy)
    markers.mark_done(tmp_path, "03_grpo", ["grpo/global_step_1/policy"], "s", 1.0)
    weights = policy / "model.safetensors"
    whole = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(whole - 100)  # a copy that stopped early
    with pytest.raises(ExportError, match=rf"model.safetensors: {whole - 100} bytes, its header says {whole}"):
        check_export(policy)
    with pytest.raises(ModelError, match="truncated or overwritten"):
        resolve_model(str(policy))
    assert markers.output_problems(tmp_path, "03_grpo") == [
        f"grpo/global_step_1/policy/model.safetensors: {whole - 100} bytes, the marker says {whole} "
        "(truncated or overwritten)"]
    weights.write_bytes(b"\x05")
    with pytest.raises(ExportError, match="shorter than a safetensors header"):
        check_export(policy)
    weights.unlink()
    with pytest.raises(ExportError, match="no weights"):
        check_export(policy)


def test_a_truncated_cached_train_jsonl_is_named_and_rebuilt(tmp_path, capsys):
    args = (1, 8, tmp_path / "data", "compact", RewardKnobs.from_config(load_config(env={"W8_SANDBOX": "local"})), 0,
            PAGE)
    data = prepare_training_data(*args)
    jsonl = data.sft_dir / "train.jsonl"
    whole = jsonl.read_bytes()
    jsonl.write_bytes(whole[: len(whole) // 2])
    assert prepare_training_data(*args) == data
    assert f"training data: {jsonl} is missing or changed since it was written (sha256); rebuilding it" in \
        capsys.readouterr().out
    assert jsonl.read_bytes() == whole and json.loads(whole.splitlines()[0])["messages"]
    prepare_training_data(*args)  # intact now: reused without a word
    assert capsys.readouterr().out == ""


def test_a_trace_cut_mid_json_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "frozen_trace.json"
    path.write_text(json.dumps({"role": "frozen", "traces": [{"steps_to_first_gold": 1}] * 50})[:300])
    with pytest.raises(StorageError) as err:
        load_traces(path)
    assert str(err.value).startswith(f"{path}: corrupt JSON (") and "rerun the step that wrote it" in str(err.value)
    assert "\n" not in str(err.value)


def test_writes_to_an_unwritable_folder_are_one_line_with_the_path_and_the_fix(unwritable_dir):
    folder = unwritable_dir
    with pytest.raises(StorageError) as err:
        atomic_write_bytes(folder / "x.json", b"{}")
    assert str(err.value).startswith(str(folder)) and "W8_RUNS_ROOT" in str(err.value)
    record = {"file": "summary.md", "text": "hi\n", "sha256": hashlib.sha256(b"hi\n").hexdigest()}
    with pytest.raises(RecordError) as rec_err:
        write_results({"summary.md": record}, folder / "run-x")
    assert str(folder) in str(rec_err.value) and "\n" not in str(rec_err.value)


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on the device: free disk space"),
                                         (errno.EROFS, "read-only file system"),
                                         (errno.EACCES, "permission denied"),
                                         (errno.EDQUOT, "disk quota exceeded")])
def test_each_storage_errno_says_its_fix(code, words):
    err = storage_error("/runs/x/trace.json", OSError(code, "raw"))
    assert str(err).startswith(f"/runs/x/trace.json: {words}") and err.errno == code
