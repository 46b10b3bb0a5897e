"""The GPU node's Python env: SkyRL's release pin, and an offline check of what the node installs.

    python -m harness.node_env check [--out DIR]       # here (make dry-run): sdist, static check, two uv compiles
    python -m harness.node_env check-checkout ~/skyrl  # on the node: the checkout is the release validated here
    python -m harness.node_env constraints             # name==version of the running env (the node's -c file)

The node (scripts/node_setup.sh) builds its env the way SkyRL documents: its repository at
SKYRL_REF, `uv sync --extra fsdp` inside it (SkyRL's pyproject brings torch, vLLM,
flash-attn and flashinfer through [tool.uv.sources] and extra indexes), then
`uv pip install -r sky/requirements-node.txt -c <every package sync installed>`, so our
additions can never move a package SkyRL installed.

`check` replays that here with PyPI only. Stage 1 resolves `skyrl[fsdp]==SKYRL_VERSION` with
SkyRL's own override-dependencies for linux x86_64 / Python 3.12; stage 2 resolves
sky/requirements-node.txt constrained to stage 1's output, as the node does. What it cannot
see: SkyRL's uv.lock (the sdist does not ship it), so stage 1 resolves as of the sdist's
upload time (--exclude-newer): every version the lock holds was published before then, which
keeps stage 1 from picking releases the node can never have (httpx 0.29 and pydantic 2.14
came out after skyrl 0.4.0, and daytona 0.226.1 needs the latter). The lock may still hold
older versions than stage 1; the node's own stage 2 then fails with uv's reason. Packages in
EXTRA_INDEX_ONLY cannot be resolved from PyPI at all; they are left out here and named in
the summary. Standard library only (tomllib included), so it runs under any Python 3.12.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from harness.files import REPO_ROOT, WORK_DIR, atomic_path, atomic_write_text


SKYRL_VERSION = "0.4.0"
SKYRL_GIT_URL = "https://github.com/NovaSky-AI/SkyRL.git"
SKYRL_REF = "skyrl-v0.4.0"  # the node's checkout (scripts/node_setup.sh; W8_SKYRL_REF overrides it there)
SKYRL_SDIST_SHA256 = "fc7d2d0069a5a7520d9c9080209d6603f7b75aed4689da6f6f2d507699be7925"
# Just after skyrl-0.4.0.tar.gz reached PyPI (2026-10-01T21:17:40.74Z, the wheel a second earlier):
# stage 1 resolves as of then, the newest its uv.lock can be (see the module docstring).
SKYRL_RELEASED = "2026-10-01T21:17:41Z"
UV_VERSION = "0.13.8"
SIMPLE_INDEX = "https://pypi.org/simple/"
NODE_REQUIREMENTS = REPO_ROOT / "sky" / "requirements-node.txt"
CACHE_DIR = WORK_DIR / "cache" / f"skyrl-{SKYRL_VERSION}"
PLATFORM = "x86_64-manylinux_2_28"  # the GCP node: linux x86_64, glibc >= 2.28
PYTHON_VERSION = "3.12"
REPORTED = ("torch", "vllm", "transformers", "ray")  # versions the summary names
CORE_PINS = ("torch", "vllm", "transformers")  # a checkout must pin these exactly as the validated sdist

# Packages of SkyRL's fsdp env that PyPI cannot serve at SkyRL's pins (checked 2026-12 against
# https://pypi.org/simple/<name>/). Offline they are resolved away (`<name>; sys_platform == 'never'`);
# on the node SkyRL's [tool.uv.sources] brings them. flash-attn 2.8.3 and causal-conv1d 1.6.2.post1
# are sdist-only on PyPI too, but their sdists carry static metadata (PKG-INFO), so uv resolves
# them without building; they stay in the offline resolution.
EXTRA_INDEX_ONLY = {
    "flashinfer-jit-cache": "not on PyPI at all; SkyRL's flashinfer-cu130 index (https://flashinfer.ai/whl/cu130)",
    "flashinfer-cubin": "PyPI stops at 0.6.13, SkyRL pins 0.6.18.post1; its index https://flashinfer.ai/whl/",
}

# What sky/requirements-node.txt may never name: SkyRL's fsdp extra installs these (CUDA builds from
# its own indexes and wheel URLs), and a second pin would at best fail on the node, at worst move them.
FORBIDDEN = (
    "skyrl", "skyrl-gym", "torch", "torchvision", "torchaudio", "triton", "transformers", "tokenizers", "peft",
    "accelerate", "datasets", "vllm", "vllm-router", "xgrammar", "flash-attn", "flash-attn-4",
    "flash-linear-attention", "causal-conv1d", "flashinfer-*", "nixl", "nixl-*", "nvidia-*", "cuda-*", "ray",
    "jax", "jaxlib",
)


class NodeEnvError(RuntimeError):
    """The node env cannot be validated or is wrong; the message names the fix in one line."""


def normalize(name: str) -> str:
    """PEP 503 name: lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """'torch==2.13.0; sys_platform == "linux"' -> 'torch' ('' if the line does not start with a name)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return normalize(match.group(1)) if match else ""


def _squeeze(text: str) -> str:
    return " ".join(text.split())


# ---- SkyRL's install spec ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SkyrlSpec:
    """What SkyRL's pyproject.toml (and skyrl/__init__.py) say about its fsdp env."""

    version: str  # skyrl.__version__
    fsdp: tuple[str, ...]  # [project.optional-dependencies] fsdp
    overrides: tuple[str, ...]  # [tool.uv] override-dependencies
    indexes: tuple[tuple[str, str], ...]  # [[tool.uv.index]] (name, url)
    sources: tuple[str, ...]  # [tool.uv.sources] package names

    def pins(self, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The fsdp-extra and override entries that name `name`, whitespace squeezed."""
        return _naming(self.fsdp, name), _naming(self.overrides, name)


def _naming(requirements: tuple[str, ...], name: str) -> tuple[str, ...]:
    return tuple(_squeeze(r) for r in requirements if requirement_name(r) == name)


def parse_spec(pyproject_text: str, init_text: str, origin: str) -> SkyrlSpec:
    """A SkyrlSpec from the two files' text; NodeEnvError naming `origin` if they are not SkyRL's."""
    try:
        project = tomllib.loads(pyproject_text)
    except tomllib.TOMLDecodeError as err:
        raise NodeEnvError(f"{origin}/pyproject.toml is not TOML ({err})") from None
    version = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", init_text, re.M)
    fsdp = project.get("project", {}).get("optional-dependencies", {}).get("fsdp")
    uv = project.get("tool", {}).get("uv", {})
    if project.get("project", {}).get("name") != "skyrl" or not fsdp or not version:
        raise NodeEnvError(f"{origin} is not a SkyRL source tree (needs pyproject.toml with name skyrl and an "
                           "fsdp extra, and skyrl/__init__.py with __version__)")
    return SkyrlSpec(version=version.group(1), fsdp=tuple(fsdp), overrides=tuple(uv.get("override-dependencies", ())),
                     indexes=tuple((i["name"], i["url"]) for i in uv.get("index", ())),
                     sources=tuple(uv.get("sources", {})))


def read_sdist_spec(sdist: Path) -> SkyrlSpec:
    """The spec straight from the sdist tarball (nothing unpacked)."""
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist, "r:gz") as tar:
        def text(member: str) -> str:
            try:
                return tar.extractfile(f"{top}/{member}").read().decode()
            except KeyError:
                raise NodeEnvError(f"{sdist} has no {top}/{member}: not SkyRL's sdist (delete it to refetch)") from None
        return parse_spec(text("pyproject.toml"), text("skyrl/__init__.py"), str(sdist))


def read_checkout_spec(skyrl_dir: Path) -> SkyrlSpec:
    files = [skyrl_dir / "pyproject.toml", skyrl_dir / "skyrl" / "__init__.py"]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise NodeEnvError(f"{skyrl_dir} is not a SkyRL checkout (missing {', '.join(missing)}): "
                           f"git clone {SKYRL_GIT_URL} {skyrl_dir}")
    return parse_spec(files[0].read_text(), files[1].read_text(), str(skyrl_dir))


def check_checkout(skyrl_dir: Path, expected: SkyrlSpec) -> list[str]:
    """Problems (one line each) where a SkyRL checkout differs from the sdist validated offline."""
    try:
        found = read_checkout_spec(Path(skyrl_dir))
    except NodeEnvError as err:
        return [str(err)]
    fix = (f"check out W8_SKYRL_REF=skyrl-v{expected.version}, or move SKYRL_VERSION/SKYRL_SDIST_SHA256 in "
           "harness/node_env.py to that release and rerun `make dry-run`")
    problems = []
    if found.version != expected.version:
        problems.append(f"{skyrl_dir} is skyrl {found.version}, the validated release is {expected.version}: {fix}")
    for name in CORE_PINS:
        for where, got, want in zip(("fsdp extra", "override-dependencies"), found.pins(name), expected.pins(name)):
            if got != want:
                problems.append(f"{skyrl_dir}/pyproject.toml {where} pins {name} as {list(got)}, the validated "
                                f"sdist as {list(want)}: {fix}")
    return problems


# ---- the sdist ------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _open(url: str, headers: dict[str, str]):
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60)
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise NodeEnvError(f"cannot fetch {url} ({reason}): the check needs PyPI; run it online") from None


def _sdist_entry(index: str, filename: str) -> dict:
    """The file entry of `filename` in PyPI's simple JSON API (PEP 691)."""
    url = f"{index.rstrip('/')}/skyrl/"
    with _open(url, {"Accept": "application/vnd.pypi.simple.v1+json"}) as response:
        files = json.load(response).get("files", [])
    for entry in files:
        if entry.get("filename") == filename:
            return entry
    raise NodeEnvError(f"{url} lists no {filename}: is SKYRL_VERSION in harness/node_env.py a released version?")


def fetch_sdist(cache_dir: Path, version: str, sha256: str, index: str) -> Path:
    """skyrl-<version>.tar.gz in cache_dir, checked against `sha256`; fetched from `index` unless cached."""
    filename = f"skyrl-{version}.tar.gz"
    target = Path(cache_dir) / filename
    if target.is_file() and _sha256(target) == sha256:
        return target
    entry = _sdist_entry(index, filename)
    listed = entry.get("hashes", {}).get("sha256")
    if listed != sha256:
        raise NodeEnvError(f"PyPI lists sha256 {listed} for {filename}, harness/node_env.py pins {sha256}: "
                           "the release changed; review it and update SKYRL_SDIST_SHA256")
    with atomic_path(target) as tmp:
        with _open(entry["url"], {}) as response, open(tmp, "wb") as f:
            shutil.copyfileobj(response, f)
        if _sha256(tmp) != sha256:
            raise NodeEnvError(f"{entry['url']} downloaded with a different sha256 than {sha256}: retry (a broken "
                               "download or proxy)")
    return target


# ---- sky/requirements-node.txt -----------------------------------------------------------------------
def _forbidden(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in FORBIDDEN)


def _line_problem(line: str) -> str:
    if line.startswith("-"):
        return f"`{line}` is an option, not a plain requirement (the node installs name==version lines)"
    if "://" in line or " @ " in line or line.startswith((".", "/", "~")):
        return f"`{line}` is a URL or path, not a plain requirement (the node installs name==version lines)"
    match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[A-Za-z0-9,._ -]+\])?\s*((?:[<>=!~]=?=?)[^;]*)?(;.*)?",
                         line)
    if not match:
        return f"`{line}` is not a requirement"
    name, specifier = normalize(match.group(1)), match.group(3) or ""
    if _forbidden(name):
        return f"{name} is SkyRL's (its fsdp env installs it); remove it from the node requirements"
    if not re.fullmatch(r"==\s*[A-Za-z0-9.+!_-]+\s*", specifier):
        return f"{name} is not pinned as {name}==<version> (the node must install what was validated)"
    return ""


