"""The compute ledger of a run's arms: what each arm's searches and training spent, the warm-start each one
started from, and what "equal compute" (frozen_matched) matches and what it does not.

    from harness.ledger import ledger, ledger_lines, warm_start, equal_compute_line
    book = ledger(run_dir, result, planned)           # per arm: search spend + training spend
    warm = warm_start(cfg, run_dir, list(book))       # per arm: the fine-tune before GRPO (steps, rows, tokens)
    ledger_lines(book, n_tasks, warm)                 # the two markdown tables of summary.md

Training spend comes from the metrics files a run writes (sft_metrics.json, <arm>_metrics.json,
self_data.json); the searches' spend from harness.search_stats.search_ledger. Wall time is elapsed
real time of the thing named. A harvest runs its searches side by side, one batch a round, so the
sum of its searches' elapsed times is worker-seconds, not wall time; a harvest record written
before that was told apart (no `worker_s`) holds that sum in `wall_s`, and its real time is
recomputed from the record: a search without a gold node runs every round, so its elapsed time
spans the whole harvest. With no gold node the real time is worker-seconds / searches; with g
searches stopped early at gold, it lies between worker-seconds / searches and worker-seconds /
(searches - g). A search killed and resumed loses the time between its last saved node and the
kill, so a resumed harvest's figure is a lower bound.

The warm-start. frozen_matched gives the frozen operator the trained arm's sampling compute: its
budget plus the trained arm's planned GRPO generations per task (harness.budget). It is not given
the warm-start: SFT on rows whose answers are the answer key (the oracle program), information no
sampling budget buys. The ledger counts those rows and their tokens with the model's tokenizer, as
the chat template renders them (prompt with the generation prompt; answer = the rest of the row).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from harness.arms import ARMS, BY_NAME
from harness.models import ModelError, resolve_model
from harness.training_data import sft_target_label, training_data_for

# from harness/arms.py's table: the trained arms, their GRPO metrics files, and those that start from step 02's SFT
# on the answer key
TRAINED = tuple(a.name for a in ARMS if a.trained_by != "-")
GRPO_METRICS = {a.name: a.metrics for a in ARMS if a.metrics}
FROM_SFT = tuple(a.name for a in ARMS if a.from_answer_key)


def read_metrics(run_dir: Path, name: str) -> dict[str, Any]:
    path = Path(run_dir) / name
    return json.loads(path.read_text()) if path.is_file() else {}


def grpo_generations_done(metrics: dict) -> int:
    """The completions a local or SkyRL GRPO really sampled: each step's prompts x group."""
    group = metrics.get("group_size") or 0
    total = 0
    for step in metrics.get("steps") or []:
        if step.get("generations") is not None:
            total += int(step["generations"])
        else:
            total += int(step.get("prompts") or 1) * group
    return total


def trainer_wall(metrics: dict) -> float:
    """The training's own wall time, harvests excluded (their search time is harvest_wall_s): `trainer_wall_s`
    where step 03 recorded it; else (runs before it did) the arm's wall time in step 03's last invocation,
    which also holds any harvest that invocation searched rather than found saved."""
    return round(metrics.get("trainer_wall_s", metrics.get("train_wall_s", 0.0)), 1)


def harvest_wall(harvest: dict) -> dict[str, Any]:
    """A harvest's real wall time (low, high: equal when exact) and its worker-seconds (module doc)."""
    if "worker_s" in harvest:
        return {"low": harvest["wall_s"], "high": harvest["wall_s"], "worker_s": harvest["worker_s"],
                "recomputed": False}
    worker, searches = harvest.get("wall_s", 0.0), max(1, harvest.get("searches") or 1)
    stopped_early = min(harvest.get("gold_nodes") or 0, searches - 1)
    return {"low": worker / searches, "high": worker / (searches - stopped_early), "worker_s": worker,
            "recomputed": True}


