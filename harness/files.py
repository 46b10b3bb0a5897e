"""Where things live, and the one way files are written: temp-then-rename.

    from harness.files import REPO_ROOT, WORK_DIR, atomic_write_json, atomic_path, atomic_dir
    atomic_write_json(WORK_DIR / "runs" / run_id / "run_config.json", config)
    with atomic_dir(export_dir) as tmp:      # a folder that appears whole or not at all
        model.save_pretrained(tmp)

WORK_DIR is `.w8-biayn/` at the repo root ("w8-biayn" is the project's work-area name: the
`W8_` prefix of every knob comes from it), git-ignored: run folders, caches, logs, the
converted model. A reader never sees half a file or half a folder: writes go to a
sibling temp path and are renamed into place (os.replace is atomic on one filesystem).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

REPO_ROOT = Path(__file__).resolve().parent.parent
WORK_DIR = REPO_ROOT / ".w8-biayn"


def logs_dir() -> Path:
    """Saved launch and watch logs (W8_LOGS_DIR in tests): `make results` reads them after --down."""
    return Path(os.environ.get("W8_LOGS_DIR") or WORK_DIR / "logs")


def shown_path(path: str | Path, root: str | Path) -> str:
    """A path as results should record it: relative to `root` (a run folder) or to the work area when
    inside them, as given otherwise (a hub id, a relative path): no machine paths in committed results."""
    p = Path(path)
    if not p.is_absolute():
        return str(path)
    for base in (Path(root).resolve(), WORK_DIR.resolve()):
        if p.resolve().is_relative_to(base):
            return str(p.resolve().relative_to(base))
    return str(path)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write via a temp file in the same folder, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=indent is not None, default=str) + "\n")


@contextmanager
def atomic_path(final: str | Path) -> Iterator[Path]:
    """A temp file path (same folder, same suffix: writers that pick a format by it keep working) that
    replaces `final` when the block succeeds; nothing is left behind when it fails."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.stem}.tmp{os.getpid()}{final.suffix}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """A sibling temp folder to fill; on success it replaces `final` (an earlier one is removed first).

    An exception leaves `final` as it was and removes the temp folder.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