def check_requirements_text(text: str) -> list[str]:
    """One line per problem in a node requirements file: options, URLs, unpinned or SkyRL-owned packages."""
    problems = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*", "", raw).strip()
        problem = _line_problem(line) if line else ""
        if problem:
            problems.append(f"line {number}: {problem}")
    return problems


# ---- uv pip compile ------------------------------------------------------------------------------------
def find_uv() -> str:
    """The uv next to this interpreter (the venv's), else on PATH; NodeEnvError unless it is UV_VERSION."""
    here = Path(sys.executable).parent / "uv"
    uv = str(here) if here.is_file() else shutil.which("uv")
    if not uv:
        raise NodeEnvError(f"uv not found: pip install uv=={UV_VERSION} (make setup does)")
    found = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.split()
    if found[1:2] != [UV_VERSION]:
        raise NodeEnvError(f"{uv} is uv {' '.join(found[1:2]) or '?'}, the node uses {UV_VERSION}: "
                           f"pip install uv=={UV_VERSION}")
    return uv


def uv_reason(stderr: str) -> str:
    """uv's failure in one line: what follows its `error:`, whitespace squeezed."""
    start = stderr.find("error:")
    text = _squeeze(stderr[start + len("error:"):] if start >= 0 else stderr)
    return (text[:600] + " ...") if len(text) > 600 else text or "no output"


