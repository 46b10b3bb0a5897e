"""harness.node_env and scripts/node_setup.sh: the real SkyRL sdist from PyPI, real `uv pip compile` runs.

Needs PyPI (this machine and CI reach it). The sdist is cached under .w8-biayn/cache and uv keeps
its own cache, so a warm run of this file takes seconds.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness import node_env
from harness.node_env import NodeEnvError

REPO = Path(__file__).resolve().parent.parent
TORCH_PIN = "torch==2.13.0; sys_platform == 'linux'"
# Where sky/requirements-node.txt may differ from requirements.txt, and why: nowhere (daytona is 0.224.0 in
# both: 0.226.1 needs pydantic>=2.14.1, newer than SkyRL 0.4.0's env; test_daytona_... proves it).
DIVERGES: dict[str, str] = {}


@pytest.fixture(scope="session")
def sdist() -> Path:
    return node_env.fetch_sdist(node_env.CACHE_DIR, node_env.SKYRL_VERSION, node_env.SKYRL_SDIST_SHA256,
                                node_env.SIMPLE_INDEX)


@pytest.fixture(scope="session")
def spec(sdist):
    return node_env.read_sdist_spec(sdist)


@pytest.fixture(scope="session")
def checked(sdist, tmp_path_factory):
    """`python -m harness.node_env check --out DIR`, as make dry-run runs it: (process, DIR)."""
    out = tmp_path_factory.mktemp("node-env")
    proc = subprocess.run([sys.executable, "-m", "harness.node_env", "check", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    return proc, out


@pytest.fixture
def checkout(sdist, tmp_path) -> Path:
    """The sdist's pyproject.toml and skyrl/__init__.py laid out as a checkout (at skyrl-v0.3.0 the sdist's
    pyproject.toml is byte-identical to the tag's, so this is what the node's checkout holds)."""
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as tar:
        for member in ("pyproject.toml", "skyrl/__init__.py"):
            target = tmp_path / "skyrl-checkout" / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(f"{top}/{member}").read())
    return tmp_path / "skyrl-checkout"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---- the sdist and its spec ----------------------------------------------------------------------------
def test_the_sdist_spec_holds_skyrls_fsdp_pins_indexes_and_sources(spec):
    assert spec.version == node_env.SKYRL_VERSION
    assert spec.pins("torch") == ((TORCH_PIN,), (TORCH_PIN,))
    assert spec.pins("vllm") == (("vllm==0.30.0; sys_platform == 'linux'",), ())
    assert "flashinfer-cu130" in dict(spec.indexes) and "pytorch-cu130" in dict(spec.indexes)
    # every package resolved away offline is one SkyRL's own sources serve on the node
    assert set(node_env.EXTRA_INDEX_ONLY) <= set(spec.sources)


def test_extra_index_only_packages_really_are_missing_from_pypi_at_skyrls_pins(spec):
    """Re-checks the exclusion list against PyPI, so a package that gets published there is noticed."""
    import urllib.error
    import urllib.request

    for name in node_env.EXTRA_INDEX_ONLY:
        pinned = re.search(r"==([^;\s]+)", next(r for r in spec.fsdp if node_env.requirement_name(r) == name))[1]
        request = urllib.request.Request(f"{node_env.SIMPLE_INDEX}{name}/",
                                         headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                versions = json.load(response)["versions"]
        except urllib.error.HTTPError as err:
            assert err.code == 404, f"{name}: {err}"
            versions = []
        assert pinned not in versions, f"{name} {pinned} is on PyPI now: drop it from EXTRA_INDEX_ONLY"


def test_a_cached_sdist_is_reused_and_a_corrupt_one_refetched(sdist, tmp_path):
    cached = tmp_path / sdist.name
    shutil.copy(sdist, cached)
    stamp = cached.stat().st_mtime_ns
    pinned = (node_env.SKYRL_VERSION, node_env.SKYRL_SDIST_SHA256, node_env.SIMPLE_INDEX)
    assert node_env.fetch_sdist(tmp_path, *pinned) == cached and cached.stat().st_mtime_ns == stamp
    cached.write_bytes(b"not a tarball")
    node_env.fetch_sdist(tmp_path, *pinned)
    assert node_env._sha256(cached) == node_env.SKYRL_SDIST_SHA256
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("version, sha256, index, message", [
    ("0.4.0", "0" * 64, node_env.SIMPLE_INDEX, "update SKYRL_SDIST_SHA256"),  # the release changed under the pin
    ("9.9.9", "0" * 64, node_env.SIMPLE_INDEX, "lists no skyrl-9.9.9.tar.gz"),
    ("0.4.0", node_env.SKYRL_SDIST_SHA256, "http://127.0.0.1:9/simple/",  # offline
     "cannot fetch http://127.0.0.1:9/simple/skyrl/"),
])
def test_fetch_fails_in_one_line_naming_the_fix(tmp_path, version, sha256, index, message):
    with pytest.raises(NodeEnvError, match=re.escape(message)) as err:
        node_env.fetch_sdist(tmp_path, version, sha256, index)
    assert "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())  # nothing half-written


# ---- the static check of sky/requirements-node.txt ------------------------------------------------------
@pytest.mark.parametrize("text, problem", [
    ("matplotlib==3.11.2  # plots\n", None),
    ("# only a comment\n\n", None),
    ("daytona==0.224.0 ; python_version >= '3.12'\n", None),
    ("torch==2.14.1\n", "line 1: torch is SkyRL's"),
    ("matplotlib==3.11.2\nflashinfer-cubin==0.6.13\n", "line 2: flashinfer-cubin is SkyRL's"),
    ("Flash_Attn==2.8.3\n", "flash-attn is SkyRL's"),  # names are compared normalized
    ("nvidia-nccl-cu13==2.28.9\n", "nvidia-nccl-cu13 is SkyRL's"),
    ("skyrl-gym\n", "skyrl-gym is SkyRL's"),
    ("matplotlib>=3.10\n", "matplotlib is not pinned"),
    ("matplotlib\n", "matplotlib is not pinned"),
    ("-e ./vendor/pkg\n", "is an option"),
    ("--index-url https://example.com/simple\n", "is an option"),
    ("pkg @ https://example.com/pkg.whl\n", "is a URL or path"),
    ("./wheels/pkg.whl\n", "is a URL or path"),
    ("what is this?\n", "is not a requirement"),
])
def test_check_requirements_text(text, problem):
    problems = node_env.check_requirements_text(text)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


def test_the_node_requirements_pass_and_pin_what_requirements_txt_pins():
    node = node_env.read_pins(node_env.NODE_REQUIREMENTS)
    cpu = node_env.read_pins(REPO / "requirements.txt")
    assert node_env.check_requirements_text(node_env.NODE_REQUIREMENTS.read_text()) == []
    assert node and set(node) <= set(cpu)  # everything the node adds is something the pipeline already uses here
    assert {name for name in node if node[name] != cpu[name]} == set(DIVERGES)


# ---- uv pip compile: both stages ------------------------------------------------------------------------
@pytest.mark.slow  # over 5 s on 2 cores: runs in make test-slow
def test_check_compiles_skyrls_env_and_our_additions_on_top(checked):
    proc, out = checked
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("node env ok: skyrl 0.4.0 [fsdp]")
    assert "torch 2.13.0, vllm 0.30.0, transformers 5.16.1, ray 2.57.0" in line
    assert "flashinfer-cubin, flashinfer-jit-cache" in line
    stage1 = node_env.read_pins(out / "node-env-stage1.txt")
    stage2 = node_env.read_pins(out / "node-env-stage2.txt")
    assert not set(node_env.EXTRA_INDEX_ONLY) & set(stage1)
    assert stage1["flash-attn"] == "2.8.3" and stage1["skyrl-gym"] == "0.4.0"  # resolved, not excluded
    assert stage2["daytona"] == "0.210.0" and stage2["matplotlib"] == "3.11.2"
    moved = {name: (stage1[name], stage2[name]) for name in set(stage1) & set(stage2) if stage1[name] != stage2[name]}
    assert moved == {}  # stage 2 never moves a stage-1 package
    overrides = (out / "node-env-overrides.txt").read_text().splitlines()
    assert "flashinfer-jit-cache; sys_platform == 'never'" in overrides and TORCH_PIN in overrides
    assert not [o for o in overrides if o.startswith("flashinfer-jit-cache==")]


def test_a_torch_pin_is_stopped_by_the_static_check(spec, tmp_path):
    requirements = write(tmp_path / "requirements-node.txt", "matplotlib==3.11.2\ntorch==2.14.1\n")
    with pytest.raises(NodeEnvError, match="line 2: torch is SkyRL's"):
        node_env.compile_node_env(spec, requirements, tmp_path / "out", node_env.find_uv())
    assert not (tmp_path / "out").exists()  # nothing compiled


@pytest.mark.slow  # over 5 s on 2 cores: runs in make test-slow
def test_a_torch_pin_past_the_static_check_fails_stage_two_naming_torch(checked, tmp_path):
    """What the node's `uv pip install -c` would hit: SkyRL's torch cannot be moved."""
    requirements = write(tmp_path / "requirements-node.txt", "torch==2.14.1\n")
    with pytest.raises(NodeEnvError, match=r"does not resolve: .*torch==2\.14\.1.*torch==2\.13\.0") as err:
        node_env.compile_additions(requirements, checked[1] / "node-env-stage1.txt", tmp_path, node_env.find_uv())
    assert "\n" not in str(err.value)
    assert not (tmp_path / "node-env-stage2.txt").exists()


@pytest.mark.slow  # over 5 s on 2 cores: runs in make test-slow
def test_daytona_from_requirements_txt_does_not_fit_skyrls_env(checked, tmp_path):
    requirements = write(tmp_path / "requirements-node.txt", "daytona==0.226.1\n")
    with pytest.raises(NodeEnvError, match="pydantic"):
        node_env.compile_additions(requirements, checked[1] / "node-env-stage1.txt", tmp_path, node_env.find_uv())


# ---- the node's checkout ---------------------------------------------------------------------------------
def test_the_release_checkout_passes(checkout, spec):
    assert node_env.check_checkout(checkout, spec) == []


def test_a_checkout_with_another_torch_pin_is_named(checkout, spec):
    pyproject = checkout / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(TORCH_PIN, "torch==2.14.0; sys_platform == 'linux'"))
    problems = node_env.check_checkout(checkout, spec)
    assert len(problems) == 2 and "fsdp extra pins torch as" in problems[0], problems
    assert "override-dependencies pins torch as" in problems[1] and "2.14.0" in problems[1]
    assert all("W8_SKYRL_REF=skyrl-v0.4.0" in p for p in problems)


def test_a_checkout_of_another_release_is_named(checkout, spec):
    (checkout / "skyrl" / "__init__.py").write_text('__version__ = "0.5.0"\n')
    assert node_env.check_checkout(checkout, spec) == [
        f"{checkout} is skyrl 0.5.0, the validated release is 0.4.0: check out W8_SKYRL_REF=skyrl-v0.4.0, or move "
        "SKYRL_VERSION/SKYRL_SDIST_SHA256 in harness/node_env.py to that release and rerun `make dry-run`"]


def test_check_checkout_cli(checkout, tmp_path):
    def run(path):
        return subprocess.run([sys.executable, "-m", "harness.node_env", "check-checkout", str(path)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    ok, missing = run(checkout), run(tmp_path / "nowhere")
    assert ok.returncode == 0 and ok.stdout.startswith("skyrl checkout ok:"), ok.stderr
    assert missing.returncode == 1 and missing.stderr.startswith("error: ")
    assert "is not a SkyRL checkout" in missing.stderr


# ---- constraints of the running env -----------------------------------------------------------------------
def test_constraints_pin_every_installed_package_and_skip_editable_installs(tmp_path):
    """A real dist-info of an editable install on the path is skipped; everything else is name==version."""
    info = tmp_path / "site" / "w8_editable_probe-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: w8-editable-probe\nVersion: 1.0\n")
    (info / "direct_url.json").write_text(json.dumps({"url": "file:///src/probe", "dir_info": {"editable": True}}))
    proc = subprocess.run([sys.executable, "-m", "harness.node_env", "constraints"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    head, *pins = proc.stdout.splitlines()
    assert "skipped (editable or path installs): w8-editable-probe" in head
    assert f"pytest=={pytest.__version__}" in pins and not [p for p in pins if "w8-editable-probe" in p]
    assert all(re.fullmatch(r"[a-z0-9-]+==\S+", p) for p in pins)


# ---- scripts/node_setup.sh ---------------------------------------------------------------------------------
def test_node_setup_parses_and_pins_what_node_env_pins():
    script = (REPO / "scripts" / "node_setup.sh").read_text()
    parsed = subprocess.run(["bash", "-n", str(REPO / "scripts" / "node_setup.sh")], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    assert re.search(r"^UV_VERSION=(\S+)$", script, re.M)[1] == node_env.UV_VERSION
    assert re.search(r'^SKYRL_REF="\$\{W8_SKYRL_REF:-([^}]+)\}"$', script, re.M)[1] == node_env.SKYRL_REF
    assert re.search(r'^SKYRL_GIT_URL="\$\{SKYRL_GIT_URL:-([^}]+)\}"', script, re.M)[1] == node_env.SKYRL_GIT_URL
    assert "set -euo pipefail" in script and not re.search(r"^\s*set -[a-z]*x", script, re.M)  # secrets in env
    for step in ("uv sync --quiet --extra fsdp", "harness.node_lock check-checkout", "harness.node_env check-checkout",
                 "harness.node_env constraints",
                 "-r sky/requirements-node.txt -c", "harness.preflight"):
        assert step in script, step
