"""The training data of the refine and self arms: harvests on train pages, mixed GRPO rows, rejection sampling.

    from harness.arm_training import harvest, mixed_training_data, self_round_rows, check_no_oracle
    h = harvest(cfg, run_dir, "refine", sft_export)              # <run>/harvest/refine.json (own process)
    data, mix = mixed_training_data(cfg, run_dir, "refine", [h])  # <run>/data/refine/train.parquet

refine: the SFT export searches train pages (a harvest); its refinement requests become GRPO
        prompts (harness.prompts.build_refine_prompt, the search's own prompt), mixed with the
        zero-shot rows at W8_REFINE_SHARE; GRPO then starts from the SFT export.
self:   no answer key anywhere. Round r (1..W8_SELF_ROUNDS): the round's model (the base model,
        then the previous round's) searches train pages, the reward keeps its best programs
        (harness.harvest.kept_programs: gold ones, else, among the programs better than a
        constant answer, the top quarter above the base model's median reward), and the BASE
        model is fine-tuned on them (rejection sampling as ReST-EM does: always from the base, on
        the latest round's programs). Then the last model
        harvests once more for its refinement prompts, and GRPO on the mixed rows starts from it.
        Every training row's source (harvest, task, node, reward) goes to <run>/self_data.json,
        and a row whose program is the oracle's (or the compact SFT target) fails the run.

The drivers of these steps live in scripts/03_grpo.py; this module holds what they share.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.files import REPO_ROOT, atomic_write_json, read_json
from harness.harvest import (CONSTANT_BALANCED_ACCURACY, harvest_file, harvest_line, harvest_numbers,
                             harvest_wall_s, kept_programs, load_harvest, median_reward, refinement_requests)
from harness.interface import program_key
from harness.oracle import sft_target_source
from harness.rewards import RewardKnobs
from harness.run_folder import StepError
from harness.training_data import (TrainingData, mixed_rows, program_row, refine_row, row_prompt_kind, skyrl_row,
                                   train_tasks, training_data_for, write_jsonl_rows,
                                   write_parquet_rows)

MIX_SEED = 0  # the mixed rows' order (the trainer shuffles again with its own seed)
SFT_TARGETS = ("oracle", "compact")


def harvest(cfg: Any, run_dir: Path, name: str, model: str) -> dict[str, Any]:
    """<run>/harvest/<name>.json, searched in its own process (`python -m harness.harvest`) unless it is there."""
    path = harvest_file(run_dir, name)
    cached = path.is_file()  # a harvest run here prints its own closing line
    if not cached:
        cmd = [sys.executable, "-m", "harness.harvest", str(run_dir), name, str(model)]
        with subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              bufsize=1) as proc:
            last_error = ""
            for line in proc.stdout:
                print(line, end="", flush=True)
                last_error = line.strip() if line.startswith("error:") else last_error
        if proc.returncode != 0:
            raise StepError(f"harvest {name} failed (exit {proc.returncode}): {last_error or 'see above'}")
    result = load_harvest(run_dir, name)
    if cached:
        print(harvest_line(result), flush=True)
    return result


def mixed_training_data(cfg: Any, run_dir: Path, name: str, data: TrainingData, harvests: list[dict[str, Any]],
                        forbid_oracle: bool = False) -> tuple[TrainingData, dict[str, Any]]:
    """<run>/data/<name>/train.parquet: W8_TRAIN_COUNT rows, W8_REFINE_SHARE of them refinement prompts from
    the harvests' own refinement requests, the rest the zero-shot rows; `data` with that parquet.
    forbid_oracle (the self arm): a parent program that is the answer key fails the run."""
    reward = RewardKnobs.from_config(cfg)
    zero_shot = [skyrl_row(t, reward) for t in train_tasks(cfg.train_count, cfg.train_examples_per_obs)]
    requests = [r for h in harvests for r in refinement_requests(h)]
    if forbid_oracle:
        check_no_oracle([r.parent_code for r in requests], [f"refinement parent {r.source}" for r in requests])
    refine = [refine_row(r.task, r.parent_code, r.failures, r.parent_reward, reward, cfg.refine_improvement_bonus,
                         cfg.refine_identical_penalty, attempt=r.attempt, source=r.source) for r in requests]
    rows, mix = mixed_rows(zero_shot, refine, cfg.refine_share, cfg.train_count, MIX_SEED)
    path = write_parquet_rows(rows, Path(run_dir) / "data" / name / "train.parquet")
    info = {"parquet": str(path.relative_to(run_dir)), "refine_share": cfg.refine_share,
            "refinement_pool": len(refine), "harvests": [h["name"] for h in harvests], **mix,
            "refine_sources": [row_source(r) for r in rows if row_prompt_kind(r) == "refine"]}
    return dataclasses.replace(data, train_parquet=path, n_train=len(rows)), info


def row_source(row: dict[str, Any]) -> dict[str, Any]:
    """A refinement row's source (harvest, task, node, parent, model), a dict also where the row keeps JSON."""
    source = (row.get("extra_info") or {}).get("source") or {}
    return json.loads(source) if isinstance(source, str) else dict(source)


