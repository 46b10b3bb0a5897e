"""Shared test set-up: every test runs the local sandbox, whatever the shell exports.

Exporting DAYTONA_API_KEY (or W8_SANDBOX=daytona) must never move a test's programs to a
remote service or skip the hostile-program suite: the sandbox is pinned to local here and
the key removed for the test's own process (tests that exercise Daytona set it themselves).
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def local_sandbox_only(monkeypatch):
    monkeypatch.setenv("W8_SANDBOX", "local")
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