def training_ledger(run_dir: Path, arm: str) -> dict[str, Any]:
    """What an arm's training spent: GRPO samples, harvest search nodes, and the wall time of each part."""
    sft = read_metrics(run_dir, "sft_metrics.json")
    sft_wall = sft.get("train_wall_s", 0.0) if arm in FROM_SFT else 0.0
    metrics = read_metrics(run_dir, GRPO_METRICS[arm]) if arm in GRPO_METRICS else {}
    harvests = metrics.get("harvests") or []
    if arm == "self" and not metrics:  # no training data: the harvests still ran
        harvests = read_metrics(run_dir, "self_data.json").get("harvests") or []
    grpo = grpo_generations_done(metrics) if metrics else 0
    nodes = sum(h.get("nodes", 0) for h in harvests)
    walls = [harvest_wall(h) for h in harvests]
    return {"grpo_generations": grpo, "harvest_generations": nodes, "training_generations": grpo + nodes,
            "harvest_wall_s": round(sum(w["low"] for w in walls), 1),
            "harvest_wall_s_high": round(sum(w["high"] for w in walls), 1),
            "harvest_worker_s": round(sum(w["worker_s"] for w in walls), 1),
            "harvest_wall_recomputed": any(w["recomputed"] for w in walls),
            "train_wall_may_hold_harvest": bool(harvests) and "trainer_wall_s" not in metrics,
            "sft_wall_s": round(sft_wall, 1), "train_wall_s": trainer_wall(metrics)}


def ledger(run_dir: Path, result: dict, planned: dict) -> dict[str, dict[str, Any]]:
    """Per arm: the searches' spend (harness.search_stats.search_ledger) and the training's, with the plan."""
    out = {}
    for arm, a in result["arms"].items():
        base = arm.split("@")[0] if "@" in arm else arm
        out[arm] = {**a["search_ledger"], **(training_ledger(run_dir, base) if base in TRAINED else
                                             {"training_generations": 0}),
                    "planned_training_generations": planned.get(base, 0)}
    return out


# ---- the warm-start ------------------------------------------------------------------------------

def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sft_rows(cfg: Any, run_dir: Path) -> list[dict[str, Any]]:
    """Step 02's rows: <run>/data/sft/train.jsonl, or (a results folder, which holds no data folder) the same file
    written again from the run's knobs by step 02's own code (harness.training_data.training_data_for) in a
    temporary folder."""
    saved = Path(run_dir) / "data" / "sft" / "train.jsonl"
    if saved.is_file():
        return read_rows(saved)
    with tempfile.TemporaryDirectory(prefix="w8-sft-rows-") as scratch:
        return read_rows(training_data_for(cfg, Path(scratch)).sft_dir / "train.jsonl")


def row_tokens(rows: list[dict[str, Any]], tokenizer_dir: str) -> tuple[int, int]:
    """(prompt tokens, answer tokens) of chat rows as the chat template renders them."""
    from transformers import AutoTokenizer  # heavy: only when a warm-start is counted

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)

    def count(messages: list[dict[str, str]], **kw: Any) -> int:
        ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kw)["input_ids"]
        return len(ids)

    prompt = answer = 0
    for row in rows:
        asked = count(row["messages"][:-1], add_generation_prompt=True)
        prompt, answer = prompt + asked, answer + count(row["messages"]) - asked
    return prompt, answer


def tokenizer_dir(cfg: Any, run_dir: Path, sft: dict) -> str | None:
    """The SFT export's tokenizer in a run folder; else the base model's (the same tokenizer); None if neither is
    on this machine (nothing is downloaded)."""
    export = Path(run_dir) / sft["policy"] if sft.get("policy") else None
    if export is not None and (export / "tokenizer_config.json").is_file():
        return str(export)
    try:
        return resolve_model(cfg.harness_model)
    except ModelError:
        return None