def uv_compile(uv: str, args: list[str], out: Path, what: str) -> None:
    """`uv pip compile <args>` for the node's platform into `out`, headed by what it is (temp, then rename)."""
    tmp = out.with_name(f".{out.name}.uv{os.getpid()}")  # uv writes it; copied into place below when complete
    # --python: the interpreter uv would build an sdist's metadata with (none needs building today); without
    # it uv tries to download a CPython 3.12 when the one on PATH is another version.
    cmd = [uv, "pip", "compile", *args, "--python-platform", PLATFORM, "--python-version", PYTHON_VERSION,
           "--python", sys.executable, "--no-header", "--quiet", "-o", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent, timeout=600)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise NodeEnvError(f"{what} does not resolve: {uv_reason(proc.stderr)}")
    shown = " ".join(Path(a).name if os.sep in a else a for a in args)
    atomic_write_text(out, f"# {what}: uv {UV_VERSION} pip compile {shown}\n#   for {PLATFORM} / Python "
                           f"{PYTHON_VERSION} (harness/node_env.py)\n" + tmp.read_text())
    tmp.unlink()


def read_pins(path: Path) -> dict[str, str]:
    """name -> version of a compiled requirements file (name==version lines)."""
    pins = {}
    for line in Path(path).read_text().splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", line)
        if match:
            pins[normalize(match.group(1))] = match.group(2)
    return pins


