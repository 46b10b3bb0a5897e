"""Thompson-sampling tree search over harness programs (REx, as AutoHarness uses it).

    from harness.search import SearchKnobs, run_search
    trace = run_search(task, operator, SearchKnobs.from_config(cfg), state_path="s.json")
    trace.steps_to_first_gold(), trace.to_trace()

    python -m harness.search --operator deterministic --task-seed 7       # one search, watched

- node 0 is the operator's zero-shot answer to build_zero_shot_prompt(task) (no seed program);
- each iteration draws theta_i ~ Beta(1 + C*h_i, 1 + C*(1 - h_i) + N_i) for every node
  (h = reward, N = times refined) with a seeded RNG, refines the argmax with up to five
  failing examples, scores the child and adds it;
- it stops at the first gold node (balanced accuracy >= gold_threshold) or after
  max_iterations refinements, so a trace has at most max_iterations + 1 nodes;
- steps_to_first_gold = index of the first gold node, None if none;
- a gold node also records its accuracy on examples of other held-out observations.

The search state (nodes, refinement counts, RNG state, budget used) is written atomically
(temp file + os.replace) after every node. With `state_path` set, a search that was killed
resumes from the last node written; with the deterministic operator the resumed trace
equals an uninterrupted one (wall times aside). LLM operators get a per-node seed derived
from the search seed and the node index, so a resumed sampled search asks the same
questions with the same seeds. A state file of another task, operator or knob setting is
refused, never silently reused.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.config import add_flags, load_config_or_exit
from harness.dataset import DatasetError, Example, heldout_examples, make_task
from harness.failures import failure_candidates, failure_from_record, failure_record, select_failures
from harness.files import WORK_DIR, atomic_write_json
from harness.knob_parser import KnobParser
from harness.operators import Generation, Operator, OperatorError, Request, operator_from_config
from harness.rewards import RewardKnobs, score_harness, score_with
from harness.rule_split import Design

TRACE_VERSION = 1
# Fields that differ between two runs of the same search (timing only).
TIMING_FIELDS = ("wall_s", "operator_wall_s", "score_wall_s")


class SearchStateError(ValueError):
    """A saved search state does not belong to this search; the message names the mismatch."""


class SandboxDown(SearchStateError):
    """The sandbox failed a program twice (an infrastructure fault, not a score): the search stops
    before recording the node, so a rerun resumes where it stopped."""


@dataclass(frozen=True)
class SearchKnobs:
    """Everything a search is run with besides the task and the operator (from the knob table)."""

    max_iterations: int  # W8_TRACE_MAX_ITERATIONS: refinements (a trace has at most this + 1 nodes)
    c: float  # W8_SEARCH_C: the Thompson-sampling weight
    seed: int  # W8_SEARCH_SEED: the RNG of the search and the per-node operator seeds
    reward: RewardKnobs  # recall weight, gold threshold, sandbox timeout and backend

    @classmethod
    def from_config(cls, cfg: Any) -> "SearchKnobs":
        return cls(cfg.trace_max_iterations, cfg.search_c, cfg.search_seed, RewardKnobs.from_config(cfg))

    def record(self) -> dict[str, Any]:
        """What a trace keeps (and compare checks): the knobs that decide its nodes. The sandbox
        backend is not among them (it runs the same programs); provenance records it."""
        return {"search_c": self.c, "max_iterations": self.max_iterations, "gold_threshold": self.reward.gold_threshold,
                "reward_recall_weight": self.reward.recall_weight, "search_seed": self.seed,
                "sandbox_timeout_s": self.reward.timeout_s}


@dataclass
class Node:
    """One program in the search tree and how it scored."""

    index: int
    parent: int | None
    reward: float
    balanced_accuracy: float
    accuracy: float
    effective_recall: float
    valid: bool
    reason: str
    gold: bool
    code: str
    heldout_accuracy: float | None = None  # gold nodes only: accuracy on other held-out observations
    n_wrong: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)  # what a refinement of this node may be shown
    shown: list[int] = field(default_factory=list)  # example indexes of the parent's failures this node was asked with
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    operator_wall_s: float = 0.0
    score_wall_s: float = 0.0


@dataclass
class Trace:
    """A search: task identity, knobs, operator, nodes; JSON via to_trace()/from_trace()."""

    task: dict[str, Any]
    knobs: dict[str, Any]
    operator: dict[str, Any]
    nodes: list[Node] = field(default_factory=list)
    wall_s: float = 0.0

    def steps_to_first_gold(self) -> int | None:
        return next((n.index for n in self.nodes if n.gold), None)

    @property
    def finished(self) -> bool:
        return bool(self.nodes) and (self.nodes[-1].gold or len(self.nodes) > self.knobs["max_iterations"])

    def to_trace(self) -> dict[str, Any]:
        return trace_json(self.task, self.knobs, self.operator, [asdict(n) for n in self.nodes], self.wall_s)

    @classmethod
    def from_trace(cls, data: dict[str, Any]) -> "Trace":
        nodes = [Node(**n) for n in data.get("nodes", [])]
        return cls(data["task"], data["knobs"], data["operator"], nodes, data.get("wall_s", 0.0))


def trace_json(task: dict[str, Any], knobs: dict[str, Any], operator: dict[str, Any], nodes: list[dict[str, Any]],
               wall_s: float) -> dict[str, Any]:
    """A trace's JSON from its parts: the nodes and what is derived from them (first gold, best node, tokens)."""
    steps = next((n["index"] for n in nodes if n["gold"]), None)
    finished = bool(nodes) and (nodes[-1]["gold"] or len(nodes) > knobs["max_iterations"])
    best = max(nodes, key=lambda n: (n["reward"], -n["index"]), default=None)
    prompt = sum(n.get("prompt_tokens", 0) for n in nodes)
    completion = sum(n.get("completion_tokens", 0) for n in nodes)
    return {
        "version": TRACE_VERSION, "task": task, "knobs": knobs, "operator": operator,
        "steps_to_first_gold": steps, "n_nodes": len(nodes), "finished": finished,
        "stop_reason": "gold" if steps is not None else ("budget" if finished else "running"),
        "best_node": best["index"] if best else None, "best_reward": best["reward"] if best else None,
        "best_balanced_accuracy": max((n["balanced_accuracy"] for n in nodes), default=None),
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        "wall_s": wall_s, "nodes": nodes,
    }


