"""The README's front matter stays true: its two commands exist, its knob table is the config's."""

import re
import subprocess
from pathlib import Path

from harness.config import knob_table_markdown

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_knob_table_matches_config():
    assert knob_table_markdown() in README, "README knob table is stale: paste harness.config.knob_table_markdown()"


def test_every_make_target_named_in_readme_exists():
    targets = set(re.findall(r"(?:^|`)make ([a-z][a-z-]*)", README, re.M))
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    known = {line.split()[0] for line in listed.splitlines() if line.strip()}
    assert {"local", "test"} <= targets
    assert targets - known == set()


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
