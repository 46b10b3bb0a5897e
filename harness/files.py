"""Where things live, and the one way files are written: temp-then-rename.

    from harness.files import REPO_ROOT, WORK_DIR, atomic_write_json, atomic_path, atomic_dir
    atomic_write_json(WORK_DIR / "runs" / run_id / "run_config.json", config)
    with atomic_dir(export_dir) as tmp:      # a folder that appears whole or not at all
        model.save_pretrained(tmp)

WORK_DIR is `.w8-biayn/` at the repo root ("w8-biayn" is the project's work-area name: the
`W8_` prefix of every knob comes from it), git-ignored: run folders, caches, logs, the
converted model. A reader never sees half a file or half a folder: writes go to a
sibling temp path and are renamed into place (os.replace is atomic on one filesystem).
A write that the storage refuses (read-only, full, no permission) raises StorageError: one
line naming the path and the fix, never a bare traceback.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterator

REPO_ROOT = Path(__file__).resolve().parent.parent
WORK_DIR = REPO_ROOT / ".w8-biayn"


class StorageError(OSError):
    """A file the storage will not write or read back whole; str() is one line with the path and the fix."""

    def __str__(self) -> str:  # OSError(errno, text) would print "[Errno 30] text": the text is the line
        return str(self.strerror or (self.args[0] if self.args else "storage error"))


# errno -> what to do about it; anything else is reported with the system's own words
STORAGE_FIXES = {
    errno.EROFS: "read-only file system: remount it writable or point the run elsewhere (W8_RUNS_ROOT, "
                 "W8_RESULTS_ROOT)",
    errno.EACCES: "permission denied: make it writable for this user or point the run elsewhere (W8_RUNS_ROOT, "
                  "W8_RESULTS_ROOT)",
    errno.EPERM: "operation not permitted: make it writable for this user or point the run elsewhere "
                 "(W8_RUNS_ROOT, W8_RESULTS_ROOT)",
    errno.ENOSPC: "no space left on the device: free disk space (old run folders under .w8-biayn/runs take "
                  "~1.6 GB each) and rerun; finished steps are kept",
    errno.EDQUOT: "disk quota exceeded: free space and rerun; finished steps are kept",
}


def storage_error(path: str | Path, err: OSError) -> StorageError:
    """An OSError of a file operation as one line: the path, what happened, the fix."""
    fix = STORAGE_FIXES.get(err.errno or 0, err.strerror or str(err))
    return StorageError(err.errno, f"{path}: {fix}")


def file_digest(path: str | Path) -> dict[str, int | str]:
    """{"sha256", "bytes"} of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"sha256": digest.hexdigest(), "bytes": Path(path).stat().st_size}


def check_writable(folder: str | Path) -> Path:
    """Create `folder` if needed and prove a file can be written there (then removed); StorageError if not.
    Run before step 01, so a read-only results root is found before hours of work, not after."""
    folder = Path(folder)
    probe = folder / f".w8-write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise storage_error(folder, err) from None
    return folder


def read_json(path: str | Path, fix: str = "delete it and rerun") -> object:
    """A JSON file's content; StorageError naming the file (truncated or corrupt JSON, unreadable) and `fix`."""
    try:
        return json.loads(Path(path).read_text())
    except ValueError as err:
        raise StorageError(errno.EINVAL, f"{path}: corrupt JSON ({err}); {fix}") from None
    except OSError as err:
        raise storage_error(path, err) from None


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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise storage_error(path.parent, err) from None
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as err:
        with suppress(OSError):  # a half-written temp file must not stay behind (ENOSPC)
            tmp.unlink(missing_ok=True)
        raise storage_error(path, err) from None
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