def trace_prefix(trace: dict[str, Any], budget: int) -> dict[str, Any]:
    """The search as if its budget had been `budget` refinements: its first budget + 1 nodes.

    Exact, because the search never looks at its budget: Thompson sampling, the per-node seeds
    and the prompts depend only on the nodes so far, and the budget only says when to stop. One
    long search therefore serves every smaller budget (the frozen and frozen_matched arms share
    one search per task; tests/test_search_budget.py checks it). Wall time is the kept nodes' own."""
    if budget > trace["knobs"]["max_iterations"]:
        raise ValueError(f"a prefix of budget {budget} from a search of budget {trace['knobs']['max_iterations']}")
    nodes = trace["nodes"][: budget + 1]
    return trace_json(trace["task"], {**trace["knobs"], "max_iterations": budget}, trace["operator"], nodes,
                      round(sum(n.get("wall_s", 0.0) for n in nodes), 3))


def steps_to_first_gold(trace: Trace | dict[str, Any], threshold: float | None = None) -> int | None:
    """Index of the first gold node of a trace (object or JSON), None if no node is gold.

    With `threshold`, gold is recomputed from each node's validity and balanced accuracy
    instead of trusted from the record (what compare does with trace files).
    """
    nodes = [asdict(n) for n in trace.nodes] if isinstance(trace, Trace) else trace.get("nodes", [])
    if threshold is None:
        return next((n["index"] for n in nodes if n["gold"]), None)
    return next((n["index"] for n in nodes if n.get("valid", True) and n["balanced_accuracy"] >= threshold), None)