def stage1_overrides(spec: SkyrlSpec) -> list[str]:
    """SkyRL's override-dependencies, minus the extra-index-only packages, which are resolved away instead."""
    kept = [o for o in spec.overrides if requirement_name(o) not in EXTRA_INDEX_ONLY]
    return kept + [f"{name}; sys_platform == 'never'" for name in sorted(EXTRA_INDEX_ONLY)]


def compile_skyrl(spec: SkyrlSpec, out_dir: Path, uv: str) -> Path:
    """Stage 1: skyrl[fsdp]==<version> as of its release -> out_dir/node-env-stage1.txt."""
    overrides = out_dir / "node-env-overrides.txt"
    overrides.write_text("\n".join(stage1_overrides(spec)) + "\n")
    out = out_dir / "node-env-stage1.txt"
    with tempfile.TemporaryDirectory() as tmp:
        request = Path(tmp) / "skyrl.in"
        request.write_text(f"skyrl[fsdp]=={spec.version}\n")
        uv_compile(uv, [str(request), "--override", str(overrides), "--exclude-newer", SKYRL_RELEASED], out,
                   f"skyrl[fsdp]=={spec.version} (with {overrides.name})")
    return out


def compile_additions(requirements: Path, constraints: Path, out_dir: Path, uv: str) -> Path:
    """Stage 2: the node requirements constrained to stage 1 (the node's `uv pip install -c`) -> out_dir."""
    out = out_dir / "node-env-stage2.txt"
    uv_compile(uv, [str(requirements), "--constraint", str(constraints)], out,
               f"{requirements.name} on top of SkyRL's env")
    return out


@dataclass(frozen=True)
class NodeEnvSummary:
    skyrl_version: str
    packages: int  # stage 1: SkyRL's fsdp env as resolved from PyPI
    requested: tuple[str, ...]  # what sky/requirements-node.txt names
    added: tuple[str, ...]  # packages stage 2 adds to stage 1
    versions: dict[str, str]  # REPORTED -> version
    excluded: tuple[str, ...]  # EXTRA_INDEX_ONLY, not resolved here
    wall_s: float

    def line(self) -> str:
        versions = ", ".join(f"{name} {version}" for name, version in self.versions.items())
        return (f"node env ok: skyrl {self.skyrl_version} [fsdp] {self.packages} packages + {len(self.added)} for "
                f"requirements-node.txt ({', '.join(self.requested)}); {versions}; extra-index only, not resolved "
                f"here: {', '.join(self.excluded)}; {self.wall_s:.1f}s")


