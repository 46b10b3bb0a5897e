"""A run's small artifacts in the bucket, so they survive `--down` and a dropped connection.

    python scripts/upload_results.py --run-dir RUN_DIR [STEP ...]   # run_r3.sh, after each step and a failure
    python -m harness.bucket download BUCKET RUN_ID OUT_DIR         # make results (in .venv-sky for gs://)

Layout: <W8_BUCKET>/runs/<run-id>/<name>, where <name> is a small artifact of the run folder
(harness.pipeline.small_artifacts: traces, metrics, run_config.json, summary.md, plots, override
lists) or a failure tail (failure/<name>); never exports or checkpoints. gs:// goes through
google-cloud-storage (in SkyRL's env on the node, and in .venv-sky here: imported lazily, it is
heavy); file:// through the filesystem (tests, a mounted disk). Errors are BucketError in one
line naming the URL. Downloads never overwrite a local file whose content differs (a finished
run's results are never overwritten). Standard library only, like harness.records, so the
SkyPilot tool env runs it too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable
from urllib.parse import urlparse

from harness.files import atomic_write_bytes
from harness.records import RESULT_MAX_BYTES


class BucketError(RuntimeError):
    """A bucket cannot be read or written; the message names the URL and the reason in one line."""


def run_url(bucket: str, run_id: str) -> str:
    """<bucket>/runs/<run-id>/ (one trailing slash)."""
    return f"{bucket.rstrip('/')}/runs/{run_id}/"


def _split(url: str) -> tuple[str, str, str]:
    parsed = urlparse(url)
    if parsed.scheme not in ("gs", "file") or (parsed.scheme == "gs" and not parsed.netloc):
        raise BucketError(f"{url}: not a gs://bucket/prefix or file:// URL")
    return parsed.scheme, parsed.netloc, parsed.path.lstrip("/") if parsed.scheme == "gs" else parsed.path


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


def _gcs_bucket(name: str):
    from google.cloud import storage  # heavy; only gs:// needs it

    return storage.Client().bucket(name)


def put(url: str, data: bytes) -> None:
    scheme, bucket, path = _split(url)
    try:
        if scheme == "file":
            atomic_write_bytes(Path(path), data)
        else:
            _gcs_bucket(bucket).blob(path).upload_from_string(data)
    except Exception as err:  # google.api_core and OSError alike: one line naming the URL
        raise BucketError(f"cannot write {url}: {_one_line(err)}") from None


def listing(url: str) -> dict[str, bytes]:
    """name (relative to url) -> bytes of every object under the prefix `url`."""
    scheme, bucket, path = _split(url)
    try:
        if scheme == "file":
            root = Path(path)
            return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
        blobs = _gcs_bucket(bucket).client.list_blobs(bucket, prefix=path)
        return {blob.name[len(path):]: blob.download_as_bytes() for blob in blobs if not blob.name.endswith("/")}
    except Exception as err:
        raise BucketError(f"cannot read {url}: {_one_line(err)}") from None


def upload(run_dir: Path, names: Iterable[str], bucket: str) -> list[str]:
    """Copy the named small files of run_dir to <bucket>/runs/<run-id>/; returns what was copied."""
    run_dir = Path(run_dir)
    copied = []
    for name in names:
        path = run_dir / name
        if path.is_file() and path.stat().st_size <= RESULT_MAX_BYTES:
            put(run_url(bucket, run_dir.name) + name, path.read_bytes())
            copied.append(name)
    return copied


def download(bucket: str, run_id: str, out_dir: Path) -> list[Path]:
    """<bucket>/runs/<run-id>/* into out_dir; BucketError if there is none or a local file differs."""
    url = run_url(bucket, run_id)
    found = listing(url)
    if not found:
        raise BucketError(f"{url} holds no files (no step of {run_id} finished, or another bucket)")
    out_dir = Path(out_dir)
    clashes = [name for name, data in found.items() if (out_dir / name).exists() and (out_dir / name).read_bytes() != data]
    if clashes:
        raise BucketError(f"{out_dir} already holds different {', '.join(sorted(clashes))}: a finished run's results "
                          "are never overwritten")
    for name, data in found.items():
        atomic_write_bytes(out_dir / name, data)
    return [out_dir / name for name in sorted(found)]


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] != "download":
        print("usage: python -m harness.bucket download BUCKET RUN_ID OUT_DIR", file=sys.stderr)
        return 2
    try:
        written = download(argv[1], argv[2], Path(argv[3]))
    except BucketError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{len(written)} files from {run_url(argv[1], argv[2])} -> {argv[3]}/ ({', '.join(p.name for p in written)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
