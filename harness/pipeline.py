"""The r3 pipeline: opening a run (the checks before work, run_config.json), the numbered steps' main, the CLI.

    from harness.pipeline import open_run, step_is_done, mark_done
    run = open_run(cfg)                  # .w8-biayn/runs/<run-id>/ with run_config.json written
    step_is_done(run, "01_frozen_trace") # marker present and every output as the marker hashed it
    mark_done(run, "01_frozen_trace", ["frozen_trace.json"], "steps_to_gold 5/17", wall_s=12.3)

One folder per run holds everything a run writes (harness.run_folder: its id, what it holds, the resume
command; its names are re-exported here), and one process at a time works in it
(harness.run_lock: a second one exits at once naming the first). Each step writes its
outputs temp-then-rename and then a marker `steps/<step>.json` with each output's sha256
(harness.markers), so a crash leaves either a finished step or no marker, and a file damaged
later is named and its step redone. A run folder is bound to its knobs: reopening it with
different knobs is refused rather than mixing two configurations in one result.

Each numbered script runs through `run_step`: the knobs and the model are checked first, then what
the step reads (an earlier step's damaged output is refused naming it, a damaged cached training
file rebuilt), then it skips a complete step, or runs it (a damaged output or training input of its
own is named and the step redone, the damaged training inputs removed first so they are rebuilt) and
ends with one line (summary, wall time, peak RSS, where the files are). Caches the step's libraries
write go under <run>/cache/. On a node (or with W8_EMIT_RESULTS=1) it also prints one `W8_RESULT {json}`
line per small file the step wrote (also when skipping, so the log of a resumed run carries every result).

Also a tiny CLI for run_r3.sh (no model or trainer library is imported: fast to start):
    python -m harness.pipeline init RESULTS_ROOT         # print the run dir (creates it, writes run_config.json,
                                                         # proves it and RESULTS_ROOT writable)
    python -m harness.pipeline lock RUN_DIR 9            # lock the run on the caller's open descriptor 9
    python -m harness.pipeline knob backend              # one resolved knob (preset applied)
    python -m harness.pipeline rerun-command RUN_ID [--new]  # the command that resumes (or starts anew) a run
    python -m harness.pipeline invocation RUN_DIR start  # an invocation starts (its time counts even if killed)
    python -m harness.pipeline invocation RUN_DIR end RC # it ends; prints the wall time of all invocations
    python -m harness.pipeline emit [--when-wanted] RUN_DIR [STEP ...]   # W8_RESULT lines of a run's small
                                                         # artifacts (--when-wanted: on a node or W8_EMIT_RESULTS=1)
    python -m harness.pipeline emit-failure RUN_DIR STEP CODE   # a failed step's log tails (W8_RESULT on a node)
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.budget import check_budgets, check_refine_fits, planned_arms
from harness.config import (BY_NAME, Config, ConfigError, add_flags, defaults_notice, load_config,
                            load_config_or_exit, recorded_value)
from harness.dataset import DatasetError, max_examples_per_obs, n_pages
from harness.exports import ExportError, check_export, newest_export
from harness.files import (StorageError, atomic_write_bytes, atomic_write_json, check_writable, read_json,
                           storage_error)
from harness.harvest import harvest_tasks
from harness.hparams import hparams_record
from harness.knob_parser import KnobParser
from harness.provenance import detected_gpus, git_sha, package_versions
from harness.markers import (DATA_STAMP, STEPS, MarkerError, damaged_training_inputs, data_problems, end_invocation,
                             first_pending_step, input_problems, mark_done, output_problems, read_marker,
                             start_invocation, step_is_done)
from harness.models import ModelError, check_model_name
from harness.records import emit_failure, emit_results, results_wanted
from harness.rule_split import Design
# config_of_run, record_sandbox, runs_root, small_artifacts: also used from here by the scripts and tests
from harness.run_folder import (PIPELINE, RunError, StepError, config_of_run, knobs_line, load_run_config,
                                new_run_id, record_sandbox, rerun_command, resolve_run_id, runs_root, shown_run_dir,
                                small_artifacts, use_run_caches)
from harness.run_lock import RunLocked, lock_run
from harness.traces import trace_seeds, trace_tasks
from harness.training_data import eval_tasks, sft_tasks, train_tasks, training_data_for

EXIT_LOCKED = 75  # EX_TEMPFAIL: another process runs this run id; try again later


# ---- run_config.json -----------------------------------------------------------------------
def run_config(cfg: Config, run_id: str) -> dict[str, Any]:
    """Everything needed to say what ran: every knob, the task ids (run_tasks), versions, git sha, model,
    hardware, backend."""
    knobs = cfg.as_dict()
    knobs["run_id"] = run_id
    gpus = detected_gpus()
    return {
        "pipeline": PIPELINE,
        "run_id": run_id,
        "knobs": knobs,
        "env": {BY_NAME[name].env: value for name, value in knobs.items()},
        "model": cfg.harness_model,
        "backend": cfg.backend,
        "hparams": hparams_record(cfg),
        "tasks": run_tasks(cfg),
        "accelerators": {"requested": cfg.accelerators if cfg.backend == "skyrl" else "cpu",
                         "detected": gpus or ["cpu"]},
        "git_sha": git_sha(),
        "versions": package_versions(),
        "host": platform.node(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def run_tasks(cfg: Config) -> dict[str, Any]:
    """The task ids a run uses, computed from its knobs by the functions the steps call: the held-out tasks of the
    traces (`trace`, each searched with every seed of `trace_seeds`), the train tasks of GRPO's prompts (`grpo`;
    the refine and self arms' GRPO draws its zero-shot rows from them), of the SFT warm-start's rows (`sft`), of
    the refine and self arms' harvests (`harvest`; the self arm's rejection-sampling rows come from them), and the
    held-out tasks of the training's small evaluation split (`eval`, evaluated only). A part the run does not do
    lists none."""
    design = Design.of(cfg)
    grpo = train_tasks(cfg.train_count, cfg.train_examples_per_obs, design)
    sft = sft_tasks(grpo, cfg.sft_count, cfg.train_examples_per_obs, design) if cfg.harness_sft_steps else []
    harvest = harvest_tasks(cfg) if cfg.refine_arm or cfg.self_arm else []
    try:
        trace = trace_tasks(cfg)
    except DatasetError as err:
        raise ConfigError(str(err)) from None
    return {"trace": [t.task_id for t in trace], "trace_seeds": trace_seeds(cfg), "grpo": [t.task_id for t in grpo],
            "sft": [t.task_id for t in sft], "harvest": [t.task_id for t in harvest],
            "eval": [t.task_id for t in eval_tasks(cfg.train_examples_per_obs, design)]}


def _knob_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return [f"{BY_NAME[name].env}={recorded_value(saved, name)!r} (now {now[name]!r})" for name in sorted(now)
            if name != "run_id" and name in BY_NAME and recorded_value(saved, name) != now[name]]


def check_task_sizes(cfg: Config) -> None:
    """Task sizes and counts the snapshot can serve, checked before anything starts (a model loads, a folder
    appears)."""
    design = Design.of(cfg)
    if cfg.curriculum == "repair" and design.kind != "rule":
        raise ConfigError("W8_CURRICULUM=repair: repair tasks are made under the rule split; set W8_SPLIT=rule")
    pages = n_pages("heldout", design=design)
    if cfg.trace_tasks > pages:
        raise ConfigError(f"W8_TRACE_TASKS={cfg.trace_tasks}: the held-out split ({design.kind}) can give {pages} "
                          "tasks, one per page that serves one, and each trace task needs a page of its own")
    for name, split in (("trace_examples_per_obs", "heldout"), ("train_examples_per_obs", "train")):
        n = getattr(cfg, name)
        serviceable, largest = max_examples_per_obs(split, design=design)
        if n > serviceable:
            raise ConfigError(f"{BY_NAME[name].env}={n}: no {split} observation can give {n} balanced examples "
                              f"(the snapshot's largest observation has {largest} actions)")
    arms = planned_arms(cfg)
    check_budgets(cfg, arms)
    try:
        check_refine_fits(cfg, trace_tasks(cfg)[:1])  # the run's own first task; all of them are drawn here
    except DatasetError as err:
        raise ConfigError(str(err)) from None


MODELS_ACCEPTED = {"local": "smollm2-135m (embedded), a local HF model directory with config.json, or an HF id "
                            "(org/name) already in the local HF cache",
                   "skyrl": "smollm2-135m (embedded), a local HF model directory with config.json, or an HF id "
                            "(org/name), fetched by the node"}


def check_model(cfg: Config) -> None:
    """W8_HARNESS_MODEL resolvable as harness.models.resolve_model would on this backend, checked with the other
    knobs before any step (nothing loaded or converted): a ConfigError naming the knob and what it accepts."""
    try:
        check_model_name(cfg.harness_model, cfg.backend)
    except ModelError as err:
        raise ConfigError(f"W8_HARNESS_MODEL={cfg.harness_model}: {err}; accepted on the {cfg.backend} backend: "
                          f"{MODELS_ACCEPTED.get(cfg.backend, MODELS_ACCEPTED['local'])}") from None


def check_before_work(cfg: Config) -> None:
    """Every check that needs no run folder: task sizes, budgets, the model (run_r3.sh's init and each step)."""
    check_task_sizes(cfg)
    check_model(cfg)


def open_run(cfg: Config, root: Path | None = None) -> Path:
    """Create or reopen the run folder; write run_config.json before any work starts.

    Reopening a folder started with other knobs raises RunError naming the variables and the
    command that starts a new run id instead.
    """
    run_id = resolve_run_id(cfg)
    run_dir = (root or runs_root()) / run_id
    config_path = run_dir / "run_config.json"
    if config_path.exists():
        try:
            saved = load_run_config(run_dir)["knobs"]
        except (StorageError, KeyError, TypeError):
            raise RunError(f"{config_path}: unreadable run_config.json; start a new run id: "
                           f"{rerun_command(new_run_id(run_id))}") from None
        diffs = _knob_differences(saved, {**cfg.as_dict(), "run_id": run_id})
        if diffs:
            raise RunError(f"run {run_id} was started with other knobs: {', '.join(diffs)}; resume with the same "
                           f"knobs, or start a new run id: {rerun_command(new_run_id(run_id))}")
        return run_dir
    try:
        (run_dir / "steps").mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise storage_error(run_dir, err) from None
    atomic_write_json(config_path, run_config(cfg, run_id))
    return run_dir


# ---- the numbered scripts' shared main ------------------------------------------------------
@dataclass
class StepResult:
    outputs: list[str]  # relative to the run folder, already written (temp-then-rename)
    summary: str  # the one-line k/n or before/after summary
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    training_inputs: list[str] = field(default_factory=list)  # built and trained on: hashed in the marker too


def step_parser(step: str, doc: str) -> argparse.ArgumentParser:
    parser = KnobParser(prog=f"scripts/{step}.py", description=doc,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="redo the step even if its outputs are complete")
    add_flags(parser)
    return parser


def peak_rss_mb() -> float:
    """The highest resident memory of this process or any child it waited for, in MB (ru_maxrss: KiB on
    Linux, bytes on macOS). A step is one process, so this is the step's peak."""
    scale = 1 if sys.platform == "darwin" else 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) * scale / 2**20, 1)


