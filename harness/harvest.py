"""Harvests: an operator's own searches on TRAIN pages, the training data of the refine and self arms.

    python -m harness.harvest RUN_DIR NAME MODEL     # <run>/harvest/<NAME>.json, the run's own knobs
    from harness.harvest import load_harvest, refinement_requests, kept_programs
    requests = refinement_requests(load_harvest(run_dir, "refine"))   # what the search asked, with its parent
    kept = kept_programs(load_harvest(run_dir, "self-r1"), floor=0.4)  # the best programs, for rejection sampling

A harvest searches W8_HARVEST_TASKS train tasks with W8_HARVEST_MAX_ITERATIONS refinements each,
with the same search, sampling and sandbox as the held-out traces (harness.search). Its tasks
are train-split tasks at seeds after the GRPO and SFT rows' (HARVEST_SEED_START on), so an SFT
model is not just recalling an answer it was trained on, and no held-out page is ever searched.

What a harvest gives:
- refinement requests: every refinement the search really asked, rebuilt exactly (the parent's
  program, the failures it was shown, the attempt count): the prompts the search sends, which
  the refine and self arms' GRPO trains on (EvoTune and ThetaEvolve train on the search's own
  prompts), each with its source (harvest, task, node, parent, model);
- kept programs: the programs the reward ranks best (gold ones if any; else the top quarter by
  reward, above a floor such as the base model's median, and better than a constant answer), for
  rejection-sampling fine-tuning (ReST-EM) of the self arm. The reward is the only judge: no answer key enters.

Each harvest search saves its state after every node (<run>/harvest/<NAME>/), so a killed
harvest resumes; the harvest runs in its own process so its model leaves memory before training.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import Config, ConfigError
from harness.dataset import DatasetError, Task, make_task
from harness.rule_split import Design
from harness.failures import failure_from_record
from harness.files import StorageError, atomic_write_json, read_json, shown_path
from harness.operators import OperatorError, operator_from_config
from harness.rewards import Failure
from harness.run_folder import StepError, config_of_run
from harness.sandbox import sandbox_provenance
from harness.search import SearchKnobs, SearchSpec, SearchStateError, run_searches

HARVEST_SEED_START = 1000  # train-task seeds of harvests: far after the GRPO (0..W8_TRAIN_COUNT-1) and SFT rows'
KEEP_TOP_SHARE = 0.25  # without a gold program, the self arm keeps the top quarter by reward
# A program that gives every action the same answer (`return True`, `return False`, `return action in (None,)`)
# has balanced accuracy exactly 0.5 whatever the page: a kept program must beat that, or rejection sampling
# teaches the model a constant (found in results/study-b4-self-20261206: every kept program answered False)
CONSTANT_BALANCED_ACCURACY = 0.5


def harvest_tasks(cfg: Config) -> list[Task]:
    """The train tasks a harvest searches (train split only)."""
    design = Design.of(cfg)
    return [make_task("train", HARVEST_SEED_START + i, cfg.train_examples_per_obs, design=design)
            for i in range(cfg.harvest_tasks)]


def harvest_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "harvest"


def harvest_file(run_dir: Path, name: str) -> Path:
    return harvest_dir(run_dir) / f"{name}.json"


def run_harvest(cfg: Config, run_dir: Path, name: str, model: str, say=print) -> Path:
    """Search every harvest task with `model`; write <run>/harvest/<name>.json and return its path.

    Its `wall_s` is real time: from this call's start (the model's loading included) to its last search's end,
    plus what earlier, killed processes spent (earlier_wall_s). The searches run side by side, so adding up
    their own times gives worker-seconds (`worker_s`), not wall time."""
    started = time.monotonic()
    cfg = cfg.replace(harness_model=model)
    knobs = SearchKnobs.from_config(cfg.replace(trace_max_iterations=cfg.harvest_max_iterations))
    try:
        tasks = harvest_tasks(cfg)
        operator = operator_from_config(cfg)
    except (DatasetError, OperatorError) as err:
        raise StepError(f"harvest {name}: {err}") from None
    specs = [SearchSpec(task, knobs, None, harvest_dir(run_dir) / name / f"{task.task_id.replace('/', '_')}.state.json",
                        label=f"harvest {name} {task.task_id}") for task in tasks]
    earlier = earlier_wall_s(specs)
    say(f"harvest {name}: {len(specs)} train task(s), budget {knobs.max_iterations}, operator {operator.name}",
        flush=True)
    try:
        traces = [t.to_trace() for t in run_searches(specs, operator, progress=lambda line: say(line, flush=True))]
    except (SearchStateError, OperatorError) as err:
        raise StepError(f"harvest {name}: {err}") from None
    finally:
        operator.close()
    for trace in traces:
        trace["operator"]["model"] = shown_path(trace["operator"].get("model", ""), run_dir)
    wall_s = earlier + time.monotonic() - started
    record = {"name": name, "model": shown_path(model, run_dir), "sandbox": sandbox_provenance(),
              "design": Design.of(cfg).record(),
              "budget": knobs.max_iterations, "traces": traces, **harvest_numbers(traces, wall_s),
              "earlier_wall_s": round(earlier, 3)}
    return atomic_write_json(harvest_file(run_dir, name), record)


def earlier_wall_s(specs: list[SearchSpec]) -> float:
    """The real time earlier processes spent on these searches: the longest saved search's own time (a search's
    clock goes on from its saved state, and the searches of one harvest start together), 0.0 when none is
    saved. A state that cannot be read counts 0 here; resuming it fails with its name (harness.search)."""
    saved = []
    for spec in specs:
        try:
            saved.append(float(read_json(Path(spec.state_path))["trace"].get("wall_s", 0.0)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return max(saved, default=0.0)


def harvest_numbers(traces: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """What a harvest found, in numbers (printed when it finds nothing usable). wall_s is the harvest's real time;
    worker_s adds up its searches' own times, which ran side by side (worker-seconds: not a wall time)."""
    nodes = [n for t in traces for n in t["nodes"]]
    return {"searches": len(traces), "nodes": len(nodes), "valid_nodes": sum(n["valid"] for n in nodes),
            "gold_nodes": sum(n["gold"] for n in nodes), "refinements": sum(n["parent"] is not None for n in nodes),
            "completion_tokens": sum(n.get("completion_tokens", 0) for n in nodes),
            "wall_s": round(wall_s, 3), "worker_s": round(sum(t.get("wall_s", 0.0) for t in traces), 3),
            "best_reward": max((n["reward"] for n in nodes), default=None)}


