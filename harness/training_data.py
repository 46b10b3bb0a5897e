"""Training data: SkyRL prompt rows (GRPO) and chat rows (SFT) from train tasks, and their files.

    from harness.training_data import training_data_for
    data = training_data_for(cfg, run_dir / "data")   # train.parquet, validation.parquet, sft/train.jsonl
    data.train_parquet, data.n_train

A zero-shot row's prompt is harness.prompts.build_zero_shot_prompt(task): the prompt of node 0
of a trace, so training targets exactly what the trace measures. A refinement row (refine_row)
holds the search's other prompt, build_refine_prompt(task, parent_code, failures, attempt),
for a parent program a search on a train page really refined; mixed_rows mixes the two kinds
(W8_REFINE_SHARE). Every row carries the same extra_info fields (ROW_KIND_FIELDS), a zero-shot
row with neutral values, so a parquet of either kind or both has one schema. Train rows come from train
pages only; the small eval split comes from held-out pages with seeds far from the trace
seeds (EVAL_SEED_OFFSET), and is only ever evaluated, never trained on. The reward knobs
(recall weight, gold threshold, sandbox timeout and backend) travel in each row's
extra_info, so the env scores exactly as the search does, on CPU and on the GPU node.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.dataset import DatasetError, Example, Task, make_task
from harness.files import atomic_write_bytes, atomic_write_text, file_digest
from harness.oracle import sft_target_source
from harness.rule_split import Design, restricted_target
from harness.prompts import build_refine_prompt, build_zero_shot_prompt
from harness.rewards import RewardKnobs

ENV_CLASS = "harness_legality"
DATA_SOURCE = "w8-biayn/harness-legality"
SKYRL_COLUMNS = ("data_source", "prompt", "env_class", "reward_spec", "extra_info")
EVAL_SEED_OFFSET = 100_000
EVAL_COUNT = 16

def ground_truth_json(task: Task) -> str:
    """reward_spec.ground_truth of a row: the task's state and labeled actions as one JSON string."""
    return json.dumps({"task_id": task.task_id, "state": task.state,
                       "examples": [{"action": e.action, "legal": e.legal, "dom_changed": e.dom_changed,
                                     "error": e.error, "action_type": e.action_type} for e in task.examples]})


def examples_from_ground_truth(ground_truth: str | dict) -> list[Example]:
    """Examples back from a row's ground_truth (JSON string; an already-parsed dict is accepted too)."""
    data = json.loads(ground_truth) if isinstance(ground_truth, (str, bytes)) else dict(ground_truth or {})
    state = data.get("state", "")
    return [Example(state=e.get("state", state), action=e["action"], legal=bool(e["legal"]),
                    error=e.get("error", ""), dom_changed=bool(e.get("dom_changed", False)),
                    action_type=e.get("action_type", ""), obs_id=data.get("task_id", ""))
            for e in data.get("examples", [])]


# The fields that tell the kinds of row apart, with a zero-shot row's neutral values. Every row has all of
# them, with one type each (parent_reward a float: -1.0 is "no parent", rewards lie in [0, 1]; source a JSON
# string, since a struct of varying keys, or of none, does not round-trip through parquet), so a zero-shot
# parquet, a refinement parquet and a mix of both share one schema.
ZERO_SHOT_FIELDS = {"prompt_kind": "zero_shot", "parent_code": "", "parent_reward": -1.0, "improvement_bonus": 0.0,
                    "identical_penalty": 0.0, "attempt": 0, "source": ""}
PROMPT_KINDS = ("zero_shot", "refine")


def _row(task: Task, prompt: list[dict[str, str]], reward: RewardKnobs, kind: dict[str, Any]) -> dict[str, Any]:
    return {"data_source": DATA_SOURCE, "prompt": prompt, "env_class": ENV_CLASS,
            "reward_spec": {"method": "rule", "ground_truth": ground_truth_json(task)},
            "extra_info": {"task_id": task.task_id, "split": task.split, "seed": task.seed, "obs_id": task.obs_id,
                           "page": task.page, "n_examples": len(task.examples), **reward.as_row(), **kind}}


def skyrl_row(task: Task, reward: RewardKnobs) -> dict[str, Any]:
    """One SkyRL prompt row, zero-shot. SkyRL hands everything but prompt/env_class to the env as `extras`;
    our own fields live under extras["extra_info"] (harness/env.py unwraps them)."""
    return _row(task, build_zero_shot_prompt(task), reward, ZERO_SHOT_FIELDS)