def sft_warm_start(cfg: Any, run_dir: Path) -> dict[str, Any] | None:
    """Step 02's SFT on the answer key, counted: steps, batch, rows, their tokens; None when it did not run."""
    sft = read_metrics(run_dir, "sft_metrics.json")
    if not sft:
        return None
    rows = sft_rows(cfg, run_dir)
    where = tokenizer_dir(cfg, run_dir, sft)
    try:
        prompt, answer = row_tokens(rows, where) if where else (None, None)
    except (OSError, ValueError):  # a tokenizer that will not load here: the rows are still counted, not their tokens
        prompt = answer = None
    return {"kind": "SFT", "on": f"the answer key (the `{sft_target_label(cfg)}` oracle program)",
            "steps": len(sft.get("steps") or []) or cfg.harness_sft_steps, "batch": sft.get("batch_size"),
            "rows": sft.get("train_rows", len(rows)), "rows_counted": len(rows), "prompt_tokens": prompt,
            "answer_tokens": answer, "wall_s": sft.get("train_wall_s")}


def self_warm_start(cfg: Any, run_dir: Path) -> dict[str, Any] | None:
    """The self arm's rejection-sampling fine-tunes on its own harvested programs (no answer key)."""
    data = read_metrics(run_dir, "self_data.json")
    rounds = [r for r in data.get("rounds") or [] if r.get("kept")]
    if not rounds:
        return None
    return {"kind": "rejection-sampling fine-tune", "on": "its own harvested programs (no answer key)",
            "steps": cfg.self_sft_steps * len(rounds), "batch": None, "rows": sum(r["kept"] for r in rounds),
            "prompt_tokens": None, "answer_tokens": None, "wall_s": None}


def other_warm_start(arm: str) -> dict[str, Any] | None:
    """An arm of the table that starts from neither the base model, step 02's SFT nor the self rounds: its start
    as its row gives it, not counted here (None: it starts from the model as shipped)."""
    row = BY_NAME.get(arm)
    if row is None or row.trained_by == "-" or row.starts_from.startswith("the model as shipped"):
        return None
    return {"kind": "its own start", "on": row.starts_from, "steps": "-", "batch": None, "rows": "-",
            "prompt_tokens": None, "answer_tokens": None, "wall_s": None}


def warm_start(cfg: Any, run_dir: Path, arms: list[str]) -> dict[str, dict[str, Any] | None]:
    """Per arm, the fine-tune it started from before its searches (None: the base model)."""
    sft = sft_warm_start(cfg, run_dir) if any(a in FROM_SFT for a in arms) else None
    own = self_warm_start(cfg, run_dir) if "self" in arms else None
    return {arm: sft if arm in FROM_SFT else own if arm == "self" else other_warm_start(arm) for arm in arms}


# ---- the tables ----------------------------------------------------------------------------------