def harvest_wall_s(harvest: dict[str, Any]) -> float:
    """A harvest record's real time. A record written before worker_s existed held the searches' times added up
    in wall_s; for it the longest search's own time stands in (the searches started together: a lower bound)."""
    if "worker_s" in harvest:
        return float(harvest["wall_s"])
    return max((t.get("wall_s", 0.0) for t in harvest["traces"]), default=0.0)


def harvest_design(harvest: dict[str, Any]) -> Design:
    """The split design a harvest's tasks were drawn under (the page split for records from before it was kept)."""
    design = harvest.get("design") or {}
    return Design(design.get("split", "page"), tuple(design.get("heldout_rules", ())))


def load_harvest(run_dir: Path, name: str) -> dict[str, Any]:
    return read_json(harvest_file(run_dir, name), fix="step 03 harvests it again from its saved searches")


def harvest_line(harvest: dict[str, Any]) -> str:
    return (f"harvest {harvest['name']}: {harvest['searches']} searches, {harvest['nodes']} nodes "
            f"({harvest['valid_nodes']} valid, {harvest['gold_nodes']} gold, {harvest['refinements']} refinements), "
            f"best reward {harvest['best_reward'] if harvest['best_reward'] is not None else '-'}, "
            f"{harvest_wall_s(harvest):.0f} s wall")


# ---- what a harvest gives ------------------------------------------------------------------------

@dataclass(frozen=True)
class RefinementRequest:
    """One refinement the search asked: the parent's program and the failures it was shown."""

    task: Task
    parent_code: str
    parent_reward: float
    failures: list[Failure]
    attempt: int
    source: dict[str, Any]


