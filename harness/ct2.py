"""CTranslate2 copies of HF models for the ct2 operator: converted once, found again by content.

    from harness.ct2 import ct2_model_dir
    path = ct2_model_dir("/path/to/hf/model", "int8")   # <cache>/<name>-<key>-int8, converted if absent

CTranslate2 (an inference engine for CPUs; `scripts/bench/bench_engines.py` measures it against the hf
operator) runs its own model format, converted from an HF directory by its TransformersConverter
(~10 s for the 135M model). The copy's folder name carries a key of what it was converted from
(the source's path, config.json and the size and mtime of each weight file): a retrained export
at the same path gets a new copy, never a stale one. The cache is W8_CT2_CACHE when set (each step
of a run sets it to <run>/cache/ct2, harness.pipeline.use_run_caches), else .w8-biayn/ct2.
A conversion is written into a temp folder and renamed into place, so a killed one leaves nothing.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from harness.files import WORK_DIR, atomic_dir

COMPUTE_TYPES = ("int8", "int8_float32", "float32")  # what CTranslate2's CPU build offers here
WEIGHTS = (".safetensors", ".bin")


class CT2Error(RuntimeError):
    """A model cannot be converted or loaded by CTranslate2; the message names the model."""


def cache_root() -> Path:
    return Path(os.environ.get("W8_CT2_CACHE") or WORK_DIR / "ct2")


def source_key(hf_dir: str | Path) -> str:
    """16 hex digits of what a conversion reads: the path, config.json, and each weight file's size and mtime."""
    hf_dir = Path(hf_dir).resolve()
    digest = hashlib.sha256(str(hf_dir).encode())
    config = hf_dir / "config.json"
    digest.update(config.read_bytes() if config.is_file() else b"")
    for path in sorted(p for p in hf_dir.iterdir() if p.suffix in WEIGHTS):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def ct2_model_dir(hf_dir: str | Path, compute_type: str = "int8", cache: Path | None = None) -> Path:
    """The CTranslate2 copy of hf_dir quantized to compute_type, converted into the cache on first use."""
    if compute_type not in COMPUTE_TYPES:
        raise CT2Error(f"CTranslate2 compute type {compute_type!r}: expected one of {', '.join(COMPUTE_TYPES)}")
    hf_dir = Path(hf_dir).resolve()
    name = hf_dir.name if hf_dir.name not in ("policy", "") else "-".join(hf_dir.parts[-3:])
    target = (cache or cache_root()) / f"{name}-{source_key(hf_dir)}-{compute_type}"
    if (target / "model.bin").is_file():
        return target
    import ctranslate2.converters

    try:
        with atomic_dir(target) as tmp:
            ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(
                str(tmp), quantization=compute_type, force=True)
    except Exception as err:  # an architecture CTranslate2 lacks, a damaged checkpoint: one line
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise CT2Error(f"model {hf_dir}: CTranslate2 cannot convert it ({type(err).__name__}: {first}); "
                       "use W8_OPERATOR=hf for this model") from None
    return target
