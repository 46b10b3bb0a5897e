"""Benchmark: an arm's searches batched in rounds vs the same searches one by one (embedded model, hf operator).

    python scripts/bench/bench_batch.py                                # 3 tasks x 2 seeds, budget 1, 160-token answers
    python scripts/bench/bench_batch.py --tasks 2 --seeds 1 --max-new-tokens 64   # a quick look

The same (task, seed) searches (harness.traces.search_specs, presets/local.env otherwise)
run three ways with one loaded model: padded (harness.search.run_searches in rounds, every
unfinished search's next request in one padded generate, answers scored in parallel: what
the hf operator does on a GPU), rounds (the same rounds, the requests generated one after
another: what it does on a CPU) and one by one (run_searches on each search alone).
Sampled answers differ between the runs (a padded batch is seeded as a whole), so the
comparison is the wall time per node and per generated token, printed side by side with
the speedups. Not a test: a measurement. Ends with one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.config import load_config  # noqa: E402
from harness.operators import operator_from_config  # noqa: E402
from harness.search import run_searches  # noqa: E402
from harness.traces import search_specs  # noqa: E402


def timed(specs, operator) -> dict:
    start = time.monotonic()
    traces = run_searches(specs, operator, progress=None)
    wall = time.monotonic() - start
    nodes = sum(len(t.nodes) for t in traces)
    tokens = sum(n.completion_tokens for t in traces for n in t.nodes)
    return {"wall_s": round(wall, 1), "nodes": nodes, "completion_tokens": tokens,
            "s_per_node": round(wall / nodes, 2), "tokens_per_s": round(tokens / wall, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--budget", type=int, default=1, help="refinements per search (nodes = budget + 1)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    args = parser.parse_args(argv)
    cfg = load_config(env={"W8_PRESET": "local", "W8_TRACE_TASKS": str(args.tasks), "W8_TRACE_SEEDS": str(args.seeds),
                           "W8_TRACE_MAX_ITERATIONS": str(args.budget), "W8_SANDBOX": "local",
                           "W8_OPERATOR_MAX_NEW_TOKENS": str(args.max_new_tokens),
                           "W8_HARNESS_GOLD_THRESHOLD": "1.0"})  # every search uses its whole budget
    operator = operator_from_config(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        specs = [spec for spec in search_specs(cfg, Path(tmp), "bench")]
        for spec in specs:
            spec.state_path = None
        runs = {}
        for name, padded in (("padded", True), ("rounds", False)):
            operator.padded = padded
            runs[name] = timed(specs, operator)
        alone = [timed([spec], operator) for spec in specs]
    one_by_one = {"wall_s": round(sum(a["wall_s"] for a in alone), 1), "nodes": sum(a["nodes"] for a in alone),
                  "completion_tokens": sum(a["completion_tokens"] for a in alone)}
    one_by_one["s_per_node"] = round(one_by_one["wall_s"] / one_by_one["nodes"], 2)
    one_by_one["tokens_per_s"] = round(one_by_one["completion_tokens"] / one_by_one["wall_s"], 1)
    runs["one_by_one"] = one_by_one
    speedups = {name: round(one_by_one["s_per_node"] / runs[name]["s_per_node"], 2) for name in ("padded", "rounds")}
    print(json.dumps({"searches": len(specs), "budget": args.budget, "max_new_tokens": args.max_new_tokens,
                      "temperature": cfg.operator_temperature, "device": operator.device, **runs,
                      "speedup_per_node": speedups}))
    print(f"bench_batch: {len(specs)} searches x {args.budget + 1} nodes, hf SmolLM2-135M on {operator.device}, "
          f"{args.max_new_tokens}-token answers: " + ", ".join(
              f"{name} {run['wall_s']}s ({run['s_per_node']} s/node, {run['tokens_per_s']} tok/s)"
              for name, run in runs.items())
          + f"; per node vs one by one: padded {speedups['padded']:.2f}x, rounds {speedups['rounds']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