def without_timing(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace JSON with the wall times removed: what two runs of one search must share."""
    out = {k: v for k, v in trace.items() if k not in TIMING_FIELDS}
    out["nodes"] = [{k: v for k, v in n.items() if k not in TIMING_FIELDS} for n in trace.get("nodes", [])]
    return out


# ---- one search, step by step -------------------------------------------------------

def task_record(task: Any) -> dict[str, Any]:
    """The task identity a trace carries (ids, examples hash, class counts)."""
    n_legal = sum(1 for e in task.examples if e.legal)
    return {**task.identity(), "n_legal": n_legal, "n_illegal": len(task.examples) - n_legal}


def node_seed(search_seed: int, index: int, task_id: str) -> int:
    """The seed handed to the operator for node `index` of the search of `task_id` (stable across resumes).

    The task is mixed in so that two tasks searched with the same search seed do not share their
    sampling noise: the tasks are the unit of analysis, and shared noise would correlate them."""
    return random.Random(f"node:{task_id}:{search_seed}:{index}").randrange(2**31)


def thompson_pick(nodes: Sequence[Node], refine_counts: Sequence[int], c: float, rng: random.Random) -> int:
    """argmax_i theta_i, theta_i ~ Beta(1 + C*h_i, 1 + C*(1 - h_i) + N_i); ties go to the lower index."""
    thetas = [rng.betavariate(1 + c * n.reward, 1 + c * (1 - n.reward) + k) for n, k in zip(nodes, refine_counts)]
    return max(range(len(thetas)), key=lambda i: (thetas[i], -i))


HeldOut = Sequence[Example] | Callable[[str], float] | None


def heldout_accuracy(code: str, heldout: HeldOut, reward: RewardKnobs) -> float | None:
    if heldout is None:
        return None
    if callable(heldout):
        return float(heldout(code))
    if not heldout:
        return None
    return score_harness(code, list(heldout), reward.recall_weight, reward.timeout_s, sandbox=reward.sandbox).accuracy


def progress_line(node: Node) -> str:
    parent = "-" if node.parent is None else str(node.parent)
    tail = "" if node.valid else f"  invalid: {node.reason[:80]}"
    held = f" heldout {node.heldout_accuracy:.3f}" if node.heldout_accuracy is not None else ""
    return (f"node {node.index:>3} parent {parent:>3} reward {node.reward:.3f} ba {node.balanced_accuracy:.3f} "
            f"gold {'YES' if node.gold else 'no'}{held} ({node.wall_s:.2f}s, "
            f"{node.prompt_tokens + node.completion_tokens} tok){tail}")


@dataclass
class SearchSpec:
    """One search of a batch: its task, knobs (the seed among them), held-out check and state file."""

    task: Any
    knobs: SearchKnobs
    heldout: HeldOut = None
    state_path: str | Path | None = None
    label: str = ""  # prefixes its progress lines (e.g. "task <id> seed <s>")


class Search:
    """One search's state: `ask` says what the operator must answer next, `score` and `add` take the answer.

    Thompson sampling happens in `ask` with the search's own seeded RNG, whose state is saved
    with every node, so a killed search resumes where it stopped and asks the same question.
    """

    def __init__(self, spec: SearchSpec, operator: Operator, progress: Callable[[str], None] | None):
        self.spec, self.progress = spec, progress
        self.trace = Trace(task_record(spec.task), spec.knobs.record(), operator.describe())
        self.rng = random.Random(spec.knobs.seed)
        self.counts: list[int] = []
        self.parent: int | None = None
        self.shown: list[int] = []
        if spec.state_path and Path(spec.state_path).exists():
            self.counts = _resume(Path(spec.state_path), self.trace, self.rng)
            self._say(f"resumed {spec.state_path}: {len(self.trace.nodes)} node(s) done")
        self.started = time.perf_counter() - self.trace.wall_s

    @property
    def finished(self) -> bool:
        return self.trace.finished

    def ask(self) -> Request:
        """The next request: node 0's zero-shot prompt, or a refinement of the Thompson-picked node."""
        task, index = self.spec.task, len(self.trace.nodes)
        seed = node_seed(self.spec.knobs.seed, index, task.task_id)
        if index == 0:
            self.parent, self.shown = None, []
            return Request(task, seed)
        self.parent = thompson_pick(self.trace.nodes, self.counts, self.spec.knobs.c, self.rng)
        node = self.trace.nodes[self.parent]
        # earlier refinements of this same program, from any node that holds it: a model that keeps
        # answering one wrong program is shown other failures each time, and never the same prompt
        attempt = sum(1 for n in self.trace.nodes if n.parent is not None and self.trace.nodes[n.parent].code == node.code)
        candidates = [failure_from_record(r, task.examples) for r in node.failures]
        shown = select_failures(candidates, attempt=attempt)
        self.shown = [f.index for f in shown]
        return Request(task, seed, node.code, shown, attempt)

    def score(self, gen: Generation) -> Node:
        """The answer scored in the sandbox as the next node (thread-safe: touches no search state)."""
        start = time.perf_counter()
        task, reward = self.spec.task, self.spec.knobs.reward
        code, score, gold = score_with(gen.text, task.examples, reward)
        if score.infra:  # the sandbox's fault, not the program's: once more, then stop rather than score it
            code, score, gold = score_with(gen.text, task.examples, reward)
            if score.infra:
                raise SandboxDown(f"{self.spec.label or task.task_id}: the sandbox failed node "
                                  f"{len(self.trace.nodes)} twice ({score.reason[:160]}); the search stopped "
                                  "there and resumes from its saved state on a rerun")
        held = heldout_accuracy(code, self.spec.heldout, reward) if gold else None
        score_wall = time.perf_counter() - start
        return Node(index=len(self.trace.nodes), parent=self.parent, reward=score.reward,
                    balanced_accuracy=score.balanced_accuracy, accuracy=score.accuracy,
                    effective_recall=score.effective_recall, valid=score.valid, reason=score.reason, gold=gold,
                    code=code, heldout_accuracy=held, n_wrong=score.n_wrong,
                    failures=[failure_record(f) for f in failure_candidates(score, task.examples)],
                    shown=list(self.shown), prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens,
                    wall_s=gen.wall_s + score_wall, operator_wall_s=gen.wall_s, score_wall_s=score_wall)

    def add(self, node: Node) -> None:
        """Append the node, count the refinement, save the state, report a line."""
        self.trace.nodes.append(node)
        self.counts.append(0)
        if node.parent is not None:
            self.counts[node.parent] += 1
        self.trace.wall_s = time.perf_counter() - self.started
        if self.spec.state_path:
            save_state(Path(self.spec.state_path), self.trace, self.counts, self.rng)
        self._say(progress_line(node))

    def _say(self, line: str) -> None:
        if self.progress:
            self.progress(f"{self.spec.label} {line}".strip())


def run_searches(specs: Sequence[SearchSpec], operator: Operator,
                 progress: Callable[[str], None] | None = print) -> list[Trace]:
    """Run (or resume) several searches with one operator, in rounds; returns their traces in order.

    Each round asks the operator for every unfinished search's next program at once (one
    batch: harness.operators.Operator.answer) and scores the answers in parallel in the
    sandbox, one worker per core. A search's state is saved after each of its nodes, so a
    killed round resumes: finished nodes are kept, the round's missing ones are asked again.
    A program the sandbox fails twice raises SandboxDown after the round's other nodes are kept.
    """
    searches = [Search(spec, operator, progress) for spec in specs]
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        while pending := [s for s in searches if not s.finished]:
            gens = operator.answer([s.ask() for s in pending])
            futures = [pool.submit(search.score, gen) for search, gen in zip(pending, gens)]
            down = None
            for search, future in zip(pending, futures):
                try:
                    search.add(future.result())
                except SandboxDown as err:  # keep the round's other nodes, then stop
                    down = down or err
            if down:
                raise down
    return [s.trace for s in searches]


def run_search(task: Any, operator: Operator, knobs: SearchKnobs, heldout: HeldOut = None,
               state_path: str | Path | None = None, progress: Callable[[str], None] | None = print) -> Trace:
    """Run (or resume) one search on `task` with `operator`; returns the trace.

    heldout: examples of other held-out observations, or a callable code -> accuracy, used
    for gold nodes only. state_path: where the state is saved after every node; an
    existing file is resumed if it matches this task, operator and knobs.
    """
    return run_searches([SearchSpec(task, knobs, heldout, state_path)], operator, progress)[0]


# ---- state files --------------------------------------------------------------------

def save_state(path: Path, trace: Trace, counts: Sequence[int], rng: random.Random) -> None:
    """Write the search state atomically (harness.files): a killed search resumes from it."""
    atomic_write_json(path, {"trace": trace.to_trace(), "refine_counts": list(counts), "rng_state": _rng_to_json(rng)},
                      indent=None)


def _rng_to_json(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _resume(path: Path, trace: Trace, rng: random.Random) -> list[int]:
    """Load a saved state into `trace` and `rng`; refuse a state of another search."""
    try:
        state = json.loads(path.read_text())
        saved = state["trace"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SearchStateError(f"search state {path} is unreadable ({err}); delete it to start over") from None
    for part in ("task", "knobs", "operator"):
        mine, theirs = getattr(trace, part), saved.get(part, {})
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                raise SearchStateError(f"search state {path} is for another search: {part}.{key} is "
                                       f"{theirs.get(key)!r} there, {mine.get(key)!r} here; delete it or use another path")
    trace.nodes = Trace.from_trace(saved).nodes
    trace.wall_s = saved.get("wall_s", 0.0)
    version, internal, gauss = state["rng_state"]
    rng.setstate((version, tuple(internal), gauss))
    return list(state["refine_counts"])


def load_trace(path: str | Path) -> dict[str, Any]:
    """A trace JSON from a trace file or a search state file."""
    data = json.loads(Path(path).read_text())
    return data["trace"] if "trace" in data and "nodes" not in data else data


def _parser() -> argparse.ArgumentParser:
    p = KnobParser(prog="python -m harness.search", description="Run (or resume) one harness search.")
    p.add_argument("--task-seed", dest="trace_task_seed", default=None, help="alias of --trace-task-seed")
    p.add_argument("--task-split", dest="task_split", default="heldout", choices=("heldout", "train"),
                   help="the task's side of the split (--split: which split design) [heldout]")
    p.add_argument("--out", default=None, help="trace JSON path [.w8-biayn/search/<task>-<operator>.json]")
    p.add_argument("--state", default=None, help="search state path [<out>.state.json]; resumed if it matches")
    p.add_argument("--fresh", action="store_true", help="delete an existing state file first")
    p.add_argument("--quiet", action="store_true", help="no per-node lines")
    add_flags(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    cfg = load_config_or_exit(argv, parser=parser)
    try:
        design = Design.of(cfg)  # the split design (W8_SPLIT, W8_HELDOUT_RULES)
        task = make_task(args.task_split, cfg.trace_task_seed, cfg.trace_examples_per_obs, design=design)
        operator = operator_from_config(cfg)
    except (DatasetError, OperatorError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out or WORK_DIR / "search" / f"{task.task_id.replace('/', '_')}-{operator.name}.json")
    state = Path(args.state or f"{out}.state.json")
    if args.fresh:
        state.unlink(missing_ok=True)
    try:
        held = heldout_examples(task.obs_id, design=design) if args.task_split == "heldout" else None
    except DatasetError:
        held = None
    print(f"task {task.task_id} ({len(task.examples)} examples, hash {task.examples_hash}), "
          f"operator {operator.name} {operator.model}", file=sys.stderr)
    try:
        trace = run_search(task, operator, SearchKnobs.from_config(cfg), held, state,
                           progress=None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True)))
    except (SearchStateError, OperatorError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        operator.close()
    data = trace.to_trace()
    atomic_write_json(out, data, indent=1)
    steps = data["steps_to_first_gold"]
    print(f"steps_to_first_gold {steps if steps is not None else 'not reached'} | nodes {data['n_nodes']} | "
          f"best reward {data['best_reward']:.3f} | tokens {data['tokens']['total']} | "
          f"{data['wall_s']:.2f}s | trace {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
