"""W8_RESULT records: a run's small artifacts as log lines, so results come home through any log.

    from harness.records import emit_results, parse_result_lines, write_results
    emit_results(run_dir, ["summary.md", "trace.png"])      # prints `W8_RESULT {json}` lines
    records = parse_result_lines(open("launch.log"), run_id)  # back from a log (sky logs, a saved file)
    write_results(records, Path("results") / run_id)          # never overwrites different content

Every artifact travels as one `W8_RESULT {json}` line with its sha256 (text verbatim, binary
as base64); a damaged line is refused. The remote node prints them, so `sky logs` brings a
run's results back even after `--down`; off a node they are printed only when asked
(W8_EMIT_RESULTS=1, results_wanted), since the run folder holds the files. A failed
step also sends the tails of its logs (ours, SkyRL's infra logs, Ray's worker errors).
Standard library only (with harness.files): the SkyPilot tool env imports this too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.files import StorageError, atomic_write_bytes, atomic_write_text, storage_error

RESULT_PREFIX = "W8_RESULT "
EMIT_TRUE = ("1", "true", "yes")
RESULT_MAX_BYTES = 8 << 20  # a bigger artifact is not a "small" one; it stays on the node


class RecordError(ValueError):
    """A record that cannot be written as asked (damaged, or it would overwrite a result)."""


def results_wanted(env: Mapping[str, str] | None = None) -> bool:
    """W8_RESULT lines are for logs that must carry results home: on a SkyPilot node (SKYPILOT_NODE_RANK set)
    or when asked (W8_EMIT_RESULTS=1). On a local terminal they would repeat whole files the run folder holds."""
    env = os.environ if env is None else env
    return "SKYPILOT_NODE_RANK" in env or env.get("W8_EMIT_RESULTS", "").strip().lower() in EMIT_TRUE


def result_record(run_id: str, path: Path, name: str | None = None) -> dict[str, Any]:
    """One artifact as a JSON-able record: text files verbatim, binary ones base64, with sha256."""
    data = Path(path).read_bytes()
    record: dict[str, Any] = {"run_id": run_id, "file": name or Path(path).name, "bytes": len(data),
                              "sha256": hashlib.sha256(data).hexdigest()}
    try:
        record["text"] = data.decode("utf-8")
    except UnicodeDecodeError:
        record["base64"] = base64.b64encode(data).decode("ascii")
    return record


def result_line(run_id: str, path: Path, name: str | None = None) -> str:
    """`W8_RESULT {json}` on one line (json.dumps escapes newlines)."""
    return RESULT_PREFIX + json.dumps(result_record(run_id, path, name), sort_keys=True)


def record_bytes(record: Mapping[str, Any]) -> bytes:
    """The artifact's bytes; RecordError when the record is damaged (sha256 mismatch)."""
    if "text" in record:
        data = record["text"].encode("utf-8")
    else:
        data = base64.b64decode(record.get("base64", ""))
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        raise RecordError(f"W8_RESULT for {record.get('file')!r} is damaged (sha256 mismatch)")
    return data


def iter_result_records(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    """Each W8_RESULT record in log lines, in order (sky prefixes like '(task, pid=1) ' are fine)."""
    for line in lines:
        at = line.find(RESULT_PREFIX)
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(RESULT_PREFIX):].strip())
        except ValueError:
            continue  # a line cut by the log transport; a later complete copy may follow
        if isinstance(record, dict) and "file" in record:
            yield {**record, "file": Path(str(record["file"])).name}  # a name, never a path


def parse_result_lines(lines: Iterable[str], run_id: str | None = None) -> dict[str, dict[str, Any]]:
    """The records of one run (or all) by file name; a later record of the same file wins (resumed runs)."""
    return {r["file"]: r for r in iter_result_records(lines) if run_id is None or r.get("run_id") == run_id}


