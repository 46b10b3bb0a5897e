"""GGUF copies of HF checkpoints for the llamacpp operator: written once, found again by content.

    from harness.gguf_export import gguf_for
    path = gguf_for("/path/to/global_step_8/policy", "Q8_0")   # <cache>/<name>-<key>-Q8_0.gguf
    path = gguf_for(base_dir, "Q4_1", shipped=find_embedded_gguf())  # the shipped file when it has that type

The run's exports (SFT, GRPO, self rounds) are HF checkpoints of the embedded model's architecture.
llama.cpp's own converter (convert_hf_to_gguf.py) takes our exports' tokenizer for a `llama` one
holding GPT-2 byte pieces, so llama.cpp's decoding prints `Ġ`/`Ċ`. The copy is therefore written
with gguf-py on the shipped GGUF as its template: every metadata key (architecture,
hyperparameters, tokenizer, chat template) comes from the shipped file, and only the weights come
from the checkpoint: names through gguf-py's own TensorNameMap, the q/k rows permuted the way
llama.cpp's converter permutes them (llama.cpp's rope pairs neighbouring dimensions, HF's rotates
halves), 1-D weights (norms) kept in F32, every other weight quantized to the requested type. The
shipped file itself is the base model's weights exactly (its HF checkpoint is their
dequantization), so the base model at the shipped file's own type is served by that file as is.

The cache key is the sha256 of what a conversion reads (config.json and every weight file, byte by
byte), so a retrained export at the same path gets a new copy, never a stale one. The cache is
W8_GGUF_CACHE when set (each step of a run sets <run>/cache/gguf), else .w8-biayn/gguf. A copy is
written to a temp file and renamed into place, then its size and sha256 go into `<copy>.json`;
a copy whose size or hash no longer matches (a killed write, a damaged disk) is named and rebuilt.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable

from harness.files import WORK_DIR, atomic_path, atomic_write_json, file_digest, read_json
from harness.models import find_embedded_gguf

TYPES = ("F32", "F16", "Q8_0", "Q4_1")  # what the copy's 2-D weights may be quantized to
WEIGHTS = (".safetensors", ".bin")


class GGUFError(RuntimeError):
    """A checkpoint cannot be written as GGUF; the message names the checkpoint and the fix."""


def cache_root() -> Path:
    return Path(os.environ.get("W8_GGUF_CACHE") or WORK_DIR / "gguf")


def content_key(hf_dir: str | Path) -> str:
    """16 hex digits of the sha256 of config.json and every weight file (name and bytes) of a checkpoint."""
    hf_dir = Path(hf_dir)
    digest = hashlib.sha256()
    for path in [hf_dir / "config.json"] + sorted(p for p in hf_dir.iterdir() if p.suffix in WEIGHTS):
        digest.update(path.name.encode() + b"\0" + file_digest(path)["sha256"].encode())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=16)
def _file_type(path: str, size: int, mtime_ns: int) -> str:
    import gguf

    field = gguf.GGUFReader(path).fields.get("general.file_type")
    if field is None:
        return "F32"
    return gguf.LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_").removeprefix("ALL_")


def file_type_name(path: str | Path) -> str:
    """The quantization a GGUF file declares (general.file_type), e.g. 'Q4_1' (gguf-py parses the whole header,
    seconds for the tokenizer's arrays: kept per file, size and mtime)."""
    stat = Path(path).stat()
    return _file_type(str(path), stat.st_size, stat.st_mtime_ns)


def damage(path: Path) -> str | None:
    """Why a cached copy cannot be trusted (size or hash differs from its record, no record), or None."""
    record_path = path.with_name(path.name + ".json")
    if not path.is_file():
        return None if not record_path.exists() else f"{path.name} is missing"
    try:
        want = read_json(record_path)
    except Exception:
        return f"{path.name} has no readable size-and-hash record"
    have = file_digest(path) if path.stat().st_size == want.get("bytes") else {"bytes": path.stat().st_size}
    if have.get("bytes") != want.get("bytes"):
        return f"{path.name}: {have['bytes']} bytes, its record says {want.get('bytes')}"
    if have.get("sha256") != want.get("sha256"):
        return f"{path.name}: sha256 differs from its record"
    return None


def gguf_for(hf_dir: str | Path, qtype: str, shipped: Path | None = None, cache: Path | None = None,
             say: Callable[[str], None] = print) -> Path:
    """The GGUF of the checkpoint `hf_dir` at `qtype`. `shipped`: the GGUF file `hf_dir` was dequantized from
    (the base model), served as is when it is of that type; otherwise a cached copy is written on first use
    (a damaged one is rebuilt), with the shipped model's metadata as its template."""
    if qtype not in TYPES:
        raise GGUFError(f"GGUF type {qtype!r}: expected one of {', '.join(TYPES)}")
    if shipped is not None and file_type_name(shipped) == qtype:
        return Path(shipped)
    hf_dir = Path(hf_dir).resolve()
    name = hf_dir.name if hf_dir.name not in ("policy", "") else "-".join(hf_dir.parts[-3:-1])
    target = (cache or cache_root()) / f"{name}-{content_key(hf_dir)}-{qtype}.gguf"
    problem = damage(target)
    if problem is None and target.is_file():
        return target
    if problem:
        say(f"gguf cache: {problem}; writing it again")
    template = find_embedded_gguf()  # the shipped model: metadata, tokenizer and tensor list of every copy
    with atomic_path(target) as tmp:
        write_gguf(hf_dir, tmp, qtype, template)
    atomic_write_json(target.with_name(target.name + ".json"), {**file_digest(target), "source": str(hf_dir),
                                                               "type": qtype, "template": Path(template).name})
    return target


def permute(weights, n_head: int):
    """HF's q/k rows (rotate-half rope) in llama.cpp's order (neighbouring pairs), as convert_hf_to_gguf does."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def write_gguf(hf_dir: Path, out: Path, qtype: str, template: Path) -> None:
    """The checkpoint's weights with the template's metadata, 2-D weights at `qtype`, into `out`."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    reader = gguf.GGUFReader(str(template))
    arch = reader.fields["general.architecture"].contents()
    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise GGUFError(f"checkpoint {hf_dir} has no .safetensors weights (an HF export writes them)")
    hf = {k: v for f in files for k, v in load_file(str(f)).items()}
    n_head = int(reader.fields[f"{arch}.attention.head_count"].contents())
    n_kv = int(reader.fields[f"{arch}.attention.head_count_kv"].contents())
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()],
                                     int(reader.fields[f"{arch}.block_count"].contents()))
    tensors = {}
    for key, value in hf.items():
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise GGUFError(f"checkpoint {hf_dir}: tensor {key} has no GGUF name for {arch}")
        value = value.astype(np.float32)
        if key.endswith("q_proj.weight"):
            value = permute(value, n_head)
        elif key.endswith("k_proj.weight"):
            value = permute(value, n_kv)
        tensors[name] = value
    wanted = [t.name for t in reader.tensors]
    missing = [n for n in wanted if n not in tensors]
    if missing:
        raise GGUFError(f"checkpoint {hf_dir} lacks {len(missing)} tensor(s) of its template, e.g. {missing[0]}")
    extra = [n for n in tensors if n not in wanted and not (n == "output.weight" and np.array_equal(
        tensors[n], tensors.get("token_embd.weight")))]  # a tied output head is the embedding again
    if extra:
        raise GGUFError(f"checkpoint {hf_dir} has tensors its template lacks, e.g. {extra[0]} (another architecture?)")
    writer = gguf.GGUFWriter(str(out), arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue  # written by the writer itself
        value = int(gguf.LlamaFileType["ALL_F32" if qtype == "F32" else f"MOSTLY_{qtype}"]) \
            if field.name == "general.file_type" else field.contents()
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub)
    for name in wanted:
        data = tensors[name]
        if data.ndim == 1 or qtype == "F32":
            writer.add_tensor(name, data)
        elif qtype == "F16":
            writer.add_tensor(name, data.astype(np.float16))
        else:
            kind = gguf.GGMLQuantizationType[qtype]
            writer.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