def open_step_run(step: str, cfg: Config) -> tuple[Path | None, int]:
    """The run folder, locked for this process (or its run_r3.sh) and writable; (None, exit code) with one
    line printed when it cannot be used."""
    try:
        check_before_work(cfg)
        run_dir = open_run(cfg)
        lock_run(run_dir)
        check_writable(run_dir)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return None, 2
    except RunLocked as err:
        print(f"error: [{step}] {err}", file=sys.stderr)
        return None, EXIT_LOCKED
    except (RunError, StorageError) as err:
        print(f"error: {err}", file=sys.stderr)
        return None, 2 if isinstance(err, RunError) else 1
    return run_dir, 0


def run_step(step: str, doc: str, body: Callable[[Config, Path, argparse.Namespace], StepResult],
             argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Parse flags and knobs (the model among them), open and lock the run folder, check what the step reads,
    skip if done, run `body`, write the marker.

    Exit codes, each failure one line: 2 a bad knob (the run folder is bound to its knobs: start a
    new run id), 1 a step or storage error (resumable), 75 the run is locked by another process.
    Any other exception is a bug and keeps its traceback.
    """
    parser = parser or step_parser(step, doc)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    cfg = load_config_or_exit(argv, parser=parser)
    if defaults_notice(cfg):
        print(f"[{step}] {defaults_notice(cfg)}", flush=True)
    run_dir, code = open_step_run(step, cfg)
    if run_dir is None:
        return code
    code = check_inputs(step, cfg, run_dir)
    if code:
        return code
    use_run_caches(run_dir)
    marker, problems = read_marker(run_dir, step), output_problems(run_dir, step)
    if marker and not problems and not args.force:
        print(f"[{step}] complete, skipped ({marker.get('summary', '')})", flush=True)
        emit_step_results(run_dir, step)
        return 0
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        print(f"[{step}] {problems[0]}{more}: redoing the step", flush=True)
        for rel in damaged_training_inputs(run_dir, step):  # rebuilt by the step, never read as they are
            (run_dir / rel).unlink(missing_ok=True)
    print(f"[{step}] run dir {run_dir}", flush=True)
    start = time.monotonic()
    try:
        result = body(cfg, run_dir, args)
        wall_s = time.monotonic() - start
        if result.extra.get("sandbox"):
            record_sandbox(run_dir, step, result.extra["sandbox"])
        marker = mark_done(run_dir, step, result.outputs, result.summary, wall_s, skipped=result.skipped,
                           training_inputs=result.training_inputs, peak_rss_mb=peak_rss_mb(), **result.extra)
    except ConfigError as err:
        print(f"error: [{step}] {err}", file=sys.stderr)
        return 2
    except (StepError, RunError, MarkerError, StorageError, ExportError) as err:
        print(f"error: [{step}] {err}", file=sys.stderr)
        return 1
    print(step_line(run_dir, step, marker), flush=True)
    emit_step_results(run_dir, step)
    return 0


def check_inputs(step: str, cfg: Config, run_dir: Path) -> int:
    """What the step reads, checked before it runs or skips (also when run by hand): an earlier step's
    damaged output is refused in one line naming the file and the step to redo (exit 1: a resume redoes
    that step first); a damaged cached training file (data/) is named and rebuilt from the knobs. 0 when
    the step may go on."""
    inputs = input_problems(run_dir, step)
    if inputs:
        more = f" (and {len(inputs) - 1} more)" if len(inputs) > 1 else ""
        earlier = inputs[0].rsplit("an output of step ", 1)[1]
        print(f"error: [{step}] {inputs[0]}{more}: refusing to use it; redo step {earlier} first "
              f"(scripts/{earlier}.py with the same W8_RUN_ID, or resume the run)", file=sys.stderr)
        return 1
    data = data_problems(run_dir, step)
    if data:
        more = f" (and {len(data) - 1} more)" if len(data) > 1 else ""
        print(f"[{step}] {data[0]}{more}: rebuilding the cached training data from the run's knobs", flush=True)
        try:  # without its stamp the cache is rebuilt silently: this line is the one that names the file
            (Path(run_dir) / DATA_STAMP).unlink(missing_ok=True)
            training_data_for(cfg, Path(run_dir) / "data")
        except OSError as err:
            shown = err if isinstance(err, StorageError) else storage_error(Path(run_dir) / "data", err)
            print(f"error: [{step}] {shown}", file=sys.stderr)
            return 1
    return 0


def step_line(run_dir: Path, step: str, marker: dict[str, Any]) -> str:
    """The step's one-line summary: what it did, its wall time and peak memory, where its files are."""
    verb = "skipped" if marker.get("skipped") else "done"
    files = ", ".join(marker.get("outputs", [])) or "no files"
    dropped = f"; steps {', '.join(marker['dropped'])} will be redone (their inputs changed)" \
        if marker.get("dropped") else ""
    return (f"[{step}] {verb} in {marker['wall_s']:.1f}s, peak RSS {marker['peak_rss_mb'] / 1024:.1f} GB: "
            f"{marker['summary']} -> {shown_run_dir(run_dir)}/{{{files}}}{dropped}")


def emit_step_results(run_dir: Path, step: str) -> None:
    """One `W8_RESULT {json}` line per small file the step wrote, on a node or with W8_EMIT_RESULTS=1 only
    (logs carry results home from a node; on a terminal they are noise: the files are in the run folder)."""
    if results_wanted():
        emit_results(run_dir, [name for name in small_artifacts(run_dir, [step]) if name != "run_config.json"])


# ---- after training -------------------------------------------------------------------------
def finish_training(run_dir: Path, out_dir: Path, kind: str, wall_s: float, extra: dict | None = None) -> StepResult:
    """After SFT/GRPO: the newest export and <kind>_metrics.json (the trainer's metrics.json, annotated).

    `extra` (what the trainer reports: override file, sandbox provenance, plan) goes into the
    metrics file and the step's marker; a listed override file becomes an output too.
    """
    policy = newest_export(out_dir)
    if policy is None:
        raise StepError(f"{kind} finished without an export under {out_dir} (global_step_N/policy with config.json)")
    check_export(policy)
    extra = dict(extra or {})
    trainer_metrics = out_dir / "metrics.json"
    metrics = read_json(trainer_metrics) if trainer_metrics.is_file() else {}
    metrics = {**metrics, **extra, "policy": str(policy.relative_to(run_dir)), "train_wall_s": round(wall_s, 1)}
    name = f"{kind}_metrics.json"
    atomic_write_json(run_dir / name, metrics)
    outputs = [name, str(policy.relative_to(run_dir))]
    if (out_dir / "metrics.png").is_file():
        atomic_write_bytes(run_dir / f"{kind}_metrics.png", (out_dir / "metrics.png").read_bytes())
        outputs.append(f"{kind}_metrics.png")
    if extra.get("overrides"):
        outputs.append(extra["overrides"])
    return StepResult(outputs, f"{kind} export {policy.relative_to(run_dir)} in {wall_s:.0f}s",
                      extra={k: v for k, v in extra.items() if k in ("sandbox", "plan")})


# ---- CLI for run_r3.sh ---------------------------------------------------------------------
def init_run(results_root: Path) -> int:
    """`init`: knobs checked, the run folder opened, it and the results root proven writable, before step 01.
    stdout is the run dir (read by run_r3.sh); what the run is and where it stands goes to stderr."""
    try:
        cfg = load_config()
        check_before_work(cfg)
        run_dir = open_run(cfg)
        for folder in (run_dir, results_root):
            check_writable(folder)
    except (ConfigError, RunError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except StorageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(knobs_line(load_run_config(run_dir)["knobs"]), file=sys.stderr)
    done = [step for step in STEPS if step_is_done(run_dir, step)]
    damaged = [f"{step}: {problems[0]}" for step in STEPS if (problems := output_problems(run_dir, step))]
    if done or damaged:
        print(f"resuming {run_dir.name}: {len(done)}/{len(STEPS)} steps complete, next "
              f"{first_pending_step(run_dir) or 'none (finished)'}"
              + (f"; damaged, to redo: {'; '.join(damaged)}" if damaged else ""), file=sys.stderr)
    print(run_dir)
    return 0


def emit_run(run_dir: Path, items: list[str]) -> None:
    """W8_RESULT lines of a run's small artifacts: all, or those of the named steps and files."""
    names = small_artifacts(run_dir) if not items else [
        n for item in items for n in (small_artifacts(run_dir, [item]) if item in STEPS else [item])
        if not (item in STEPS and n == "run_config.json")]
    emit_results(run_dir, names)


def _cli(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "init" and len(rest) == 1:
            return init_run(Path(rest[0]))
        if command == "lock" and len(rest) == 2:
            lock_run(Path(rest[0]), fd=int(rest[1]))
        elif command == "rerun-command" and len(rest) in (1, 2):
            print(rerun_command(new_run_id(rest[0]) if rest[1:] == ["--new"] else rest[0]))
        elif command == "invocation" and rest[1:2] == ["start"] and len(rest) == 2:
            start_invocation(Path(rest[0]))
        elif command == "invocation" and rest[1:2] == ["end"] and len(rest) == 3:
            print(end_invocation(Path(rest[0]), int(rest[2])))
        elif command == "emit" and [a for a in rest if a != "--when-wanted"]:
            when_wanted = rest[0] == "--when-wanted"  # run_r3.sh: only where a log must carry results home
            if not when_wanted or results_wanted():
                emit_run(Path(rest[1 if when_wanted else 0]), rest[2 if when_wanted else 1:])
        elif command == "emit-failure" and len(rest) == 3:
            emit_failure(Path(rest[0]), rest[1], int(rest[2]), emit=results_wanted())
        elif command == "knob" and len(rest) == 1 and rest[0] in BY_NAME:
            print(getattr(load_config(), rest[0]))
        else:
            print("usage: python -m harness.pipeline init RESULTS_ROOT | lock RUN_DIR FD | knob NAME | "
                  "rerun-command RUN_ID [--new] | invocation RUN_DIR start|end [EXIT_CODE] | "
                  "emit [--when-wanted] RUN_DIR [STEP|FILE ...] | emit-failure RUN_DIR STEP EXIT_CODE", file=sys.stderr)
            return 2
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunLocked as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_LOCKED
    except StorageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_cli(sys.argv[1:]))
