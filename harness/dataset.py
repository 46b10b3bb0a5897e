"""The harness-legality benchmark: snapshot loading and task sampling.

    from harness.dataset import load_snapshot, make_task
    task = make_task(split="heldout", seed=7, examples_per_obs=24)
    task.state, task.examples[0].action, task.examples[0].legal

A task is one observation (the flattened AXTree text a BrowserGym agent sees)
plus `examples_per_obs` actions on it, labeled by executing each in Chromium,
drawn deterministically from `seed` and balanced (each class >= 40%).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import random
import zlib
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Iterable

DATA_DIR = Path(__file__).parent / "data"
SNAPSHOT_PATH = DATA_DIR / "harness_legality.jsonl.gz"
MANIFEST_PATH = DATA_DIR / "manifest.json"
SPLITS = ("train", "heldout")
MIN_CLASS_SHARE = 0.4  # a task's minority class is at least this share of its examples


class DatasetError(ValueError):
    """A snapshot or task request that cannot be served; the message says why."""


@dataclass(frozen=True)
class Example:
    """One labeled action on one observation."""

    state: str  # the observation text (BrowserGym flattened AXTree)
    action: str  # one BrowserGym action string, e.g. "click('12')"
    legal: bool  # the browser executed it without an action error
    error: str = ""  # the browser's error text ("" when legal)
    dom_changed: bool = False  # the DOM differed after the action (DOMDiff)
    action_type: str = ""  # click, fill, ..., or "malformed"
    obs_id: str = ""  # "<page>/<seed>" of the observation it belongs to
    dom_diff: dict[str, int] = field(default_factory=dict)  # structural/text/attribute/form_value counts

    def unlabeled(self) -> dict[str, str]:
        """What may enter the sandbox: state and action only, never the label."""
        return {"state": self.state, "action": self.action}


@dataclass(frozen=True)
class Task:
    """One observation plus balanced labeled examples on it."""

    task_id: str  # "<split>/<obs_id>/seed<seed>/n<examples_per_obs>"
    split: str
    seed: int
    obs_id: str
    page: str
    goal: str
    state: str
    examples: tuple[Example, ...]

    @property
    def examples_hash(self) -> str:
        """Identity of the examples: two traces compare only if this matches."""
        payload = json.dumps([[e.action, e.legal] for e in self.examples] + [self.state])
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def identity(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "split": self.split, "seed": self.seed, "obs_id": self.obs_id,
                "page": self.page, "examples_per_obs": len(self.examples), "examples_hash": self.examples_hash}

    def to_json(self) -> dict[str, Any]:
        return {**self.identity(), "goal": self.goal, "state": self.state,
                "examples": [asdict(e) for e in self.examples]}


# ---- splits, snapshot files ---------------------------------------------------------------
def split_of(page: str) -> str:
    """Train vs held-out by page (never by observation): a fixed ~20% of pages are held out."""
    return "heldout" if zlib.crc32(page.encode()) % 5 == 0 else "train"


def write_snapshot(records: Iterable[dict], path: Path = SNAPSHOT_PATH) -> int:
    """Write observation records as gzipped JSON lines, atomically (temp file, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
        for record in records:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            count += 1
    os.replace(tmp, path)
    return count


@cache
def _load(path: str) -> tuple[dict, ...]:
    p = Path(path)
    if not p.exists():
        raise DatasetError(f"snapshot not found: {p} (run `make harvest` to build it)")
    try:
        with gzip.open(p, "rt", encoding="utf-8") as f:
            records = tuple(json.loads(line) for line in f if line.strip())
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DatasetError(f"snapshot is corrupt: {p}: {err} (restore it with git or run `make harvest`)") from None
    missing = [k for k in ("obs_id", "page", "seed", "split", "state", "actions") if records and k not in records[0]]
    if not records or missing:
        raise DatasetError(f"snapshot is corrupt: {p}: " + (f"missing fields {missing}" if missing else "no records"))
    return records


def load_snapshot(path: str | Path = SNAPSHOT_PATH) -> list[dict]:
    """All observation records: obs_id, page, seed, split, goal, state, actions[...]."""
    return list(_load(str(Path(path).resolve())))


def examples_of(record: dict) -> list[Example]:
    return [Example(state=record["state"], action=a["action"], legal=a["legal"], error=a["error"],
                    dom_changed=a["dom_changed"], action_type=action_type(a["action"]),
                    obs_id=record["obs_id"], dom_diff=a.get("dom_diff", {})) for a in record["actions"]]


def action_type(action: str) -> str:
    """The verb of an action string ('click', 'fill', ...), 'unknown_verb', or 'malformed'."""
    from harness.oracle import KNOWN_VERBS, parse_action

    parsed = parse_action(action)
    if parsed is None:
        return "malformed"
    return parsed[0] if parsed[0] in KNOWN_VERBS else "unknown_verb"


# ---- tasks --------------------------------------------------------------------------------
def _records_for(split: str, path: Path) -> list[dict]:
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    return [r for r in load_snapshot(path) if r["split"] == split]


def _balanced_draw(examples: list[Example], n: int, rng: random.Random) -> list[Example] | None:
    pos = [e for e in examples if e.legal]
    neg = [e for e in examples if not e.legal]
    lo = math.ceil(round(MIN_CLASS_SHARE * n, 9))  # round: 0.4 * 3 is 1.2000000000000002
    if len(pos) < lo or len(neg) < lo or len(examples) < n:
        return None
    n_pos = min(len(pos), max(lo, n - len(neg), round(n * len(pos) / len(examples))))
    n_pos = min(n_pos, n - lo)
    chosen = rng.sample(pos, n_pos) + rng.sample(neg, n - n_pos)
    rng.shuffle(chosen)
    return chosen


def make_task(split: str = "heldout", seed: int = 0, examples_per_obs: int = 24,
              path: str | Path = SNAPSHOT_PATH) -> Task:
    """One observation of `split` and `examples_per_obs` balanced labeled actions, fixed by `seed`.

    The observation is drawn by seed among those that can give a balanced task of that
    size (each class >= 40%); a request no observation can satisfy raises DatasetError.
    """
    if not isinstance(examples_per_obs, int) or examples_per_obs <= 0:
        raise DatasetError(f"examples_per_obs must be a positive integer, got {examples_per_obs!r}")
    records = _records_for(split, Path(path))
    rng = random.Random(f"task:{split}:{seed}:{examples_per_obs}")
    order = list(range(len(records)))
    rng.shuffle(order)
    for i in order:
        record = records[i]
        chosen = _balanced_draw(examples_of(record), examples_per_obs, rng)
        if chosen is not None:
            return Task(task_id=f"{split}/{record['obs_id']}/seed{seed}/n{examples_per_obs}", split=split,
                        seed=seed, obs_id=record["obs_id"], page=record["page"], goal=record.get("goal", ""),
                        state=record["state"], examples=tuple(chosen))
    most = max((len(r["actions"]) for r in records), default=0)
    raise DatasetError(f"no {split} observation can give {examples_per_obs} balanced examples "
                       f"(each class >= {MIN_CLASS_SHARE:.0%}; the largest observation has {most} actions)")


def heldout_examples(exclude_obs_id: str, n_obs: int = 8, per_obs: int = 16, seed: int = 0,
                     path: str | Path = SNAPSHOT_PATH) -> list[Example]:
    """Balanced examples from other held-out observations (a gold harness's generalisation check)."""
    records = [r for r in _records_for("heldout", Path(path)) if r["obs_id"] != exclude_obs_id]
    rng = random.Random(f"heldout-check:{exclude_obs_id}:{seed}")
    out: list[Example] = []
    for record in rng.sample(records, min(n_obs, len(records))):
        out += _balanced_draw(examples_of(record), per_obs, rng) or []
    return out


# ==== training rows: SkyRL parquet rows and SFT rows (harness/env.py and harness/train_local.py read them) ====
# Every row's prompt is harness.mutation.build_zero_shot_prompt(task): the prompt of node 0
# of a trace, so training targets exactly what the trace measures. Train rows come from
# train pages only; the small eval split comes from held-out pages with seeds far from the
# trace seeds (EVAL_SEED_OFFSET), and is only ever evaluated, never trained on.

ENV_CLASS = "harness_legality"
DATA_SOURCE = "w8-biayn/harness-legality"
DEFAULT_TRAIN_DATA_DIR = Path(os.path.expanduser("~/data/w8-biayn/harness-legality"))
SKYRL_COLUMNS = ("data_source", "prompt", "env_class", "reward_spec", "extra_info")
EVAL_SEED_OFFSET = 100_000
EVAL_COUNT = 16

# The SFT assistant turn for small local models: a ~340-token program (SmolLM2 tokens) with
# the reference oracle's verdicts on the snapshot (tests/test_env.py checks the agreement),
# written the way a model would answer. The full oracle (harness/oracle.py, ~1.5k tokens)
# does not fit the completion budgets of the CPU trainer and the local search, so a 135M
# model trained on it would only ever emit truncated, invalid programs.
COMPACT_HARNESS = '''import ast
import re


def is_legal_action(state, action):
    try:
        call = ast.parse(action.strip(), mode="eval").body
        verb, args = call.func.id, [ast.literal_eval(a) for a in call.args]
    except Exception:
        return False
    n = {"noop": 1, "scroll": 2, "fill": 2, "press": 2, "select_option": 2}.get(verb, 1)
    if verb not in "click dblclick hover focus clear fill press select_option scroll noop".split():
        return False
    if not n - (verb == "noop") <= len(args) <= n:
        return False
    if verb in ("scroll", "noop"):
        return True
    m = isinstance(args[0], str) and re.search(r"^\\s*\\[%s\\] (.*)" % re.escape(args[0]), state, re.M)
    if not m:
        return False
    line = m.group(1)
    if verb in ("press", "focus"):
        return True
    if "visible" not in line and "offscreen" not in line or verb != "hover" and "disabled=True" in line:
        return False
    if verb in ("click", "dblclick", "hover") and ("zero_size" in line or "covered" in line):
        return False
    if verb in ("fill", "clear"):
        return "editable=" in line and "readonly=True" not in line
    if verb == "select_option":
        return "option %r" % args[1] in state
    return True
'''


def sft_target_source(target: str = "compact") -> str:
    """Program text of the SFT answer: 'oracle' (harness/oracle.py), 'compact' (COMPACT_HARNESS),
    or a program given as text (tests train tiny models on tiny programs)."""
    if "def is_legal_action" in target:
        return target
    if target == "oracle":
        from harness.oracle import oracle_source

        return oracle_source()
    if target == "compact":
        return COMPACT_HARNESS
    raise DatasetError(f"unknown SFT target {target!r}: expected oracle | compact | program text")


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


def skyrl_row(task: Task, recall_weight: float = 0.2, gold_threshold: float = 0.90,
              timeout_s: float = 2.0) -> dict[str, Any]:
    """One SkyRL prompt row. SkyRL hands everything but prompt/env_class to the env as `extras`;
    our own fields live under extras["extra_info"] (harness/env.py unwraps them)."""
    from harness.mutation import build_zero_shot_prompt

    return {"data_source": DATA_SOURCE, "prompt": build_zero_shot_prompt(task), "env_class": ENV_CLASS,
            "reward_spec": {"method": "rule", "ground_truth": ground_truth_json(task)},
            "extra_info": {"task_id": task.task_id, "split": task.split, "seed": task.seed, "obs_id": task.obs_id,
                           "page": task.page, "n_examples": len(task.examples), "recall_weight": recall_weight,
                           "gold_threshold": gold_threshold, "timeout_s": timeout_s}}


def train_tasks(count: int, examples_per_obs: int) -> list[Task]:
    """The GRPO/SFT tasks: train pages only, seeds 0..count-1."""
    return [make_task("train", seed, examples_per_obs) for seed in range(count)]


def eval_tasks(examples_per_obs: int, count: int = EVAL_COUNT) -> list[Task]:
    """A small evaluation split from held-out pages (seeds from EVAL_SEED_OFFSET, never the trace seeds)."""
    return [make_task("heldout", EVAL_SEED_OFFSET + i, examples_per_obs) for i in range(count)]


def sft_row(task: Task, target: str = "compact") -> dict[str, Any]:
    """One SFT row in chat form: the zero-shot prompt, then the reference harness as the answer."""
    from harness.mutation import build_zero_shot_prompt

    answer = "```python\n" + sft_target_source(target).rstrip() + "\n```"
    return {"messages": build_zero_shot_prompt(task) + [{"role": "assistant", "content": answer}],
            "task_id": task.task_id}


def write_parquet_rows(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Rows -> parquet (nested columns kept as structs and lists), atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, path)
    return path


def write_jsonl_rows(rows: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)
    return path


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


def prepare_training_data(train_count: int, examples_per_obs: int, data_dir: str | Path | None = None,
                          sft_target: str = "compact", recall_weight: float = 0.2, gold_threshold: float = 0.90,
                          timeout_s: float = 2.0) -> TrainingData:
    """Write train.parquet, validation.parquet and sft/train.jsonl under data_dir, unless identical ones exist.

    A fingerprint of the inputs (knobs, snapshot manifest, prompt builder output of the first
    task) decides reuse, so a changed knob or snapshot rebuilds the files.
    """
    root = Path(data_dir) if data_dir else DEFAULT_TRAIN_DATA_DIR
    train = train_tasks(train_count, examples_per_obs)
    evals = eval_tasks(examples_per_obs)
    first = skyrl_row(train[0], recall_weight, gold_threshold, timeout_s)
    key = hashlib.sha256(json.dumps([train_count, examples_per_obs, sft_target_source(sft_target), recall_weight, gold_threshold,
                                     timeout_s, [t.examples_hash for t in train + evals], first["prompt"]],
                                    sort_keys=True).encode()).hexdigest()[:16]
    out = TrainingData(root / "train.parquet", root / "validation.parquet", root / "sft", len(train), len(evals))
    stamp = root / "fingerprint.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("key") == key and out.train_parquet.is_file() \
            and out.eval_parquet.is_file() and (out.sft_dir / "train.jsonl").is_file():
        return out
    write_parquet_rows([skyrl_row(t, recall_weight, gold_threshold, timeout_s) for t in train], out.train_parquet)
    write_parquet_rows([skyrl_row(t, recall_weight, gold_threshold, timeout_s) for t in evals], out.eval_parquet)
    write_jsonl_rows([sft_row(t, sft_target) for t in train], out.sft_dir / "train.jsonl")
    stamp.write_text(json.dumps({"key": key, "train_count": train_count, "examples_per_obs": examples_per_obs,
                                 "sft_target": sft_target[:40]}) + "\n")
    return out
