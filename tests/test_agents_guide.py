"""AGENTS.md and its skill copy: front matter, symlinks, and every `make` target they name exists."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "AGENTS.md"
SKILL = REPO / ".agents" / "skills" / "agent-rein" / "SKILL.md"


def front_matter(text: str) -> tuple[dict, str]:
    match = re.match(r"^---\n(.*?)\n---\n\n?(.*)$", text, re.S)
    assert match, "SKILL.md must open with a --- front matter block"
    return yaml.safe_load(match.group(1)), match.group(2)


def makefile_targets() -> set[str]:
    """Targets as make itself sees them (`make -pRrq`: the database, nothing is run)."""
    proc = subprocess.run(["make", "-pRrq", "-f", "Makefile", ":"], cwd=REPO, capture_output=True, text=True)
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z][\w-]*):", proc.stdout, re.M)}


def test_skill_front_matter_names_and_describes_with_trigger_terms():
    meta, body = front_matter(SKILL.read_text())
    assert meta["name"] == "agent-rein"
    for term in ("harness", "GRPO", "SkyPilot", "make smoke", "W8_", "results/"):
        assert term in meta["description"], term
    assert body == GUIDE.read_text(), "SKILL.md's body must be AGENTS.md (regenerate it)"


def test_skill_links_are_relative_and_resolve():
    for tool in (".claude", ".gemini"):
        link = REPO / tool / "skills" / "agent-rein"
        assert link.is_symlink(), link
        assert not os.path.isabs(os.readlink(link))
        assert (link / "SKILL.md").resolve() == SKILL.resolve()


def test_every_make_target_the_guide_names_exists():
    named = set(re.findall(r"`make ([a-z][\w-]*)", GUIDE.read_text()))
    assert {"test", "dry-run", "smoke", "local", "launch", "watch", "results", "down", "doctor"} <= named
    missing = named - makefile_targets()
    assert not missing, f"AGENTS.md names make targets the Makefile lacks: {sorted(missing)}"


def test_every_make_target_has_a_help_line():
    help_text = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True).stdout
    for target in ("dry-run", "smoke", "local", "launch", "watch", "results", "down", "doctor", "sky-env"):
        assert re.search(rf"^\s+{target}\s+\S", help_text, re.M), target


def test_the_guide_points_to_the_module_map_and_its_links_resolve():
    text = GUIDE.read_text()
    assert "](docs/layout.md)" in text, "AGENTS.md must point to the module map, docs/layout.md"
    assert "layout section" not in text, "the README has no layout section: point to docs/layout.md"
    linked = re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]+)?\)", text)
    assert [path for path in linked if not (REPO / path).is_file()] == []