# ---- the self arm -----------------------------------------------------------------------------------

def self_round_rows(cfg: Any, run_dir: Path, round_: int, harvest_: dict[str, Any], floor: float
                    ) -> tuple[TrainingData | None, list[dict[str, Any]]]:
    """The rejection-sampling rows of one self round (<run>/data/self-r<k>/sft/train.jsonl) and their sources;
    (None, []) when the harvest kept no program."""
    kept = kept_programs(harvest_, floor)
    sources = [{"round": round_, "kind": "rejection_sampling_sft", **k.source} for k in kept]
    if not kept:
        return None, []
    folder = Path(run_dir) / "data" / f"self-r{round_}"
    write_jsonl_rows([program_row(k.task, k.code) for k in kept], folder / "sft" / "train.jsonl")
    check_no_oracle([k.code for k in kept], [f"round {round_} row {i}" for i in range(len(kept))])
    own = training_data_for(cfg, Path(run_dir) / "data")  # its parquets: what SkyRL's length check measures
    return dataclasses.replace(own, sft_dir=folder / "sft"), sources


def check_no_oracle(programs: list[str], names: list[str]) -> None:
    """StepError when a training program is the oracle's or the compact SFT target's (the answer key)."""
    keys = {program_key(sft_target_source(target)): target for target in SFT_TARGETS}
    for program, name in zip(programs, names):
        if program_key(program) in keys:
            raise StepError(f"self arm: {name} is the {keys[program_key(program)]} program (the answer key), "
                            "which the self arm must never train on")


def write_self_data(run_dir: Path, status: str, rounds: list[dict[str, Any]], rows: list[dict[str, Any]],
                    base_median: float | None, harvests: list[dict[str, Any]]) -> Path:
    """<run>/self_data.json: every training row of the self arm and where it came from; no row from the oracle."""
    oracle_rows = [r for r in rows if r.get("harvest") is None]
    if oracle_rows:
        raise StepError(f"self arm: {len(oracle_rows)} training row(s) without a harvest source: refusing them")
    return atomic_write_json(Path(run_dir) / "self_data.json",
                             {"status": status, "base_median_reward": base_median, "rounds": rounds,
                              "harvests": harvests,
                              "n_rows": len(rows), "rows": rows,
                              "rule": "gold programs if any, else the top quarter by reward strictly above the base "
                                      f"model's median and with balanced accuracy above a constant answer's "
                                      f"{CONSTANT_BALANCED_ACCURACY}; "
                                      "rows always from harvest search nodes, never the oracle"})


def harvest_summary(harvest_: dict[str, Any]) -> dict[str, Any]:
    """A harvest's numbers for the metrics file and the ledger."""
    return {"name": harvest_["name"], "model": harvest_["model"],
            **harvest_numbers(harvest_["traces"], harvest_wall_s(harvest_))}


def read_self_data(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "self_data.json"
    return read_json(path) if path.is_file() else None

