"""HF exports: `<root>/global_step_N/policy` folders holding config.json.

    from harness.exports import newest_export, fetch_newest_export
    newest_export(run_dir / "grpo")                        # Path of the highest N, or None
    fetch_newest_export("gs://bucket/run/grpo", run_dir / "grpo")   # bucket -> same layout locally

The layout is SkyRL's (`hf_save_interval` > 0 writes export_path/global_step_N/policy) and
the local TRL trainer's, so steps 03 and 04 find a trained model the same way on CPU and
GPU. With W8_BUCKET, SkyRL writes exports to the bucket (FSDP rank 0 may sit on any node of
a several-node cluster) and the head fetches the newest one with fsspec (gcsfs on the node;
file:// in tests). An export without config.json is incomplete and ignored; check_export
proves the weights are whole (each safetensors header parses and its tensors end exactly at
the end of the file) without loading them, so a half-copied export is named in one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.files import atomic_dir

EXPORT_DIR = re.compile(r"global_step_(\d+)")


class ExportError(RuntimeError):
    """No usable export where one was expected; the message names the place."""


def safetensors_problem(path: Path) -> str | None:
    """What makes a .safetensors file unreadable (truncated, bad header), or None: reads the header only.
    The format: 8 bytes little-endian header length, a JSON header of tensor data_offsets, the data."""
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes, shorter than a safetensors header"
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if 8 + length > size:
            return f"truncated: the header wants {length} bytes, the file has {size - 8}"
        try:
            header = json.loads(f.read(length))
        except ValueError:
            return "corrupt header (not JSON)"
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + length + max(ends, default=0)
    return None if expected == size else f"{size} bytes, its header says {expected} (truncated or overwritten)"


def check_export(policy: str | Path) -> Path:
    """`policy` if it is a whole HF export (config.json and every weights file readable), else ExportError
    naming the file and the fix."""
    policy = Path(policy)
    fix = "redo the step that wrote it (rerun with the same W8_RUN_ID: its marker no longer matches)"
    if not (policy / "config.json").is_file():
        raise ExportError(f"{policy}: no config.json; {fix}")
    weights = sorted(policy.glob("*.safetensors"))
    if not weights and not any(policy.glob("*.bin")):
        raise ExportError(f"{policy}: no weights (*.safetensors); {fix}")
    index = policy / "model.safetensors.index.json"
    if index.is_file():
        shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        missing = sorted(name for name in shards if not (policy / name).is_file())
        if missing:
            raise ExportError(f"{policy}: missing weight shard(s) {', '.join(missing)}; {fix}")
    for path in weights:
        problem = safetensors_problem(path)
        if problem:
            raise ExportError(f"{path}: {problem}; {fix}")
    return policy


def newest_export_step(root: str | Path) -> tuple[int, Path] | None:
    """(N, path) of the newest complete `global_step_N/policy` under root, or None."""
    best: tuple[int, Path] | None = None
    for policy in Path(root).glob("global_step_*/policy"):
        match = EXPORT_DIR.fullmatch(policy.parent.name)
        if match and (policy / "config.json").is_file() and (best is None or int(match.group(1)) > best[0]):
            best = (int(match.group(1)), policy)
    return best


def newest_export(root: str | Path) -> Path | None:
    found = newest_export_step(root)
    return found[1] if found else None


def fetch_newest_export(uri: str, local_root: str | Path) -> Path:
    """Copy the newest complete export under `uri` (gs://..., file://...) to local_root/global_step_N/policy."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(uri)
    steps = []
    for config in fs.glob(f"{root.rstrip('/')}/global_step_*/policy/config.json"):
        match = EXPORT_DIR.fullmatch(Path(config).parent.parent.name)
        if match:
            steps.append((int(match.group(1)), str(Path(config).parent)))
    if not steps:
        raise ExportError(f"no global_step_N/policy with config.json under {uri}")
    step, remote = max(steps)
    target = Path(local_root) / f"global_step_{step}" / "policy"
    if (target / "config.json").is_file():
        return target
    partial = target.with_name("policy.partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    fs.get(remote.rstrip("/") + "/", str(partial), recursive=True)
    partial.rename(target)  # the config.json that marks it complete appears only with the whole folder
    return target


def quiet_transformers() -> None:
    """No per-load and per-save progress bars ("Loading weights", "Writing model shards") and no repeated
    advice from transformers: a run loads a model once per arm and saves once per training, and those
    lines said nothing a step's own one-line summary does not. Errors still print."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def save_hf(model, tokenizer, final: Path, extra_files: dict[str, str] | None = None) -> Path:
    """Save model + tokenizer (+ small text files) to `final` whole or not at all (harness.files.atomic_dir)."""
    quiet_transformers()
    with atomic_dir(final) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return final


def export_policy(model, tokenizer, out_dir: str | Path, step: int) -> Path:
    """An HF export at out_dir/global_step_N/policy: SkyRL's layout, so steps 03 and 04 find it alike."""
    return save_hf(model, tokenizer, Path(out_dir) / f"global_step_{step}" / "policy")