def runs_in(lines: Iterable[str]) -> list[str]:
    """Run ids with W8_RESULT records in the lines, in order of first appearance."""
    return list(dict.fromkeys(str(r.get("run_id", "")) for r in iter_result_records(lines)))


def write_results(records: Mapping[str, Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Write each record's bytes into out_dir; never overwrite a file whose content differs."""
    out_dir = Path(out_dir)
    payloads = {name: record_bytes(record) for name, record in records.items()}
    clashes = [name for name, data in payloads.items()
               if (out_dir / name).exists() and (out_dir / name).read_bytes() != data]
    if clashes:
        raise RecordError(f"{out_dir} already holds different {', '.join(sorted(clashes))}: "
                         "a finished run's results are never overwritten")
    written = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, data in sorted(payloads.items()):
            path = out_dir / name
            if not path.exists():
                atomic_write_bytes(path, data)
            written.append(path)
    except OSError as err:  # read-only, full: one line with the path and the fix, not a traceback
        raise RecordError(str(err if isinstance(err, StorageError) else storage_error(out_dir, err))) from None
    return written


def emit_results(run_dir: Path, names: Iterable[str], out=None, run_id: str | None = None) -> int:
    """Print one W8_RESULT line per existing small file of run_dir; returns how many were printed."""
    out = out or sys.stdout
    run_dir = Path(run_dir)
    run_id = run_id or run_dir.name
    count = 0
    for name in names:
        path = run_dir / name
        if not path.is_file():
            continue
        if path.stat().st_size > RESULT_MAX_BYTES:
            print(f"W8_RESULT_SKIPPED {name}: {path.stat().st_size} bytes is over {RESULT_MAX_BYTES}", file=out)
            continue
        print(result_line(run_id, path, name), file=out, flush=True)
        count += 1
    return count


FAILURE_TAIL_LINES = 200
FAILURE_TAIL_BYTES = 64 << 10
FAILURE_RAY_FILES = 8  # newest non-empty Ray *.err files (worker crashes, vLLM start-up)


def failure_logs(run_dir: Path, ray_logs: Path | None = None) -> list[Path]:
    """The logs that explain a failed step: every *.log under the run folder (our step logs, SkyRL's
    infra logs under trainer.log_path), then the newest non-empty Ray *.err files of this machine."""
    found = sorted(p for p in Path(run_dir).rglob("*.log") if p.is_file() and p.stat().st_size)
    ray_root = ray_logs or Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray" / "session_latest" / "logs"
    if ray_root.is_dir():
        errs = [p for p in ray_root.glob("*.err") if p.is_file() and p.stat().st_size]
        found += sorted(errs, key=lambda p: p.stat().st_mtime)[-FAILURE_RAY_FILES:]
    return found


def tail_text(path: Path, lines: int = FAILURE_TAIL_LINES, max_bytes: int = FAILURE_TAIL_BYTES) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - max_bytes))
        text = f.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) + "\n"


def emit_failure(run_dir: Path, step: str, exit_code: int, ray_logs: Path | None = None, out=None,
                 emit: bool = True) -> list[str]:
    """After a failed step: the tails of its logs as files under <run>/failure/ and (emit) as W8_RESULT
    records, so `make results` brings the evidence home after --down. Returns the file names written."""
    run_dir = Path(run_dir)
    folder = run_dir / "failure"
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for path in failure_logs(run_dir, ray_logs):
        if folder in path.parents:
            continue
        source = path.relative_to(run_dir) if run_dir in path.parents else Path("ray") / path.name
        name = f"failure-{step}-" + "-".join(source.parts)
        atomic_write_text(folder / name, tail_text(path))
        names.append(name)
    summary = {"step": step, "exit_code": exit_code, "tails": names, "lines_each": FAILURE_TAIL_LINES,
               "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write_text(folder / f"failure-{step}.json", json.dumps(summary, indent=1) + "\n")
    names.insert(0, f"failure-{step}.json")
    if emit:
        emit_results(folder, names, out=out, run_id=run_dir.name)
    return names