def _tokens(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def harvest_cell(e: dict) -> str:
    """The harvest wall time, recomputed or a range where the record allows no more, with its worker-seconds."""
    if not e.get("harvest_worker_s"):
        return "0"
    low, high = e["harvest_wall_s"], e.get("harvest_wall_s_high", e["harvest_wall_s"])
    wall = f"{low:.0f}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}"
    mark = ", recomputed" if e.get("harvest_wall_recomputed") else ""
    return f"{wall} ({e['harvest_worker_s']:.0f} worker-s{mark})"


def ledger_lines(book: dict, n_tasks: int, warm: dict[str, dict | None] | None = None) -> list[str]:
    lines = ["| arm | search nodes | tokens generated in search | sandbox evaluations | search s (its nodes' times "
             "added up: each node's share of its round's generation, plus its scoring) | training "
             "generations (GRPO + harvest) | planned | training wall s (fine-tunes + GRPO) | harvest wall s (and its "
             "searches' worker-seconds) | total generations per task |", "|---|---|---|---|---|---|---|---|---|---|"]
    for arm, e in book.items():
        total = (e["search_generations"] + e["training_generations"]) / max(1, n_tasks)
        train = (f"{e['training_generations']} ({e.get('grpo_generations', 0)} + {e.get('harvest_generations', 0)})"
                 if "grpo_generations" in e else str(e["training_generations"]))
        wall = (f"{e.get('sft_wall_s', 0) + e.get('train_wall_s', 0):.0f} | {harvest_cell(e)}"
                if "train_wall_s" in e else "- | -")
        lines.append(f"| {arm} | {e['search_generations']} | {e['completion_tokens']} | {e['sandbox_evaluations']} | "
                     f"{e['search_wall_s']:.0f} | {train} | {e['planned_training_generations']} | {wall} | "
                     f"{total:.1f} |")
    lines += ["", "Equal compute: frozen_matched's budget is frozen's plus the trained arm's PLANNED training "
                  "generations per task, rounded up (harness.budget); the plan bounds what training really spent (the "
                  "training generations column), so the control never gets less sampling compute. It matches "
                  "sampling only: the warm-start below is not in it."]
    if any(e.get("harvest_wall_recomputed") for e in book.values()):
        lines += ["", "Harvest wall time recomputed from a harvest record that summed the elapsed times of its searches run side by "
                      "side (worker-seconds, in brackets): a search without a gold node runs every round, so real "
                      "time = worker-seconds / searches when no search stopped early at gold, and lies between "
                      "worker-seconds / searches and worker-seconds / (searches - gold nodes) otherwise "
                      "(harness.ledger). Lower bounds if a harvest was killed and resumed."]
    if held := [arm for arm, e in book.items() if e.get("train_wall_may_hold_harvest")]:
        lines += ["", f"Training wall time of {', '.join(held)}: step 03's whole time for the arm, recorded before the "
                      "training's own time was (trainer_wall_s); it holds the harvests if that invocation of step 03 "
                      "searched them rather than found them saved."]
    if warm:
        lines += ["", *warm_start_lines(warm)]
    return lines


def warm_start_lines(warm: dict[str, dict | None]) -> list[str]:
    lines = ["The warm-start: what each arm was fine-tuned on before GRPO and its searches (tokens of the rows as the "
             "chat template renders them; a step takes `batch` rows).", "",
             "| arm | fine-tune | on | steps x batch | rows | prompt tokens in the rows | answer tokens in the rows |",
             "|---|---|---|---|---|---|---|"]
    for arm, w in warm.items():
        if w is None:
            lines.append(f"| {arm} | none (the base model) | - | - | - | - | - |")
            continue
        batch = f" x {w['batch']}" if w.get("batch") else ""
        lines.append(f"| {arm} | {w['kind']} | {w['on']} | {w['steps']}{batch} | {w['rows']} | "
                     f"{_tokens(w['prompt_tokens'])} | {_tokens(w['answer_tokens'])} |")
    return lines


def equal_compute_line(result: dict, book: dict, warm: dict[str, dict | None]) -> str | None:
    """The headline's sentence on what frozen_matched matches and what it does not (None without the pair)."""
    arms = result["arms"]
    sft = warm.get("trained")
    if "frozen_matched" not in arms or "trained" not in arms:
        return None
    matched, budget = arms["frozen_matched"]["budget"], arms["trained"]["budget"]
    planned = book["trained"]["planned_training_generations"]
    line = (f"- **what equal compute matches**: frozen_matched is the frozen operator searched to a budget of "
            f"{matched} instead of {budget}, the trained arm's sampling compute ({planned} planned training "
            f"generations over {result['n_tasks']} tasks, rounded up). ")
    if sft is None:
        return line + "The trained arm had no warm-start, so nothing else separates them."
    tokens = "" if sft["answer_tokens"] is None else f", {sft['answer_tokens']:,} answer tokens"
    return line + (f"It is not given the warm-start: {sft['steps']} SFT steps on {sft['rows']} rows whose answers are "
                   f"the answer key (the oracle program{tokens}), information the frozen control never gets and no "
                   "sampling budget buys.")