def compile_node_env(spec: SkyrlSpec, requirements: Path, out_dir: Path, uv: str) -> NodeEnvSummary:
    """Static check of `requirements`, then both stages into out_dir; NodeEnvError with the first problem."""
    started = time.monotonic()
    text = Path(requirements).read_text()
    problems = check_requirements_text(text)
    if problems:
        raise NodeEnvError(f"{requirements}: {problems[0]}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stage1 = read_pins(compile_skyrl(spec, out_dir, uv))
    missing = [name for name in REPORTED if name not in stage1]
    if missing:
        raise NodeEnvError(f"skyrl[fsdp]=={spec.version} resolved without {', '.join(missing)}: its fsdp extra "
                           "changed; read its pyproject.toml before launching")
    stage2 = read_pins(compile_additions(Path(requirements), out_dir / "node-env-stage1.txt", out_dir, uv))
    requested = tuple(requirement_name(line) for line in text.splitlines() if requirement_name(line))
    return NodeEnvSummary(spec.version, len(stage1), requested, tuple(sorted(set(stage2) - set(stage1))),
                          {name: stage1[name] for name in REPORTED}, tuple(sorted(EXTRA_INDEX_ONLY)),
                          time.monotonic() - started)


# ---- the running env as constraints ---------------------------------------------------------------------
def installed_pins() -> tuple[list[str], list[str]]:
    """(name==version of every installed distribution, names skipped as editable or local-path installs)."""
    pins: dict[str, str] = {}
    skipped: list[str] = []
    for dist in importlib.metadata.distributions():
        name = normalize(dist.metadata["Name"] or "")
        if not name or name in pins or name in skipped:
            continue  # the first one on sys.path is the one Python imports
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
        if "dir_info" in direct or direct.get("url", "").startswith("file:"):
            skipped.append(name)  # an editable or path install has no version an index could satisfy
            continue
        pins[name] = f"{name}=={dist.version}"
    return sorted(pins.values()), sorted(skipped)


# ---- command line ---------------------------------------------------------------------------------------
def skyrl_spec() -> SkyrlSpec:
    """The validated release's spec, from the cached (or freshly fetched) sdist."""
    return read_sdist_spec(fetch_sdist(CACHE_DIR, SKYRL_VERSION, SKYRL_SDIST_SHA256, SIMPLE_INDEX))


def _check(out: Path, requirements: Path) -> str:
    return compile_node_env(skyrl_spec(), requirements, out, find_uv()).line()


def _check_checkout(skyrl_dir: Path) -> str:
    problems = check_checkout(skyrl_dir, skyrl_spec())
    if problems:
        raise NodeEnvError(problems[0])
    return (f"skyrl checkout ok: {skyrl_dir} is skyrl {SKYRL_VERSION} with the validated "
            f"{'/'.join(CORE_PINS)} pins")


def _constraints() -> str:
    pins, skipped = installed_pins()
    head = (f"# {len(pins)} packages of {sys.executable}; skipped (editable or path installs): "
            f"{', '.join(skipped) or 'none'}")
    return "\n".join([head, *pins])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.node_env", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="offline: fetch the sdist, check and compile the node env")
    check.add_argument("--out", type=Path, default=CACHE_DIR / "compile", help="where the compiled files go")
    check.add_argument("--requirements", type=Path, default=NODE_REQUIREMENTS, help="the node requirements file")
    checkout = sub.add_parser("check-checkout", help="on the node: a SkyRL checkout is the validated release")
    checkout.add_argument("skyrl_dir", type=Path)
    sub.add_parser("constraints", help="name==version of every package of this interpreter")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            print(_check(args.out, args.requirements))
        elif args.command == "check-checkout":
            print(_check_checkout(args.skyrl_dir.expanduser()))
        else:
            print(_constraints())
    except NodeEnvError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
