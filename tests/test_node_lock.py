"""harness.node_lock: the node requirements against SkyRL's real uv.lock (real `uv export` and `uv pip compile`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import node_env, node_lock
from harness.node_env import NodeEnvError

REPO = Path(__file__).resolve().parent.parent
DAYTONA_TOO_NEW = "matplotlib==3.11.2\ndaytona==0.224.0\n"  # what requirements-node.txt pinned before issue 18


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_committed_export_says_what_lock_it_is():
    text = node_lock.LOCK_EXPORT.read_text()
    assert node_lock.export_source(node_lock.LOCK_EXPORT).startswith(
        "NovaSky-AI/SkyRL@94d5389584925ee68c95dfd7812f63427e882770 (main, 2026-08-20")
    assert "# sha256: uv.lock 41be5417436289d4e85d3838db923d4bcd8a8372ed07dfa936cf7929eca3952b;" in text
    pins = node_env.read_pins(node_lock.LOCK_EXPORT)
    assert pins["pydantic"] == "2.13.4" and pins["urllib3"] == "2.7.0"


def test_the_node_requirements_fit_the_committed_lock(tmp_path):
    line = node_lock.check_committed(node_env.NODE_REQUIREMENTS, node_lock.LOCK_EXPORT, tmp_path, node_env.find_uv())
    assert line.startswith("lock ok: requirements-node.txt (matplotlib 3.11.2, daytona 0.210.0) fits the uv.lock of "
                           "NovaSky-AI/SkyRL@94d5389")
    assert "(pydantic 2.13.4, urllib3 2.7.0, httpx 0.28.1)" in line and "not the pinned release's own lock" in line
    resolved = node_env.read_pins(tmp_path / "node-lock-compiled.txt")
    lock = node_env.read_pins(node_lock.LOCK_EXPORT)  # a name per line, some twice (numpy: per-platform markers)
    pairs = {(node_env.requirement_name(line), line.split("==")[1].split()[0])
             for line in node_lock.LOCK_EXPORT.read_text().splitlines() if "==" in line and not line.startswith("#")}
    moved = {name: v for name, v in resolved.items() if name in lock and (name, v) not in pairs}
    assert moved == {} and resolved["numpy"] == "2.3.5"  # nothing moved; the linux / 3.12 numpy of the lock


def test_daytona_0_224_is_refused_by_the_committed_lock(tmp_path):
    """The defect: daytona 0.224.0's API clients need pydantic >= 2.13.5; SkyRL's lock holds 2.13.4."""
    requirements = write(tmp_path / "requirements-node.txt", DAYTONA_TOO_NEW)
    with pytest.raises(NodeEnvError, match=r"does not resolve: .*daytona==0\.224\.0 depends on pydantic>=2\.13\.5") as err:
        node_lock.check_committed(requirements, node_lock.LOCK_EXPORT, tmp_path, node_env.find_uv())
    assert "\n" not in str(err.value)


def test_without_a_readable_lock_the_check_says_pypi_only(tmp_path):
    line = node_lock.check_committed(node_env.NODE_REQUIREMENTS, tmp_path / "absent.txt", tmp_path, node_env.find_uv())
    assert line.startswith("lock not checked: no absent.txt to read here, so the node requirements are checked "
                           "against PyPI only")


@pytest.fixture(scope="module")
def locked_checkout(tmp_path_factory):
    """A project named skyrl with an fsdp extra, locked for real by uv against PyPI with pydantic 2.13.4."""
    root = tmp_path_factory.mktemp("skyrl-like")
    write(root / "pyproject.toml", '[project]\nname = "skyrl"\nversion = "0.0.1"\nrequires-python = ">=3.12"\n'
                                   'dependencies = []\n[project.optional-dependencies]\n'
                                   'fsdp = ["pydantic==2.13.4", "urllib3==2.7.0"]\n')
    proc = subprocess.run([node_env.find_uv(), "lock", "--no-config", "--python", sys.executable], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.parametrize("requirements, code, said", [
    (DAYTONA_TOO_NEW, 1, "daytona==0.224.0 depends on pydantic>=2.13.5"),
    ("matplotlib==3.11.2\ndaytona==0.210.0\n", 0, "lock ok: requirements-node.txt (matplotlib 3.11.2, daytona 0.210.0)"),
])
def test_the_nodes_check_of_its_checkouts_lock(locked_checkout, tmp_path, requirements, code, said):
    """What node_setup.sh runs right after checkout, before uv sync: export the real lock, compile against it."""
    req = write(tmp_path / "requirements-node.txt", requirements)
    proc = subprocess.run([sys.executable, "-m", "harness.node_lock", "check-checkout", str(locked_checkout),
                           "--requirements", str(req), "--out", str(tmp_path / "node")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert said in (proc.stdout if code == 0 else proc.stderr)
    assert len((proc.stdout + proc.stderr).strip().splitlines()) == 1
    export = (tmp_path / "node" / "skyrl-fsdp-lock.txt").read_text()
    assert "pydantic==2.13.4" in export and f"# sha256: uv.lock {node_lock._sha256(locked_checkout / 'uv.lock')}" in export


def test_a_checkout_without_a_lock_is_named(tmp_path):
    with pytest.raises(NodeEnvError, match="has no uv.lock or pyproject.toml: not a SkyRL checkout with a lock"):
        node_lock.export_lock(node_env.find_uv(), tmp_path, tmp_path / "x.txt", "here")
