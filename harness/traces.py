"""The traces of a run: which held-out tasks, one search per task with an arm's model, trace files.

    from harness.traces import run_trace_searches, write_traces, load_traces
    traces = run_trace_searches(cfg, run_dir, "frozen")      # cfg.harness_model is the arm's model
    write_traces(run_dir / "frozen_trace.json", "frozen", model, traces)

Step 01 runs the frozen model's searches, step 04 the trained model's, with the same
knobs, tasks and decoding; step 05 compares them (harness.compare). Each search saves its
state under <run>/search/ after every node, so a killed step resumes mid-search.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.config import Config
from harness.dataset import DatasetError, heldout_examples, make_task
from harness.files import atomic_write_json, shown_path
from harness.operators import OperatorError, operator_from_config
from harness.pipeline import StepError
from harness.search import SearchKnobs, SearchStateError, run_search


def write_traces(path: Path, role: str, model: str, traces: list[dict[str, Any]]) -> Path:
    """frozen_trace.json / trained_trace.json: {"role", "model", "traces": [one trace per task]}."""
    return atomic_write_json(path, {"role": role, "model": model, "traces": traces})


def load_traces(path: Path) -> list[dict[str, Any]]:
    """The traces of a trace file written by write_traces (or a single plain trace JSON)."""
    data = json.loads(Path(path).read_text())
    return data["traces"] if "traces" in data else [data]


def trace_seeds(cfg: Config) -> list[int]:
    return [cfg.trace_task_seed + i for i in range(cfg.trace_tasks)]


def run_trace_searches(cfg: Config, run_dir: Path, role: str, say=print) -> list[dict[str, Any]]:
    """One search per held-out trace task with the operator the knobs describe (model = cfg.harness_model).

    Each search saves its state under search/ after every node, so a killed step resumes mid-search.
    Prints live `steps_to_gold <role> ...` lines.
    """
    try:
        operator = operator_from_config(cfg)
    except OperatorError as err:
        raise StepError(f"operator: {err}") from None
    knobs = SearchKnobs.from_config(cfg)
    traces = []
    for seed in trace_seeds(cfg):
        try:
            task = make_task("heldout", seed, cfg.trace_examples_per_obs)
            heldout = heldout_examples(task.obs_id)
        except DatasetError as err:
            raise StepError(f"trace task seed {seed}: {err}") from None
        say(f"steps_to_gold {role} task {task.task_id}: searching (budget {cfg.trace_max_iterations})", flush=True)
        try:
            trace = run_search(task, operator, knobs, heldout,
                               state_path=run_dir / "search" / f"{role}-seed{seed}.state.json",
                               progress=lambda line: say(f"steps_to_gold {role} {line}", flush=True))
        except SearchStateError as err:
            raise StepError(str(err)) from None
        data = trace.to_trace()
        data["operator"]["model"] = shown_path(data["operator"].get("model", ""), run_dir)
        steps = data["steps_to_first_gold"]
        say(f"steps_to_gold {role} task {task.task_id} = {steps if steps is not None else 'not reached'} "
            f"({data['n_nodes']} nodes, best balanced accuracy {data['best_balanced_accuracy']:.3f})", flush=True)
        traces.append(data)
    return traces


def steps_summary(traces: list[dict[str, Any]]) -> str:
    parts = [f"{t['task']['task_id']}: {t['steps_to_first_gold'] if t['steps_to_first_gold'] is not None else '-'}"
             f"/{t['knobs']['max_iterations'] + 1}" for t in traces]
    gold = sum(t["steps_to_first_gold"] is not None for t in traces)
    return f"gold reached on {gold}/{len(traces)} task(s); steps_to_gold {'; '.join(parts)}"
