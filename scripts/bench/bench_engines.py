"""Benchmark: the search's own generations with the hf operator against CTranslate2 and llama.cpp, side by side.

    python scripts/bench/bench_engines.py --sft <run>/sft/global_step_9/policy      # the frozen model and an SFT export
    python scripts/bench/bench_engines.py --tasks 2 --budget 0 --engines hf,llamacpp-q8_0  # a quick look
    python scripts/bench/bench_engines.py --sft <export> --sft-only   # the SFT export's rows alone (hf baseline beside)

Each engine searches the study's held-out tasks (presets/study.env: its token budget, temperature,
gold threshold, on the page split: an SFT export's node-0 gold there measures recall of its target) with the
frozen model and, with --sft, an SFT export: node 0 asks the zero-shot prompt and each refinement the
refinement prompt, as in a real arm. llama.cpp runs one worker process of one thread (s/node comparable
with hf's one generate at a time on every core) and, in its `-w` row, one worker per core (the searches'
nodes per minute). Every
(engine, model) runs in its own child process, so its peak RSS is its own, and one after the
other, so they share the machine's load. Printed per row: nodes, seconds per node, tokens/s,
peak RSS, the ct2 conversion + load time, and the answers' quality: share of valid programs,
mean reward, node-0 gold share (a 95% Wilson interval on the valid share says how far the
sample can tell two engines apart). Ends with one line: the speedup per node of each engine
over hf, at what quality. Not a test: a measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ENGINES = {"hf": {"W8_OPERATOR": "hf"},
           "ct2-int8": {"W8_OPERATOR": "ct2", "W8_CT2_COMPUTE_TYPE": "int8"},
           "ct2-float32": {"W8_OPERATOR": "ct2", "W8_CT2_COMPUTE_TYPE": "float32"},
           **{f"llamacpp-{t.lower()}": {"W8_OPERATOR": "llamacpp", "W8_GGUF_TYPE": t, "W8_OPERATOR_WORKERS": "1"}
              for t in ("Q8_0", "Q4_1", "F16")},
           **{f"llamacpp-{t.lower()}-w": {"W8_OPERATOR": "llamacpp", "W8_GGUF_TYPE": t, "W8_OPERATOR_WORKERS": "auto"}
              for t in ("Q8_0", "F16")}}
DEFAULT_ENGINES = ("hf", "ct2-float32", "llamacpp-q8_0", "llamacpp-q4_1", "llamacpp-f16", "llamacpp-q8_0-w",
                   "llamacpp-f16-w")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n)))


def one(engine: str, model: str, tasks: int, budget: int) -> dict:
    """One (engine, model): load the operator, run the searches, return the figures (runs in a child)."""
    from harness.config import load_config
    from harness.operators import operator_from_config
    from harness.search import run_searches
    from harness.traces import search_specs

    cfg = load_config(env={"W8_PRESET": "study", "W8_SPLIT": "page", "W8_TRACE_TASKS": str(tasks), "W8_TRACE_SEEDS": "1",
                           "W8_TRACE_MAX_ITERATIONS": str(budget), "W8_SANDBOX": "local",
                           "W8_HARNESS_MODEL": model, **ENGINES[engine]})
    start = time.monotonic()
    operator = operator_from_config(cfg)
    load_s = time.monotonic() - start
    with tempfile.TemporaryDirectory() as tmp:
        specs = search_specs(cfg, Path(tmp), "bench")
        for spec in specs:
            spec.state_path = None
        start = time.monotonic()
        traces = run_searches(specs, operator, progress=None)
        wall = time.monotonic() - start
    operator.close()
    nodes = [n for t in traces for n in t.nodes]
    gen_s = sum(n.operator_wall_s for n in nodes)
    tokens = sum(n.completion_tokens for n in nodes)
    valid = sum(n.valid for n in nodes)
    low, high = wilson(valid, len(nodes))
    return {"engine": engine, "model": Path(model).name if "/" in model else model, "searches": len(traces),
            "nodes": len(nodes), "wall_s": round(wall, 1), "s_per_node": round(wall / max(1, len(nodes)), 2),
            "nodes_per_min": round(60 * len(nodes) / wall, 2), "workers": getattr(operator.engine, "workers", 1)
            if hasattr(operator, "engine") else 1,
            "generate_s_per_node": round(gen_s / max(1, len(nodes)), 2),
            "tokens_per_s": round(tokens / gen_s, 1) if gen_s else None, "completion_tokens": tokens,
            "load_s": round(load_s, 1), "peak_rss_mb": round(max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF,
                                                                                   resource.RUSAGE_CHILDREN)) / 1024),
            "valid_share": round(valid / max(1, len(nodes)), 3), "valid_95": [round(low, 3), round(high, 3)],
            "mean_reward": round(sum(n.reward for n in nodes) / max(1, len(nodes)), 3),
            "node0_gold": round(sum(t.nodes[0].gold for t in traces if t.nodes) / max(1, len(traces)), 3),
            "gold_searches": sum(any(n.gold for n in t.nodes) for t in traces),
            "operator": operator.describe()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16, help="held-out tasks (the study's first N), one search each")
    parser.add_argument("--budget", type=int, default=1, help="refinements per search (nodes = budget + 1)")
    parser.add_argument("--engines", default=",".join(DEFAULT_ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--sft", default="", help="an SFT export (HF folder) searched too, beside the frozen model")
    parser.add_argument("--sft-only", action="store_true", help="with --sft: the SFT export's rows alone")
    parser.add_argument("--out", default="", help="also write the rows as JSON here")
    parser.add_argument("--one", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print("BENCH_ROW " + json.dumps(one(args.one[0], args.one[1], args.tasks, args.budget)), flush=True)
        return 0
    engines = [e for e in args.engines.split(",") if e]
    if unknown := [e for e in engines if e not in ENGINES]:
        print(f"error: unknown engine(s) {', '.join(unknown)}: expected {', '.join(ENGINES)}", file=sys.stderr)
        return 2
    if args.sft and not (Path(args.sft) / "config.json").is_file():
        print(f"error: --sft {args.sft}: not an HF model folder (no config.json)", file=sys.stderr)
        return 2
    if args.sft_only and not args.sft:
        print("error: --sft-only needs --sft <export>", file=sys.stderr)
        return 2
    models = ([] if args.sft_only else ["smollm2-135m"]) + ([str(Path(args.sft).resolve())] if args.sft else [])
    rows = []
    for model in models:
        for engine in engines:
            cmd = [sys.executable, __file__, "--one", engine, model, "--tasks", str(args.tasks),
                   "--budget", str(args.budget)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_ROW ")), None)
            if proc.returncode or line is None:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"error: {engine} on {model}: exit {proc.returncode}: {tail}", file=sys.stderr)
                return 1
            row = json.loads(line.removeprefix("BENCH_ROW "))
            rows.append(row)
            print(f"{row['engine']:16} {row['model']:28} {row['nodes']:3} nodes  {row['s_per_node']:6.2f} s/node  "
                  f"{row['nodes_per_min']:5.2f} nodes/min  "
                  f"{row['tokens_per_s']:6.1f} tok/s  load {row['load_s']:5.1f} s  peak {row['peak_rss_mb']:5} MB  "
                  f"valid {row['valid_share']:.2f} {row['valid_95']}  reward {row['mean_reward']:.3f}  "
                  f"node-0 gold {row['node0_gold']:.2f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"tasks": args.tasks, "budget": args.budget, "rows": rows}, indent=1))
    parts = []
    for model in {r["model"]: None for r in rows}:
        base = next((r for r in rows if r["model"] == model and r["engine"] == "hf"), None)
        for r in rows:
            if r["model"] == model and base and r["engine"] != "hf":
                parts.append(f"{r['engine']} on {model}: {base['s_per_node'] / r['s_per_node']:.2f}x per node "
                             f"(valid {r['valid_share']:.2f} vs hf {base['valid_share']:.2f}, reward "
                             f"{r['mean_reward']:.3f} vs {base['mean_reward']:.3f}, node-0 gold {r['node0_gold']:.2f} "
                             f"vs {base['node0_gold']:.2f})")
    print(f"bench_engines: {args.tasks} held-out tasks x {args.budget + 1} nodes, study knobs; "
          + ("; ".join(parts) or "no hf row to compare with"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
