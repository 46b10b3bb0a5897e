"""Shared test set-up: every test runs the local sandbox, whatever the shell exports.

Exporting DAYTONA_API_KEY (or W8_SANDBOX=daytona) must never move a test's programs to a
remote service or skip the hostile-program suite: the sandbox is pinned to local here and
the key removed for the test's own process (tests that exercise Daytona set it themselves).
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def local_sandbox_only(monkeypatch):
    monkeypatch.setenv("W8_SANDBOX", "local")
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)


@pytest.fixture
def unwritable_dir(tmp_path) -> Path:
    """A folder this user cannot write: chmod 555, or for root (who ignores modes) a path under sysfs."""
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").write_text("x")
    except OSError:
        return folder
    for candidate in (Path("/sys/w8-results"), Path("/proc/w8-results")):
        try:
            candidate.mkdir()
        except OSError:
            return candidate
    pytest.skip("no unwritable folder on this machine")
