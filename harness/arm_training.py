"""The training data of the refine and self arms: harvests on train pages, mixed GRPO rows, rejection sampling.

    from harness.arm_training import harvest, mixed_training_data, self_round_rows, check_no_oracle
    h = harvest(cfg, run_dir, "refine", sft_export)              # <run>/harvest/refine.json (own process)
    data, mix, programs = mixed_training_data(cfg, run_dir, "refine", data, [h])  # <run>/data/refine/train.parquet
    write_training_programs(run_dir, "refine", programs)          # <run>/refine_programs.jsonl (results too)

refine: the SFT export searches train pages (a harvest); its refinement requests become GRPO
        prompts (harness.prompts.build_refine_prompt, the search's own prompt), mixed with the
        zero-shot rows at W8_REFINE_SHARE; GRPO then starts from the SFT export. Under the repair
        curriculum the refinement prompts are the curriculum's (no harvest).
repair_sft, trained (the repair curriculum): harness.repair_training's warm-start, then repair GRPO.
self:   no answer key anywhere (so not the repair curriculum, whose parents come from the compact
        program). Round r (1..W8_SELF_ROUNDS): the round's model (the base model, then the previous
        round's) searches train pages, the reward keeps its best programs (harness.harvest.kept_programs:
        gold ones, else, among the programs better than a constant answer, the top quarter above the
        base model's median reward), and the BASE model is fine-tuned on them (rejection sampling as
        ReST-EM does: always from the base, on the latest round's programs). Then the last model
        harvests once more for its refinement prompts, and GRPO on the mixed rows starts from it.
        Every training row's program goes to <run>/self_programs.jsonl and its source (harvest,
        task, node, reward) to <run>/self_data.json, which points at the program by row index and
        sha256; a row whose program is similar to the oracle's (or the compact SFT target) fails
        the run (check_no_oracle).

<run>/<arm>_programs.jsonl holds the programs an arm trains on, one row per training row: the program text,
its source (harvest, task id, page, task seed, node) and reward; results/<run-id>/ gets it (step 03's output).

Every arm step 03 trains has its training function here, in TRAININGS under the name its row of
harness/arms.py gives (`training`): it gets the knobs, the run folder and step 03's trainers on the
run's backend (Trainers: GRPO and a fine-tune), trains into the arm's folder and returns a Trained
(the model its last training started from, or None with a status when there was nothing to train on).
Step 03 (scripts/03_grpo.py) calls them in the table's order and finishes each (metrics file, marker).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from harness.dataset import Task
from harness.exports import newest_export
from harness.files import REPO_ROOT, StorageError, atomic_write_json, read_json
from harness.harvest import (CONSTANT_BALANCED_ACCURACY, harvest_dir, harvest_file, harvest_line, harvest_numbers,
                             harvest_wall_s, kept_programs, load_harvest, median_reward, refinement_requests)
from harness.interface import program_key
from harness.oracle import sft_target_source
from harness.rewards import RewardKnobs
from harness.repair_training import grpo_data, training_eval_point, warmstart_data
from harness.rule_split import Design, curriculum_of
from harness.run_folder import StepError
from harness.train_local import grpo_steps
from harness.training_data import (TrainingData, mixed_rows, program_row, refine_row, row_prompt_kind, skyrl_row,
                                   train_tasks, training_data_for, write_jsonl_rows, write_parquet_rows)

MIX_SEED = 0  # the mixed rows' order (the trainer shuffles again with its own seed)
SFT_TARGETS = ("oracle", "compact")
# check_no_oracle: a program this similar to an SFT target is the answer key (the measure and why this bar: there)
ANSWER_KEY_SIMILARITY = 0.5


def harvest(cfg: Any, run_dir: Path, name: str, model: str) -> dict[str, Any]:
    """<run>/harvest/<name>.json, searched in its own process (`python -m harness.harvest`) unless it is there;
    one that cannot be read (cut short, corrupt) is named and made again from its saved searches."""
    path = harvest_file(run_dir, name)
    cached = path.is_file()  # a harvest run here prints its own closing line
    if cached:
        try:
            result = load_harvest(run_dir, name)
        except StorageError as err:
            print(err, flush=True)  # its fix: harvested again, the searches resuming from their saved states
            path.unlink()
            cached = False
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
        return load_harvest(run_dir, name)
    print(harvest_line(result), flush=True)
    return result


def mixed_training_data(cfg: Any, run_dir: Path, name: str, data: TrainingData, harvests: list[dict[str, Any]],
                        forbid_oracle: bool = False) -> tuple[TrainingData, dict[str, Any], list[dict[str, Any]]]:
    """<run>/data/<name>/train.parquet: W8_TRAIN_COUNT rows, W8_REFINE_SHARE of them refinement prompts from
    the harvests' own refinement requests, the rest the zero-shot rows; `data` with that parquet, the mix in
    numbers, and the programs the refinement rows show (refinement_programs: the arm's training programs).
    forbid_oracle (the self arm): a parent program similar to the answer key fails the run."""
    reward = RewardKnobs.from_config(cfg)
    zero_shot = [skyrl_row(t, reward) for t in train_tasks(cfg.train_count, cfg.train_examples_per_obs,
                                                           Design.of(cfg))]
    requests = [r for h in harvests for r in refinement_requests(h)]
    if forbid_oracle:
        check_no_oracle([{"kind": "refinement parent", **r.source, "code": r.parent_code} for r in requests])
    refine = [refine_row(r.task, r.parent_code, r.failures, r.parent_reward, reward, cfg.refine_improvement_bonus,
                         cfg.refine_identical_penalty, attempt=r.attempt, source=r.source) for r in requests]
    rows, mix = mixed_rows(zero_shot, refine, cfg.refine_share, cfg.train_count, MIX_SEED)
    path = write_parquet_rows(rows, Path(run_dir) / "data" / name / "train.parquet")
    info = {"parquet": str(path.relative_to(run_dir)), "refine_share": cfg.refine_share,
            "refinement_pool": len(refine), "harvests": [h["name"] for h in harvests], **mix,
            "refine_sources": [row_source(r) for r in rows if row_prompt_kind(r) == "refine"]}
    return dataclasses.replace(data, train_parquet=path, n_train=len(rows)), info, refinement_programs(rows)


def refinement_programs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The program of each refinement row (the parent the prompt asks to improve), as a training-program record:
    its source (harvest, task, node asked at, parent: the node holding the program, model), page, task seed,
    the attempt, the parent's reward, the program."""
    out = []
    for row in rows:
        if row_prompt_kind(row) != "refine":
            continue
        info = row["extra_info"]
        out.append(program_record({"kind": "grpo_refinement_prompt", **row_source(row), "task_id": info["task_id"],
                                   "page": info["page"], "seed": info["seed"], "attempt": info["attempt"]},
                                  info["parent_code"], info["parent_reward"]))
    return out


def program_record(source: dict[str, Any], code: str, reward: float) -> dict[str, Any]:
    """One row of <arm>_programs.jsonl: where the program came from, its reward, its sha256, its text."""
    return {**source, "reward": reward, "program_sha256": hashlib.sha256(code.encode()).hexdigest(), "code": code}


def kept_record(round_: int, task: Task, code: str, reward: float, source: dict[str, Any]) -> dict[str, Any]:
    """A kept program (harness.harvest.KeptProgram) as a training-program record of a self round."""
    return program_record({"round": round_, "kind": "rejection_sampling_sft", **source, "page": task.page,
                           "seed": task.seed}, code, reward)


def programs_file(arm: str) -> str:
    """The arm's training programs, relative to the run folder (a small artifact: results/<run-id>/ gets it)."""
    return f"{arm}_programs.jsonl"


def write_training_programs(run_dir: Path, arm: str, programs: list[dict[str, Any]]) -> Path:
    """<run>/<arm>_programs.jsonl: one training-program record a line (an empty file when there is none)."""
    return write_jsonl_rows(programs, Path(run_dir) / programs_file(arm))


def arm_training_inputs(run_dir: Path, arm: str) -> list[str]:
    """What the arm built and trained on, relative to the run folder: its harvest records (harvest/refine.json;
    harvest/self-r<k>.json) and its data folders (data/refine/; data/self/, data/self-r<k>/), for step 03's
    marker to hash (harness.markers: a damaged one is named and rebuilt)."""
    run_dir = Path(run_dir)
    records = harvest_dir(run_dir).glob("refine.json" if arm == "refine" else "self-r*.json")
    folders = [p for p in (run_dir / "data").glob(f"{arm}*") if p.is_dir() and (p.name == arm or arm == "self")]
    return sorted(str(p.relative_to(run_dir)) for p in [*records, *folders])


def row_source(row: dict[str, Any]) -> dict[str, Any]:
    """A refinement row's source (harvest, task, node, parent, model), a dict also where the row keeps JSON."""
    source = (row.get("extra_info") or {}).get("source") or {}
    return json.loads(source) if isinstance(source, str) else dict(source)


# ---- the self arm -----------------------------------------------------------------------------------

def self_round_rows(cfg: Any, run_dir: Path, round_: int, harvest_: dict[str, Any], floor: float
                    ) -> tuple[TrainingData | None, list[dict[str, Any]]]:
    """The rejection-sampling rows of one self round (<run>/data/self-r<k>/sft/train.jsonl) and their programs
    (training-program records); (None, []) when the harvest kept no program."""
    kept = kept_programs(harvest_, floor)
    if not kept:
        return None, []
    programs = [kept_record(round_, k.task, k.code, k.reward, k.source) for k in kept]
    check_no_oracle(programs)
    folder = Path(run_dir) / "data" / f"self-r{round_}"
    write_jsonl_rows([program_row(k.task, k.code) for k in kept], folder / "sft" / "train.jsonl")
    own = training_data_for(cfg, Path(run_dir) / "data")  # its parquets: what SkyRL's length check measures
    return dataclasses.replace(own, sft_dir=folder / "sft"), programs


def program_tokens(code: str) -> list[str]:
    """A program as the tokens check_no_oracle compares: names, numbers and single punctuation marks of its
    normalised text (harness.interface.program_key: comments, spacing and quote style do not count)."""
    return re.findall(r"\w+|[^\w\s]", program_key(code))


@functools.cache
def answer_key_tokens() -> dict[str, tuple[str, ...]]:
    return {target: tuple(program_tokens(sft_target_source(target))) for target in SFT_TARGETS}


def answer_key_similarity(code: str) -> tuple[float, str]:
    """(similarity, target) of the SFT target (oracle or compact) most like `code`: difflib's SequenceMatcher
    ratio over the two programs' token sequences (program_tokens), 2 x matched tokens / all tokens, in [0, 1]."""
    tokens = program_tokens(code)
    return max((difflib.SequenceMatcher(None, tokens, key, autojunk=False).ratio(), target)
               for target, key in answer_key_tokens().items())


def check_no_oracle(programs: list[dict[str, Any]]) -> None:
    """StepError naming the first training-program record (program_record) whose program is similar to the
    oracle or the compact SFT target (the answer key): answer_key_similarity >= ANSWER_KEY_SIMILARITY.

    Why a similarity and why 0.5: an exact match (after program_key) misses a copy with one line changed, a
    renamed variable or a truncated tail, which is how a model that saw the key writes it. Measured on the
    committed results' held-out traces (results/*/*_trace.json, 2026-12): the 1031 search nodes of models that
    never saw the key (frozen, frozen_matched, frozen_long, grpo_only, self) score at most 0.24; the 409 of
    models SFT-trained on it (sft, trained, refine) score 0.28 to 1.0, median 0.71 to 0.93 by arm, 95 in 100 of
    them 0.5 or more; the deterministic operator's programs (harness.rules: hand-written checks that parse the
    state's lines as the oracle does) score 0.35 to 0.39. A leak of the key into the self arm's rows would bring
    many rows above 0.5, so 0.5 catches it, while it leaves twice the base model's highest score as room for a
    stronger model that writes similar checks of its own. Token sequences rather than characters: the same
    ranking at a twentieth of the cost (~5 ms a program here)."""
    for i, program in enumerate(programs):
        score, target = answer_key_similarity(program["code"])
        if score >= ANSWER_KEY_SIMILARITY:
            where = ", ".join(f"{k} {program[k]}" for k in ("round", "harvest", "task_id", "node") if k in program)
            raise StepError(f"self arm: training program {i} ({where}) is {score:.2f} similar to the {target} "
                            f"program, the answer key (token ratio, refused from {ANSWER_KEY_SIMILARITY}), which the "
                            "self arm must never train on")


def write_self_data(run_dir: Path, status: str, rounds: list[dict[str, Any]], programs: list[dict[str, Any]],
                    base_median: float | None, harvests: list[dict[str, Any]]) -> Path:
    """<run>/self_programs.jsonl (every training program of the self arm) and <run>/self_data.json (each row's
    source, pointing at its program by row index and sha256); refuses a row without a harvest source and one
    similar to the answer key (check_no_oracle), before writing either."""
    oracle_rows = [p for p in programs if p.get("harvest") is None]
    if oracle_rows:
        raise StepError(f"self arm: {len(oracle_rows)} training row(s) without a harvest source: refusing them")
    check_no_oracle(programs)
    write_training_programs(run_dir, "self", programs)
    rows = [{**{k: v for k, v in p.items() if k != "code"}, "program_row": i} for i, p in enumerate(programs)]
    return atomic_write_json(Path(run_dir) / "self_data.json",
                             {"status": status, "base_median_reward": base_median, "rounds": rounds,
                              "harvests": harvests, "programs_file": programs_file("self"),
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



# ---- the training functions (step 03) ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Trainers:
    """Step 03's trainers on the run's backend: grpo(cfg, start model, run_dir, folder, data | None) -> info,
    sft(cfg, base model, run_dir, folder, data, steps=None) -> the export's path (steps: W8_SELF_SFT_STEPS)."""
    grpo: Callable[..., dict]
    sft: Callable[..., str]


@dataclasses.dataclass
class Trained:
    """What an arm's training left: the model its last training started from (None: not trained, `status` says
    why), the trainer's info, extra outputs (its training programs) and inputs (harvests, data folders)."""
    model: str | None
    info: dict[str, Any]
    outputs: list[str] = dataclasses.field(default_factory=list)
    inputs: list[str] = dataclasses.field(default_factory=list)
    status: str = ""


def say(text: str) -> None:
    print(f"[03_grpo] {text}", flush=True)

def train_repair_sft(cfg: Any, run_dir: Path, trainers: Trainers) -> Trained:
    """repair_sft (the repair curriculum): the repair warm-start, SFT of the base model into <run>/repair_sft on
    repair prompts answered with the fix, its own wrong programs relabeled, and the zero-shot rows
    (harness.repair_training.warmstart_data: two stages around the relabeling harvest)."""
    start = time.monotonic()
    rows = warmstart_data(cfg, run_dir, lambda data, steps: trainers.sft(cfg, cfg.harness_model, run_dir,
                                                                          "repair_sft", data, steps=steps))
    harvest_s = rows["relabel_harvest"]["wall_s"]
    say(f"repair_sft: {rows['steps']} SFT steps, one row each: {rows['repair_rows']} repair rows over "
        f"{rows['families']} families, {rows['relabeled_rows']} relabeled from "
        f"{rows['relabel_harvest']['programs']} programs its stage-1 export wrote on "
        f"{rows['relabel_harvest']['tasks']} tasks, {rows['zero_shot_rows']} zero-shot")
    n = rows["relabel_harvest"]["tasks"]
    harvest_ = {"name": "repair_sft-relabel", "model": rows["relabel_harvest"]["model"], "wall_s": harvest_s,
                "nodes": n, "searches": n, "worker_s": harvest_s}
    return Trained(cfg.harness_model, {"rows": rows, "harvests": [harvest_], "start_model": cfg.harness_model,
                                       "trainer_wall_s": round(time.monotonic() - start - harvest_s, 1)},
                   ["repair_sft_rows.json"], ["data/repair_sft"])


def train_trained(cfg: Any, run_dir: Path, trainers: Trainers) -> Trained:
    """trained: GRPO into <run>/grpo. Under the repair curriculum from repair_sft's export on repair refinement
    prompts (harness.repair_training.grpo_data), its held-in repair rate taken at step 0, half-way and the end
    (W8_REPAIR_TRAIN_EVAL, local backend); otherwise from step 02's SFT export (the base model when there was
    no SFT) on the zero-shot prompts."""
    if curriculum_of(cfg) != "repair":
        sft = newest_export(Path(run_dir) / "sft")
        model = str(sft) if sft is not None else cfg.harness_model
        say(f"grpo: start model {model}")
        return Trained(model, trainers.grpo(cfg, model, run_dir, "grpo", None))
    start = newest_export(Path(run_dir) / "repair_sft")
    if start is None:
        raise StepError("the trained arm starts from the repair warm-start under the repair curriculum: no export "
                        "under <run>/repair_sft")
    data, info = grpo_data(cfg, run_dir, sft_dir=Path(run_dir) / "data" / "repair_sft" / "stage1", start=str(start))
    say(f"grpo: start model {start}; {info['rows']} repair refinement prompts over {info['families']} families"
        + (f" ({info['prefilter']['kept_with_signal']} with unequal rewards over {cfg.grpo_prefilter_samples} samples,"
           f" of {info['prefilter']['candidates']})" if info["prefilter"] else ""))
    steps = grpo_steps(data.n_train, cfg.grpo_epochs, cfg.grpo_max_steps)
    evals: list[dict[str, Any]] = []
    check = cfg.repair_train_eval and cfg.backend == "local" and (Path(run_dir) / "repair_heldin.jsonl").is_file()
    began = time.monotonic()
    if check:
        training_eval_point(cfg, run_dir, str(start), 0, evals)
        half = steps // 2
        if 0 < half < steps:
            trainers.grpo(cfg.replace(grpo_max_steps=half), str(start), run_dir, "grpo", data)
            training_eval_point(cfg, run_dir, str(newest_export(Path(run_dir) / "grpo")), half, evals)
    out = trainers.grpo(cfg, str(start), run_dir, "grpo", data)
    if check:
        training_eval_point(cfg, run_dir, str(newest_export(Path(run_dir) / "grpo")), steps, evals)
    return Trained(str(start), {**out, "repair_grpo": info, "start_model": str(start),
                                "trainer_wall_s": round(time.monotonic() - began, 1)},
                   ["repair_training_eval.json"] if check else [], ["data/repair_grpo"])


def train_grpo_only(cfg: Any, run_dir: Path, trainers: Trainers) -> Trained:
    """grpo_only: GRPO from the base model into <run>/grpo_only (what GRPO does without the warm-start)."""
    say(f"grpo_only: start model {cfg.harness_model}")
    return Trained(cfg.harness_model, trainers.grpo(cfg, cfg.harness_model, run_dir, "grpo_only", None))


def mix_line(mix: dict) -> str:
    return (f"{mix.get('n_refine', '?')} refinement + {mix.get('n_zero_shot', '?')} zero-shot GRPO rows "
            f"(share {mix['refine_share']}, pool of {mix['refinement_pool']} refinement requests)")


def repair_mixed_data(cfg: Any, run_dir: Path, name: str) -> tuple[TrainingData, dict[str, Any], list[dict[str, Any]]]:
    """Under the repair curriculum, the refine arm's GRPO rows: W8_REFINE_SHARE of W8_TRAIN_COUNT are the repair
    curriculum's refinement prompts (harness.repair_training.grpo_data's, instead of a harvest's), the rest the
    zero-shot rows; <run>/data/<name>/train.parquet, as mixed_training_data writes it."""
    import pyarrow.parquet as pq

    refine = pq.read_table(grpo_data(cfg, run_dir)[0].train_parquet).to_pylist()
    data = training_data_for(cfg, Path(run_dir) / "data")
    reward = RewardKnobs.from_config(cfg)
    zero_shot = [skyrl_row(t, reward) for t in train_tasks(cfg.train_count, cfg.train_examples_per_obs,
                                                           Design.of(cfg))]
    rows, mix = mixed_rows(zero_shot, refine, cfg.refine_share, cfg.train_count, MIX_SEED)
    path = write_parquet_rows(rows, Path(run_dir) / "data" / name / "train.parquet")
    info = {"parquet": str(path.relative_to(run_dir)), "refine_share": cfg.refine_share,
            "refinement_pool": len(refine), "harvests": [], "curriculum": "repair", **mix,
            "refine_sources": [row_source(r) for r in rows if row_prompt_kind(r) == "refine"]}
    return dataclasses.replace(data, train_parquet=path, n_train=len(rows)), info, refinement_programs(rows)


def train_refine(cfg: Any, run_dir: Path, trainers: Trainers) -> Trained:
    """refine: the SFT export harvests train pages, then GRPO from it on the mixed prompts; under the repair
    curriculum its refinement prompts are the curriculum's (repair_mixed_data) and there is no harvest."""
    sft = newest_export(Path(run_dir) / "sft")
    if sft is None:
        raise StepError("the refine arm starts from the SFT warm-start: no export under <run>/sft (run step 02)")
    if curriculum_of(cfg) == "repair":
        data, mix, programs = repair_mixed_data(cfg, run_dir, "refine")
        write_training_programs(run_dir, "refine", programs)
        say(f"refine: {mix_line(mix)} (the repair curriculum's)")
        start = time.monotonic()
        info = trainers.grpo(cfg, str(sft), run_dir, "refine", data)
        return Trained(str(sft), {**info, "mix": mix, "harvests": [], "start_model": str(sft),
                                  "trainer_wall_s": round(time.monotonic() - start, 1)},
                       [programs_file("refine")], arm_training_inputs(run_dir, "refine") + ["data/repair_grpo"])
    found = harvest(cfg, run_dir, "refine", str(sft))
    data, mix, programs = mixed_training_data(cfg, run_dir, "refine", training_data_for(cfg, Path(run_dir) / "data"),
                                              [found])
    write_training_programs(run_dir, "refine", programs)
    say(f"refine: {mix_line(mix)}; its programs -> {programs_file('refine')}")
    start = time.monotonic()
    info = trainers.grpo(cfg, str(sft), run_dir, "refine", data)
    return Trained(str(sft), {**info, "mix": mix, "harvests": [harvest_summary(found)], "start_model": str(sft),
                              "trainer_wall_s": round(time.monotonic() - start, 1)},
                   [programs_file("refine")], arm_training_inputs(run_dir, "refine"))


def train_self(cfg: Any, run_dir: Path, trainers: Trainers) -> Trained:
    """self (no answer key): rounds of harvest -> keep the best -> fine-tune the base on them, then a harvest by
    the last model and GRPO from it on the mixed prompts; not trained when no round kept a program."""
    base = cfg.harness_model
    current = harvest(cfg, run_dir, "self-r1", base)
    floor = median_reward(current)
    model, rounds, programs, harvests = base, [], [], [harvest_summary(current)]
    trainer_s = 0.0  # the fine-tunes' and GRPO's wall time, without the harvests (their own wall_s)
    for k in range(1, cfg.self_rounds + 1):
        data, kept = self_round_rows(cfg, run_dir, k, current, floor)
        rounds.append({"round": k, "harvest": current["name"], "kept": len(kept),
                       "model": str(Path(model).name if model != base else base)})
        if data is None:
            say(f"self round {k}: the harvest kept no program (valid {current['valid_nodes']} of {current['nodes']} "
                f"nodes, best reward {current['best_reward']}, floor {floor:.3f})")
            break
        programs += kept
        start = time.monotonic()
        model = trainers.sft(cfg, base, run_dir, f"self_rft{k}", data)
        trainer_s += time.monotonic() - start
        current = harvest(cfg, run_dir, f"self-r{k + 1}", model)
        harvests.append(harvest_summary(current))
    outputs = [programs_file("self"), "self_data.json"]
    if model == base:
        write_self_data(run_dir, "no training data", rounds, programs, floor, harvests)
        say(f"self: no training data: no harvest program above the base model's median reward {floor:.3f} that "
            f"beats a constant answer (balanced accuracy above {CONSTANT_BALANCED_ACCURACY}); the self arm is not "
            "trained")
        return Trained(None, {"rounds": rounds, "harvests": harvests}, outputs, arm_training_inputs(run_dir, "self"),
                       status="no training data")
    data, mix, refinements = mixed_training_data(cfg, run_dir, "self", training_data_for(cfg, Path(run_dir) / "data"),
                                                 [current], forbid_oracle=True)
    programs += [{"round": "grpo", **program} for program in refinements]
    write_self_data(run_dir, "trained", rounds, programs, floor, harvests)
    say(f"self: {mix_line(mix)}")
    start = time.monotonic()
    info = trainers.grpo(cfg, model, run_dir, "self", data)
    return Trained(model, {**info, "mix": mix, "rounds": rounds, "harvests": harvests, "start_model": model,
                           "trainer_wall_s": round(trainer_s + time.monotonic() - start, 1)},
                   outputs, arm_training_inputs(run_dir, "self"))


# arm name (harness/arms.py's `training`) -> its training function
TRAININGS: dict[str, Callable[[Any, Path, Trainers], Trained]] = {
    "repair_sft": train_repair_sft, "trained": train_trained, "grpo_only": train_grpo_only, "refine": train_refine,
    "self": train_self}
