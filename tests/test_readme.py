"""The README's front matter stays true: its commands come first and exist, its docs exist, the knob table
in docs/knobs.md is the config's."""

import re
import subprocess
from pathlib import Path

from harness.config import OTHER_ENV, knob_table_markdown

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
OTHERS_DOCS = {"docs/gpu-launch.md"}  # written by the GPU-launch work; linked from here before it lands


def test_knob_table_matches_config():
    knobs = (ROOT / "docs" / "knobs.md").read_text()
    assert knob_table_markdown() in knobs, "docs/knobs.md is stale: paste harness.config.knob_table_markdown()"
    assert all(f"`{name}`" in knobs for name in OTHER_ENV)


def test_the_first_screen_runs_the_project():
    first = "\n".join(README.splitlines()[:30])
    for command in ("make local", "make test", "make smoke"):
        assert command in first, command
    assert len(README.splitlines()) < 120, "the README is a front door; reference sections go to docs/"


def test_every_doc_the_readme_links_exists():
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", README))
    assert {"docs/knobs.md", "docs/pipeline.md", "docs/reading-results.md", "docs/gpu-launch.md"} <= linked
    assert sorted(p for p in linked - OTHERS_DOCS if not (ROOT / p).is_file()) == []


def test_every_make_target_named_in_readme_exists():
    targets = set(re.findall(r"(?:^|`)make ([a-z][a-z-]*)", README, re.M))
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    known = {line.split()[0] for line in listed.splitlines() if line.strip()}
    assert {"local", "test"} <= targets
    assert targets - known == set()


def test_make_help_gives_the_readme_times():
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    for target in ("local", "test", "smoke"):
        readme_time = re.search(rf"^make {target}\s.*?(~\d+ min)$", README, re.M).group(1)
        help_line = next(line for line in listed.splitlines() if line.split()[:1] == [target])
        assert readme_time in help_line, (target, readme_time, help_line)


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