def task_of(trace: dict[str, Any], design: Design) -> Task:
    """The task a harvest trace searched (rebuilt from the snapshot under the harvest's split design; its examples
    hash must match)."""
    info = trace["task"]
    task = make_task(info["split"], info["seed"], info["examples_per_obs"], design=design)
    if task.examples_hash != info["examples_hash"]:
        raise StepError(f"harvest task {info['task_id']}: the snapshot's examples changed since the harvest "
                        "(examples hash differs); delete the harvest folder to search again")
    return task


def refinement_requests(harvest: dict[str, Any]) -> list[RefinementRequest]:
    """Every refinement a harvest's searches asked, rebuilt as the search built it (harness.search.Search.ask):
    the parent's program, the failures shown (the child's `shown` indexes into the parent's failure records)
    and the attempt count (earlier refinements of the same program)."""
    out = []
    for trace in harvest["traces"]:
        task, nodes = task_of(trace, harvest_design(harvest)), trace["nodes"]
        for child in nodes:
            if child["parent"] is None:
                continue
            parent = nodes[child["parent"]]
            records = {r["index"]: r for r in parent["failures"]}
            failures = [failure_from_record(records[i], task.examples) for i in child["shown"] if i in records]
            attempt = sum(1 for n in nodes[1:child["index"]] if nodes[n["parent"]]["code"] == parent["code"])
            out.append(RefinementRequest(task, parent["code"], parent["reward"], failures, attempt,
                                         {"harvest": harvest["name"], "task_id": task.task_id, "node": child["index"],
                                          "parent": parent["index"], "model": harvest["model"]}))
    return out


@dataclass(frozen=True)
class KeptProgram:
    """A program a harvest found and the reward ranks among the best: a rejection-sampling row."""

    task: Task
    code: str
    reward: float
    gold: bool
    source: dict[str, Any]


def node_rewards(harvest: dict[str, Any]) -> list[float]:
    return [n["reward"] for t in harvest["traces"] for n in t["nodes"]]


def median_reward(harvest: dict[str, Any]) -> float:
    rewards = node_rewards(harvest)
    return statistics.median(rewards) if rewards else 0.0


def kept_programs(harvest: dict[str, Any], floor: float) -> list[KeptProgram]:
    """The programs to fine-tune on: every gold one if any; else, among the valid programs that tell legal from
    illegal better than a constant answer (balanced accuracy above CONSTANT_BALANCED_ACCURACY), the top quarter
    by reward, strictly above `floor` (the base model's median reward). One row per distinct (task, program)."""
    nodes = [(t, n) for t in harvest["traces"] for n in t["nodes"] if n["valid"] and n["code"].strip()]
    gold = [(t, n) for t, n in nodes if n["gold"]]
    if gold:
        chosen = gold
    else:
        # a constant answer is no candidate at all: it neither is kept nor takes a place in the top quarter
        nodes = [(t, n) for t, n in nodes if n.get("balanced_accuracy", 0.0) > CONSTANT_BALANCED_ACCURACY + 1e-9]
        rewards = sorted((n["reward"] for _, n in nodes), reverse=True)
        if not rewards:
            return []
        cut = rewards[max(0, int(len(rewards) * KEEP_TOP_SHARE) - 1)]
        chosen = [(t, n) for t, n in nodes if n["reward"] >= cut and n["reward"] > floor]
    kept, seen = [], set()
    for trace, node in chosen:
        key = (trace["task"]["task_id"], node["code"])
        if key in seen:
            continue
        seen.add(key)
        kept.append(KeptProgram(task_of(trace, harvest_design(harvest)), node["code"], node["reward"], node["gold"],
                                {"harvest": harvest["name"], "task_id": trace["task"]["task_id"],
                                 "node": node["index"], "reward": node["reward"], "gold": node["gold"],
                                 "model": harvest["model"]}))
    return kept


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.harvest RUN_DIR NAME MODEL`: one harvest with the run's own knobs."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m harness.harvest RUN_DIR NAME MODEL", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    try:
        path = run_harvest(config_of_run(run_dir), run_dir, args[1], args[2])
    except (StepError, StorageError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(harvest_line(read_json(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
