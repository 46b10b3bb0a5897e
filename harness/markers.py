"""Step markers: a finished step's proof that its outputs are whole.

    from harness.markers import mark_done, output_problems, step_is_done
    mark_done(run_dir, "01_frozen_trace", ["frozen_trace.json"], "gold 1/2", wall_s=12.3, peak_rss_mb=900)
    output_problems(run_dir, "01_frozen_trace")   # [] or ["frozen_trace.json: 3968 bytes, the marker says 8112"]
    input_problems(run_dir, "05_compare")         # the same for the earlier steps' outputs 05 reads
    step_is_done(run_dir, "01_frozen_trace")      # marker present and every output as the marker recorded it

A step writes its outputs temp-then-rename and then `steps/<step>.json`, which records each
output file's sha256 and size (a folder output, such as an export, file by file). A rerun
trusts a step only when every file is still what the marker says: a truncated trace or a
half-overwritten export is named and the step is redone, instead of being published. When a
redone step's outputs differ from before, the markers of the steps that used them are
dropped, so those are redone too (a trace redone from its saved search states usually comes
out byte-identical, and nothing after it reruns). A step also checks what it reads before it runs or
skips: the outputs of the earlier steps it uses (input_problems; a damaged one is refused, naming the
file and the step to redo) and, for the training steps, the cached training files under data/ against
data/fingerprint.json (data_problems; a damaged one is rebuilt). The training inputs a step builds for
itself (step 03's harvest records and the refine and self arms' data folders: parquet, jsonl of kept
programs) are hashed in its marker beside its outputs (`training_inputs`): a damaged one is named like a
damaged output, removed (damaged_training_inputs) and rebuilt by redoing the step.

`invocations.json` counts the wall time of every run_r3.sh invocation of the run, so a
resumed run reports its whole time: an invocation that was killed (preempted, Ctrl-C, the
OOM killer) never records its end, and is counted up to the last marker or search state it
saved.

Cost: hashing reads every byte. Files up to HASH_ALWAYS_BYTES are re-hashed on every check;
bigger ones (export weights, ~540 MB for the 135M model in float32) are re-hashed only when
their size or mtime changed, so a resume does not read gigabytes to learn nothing. Damage that
keeps the size and the mtime of a big file is not seen.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness.files import atomic_write_json, file_digest

STEPS = ("01_frozen_trace", "02_sft", "03_grpo", "04_trained_trace", "05_compare")
# which later steps read a step's outputs: redone with other outputs, their markers go
USED_BY = {"01_frozen_trace": ("05_compare",), "02_sft": ("03_grpo", "04_trained_trace", "05_compare"),
           "03_grpo": ("04_trained_trace", "05_compare"), "04_trained_trace": ("05_compare",), "05_compare": ()}
# which earlier steps' outputs a step reads (the inverse of USED_BY): checked before it runs or skips
READS = {step: tuple(earlier for earlier in STEPS if step in USED_BY[earlier]) for step in STEPS}
# the steps that train on the run's cached training files, data/ (harness.training_data writes them with their
# sha256 in data/fingerprint.json)
DATA_READERS = ("02_sft", "03_grpo")
DATA_STAMP = "data/fingerprint.json"
HASH_ALWAYS_BYTES = 64 << 20


class MarkerError(RuntimeError):
    """A marker that cannot be written as asked; one line."""


def marker_path(run_dir: Path, step: str) -> Path:
    if step not in STEPS:
        raise MarkerError(f"unknown step {step!r}: expected one of {', '.join(STEPS)}")
    return Path(run_dir) / "steps" / f"{step}.json"


def read_marker(run_dir: Path, step: str) -> dict[str, Any] | None:
    """The step's marker, or None when there is none or it is unreadable (then the step is redone)."""
    try:
        marker = json.loads(marker_path(run_dir, step).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def output_files(run_dir: Path, outputs: list[str]) -> list[str]:
    """The files of `outputs` (relative to run_dir), a folder expanded to every file under it."""
    files = []
    for rel in outputs:
        path = Path(run_dir) / rel
        if path.is_dir():
            files += sorted(str(p.relative_to(run_dir)) for p in path.rglob("*") if p.is_file())
        else:
            files.append(rel)
    return files


def record_files(run_dir: Path, outputs: list[str]) -> dict[str, dict[str, Any]]:
    """{file: {"sha256", "bytes", "mtime_ns"}} of every output file."""
    record = {}
    for rel in output_files(run_dir, outputs):
        path = Path(run_dir) / rel
        record[rel] = {**file_digest(path), "mtime_ns": path.stat().st_mtime_ns}
    return record


def file_problem(path: Path, rel: str, want: dict[str, Any]) -> str | None:
    """What is wrong with one output file against its marker entry, or None."""
    if not path.is_file():
        return f"{rel}: missing"
    stat = path.stat()
    if stat.st_size != want.get("bytes"):
        return f"{rel}: {stat.st_size} bytes, the marker says {want.get('bytes')} (truncated or overwritten)"
    if stat.st_size > HASH_ALWAYS_BYTES and stat.st_mtime_ns == want.get("mtime_ns"):
        return None
    if file_digest(path)["sha256"] != want.get("sha256"):
        return f"{rel}: content changed since the step finished (sha256 differs from the marker)"
    return None


def recorded_problems(run_dir: Path, listed: list[str], files: dict[str, dict[str, Any]]) -> list[str]:
    """One line per recorded file that is not as recorded, and per listed path that is gone without a record."""
    problems = [p for rel, want in sorted(files.items()) if (p := file_problem(Path(run_dir) / rel, rel, want))]
    problems += [f"{rel}: missing" for rel in listed if not (Path(run_dir) / rel).exists()
                 and not any(f == rel or f.startswith(rel.rstrip("/") + "/") for f in files)]
    return problems


def output_problems(run_dir: Path, step: str) -> list[str]:
    """One line per output or training input that is not as the step's marker recorded it ([] when all are, or
    no marker)."""
    marker = read_marker(run_dir, step)
    if not marker:
        return []
    files = marker.get("files")
    if files is None:  # a marker from before outputs were hashed: existence is all it can prove
        return [f"{rel}: missing" for rel in marker.get("outputs", []) if not (Path(run_dir) / rel).exists()]
    return (recorded_problems(run_dir, marker.get("outputs", []), files)
            + recorded_problems(run_dir, marker.get("training_inputs", []), marker.get("training_files") or {}))


def damaged_training_inputs(run_dir: Path, step: str) -> list[str]:
    """The training-input files of the step's marker that are no longer as recorded (relative paths): a step
    redone removes them first, so it rebuilds them instead of reading them (a harvest record is reused if
    present)."""
    marker = read_marker(run_dir, step) or {}
    return [rel for rel, want in sorted((marker.get("training_files") or {}).items())
            if file_problem(Path(run_dir) / rel, rel, want)]


def input_problems(run_dir: Path, step: str) -> list[str]:
    """One line per file `step` reads from an earlier step that is not as that step's marker recorded it,
    naming the step that wrote it ([] when all are whole, or the earlier step has no marker)."""
    return [f"{problem}, an output of step {earlier}" for earlier in READS[step]
            for problem in output_problems(run_dir, earlier)]


def data_problems(run_dir: Path, step: str) -> list[str]:
    """One line per cached training file (data/) that no longer has the sha256 data/fingerprint.json gives it;
    [] for a step that does not train, or when there is no cache yet."""
    stamp = Path(run_dir) / DATA_STAMP
    if step not in DATA_READERS or not stamp.is_file():
        return []
    try:
        hashes = json.loads(stamp.read_text()).get("sha256") or {}
    except (OSError, ValueError, AttributeError):
        return [f"{DATA_STAMP}: unreadable (corrupt JSON)"]
    problems = []
    for name, sha in sorted(hashes.items()):
        rel = f"data/{name}"
        path = Path(run_dir) / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif file_digest(path)["sha256"] != sha:
            problems.append(f"{rel}: {path.stat().st_size} bytes, content changed since it was written "
                            f"(sha256 differs from {DATA_STAMP})")
    return problems


def step_is_done(run_dir: Path, step: str) -> bool:
    """True when the step's marker exists and every output is what the marker recorded."""
    return read_marker(run_dir, step) is not None and not output_problems(run_dir, step)


def first_pending_step(run_dir: Path) -> str | None:
    return next((step for step in STEPS if not step_is_done(run_dir, step)), None)


def drop_dependents(run_dir: Path, step: str) -> list[str]:
    """Remove the markers of the steps that read `step`'s outputs; returns the ones removed."""
    dropped = []
    for later in USED_BY[step]:
        path = marker_path(run_dir, later)
        if path.exists():
            path.unlink()
            dropped.append(later)
    return dropped


def mark_done(run_dir: Path, step: str, outputs: list[str], summary: str, wall_s: float,
              skipped: bool = False, training_inputs: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """Write the step's marker last: outputs (relative to run_dir) must already be in place.

    training_inputs: what the step built and trained on (files or folders, relative to run_dir): hashed like
    the outputs and checked with them, but not results (small_artifacts lists outputs only).
    A step redone with outputs that differ from its previous marker's drops the markers of the
    steps that used them (the marker's "dropped" lists them)."""
    training_inputs = list(training_inputs or [])
    missing = [rel for rel in outputs + training_inputs if not (Path(run_dir) / rel).exists()]
    if missing:
        raise MarkerError(f"step {step} claims outputs that do not exist: {', '.join(missing)}")
    files = record_files(run_dir, outputs)
    before = read_marker(run_dir, step)
    changed = before is not None and {k: v.get("sha256") for k, v in (before.get("files") or {}).items()} != \
        {k: v["sha256"] for k, v in files.items()}
    marker = {"step": step, "outputs": list(outputs), "files": files, "summary": summary, "wall_s": round(wall_s, 3),
              "skipped": skipped, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
    if training_inputs:
        marker.update(training_inputs=training_inputs, training_files=record_files(run_dir, training_inputs))
    if changed:
        marker["dropped"] = drop_dependents(run_dir, step)
    atomic_write_json(marker_path(run_dir, step), marker)
    return marker


# ---- invocations ------------------------------------------------------------------------------
def _invocations(run_dir: Path) -> list[dict[str, Any]]:
    try:
        runs = json.loads((Path(run_dir) / "invocations.json").read_text())
    except (OSError, ValueError):
        return []  # none yet, or a damaged tally: it only loses earlier invocations' seconds
    return runs if isinstance(runs, list) else []


def start_invocation(run_dir: Path, now: float | None = None) -> None:
    """Record that an invocation starts now (its end may never be recorded: see end_invocation)."""
    runs = _invocations(run_dir) + [{"started": time.time() if now is None else now, "wall_s": None}]
    atomic_write_json(Path(run_dir) / "invocations.json", runs)


def _last_saved(run_dir: Path, since: float, until: float) -> float:
    """The newest mtime of a marker or search state written in [since, until): how far a killed
    invocation got."""
    paths = list((Path(run_dir) / "steps").glob("*.json")) + list((Path(run_dir) / "search").glob("*.json"))
    times = [t for p in paths if since <= (t := p.stat().st_mtime) < until]
    return max(times, default=since)


def end_invocation(run_dir: Path, exit_code: int, now: float | None = None) -> str:
    """Record this invocation's end; the wall time of all invocations of the run, in words."""
    now = time.time() if now is None else now
    runs = _invocations(run_dir) or [{"started": now, "wall_s": None}]
    runs[-1] = {**runs[-1], "wall_s": round(now - runs[-1]["started"], 1), "exit_code": exit_code}
    atomic_write_json(Path(run_dir) / "invocations.json", runs)
    total, killed = 0.0, 0
    for i, run in enumerate(runs):
        if run.get("wall_s") is None:
            killed += 1
            until = runs[i + 1]["started"] if i + 1 < len(runs) else now
            total += _last_saved(run_dir, run["started"], until) - run["started"]
        else:
            total += run["wall_s"]
    seconds = int(round(total))
    note = f", {killed} killed and counted to its last saved step" if killed else ""
    return f"{seconds // 60} min {seconds % 60} s over {len(runs)} invocation(s){note}"
