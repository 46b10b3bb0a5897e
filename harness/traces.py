"""The traces of a run: which held-out tasks and search seeds, one batch of searches per arm, trace files.

    from harness.traces import run_arm, write_traces, load_traces
    traces = run_arm(cfg, run_dir, "frozen")            # cfg.harness_model is the arm's model
    write_traces(run_dir / "frozen_trace.json", "frozen", model, traces)

An arm is one model searched on every (task, seed) pair of the run: `frozen` (the model as
shipped, step 01) and the post-training arms of step 04; harness/arms.py holds every arm, what it
starts from and how it is trained. Every arm gets the same tasks (each from
a different held-out page), the same search seeds, knobs and decoding; only the model
differs, so step 05 can pair them. An arm's searches advance together in rounds
(harness.search.run_searches: one operator batch per round); each saves its state under
<run>/search/ after every node, so a killed step resumes mid-round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from harness.arms import NAMES, SEARCHED
from harness.budget import arm_plan, check_refine_fits, frozen_search_budget, matched_budgets, planned_arms
from harness.config import Config, ConfigError
from harness.dataset import DatasetError, Task, heldout_examples, make_task, n_pages
from harness.rule_split import Design
from harness.files import StorageError, atomic_write_json, read_json, shown_path
from harness.operators import OperatorError, operator_from_config
from harness.rewards import validation_problem
from harness.run_folder import StepError, config_of_run
from harness.sandbox import merge_provenance, provenance_is_empty, sandbox_provenance
from harness.search import SearchKnobs, SearchSpec, SearchStateError, run_searches, trace_prefix

ARMS = NAMES  # every arm of harness/arms.py's table, in its order
SEARCHED_ARMS = SEARCHED  # the arms with searches of their own (frozen_matched is cut from frozen's)
FROZEN_LONG = "frozen_long"  # frozen's whole search, when an arm's equal-compute budget exceeds frozen_matched's
TASK_SEED_TRIES = 1000  # seeds tried from trace_task_seed on to find the tasks' distinct pages


def arm_file(arm: str) -> str:
    return f"{arm}_trace.json"


def trace_tasks(cfg: Config) -> list[Task]:
    """W8_TRACE_TASKS held-out tasks from distinct pages: seeds trace_task_seed, +1, ... skipping a page seen."""
    design = Design.of(cfg)
    pages = n_pages("heldout", design=design)
    if cfg.trace_tasks > pages:
        raise DatasetError(f"W8_TRACE_TASKS={cfg.trace_tasks}: the held-out split ({design.kind}) can give {pages} "
                           "tasks, one per page that serves one, and no page serves two")
    tasks: list[Task] = []
    for seed in range(cfg.trace_task_seed, cfg.trace_task_seed + TASK_SEED_TRIES):
        task = make_task("heldout", seed, cfg.trace_examples_per_obs, design=design)
        if task.page not in {t.page for t in tasks}:
            tasks.append(task)
        if len(tasks) == cfg.trace_tasks:
            return tasks
    raise DatasetError(f"W8_TRACE_TASKS={cfg.trace_tasks}: only {len(tasks)} distinct pages serve "
                       f"{cfg.trace_examples_per_obs} balanced examples")


def trace_seeds(cfg: Config) -> list[int]:
    """The search seeds of every task: search_seed, +1, ... (W8_TRACE_SEEDS of them)."""
    return [cfg.search_seed + j for j in range(cfg.trace_seeds)]


# What one batched round of searches costs on the GPU node, for the dry-run's estimate only: a vLLM
# call generating up to the token budget for every search of an arm at once. NOT measured (no GPU
# here): ~100 tokens/s per sequence for a 1.5B model on one A100, plus ~5 s of sandbox scoring.
GPU_TOKENS_PER_S = 100.0
GPU_ROUND_OVERHEAD_S = 5.0


def frozen_budgets(cfg: Config) -> dict[str, int]:
    """The budgets cut from frozen's one search per (task, seed): frozen (the run's budget), frozen_matched (the
    trained arm's compute, harness.budget) and, when another arm's equal-compute budget is larger, frozen_long."""
    arms = planned_arms(cfg)
    if "frozen_matched" not in arms:
        return {"frozen": cfg.trace_max_iterations}
    matched = matched_budgets(cfg, arms)
    budgets = {"frozen": cfg.trace_max_iterations, "frozen_matched": matched["trained"]}
    longest = frozen_search_budget(cfg, arms)
    if longest > budgets["frozen_matched"]:
        budgets[FROZEN_LONG] = longest
    return budgets


def search_plan(cfg: Config) -> dict[str, Any]:
    """The searches a run plans: arms x tasks x seeds, the most operator calls (every search uses its whole
    budget), and on the skyrl backend an estimate of the GPU minutes they take (assumptions above)."""
    arms = planned_arms(cfg)
    searched = [arm for arm in arms if arm in SEARCHED_ARMS]
    per_search = {arm: (frozen_search_budget(cfg, arms) if arm == "frozen" else cfg.trace_max_iterations) + 1
                  for arm in searched}
    pairs = cfg.trace_tasks * cfg.trace_seeds
    rounds = sum(per_search.values())
    round_s = cfg.operator_max_new_tokens / GPU_TOKENS_PER_S + GPU_ROUND_OVERHEAD_S
    return {"arms": arms, "tasks": cfg.trace_tasks, "seeds": cfg.trace_seeds, "searches": len(searched) * pairs,
            "max_operator_calls": pairs * rounds, "max_rounds": rounds, "per_arm": arm_plan(cfg, arms),
            "gpu_minutes_estimate": round(rounds * round_s / 60, 1) if cfg.backend == "skyrl" else None}


def search_specs(cfg: Config, run_dir: Path, arm: str, budget: int | None = None) -> list[SearchSpec]:
    """One search per (task, seed) pair, with its state file and held-out check (budget: the run's unless given)."""
    knobs = SearchKnobs.from_config(cfg if budget is None else cfg.replace(trace_max_iterations=budget))
    specs = []
    for task in trace_tasks(cfg):
        heldout = heldout_examples(task.obs_id, design=Design.of(cfg))
        slug = task.task_id.replace("/", "_")
        for seed in trace_seeds(cfg):
            specs.append(SearchSpec(task, SearchKnobs(knobs.max_iterations, knobs.c, seed, knobs.reward), heldout,
                                    run_dir / "search" / f"{arm}-{slug}-s{seed}.state.json",
                                    label=f"{arm} {task.task_id} s{seed}"))
    return specs


def sandbox_record_path(run_dir: Path, arm: str) -> Path:
    """<run>/search/<arm>.sandbox.json: where the programs of an arm's saved search nodes ran, beside their states."""
    return Path(run_dir) / "search" / f"{arm}.sandbox.json"


def arm_sandbox(run_dir: Path, arm: str) -> dict[str, Any]:
    """The sandbox record of every node of the arm's searches saved so far, over all processes that ran them."""
    path = sandbox_record_path(run_dir, arm)
    record = read_json(path, fix="delete it and the arm's search states (search/<arm>-*.state.json), then redo "
                       "the step") if path.is_file() else {}
    return record if isinstance(record, dict) else {}


def sandbox_problem(path: Path) -> str | None:
    """One line when a trace file's programs ran somewhere its sandbox record does not say (empty record, while
    some node holds a program that passed validation and so was run in the sandbox); None when it says."""
    data = read_json(path, fix="rerun the step that wrote it (same W8_RUN_ID: its marker no longer matches)")
    if not isinstance(data, dict) or not provenance_is_empty(data.get("sandbox")):
        return None
    ran = sum(1 for t in data.get("traces", [data]) for n in t.get("nodes", [])
              if n.get("code") and not validation_problem(n["code"]))
    if not ran:
        return None
    role = str(data.get("role") or "<arm>")
    search_arm = "frozen" if role.startswith("frozen") else role  # frozen_matched/_long are cuts of frozen's
    step = "01_frozen_trace" if search_arm == "frozen" else "04_trained_trace"
    return (f"{path.name}: its sandbox record is empty ({data.get('sandbox')}) although {ran} program(s) in it "
            "passed validation and ran in a sandbox, so where they ran is not recorded; delete it and "
            f"search/{search_arm}-*.state.json, then rerun step {step} (same W8_RUN_ID)")


def run_arm(cfg: Config, run_dir: Path, arm: str, say: Callable[..., None] = print,
            budget: int | None = None) -> list[dict[str, Any]]:
    """Every (task, seed) search of one arm, batched, with the operator the knobs describe (model =
    cfg.harness_model). Prints live `steps_to_gold <arm> ...` lines; StepError in one line."""
    budget = cfg.trace_max_iterations if budget is None else budget
    try:
        specs = search_specs(cfg, run_dir, arm, budget)
        if budget:  # before the model loads: the refinement prompt must fit its context
            check_refine_fits(cfg, [spec.task for spec in specs])
        operator = operator_from_config(cfg)
    except (DatasetError, OperatorError) as err:
        raise StepError(f"{arm}: {err}") from None
    earlier = arm_sandbox(run_dir, arm)  # the nodes saved by earlier processes: where their programs ran

    def progress(line: str) -> None:  # after every saved node: its sandbox record beside the search states
        atomic_write_json(sandbox_record_path(run_dir, arm), merge_provenance(earlier, sandbox_provenance()))
        say(f"steps_to_gold {line}", flush=True)

    say(f"steps_to_gold {arm}: {len(specs)} searches ({cfg.trace_tasks} task(s) x {cfg.trace_seeds} seed(s)), "
        f"budget {budget}, operator {operator.name} at temperature "
        f"{getattr(operator, 'temperature', '-')}", flush=True)
    try:
        traces = run_searches(specs, operator, progress=progress)
    except (SearchStateError, OperatorError) as err:  # OperatorError: a llama.cpp worker died mid-round
        raise StepError(f"{arm}: {err}") from None
    finally:
        operator.close()
    atomic_write_json(sandbox_record_path(run_dir, arm), merge_provenance(earlier, sandbox_provenance()))
    out = []
    for trace in traces:
        data = trace.to_trace()
        data["operator"]["model"] = shown_path(data["operator"].get("model", ""), run_dir)
        out.append(data)
    return out


def trace_arm_to_file(cfg: Config, run_dir: Path, arm: str, model: str, say: Callable[..., None] = print) -> Path:
    """An arm's searches with `model`, written to <run>/<arm>_trace.json (the model recorded run-relative,
    with the sandbox that ran the arm's programs)."""
    traces = run_arm(cfg.replace(harness_model=model), run_dir, arm, say)
    return write_traces(Path(run_dir) / arm_file(arm), arm, shown_path(model, run_dir), traces,
                        arm_sandbox(run_dir, arm))


def trace_frozen_to_files(cfg: Config, run_dir: Path, model: str, say: Callable[..., None] = print) -> list[Path]:
    """frozen's one search per (task, seed) with the largest budget any arm is matched to, cut into
    <run>/frozen_trace.json (the run's budget), frozen_matched_trace.json (the trained arm's compute) and,
    when larger, frozen_long_trace.json (every node: the refine and self arms' equal-compute budgets)."""
    budgets = frozen_budgets(cfg)
    longest = max(budgets.values())
    traces = run_arm(cfg.replace(harness_model=model), run_dir, "frozen", say, budget=longest)
    sandbox, shown = arm_sandbox(run_dir, "frozen"), shown_path(model, run_dir)
    paths = []
    for arm, budget in budgets.items():
        cut = [prefix_trace(t, budget) for t in traces]
        paths.append(write_traces(Path(run_dir) / arm_file(arm), arm, shown, cut, sandbox))
    return paths


def prefix_trace(trace: dict[str, Any], budget: int) -> dict[str, Any]:
    """A trace JSON as if searched with `budget` refinements (harness.search.trace_prefix): its first nodes."""
    if budget == trace["knobs"]["max_iterations"]:
        return trace
    return {**trace_prefix(trace, budget), "cut_from_budget": trace["knobs"]["max_iterations"]}


def write_traces(path: Path, role: str, model: str, traces: list[dict[str, Any]],
                 sandbox: dict[str, Any] | None = None) -> Path:
    """<arm>_trace.json: {"role": arm, "model", "sandbox", "traces": [one trace per (task, seed)]}."""
    return atomic_write_json(path, {"role": role, "model": model, "sandbox": sandbox, "traces": traces})


def load_traces(path: Path) -> list[dict[str, Any]]:
    """The traces of a trace file written by write_traces (or a single plain trace JSON)."""
    data = read_json(path, fix="rerun the step that wrote it (same W8_RUN_ID: its marker no longer matches)")
    if not isinstance(data, dict):
        raise StorageError(0, f"{path}: not a trace file (a JSON object with 'traces' expected)")
    return data["traces"] if "traces" in data else [data]


def steps_summary(traces: list[dict[str, Any]]) -> str:
    gold = sum(t["steps_to_first_gold"] is not None for t in traces)
    steps = [t["steps_to_first_gold"] if t["steps_to_first_gold"] is not None else t["knobs"]["max_iterations"] + 1
             for t in traces]
    return (f"gold reached in {gold}/{len(traces)} searches; mean steps_to_gold {sum(steps) / len(steps):.2f} "
            f"(not reached counts {traces[0]['knobs']['max_iterations'] + 1})")


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.traces RUN_DIR ARM MODEL`: one arm's searches with the run's own knobs (step 04 runs
    each arm in its own process, so a GPU holds one arm's vLLM engine at a time)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[1] not in ARMS:
        print(f"usage: python -m harness.traces RUN_DIR {{{'|'.join(ARMS)}}} MODEL", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    try:
        path = trace_arm_to_file(config_of_run(run_dir), run_dir, args[1], args[2])
    except StepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args[1]}: {steps_summary(load_traces(path))} -> {path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
