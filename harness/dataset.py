"""The harness-legality benchmark: snapshot loading and task sampling.

    from harness.dataset import load_snapshot, make_task
    task = make_task(split="heldout", seed=7, examples_per_obs=24)
    task.state, task.examples[0].action, task.examples[0].legal
    make_task("heldout", 7, 24, design=Design("rule", ("pointer", "fill_editable")))  # harness.rule_split

A task is one observation (the flattened AXTree text a BrowserGym agent sees)
plus `examples_per_obs` actions on it, labeled by executing each in Chromium,
drawn deterministically from `seed` and balanced (each class >= 40%). Which observations are train
and which held out, and what a task of each may hold, is the split design (harness.rule_split): by
page (the snapshot's own `split` field), or by page and rule family.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import zlib
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Iterable

from harness.files import atomic_path
from harness.oracle import KNOWN_VERBS, parse_action
from harness.rule_split import MIN_DEPENDENT, Design, dependent_actions

DATA_DIR = Path(__file__).parent / "data"
SNAPSHOT_PATH = DATA_DIR / "harness_legality.jsonl.gz"
MANIFEST_PATH = DATA_DIR / "manifest.json"
SPLITS = ("train", "heldout")
MIN_CLASS_SHARE = 0.4  # a task's minority class is at least this share of its examples
PAGE = Design()  # the page split (W8_SPLIT=page): train and held-out pages never share a page


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
    count = 0
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
        for record in records:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            count += 1
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
    parsed = parse_action(action)
    if parsed is None:
        return "malformed"
    return parsed[0] if parsed[0] in KNOWN_VERBS else "unknown_verb"


# ---- tasks --------------------------------------------------------------------------------
def _records_for(split: str, path: Path, design: Design = PAGE) -> list[dict]:
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    if design.kind == "page":
        return [r for r in load_snapshot(path) if r["split"] == split]
    return [r for r in load_snapshot(path) if design.split_of(r["page"]) == split]


def dependent_of(record: dict, design: Design) -> frozenset[str]:
    """The record's actions that depend on the design's held-out rules (none under the page split)."""
    if design.kind == "page":
        return frozenset()
    return dependent_actions(design.heldout_rules, record["state"], tuple(a["action"] for a in record["actions"]))


def _draw(record: dict, split: str, n: int, rng: random.Random, design: Design) -> list[Example] | None:
    """A balanced draw of one observation's examples, as the design allows: under the rule split a train
    task leaves out every example that depends on the held-out rules, and a held-out task holds them."""
    examples = examples_of(record)
    if design.kind == "page":
        return _balanced_draw(examples, n, rng)
    dependent = dependent_of(record, design)
    if split == "train":
        return _balanced_draw([e for e in examples if e.action not in dependent], n, rng)
    return draw_holding([e for e in examples if e.action in dependent], [e for e in examples
                                                                          if e.action not in dependent], n, rng)


def draw_holding(required: list[Example], rest: list[Example], n: int, rng: random.Random) -> list[Example] | None:
    """n balanced examples holding the required ones (each class's share of them capped so the other class
    keeps its 40%), None when fewer than MIN_DEPENDENT of them fit."""
    lo = min_class_count(n)
    keep: list[Example] = []
    for legal in (True, False):
        group = [e for e in required if e.legal is legal]
        keep += rng.sample(group, min(len(group), n - lo))
    if len(keep) < MIN_DEPENDENT:
        return None
    pos, neg = [e for e in rest if e.legal], [e for e in rest if not e.legal]
    keep_pos = sum(e.legal for e in keep)
    keep_neg = len(keep) - keep_pos
    n_all = len(required) + len(rest)
    share = round(n * (keep_pos + len(pos)) / n_all)
    n_pos = min(keep_pos + len(pos), n - max(lo, keep_neg), max(lo, keep_pos, share))
    if n_pos < max(lo, keep_pos) or n - n_pos - keep_neg > len(neg) or n - n_pos < keep_neg:
        return None
    chosen = keep + rng.sample(pos, n_pos - keep_pos) + rng.sample(neg, n - n_pos - keep_neg)
    rng.shuffle(chosen)
    return chosen


def min_class_count(n: int) -> int:
    """The fewest examples of each class a task of n examples has (the 40% rule)."""
    return math.ceil(round(MIN_CLASS_SHARE * n, 9))  # round: 0.4 * 3 is 1.2000000000000002


def is_balanced(n_legal: int, n_illegal: int) -> bool:
    """Each class holds at least MIN_CLASS_SHARE of the examples: an always-reject harness cannot look good."""
    return min(n_legal, n_illegal) >= min_class_count(n_legal + n_illegal)


def _balanced_draw(examples: list[Example], n: int, rng: random.Random) -> list[Example] | None:
    pos = [e for e in examples if e.legal]
    neg = [e for e in examples if not e.legal]
    lo = min_class_count(n)
    if len(pos) < lo or len(neg) < lo or len(examples) < n:
        return None
    n_pos = min(len(pos), max(lo, n - len(neg), round(n * len(pos) / len(examples))))
    n_pos = min(n_pos, n - lo)
    chosen = rng.sample(pos, n_pos) + rng.sample(neg, n - n_pos)
    rng.shuffle(chosen)
    return chosen


def n_pages(split: str, path: str | Path = SNAPSHOT_PATH, design: Design = PAGE) -> int:
    """How many pages can serve the split's tasks (trace tasks come from distinct pages): under the rule split,
    the held-out pages with an observation holding MIN_DEPENDENT examples that depend on the held-out rules."""
    records = _records_for(split, Path(path), design)
    if design.kind == "rule" and split == "heldout":
        records = [r for r in records if len(dependent_of(r, design)) >= MIN_DEPENDENT]
    return len({r["page"] for r in records})


def max_examples_per_obs(split: str, path: str | Path = SNAPSHOT_PATH, design: Design = PAGE) -> tuple[int, int]:
    """(the largest task size some observation of `split` can serve balanced, its largest observation's size)."""
    best, largest = 0, 0
    for record in _records_for(split, Path(path), design):
        dependent = dependent_of(record, design) if split == "train" else frozenset()
        actions = [a for a in record["actions"] if a["action"] not in dependent]
        n_legal = sum(a["legal"] for a in actions)
        n_all = len(actions)
        largest = max(largest, n_all)
        best = max([best] + [n for n in range(1, n_all + 1)
                             if min(n_legal, n_all - n_legal) >= min_class_count(n)])
    return best, largest


def make_task(split: str = "heldout", seed: int = 0, examples_per_obs: int = 24,
              path: str | Path = SNAPSHOT_PATH, design: Design = PAGE) -> Task:
    """One observation of `split` and `examples_per_obs` balanced labeled actions, fixed by `seed`.

    The observation is drawn by seed among those that can give a balanced task of that
    size (each class >= 40%) under the split design; a request no observation can satisfy
    raises DatasetError. A rule-split task's id starts with `rule/`.
    """
    if not isinstance(examples_per_obs, int) or examples_per_obs <= 0:
        raise DatasetError(f"examples_per_obs must be a positive integer, got {examples_per_obs!r}")
    records = _records_for(split, Path(path), design)
    rule = "" if design.kind == "page" else f"rule:{'+'.join(design.heldout_rules)}:"
    rng = random.Random(f"task:{rule}{split}:{seed}:{examples_per_obs}")
    order = list(range(len(records)))
    rng.shuffle(order)
    for i in order:
        record = records[i]
        chosen = _draw(record, split, examples_per_obs, rng, design)
        if chosen is not None:
            prefix = "rule/" if rule else ""
            return Task(task_id=f"{prefix}{split}/{record['obs_id']}/seed{seed}/n{examples_per_obs}", split=split,
                        seed=seed, obs_id=record["obs_id"], page=record["page"], goal=record.get("goal", ""),
                        state=record["state"], examples=tuple(chosen))
    most = max((len(r["actions"]) for r in records), default=0)
    raise DatasetError(f"no {split} observation can give {examples_per_obs} balanced examples "
                       f"(each class >= {MIN_CLASS_SHARE:.0%}; the largest observation has {most} actions)")


def heldout_examples(exclude_obs_id: str, n_obs: int = 8, per_obs: int = 16, seed: int = 0,
                     path: str | Path = SNAPSHOT_PATH, design: Design = PAGE) -> list[Example]:
    """Balanced examples from other held-out observations (a gold harness's generalisation check)."""
    records = [r for r in _records_for("heldout", Path(path), design) if r["obs_id"] != exclude_obs_id]
    rng = random.Random(f"heldout-check:{exclude_obs_id}:{seed}")
    out: list[Example] = []
    for record in rng.sample(records, min(n_obs, len(records))):
        out += _balanced_draw(examples_of(record), per_obs, rng) or []
    return out