def refine_row(task: Task, parent_code: str, failures: list[Any], parent_reward: float, reward: RewardKnobs,
               bonus: float, penalty: float, attempt: int = 0, source: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    """One SkyRL prompt row for a refinement the search asked: the prompt is build_refine_prompt(task,
    parent_code, failures, attempt) (failures: harness.rewards.Failure, as harness.failures rebuilds them from a
    node's records), the examples the task's own. extra_info adds the parent's program and composite reward
    (as the search scored it on these examples), the reward terms (bonus when the child scores strictly above
    the parent, penalty when it is the parent's program unchanged: harness/env.py) and the source (harvest,
    task, node, model) as a JSON string. Nothing of this reaches the sandbox: the env scores in its own process
    and the sandbox runs the child's code on unlabeled examples only."""
    if not isinstance(parent_reward, (int, float)) or not 0.0 <= parent_reward <= 1.0:
        raise DatasetError(f"refinement row of {task.task_id}: parent_reward {parent_reward!r} is not a reward "
                           "in [0, 1]")
    kind = {"prompt_kind": "refine", "parent_code": parent_code or "", "parent_reward": float(parent_reward),
            "improvement_bonus": float(bonus), "identical_penalty": float(penalty), "attempt": int(attempt),
            "source": json.dumps(source or {}, sort_keys=True)}
    return _row(task, build_refine_prompt(task, parent_code, failures, attempt), reward, kind)


def row_prompt_kind(row: dict[str, Any]) -> str:
    """zero_shot or refine; a row written before the kinds existed is zero-shot."""
    return (row.get("extra_info") or {}).get("prompt_kind") or "zero_shot"


def mixed_rows(zero_shot_rows: list[dict[str, Any]], refine_rows: list[dict[str, Any]], share: float, count: int,
               seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`count` rows, round(share * count) of them refinement rows (Python's round: halves to even), the rest
    zero-shot, each kind drawn from its pool and the whole shuffled with `seed` (deterministic). A refinement
    pool smaller than wanted gives all of it, the rest zero-shot, and the returned numbers say so (refine_short,
    note). Returns (rows, numbers); write the rows with write_parquet_rows. DatasetError in one line when the
    zero-shot pool cannot fill the rest."""
    if count < 1:
        raise DatasetError(f"mixed rows: count={count}, expected at least 1 row")
    wanted = round(share * count)
    n_refine = min(wanted, len(refine_rows))
    n_zero = count - n_refine
    if n_zero > len(zero_shot_rows):
        raise DatasetError(f"mixed rows: {n_zero} zero-shot rows needed ({count} rows, {n_refine} refinement) but "
                           f"the zero-shot pool holds {len(zero_shot_rows)}")
    rng = random.Random(f"mixed-rows:{seed}")
    rows = rng.sample(list(zero_shot_rows), n_zero) + rng.sample(list(refine_rows), n_refine)
    rng.shuffle(rows)
    short = wanted - n_refine
    note = (f"the refinement pool holds {len(refine_rows)} rows: {n_refine} of the {wanted} wanted "
            f"({share} x {count}), the other {short} zero-shot" if short else "")
    return rows, {"n_rows": count, "n_refine": n_refine, "n_zero_shot": n_zero, "refine_wanted": wanted,
                  "refine_short": short, "note": note}


def train_tasks(count: int, examples_per_obs: int, design: Design) -> list[Task]:
    """The GRPO/SFT tasks: train pages only, seeds 0..count-1 (under the rule split, no example depending on the
    held-out rules)."""
    return [make_task("train", seed, examples_per_obs, design=design) for seed in range(count)]


def sft_tasks(train: list[Task], sft_count: int, examples_per_obs: int, design: Design) -> list[Task]:
    """The SFT rows' tasks: the GRPO prompts' (`train`) when W8_SFT_COUNT is 0, else train tasks 0..sft_count-1."""
    return train if sft_count <= 0 else train_tasks(sft_count, examples_per_obs, design)


def eval_tasks(examples_per_obs: int, design: Design, count: int = EVAL_COUNT) -> list[Task]:
    """A small evaluation split from held-out pages (seeds from EVAL_SEED_OFFSET, never the trace seeds)."""
    return [make_task("heldout", EVAL_SEED_OFFSET + i, examples_per_obs, design=design) for i in range(count)]


def sft_row(task: Task, target: str) -> dict[str, Any]:
    """One SFT row in chat form: the zero-shot prompt, then the reference harness as the answer."""
    return program_row(task, sft_target_source(target))


def program_row(task: Task, code: str) -> dict[str, Any]:
    """One SFT row: the zero-shot prompt, then `code` in a python fence as the answer (the oracle's for the
    warm-start, a harvested program for the self arm's rejection-sampling rounds)."""
    return {"messages": build_zero_shot_prompt(task) + [{"role": "assistant", "content": fenced_answer(code)}],
            "task_id": task.task_id}


def fenced_answer(code: str) -> str:
    """An SFT row's answer: the program in one python fence."""
    return "```python\n" + code.rstrip() + "\n```"


def sft_target_for(backend: str) -> str:
    """SFT answer of W8_SFT_TARGET=auto: the full oracle on the GPU node (its budget holds it), the compact
    program on CPU."""
    return "oracle" if backend == "skyrl" else "compact"


def sft_target_of_config(cfg: Any) -> str:
    """The run's SFT answer: W8_SFT_TARGET, its 'auto' resolved by backend; under the rule split that program
    without the held-out rule families, as program text (harness.rule_split.restricted_target)."""
    name = sft_target_for(cfg.backend) if cfg.sft_target == "auto" else cfg.sft_target
    design = Design.of(cfg)
    return restricted_target(design.heldout_rules, name) if design.kind == "rule" else name


def sft_target_label(cfg: Any) -> str:
    """The run's SFT answer in words: 'compact', or 'compact without pointer, fill_editable' (rule split)."""
    name = sft_target_for(cfg.backend) if cfg.sft_target == "auto" else cfg.sft_target
    design = Design.of(cfg)
    return f"{name} without {', '.join(design.heldout_rules)}" if design.kind == "rule" else name


def write_parquet_rows(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Rows -> parquet (nested columns kept as structs and lists), atomically."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def write_jsonl_rows(rows: list[dict[str, Any]], path: str | Path) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def check_skyrl_parquet(path: str | Path) -> int:
    """Row count of a SkyRL prompt parquet; DatasetError naming the file if it is missing or lacks columns."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"training parquet not found: {path}")
    schema = pq.read_schema(path)
    missing = [c for c in SKYRL_COLUMNS if c not in schema.names]
    if missing:
        raise DatasetError(f"{path} lacks column(s) {', '.join(missing)} (SkyRL rows need {', '.join(SKYRL_COLUMNS)})")
    return pq.ParquetFile(path).metadata.num_rows


@dataclass(frozen=True)
class TrainingData:
    """Where the training files of one configuration are, and how many rows each holds."""

    train_parquet: Path
    eval_parquet: Path
    sft_dir: Path  # holds train.jsonl: load_dataset(sft_dir, split="train") in SkyRL's SFT trainer and TRL
    n_train: int
    n_eval: int


def prepare_training_data(train_count: int, examples_per_obs: int, data_dir: str | Path, sft_target: str,
                          reward: RewardKnobs, sft_count: int, design: Design) -> TrainingData:
    """Write train.parquet, validation.parquet and sft/train.jsonl under data_dir, unless identical ones exist.

    A fingerprint of the inputs (knobs, the tasks' examples, the prompt of the first task)
    decides reuse, so a changed knob or snapshot rebuilds the files.
    """
    root = Path(data_dir)
    train = train_tasks(train_count, examples_per_obs, design)
    evals = eval_tasks(examples_per_obs, design)
    first = skyrl_row(train[0], reward)
    sft_rows = sft_tasks(train, sft_count, examples_per_obs, design)
    key = hashlib.sha256(json.dumps([train_count, sft_count, examples_per_obs, sft_target_source(sft_target),
                                     reward.as_row(),
                                     [t.examples_hash for t in train + evals], first["prompt"]],
                                    sort_keys=True).encode()).hexdigest()[:16]
    out = TrainingData(root / "train.parquet", root / "validation.parquet", root / "sft", len(train), len(evals))
    stamp = root / "fingerprint.json"
    files = {"train.parquet": out.train_parquet, "validation.parquet": out.eval_parquet,
             "sft/train.jsonl": out.sft_dir / "train.jsonl"}
    if cached_files_intact(stamp, key, files):
        return out
    write_parquet_rows([skyrl_row(t, reward) for t in train], out.train_parquet)
    write_parquet_rows([skyrl_row(t, reward) for t in evals], out.eval_parquet)
    write_jsonl_rows([sft_row(t, sft_target) for t in sft_rows], out.sft_dir / "train.jsonl")
    atomic_write_text(stamp, json.dumps({"key": key, "train_count": train_count, "sft_count": len(sft_rows),
                                         "examples_per_obs": examples_per_obs,
                                         "sft_target": sft_target if len(sft_target) < 40 else
                                         hashlib.sha256(sft_target.encode()).hexdigest()[:16], **reward.as_row(),
                                         "sha256": {n: file_digest(p)["sha256"] for n, p in files.items()}}) + "\n")
    return out


def cached_files_intact(stamp: Path, key: str, files: dict[str, Path]) -> bool:
    """True when the stamp is for these inputs (key) and every file still has the sha256 it was written
    with; a damaged file (a truncated train.jsonl) is named in one line and the files are rebuilt."""
    try:
        saved = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(saved, dict) or saved.get("key") != key:
        return False
    for name, path in files.items():
        if not path.is_file() or file_digest(path)["sha256"] != saved.get("sha256", {}).get(name):
            print(f"training data: {path} is missing or changed since it was written (sha256); rebuilding it",
                  flush=True)
            return False
    return True


def training_data_for(cfg: Any, data_dir: str | Path) -> TrainingData:
    """The rows of a run: its GRPO prompts and SFT rows (counts and size), its SFT target, its reward knobs."""
    return prepare_training_data(cfg.train_count, cfg.train_examples_per_obs, data_dir,
                                 sft_target_of_config(cfg), RewardKnobs.from_config(cfg), cfg.sft_count,
                                 Design.of(cfg))
