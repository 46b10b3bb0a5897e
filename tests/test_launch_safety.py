"""A paid GPU launch: no port opened to the internet, teardown on failure or Ctrl-C (fake `sky`: GCP is
unreachable here), the cost said on the last line, autodown armed while the user's machine may go away."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness import cloud
from harness.config import KNOBS, load_config

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SKY_PY = REPO / ".venv-sky" / "bin" / "python"
needs_sky_env = pytest.mark.skipif(not SKY_PY.exists(), reason="make sky-env builds .venv-sky")
sys.path.insert(0, str(REPO / "scripts"))

import dry_run  # noqa: E402


# ---- no public ports ---------------------------------------------------------------------------------
def test_r3_yaml_declares_no_ports_anywhere():
    config = yaml.safe_load((REPO / "sky" / "r3.yaml").read_text())

    def ports(node):
        if isinstance(node, dict):
            return [v for k, v in node.items() if k == "ports"] + [p for v in node.values() for p in ports(v)]
        if isinstance(node, list):
            return [p for v in node for p in ports(v)]
        return []
    assert ports(config) == []


@needs_sky_env
def test_a_port_in_the_yaml_is_refused_by_the_dry_run_and_the_real_yaml_renders_none(tmp_path, monkeypatch):
    """SkyPilot's own parser renders the launch; any port it would open fails the dry-run in one line."""
    config = yaml.safe_load((REPO / "sky" / "r3.yaml").read_text())
    config["resources"]["ports"] = 6479  # what sky/r3.yaml had: Ray's head port, open to 0.0.0.0/0 on GCP
    with_port = tmp_path / "r3-with-port.yaml"
    with_port.write_text(yaml.safe_dump(config))
    for knob in KNOBS:
        monkeypatch.delenv(knob.env, raising=False)
    cfg = load_config(env={"W8_PRESET": "gcp"})

    [real] = cloud.render_tasks([cloud.scenario_of(cloud.launch_command({"W8_PRESET": "gcp"}, cfg.as_dict()))])
    assert cloud.open_ports(real) == []
    [opened] = cloud.render_tasks([{}], with_port)
    assert cloud.open_ports(opened) == ["6479"]
    with pytest.raises(dry_run.CheckError, match=r"^r3-with-port.yaml opens port\(s\) 6479 to the internet: remove"):
        dry_run.check_yaml(cfg, tmp_path, with_port)
