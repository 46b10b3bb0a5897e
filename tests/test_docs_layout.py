"""docs/layout.md is the module map: it names every file of harness/ and scripts/, nothing that is gone,
and lists the harness modules in an order their imports follow (each imports only modules above it)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layout import harness_imports

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "docs" / "layout.md"
PATH_CELL = re.compile(r"^\| `((?:harness|scripts)/[\w/.-]+\.(?:py|sh))` \|", re.M)


def code_files() -> list[str]:
    """Every .py under harness/ and every .py and .sh under scripts/, recursively, as repo-relative paths."""
    found = [p for p in (ROOT / "harness").rglob("*.py")]
    found += [p for ext in ("py", "sh") for p in (ROOT / "scripts").rglob(f"*.{ext}")]
    return sorted(str(p.relative_to(ROOT)) for p in found if "__pycache__" not in p.parts)


def listed(text: str) -> list[str]:
    """The paths in the first cell of the map's rows, in table order."""
    return PATH_CELL.findall(text)


def test_listed_reads_the_first_cell_only():
    text = "| `harness/a.py` | job, see `harness/b.py` |\n| `scripts/bench/c.sh` | x |\nnot `harness/d.py`\n"
    assert listed(text) == ["harness/a.py", "scripts/bench/c.sh"]


def test_every_module_and_script_is_in_the_layout():
    named = set(listed(LAYOUT.read_text()))
    missing = [path for path in code_files() if path not in named]
    assert missing == [], f"docs/layout.md lacks a row for: {', '.join(missing)}"


def test_the_layout_names_no_file_that_is_gone():
    gone = [path for path in listed(LAYOUT.read_text()) if not (ROOT / path).is_file()]
    assert gone == [], f"docs/layout.md names files that do not exist: {', '.join(gone)}"


def test_each_module_imports_only_modules_listed_above_it():
    order = [Path(p).stem for p in listed(LAYOUT.read_text()) if p.startswith("harness/") and p.count("/") == 1]
    position = {module: i for i, module in enumerate(order)}
    wrong = [f"harness/{module}.py imports harness/{name}.py, listed below it"
             for module, edges in harness_imports().items() if module in position
             for name, _ in edges if name in position and position[name] > position[module]]
    assert wrong == [], "; ".join(wrong)
