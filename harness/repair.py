"""Repair tasks: a parent program below gold on a task, and a reference that is the parent plus one rule.

    from harness.repair import RepairKnobs, make_repair_tasks
    knobs = RepairKnobs.from_config(cfg)
    train, heldin = make_repair_tasks(Design.of(cfg), knobs)     # lists of RepairTask
    rt = train[0]; rt.task (a harness.dataset.Task), rt.parent, rt.reference, rt.property

Why: the search's skill is a refinement that adds the rule its shown failures share. Under the rule
split the warm-start's program is already gold on every train task, so training on train tasks never
practises that skill. A repair task gives it something to repair:
- real families: a check of the warm-start's program (the compact program without the held-out rules H)
  left out, on real labels of train pages: the parent is the program without the check, the reference
  the program. Only the parsing and bid checks have many such tasks on the snapshot (docs/benchmark.md);
- synthetic families on real observations: verbs plus a predicate on the target element's line (a role,
  a property present or absent, or a made-up property the generator writes onto some element lines). The
  label is the real label AND NOT the rule; the parent is the warm-start's program, the reference the
  parent with the rule's guard spliced in at the target-element slot (ANCHOR). A made-up name differs from
  task to task, so the answer has to be copied from the failures shown, not remembered.
Every task leaves out the examples that depend on H; no training rule or answer names an attribute of an H
family (FAMILY_ATTRIBUTES; tests/test_repair.py reads every row). The held-in benchmark (harness/repair_eval.py)
is the same kind of task on held-out pages from families training never sees (other made-up names, roles and
properties; `hidden` left out). Programs here are our own generated code, compiled in-process (never model output).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any, Callable, Sequence

from harness.dataset import Example, Task, action_type, dependent_of, draw_holding, examples_of, load_snapshot
from harness.oracle import parse_action
from harness.rewards import score_predictions
from harness.rule_split import MIN_DEPENDENT, Design, compact_program

ANCHOR = "    line = m.group(1)\n"  # the compact program's target-element slot: a guard goes right after it
# The text a family's check tests, per holdable family: no training rule, answer or property names those of H.
FAMILY_ATTRIBUTES = {"press_focus": (), "hidden": ("visible", "offscreen"), "pointer": ("zero_size", "covered"),
                     "disabled": ("disabled",), "fill_editable": ("editable", "readonly"),
                     "select_option": ("combobox", "listbox")}
# The compact prelude's checks, each one early return: a real family's parent is the program without it.
PRELUDE_CHECKS = {"unknown_verb": '    if verb not in "click dblclick hover focus clear fill press select_option scroll '
                  'noop".split():\n        return False\n',
                  "arg_count": '    if not n - (verb == "noop") <= len(args) <= n:\n        return False\n',
                  "scroll_noop": '    if verb in ("scroll", "noop"):\n        return True\n',
                  "unknown_bid": '    if not m:\n        return False\n'}
BLOCK_FAMILIES = ("press_focus", "hidden", "disabled", "select_option")  # the compact program's other blocks
HELDIN_REAL = ("hidden",)  # left out on held-out pages only: training never sees it
# malformed is not among them: its check is the parse's try/except, which every later line needs.
REAL_PROPERTY = {"unknown_verb": ".split()", "arg_count": "len(args)", "scroll_noop": '"scroll", "noop"', "unknown_bid":
                 "if not m", "press_focus": '"press", "focus"', "hidden": "visible", "disabled": "disabled=True",
                 "select_option": "option %r"}
VERB_SETS = (("click",), ("click", "dblclick"), ("hover",), ("press",), ("focus",), ("click", "dblclick", "hover"),
             ("press", "focus"), ("dblclick",), ("hover", "focus"), ("click", "press"), ("dblclick", "hover"),
             ("focus", "click"))
# Subjects of the real-property and role families, split between training and the held-in benchmark
# (disjoint: the benchmark's families are ones training never sees), chosen where the snapshot serves them.
# An absence rule's failures show lines *without* its property, and the refinement prompt shows no other line,
# so its property must be one the system prompt names (clickable); a made-up property is always a presence.
SUBJECTS = {
    "train": {"role": ("button", "textbox", "tab", "LabelText", "link", "listitem", "paragraph", "option"),
              "present": ("clickable", "focusable=True", "selected=False", "expanded=False", "multiline=False",
                          "level=1"),
              "absent": ("clickable",)},
    "heldin": {"role": ("image", "SvgRoot", "checkbox", "cell"),
               "present": ("invalid='false'", "settable=True", "checked='false'"),
               "absent": ()},
}
# Made-up names: training's from one alphabet, the benchmark's always hold a letter training's never use.
NAME_LETTERS = {"train": ("bdfgklmnprstvz", "aeiou", ""), "heldin": ("bdfgklmnprstvzcjqwx", "aeiouy", "cjqwx")}
MADEUP_FORMS = {"train": ("{}=True", "{}", "{}='on'"), "heldin": ("{}=True", "{}", "{}='yes'")}
PRESENT_SHARE = (0.2, 0.5)  # share of element lines a made-up property is written on
MAX_TRIES_PER_OBS = 4  # train tasks (other draws) one observation may give a family; held-in: one (independent tasks)
_BID_LINE = re.compile(r"^\s*\[[^\]]+\] ")


class RepairError(ValueError):
    """Repair tasks that cannot be made as asked; one line naming the knob."""

@dataclass(frozen=True)
class RepairKnobs:
    seed: int  # W8_REPAIR_SEED
    families: int  # W8_REPAIR_FAMILIES: synthetic train families
    tasks_per_family: int  # W8_REPAIR_TASKS_PER_FAMILY
    madeup_share: float  # W8_REPAIR_MADEUP_SHARE
    heldin_families: int  # W8_REPAIR_HELDIN_FAMILIES
    heldin_tasks_per_family: int  # W8_REPAIR_HELDIN_TASKS_PER_FAMILY
    train_examples: int  # W8_TRAIN_EXAMPLES_PER_OBS
    heldin_examples: int  # W8_TRACE_EXAMPLES_PER_OBS
    gold_threshold: float  # W8_HARNESS_GOLD_THRESHOLD

    @classmethod
    def from_config(cls, cfg: Any) -> "RepairKnobs":
        return cls(cfg.repair_seed, cfg.repair_families, cfg.repair_tasks_per_family, cfg.repair_madeup_share,
                   cfg.repair_heldin_families, cfg.repair_heldin_tasks_per_family, cfg.train_examples_per_obs,
                   cfg.trace_examples_per_obs, cfg.harness_gold_threshold)


@dataclass(frozen=True)
class Family:
    """A rule family: real (a check of the warm-start's program left out) or synthetic (verbs + predicate)."""

    kind: str  # real | role | present | absent | madeup-present
    verbs: tuple[str, ...] = ()
    subject: str = ""  # the real family's name, a role, a property text, or a made-up form such as "{}=True"

    @property
    def name(self) -> str:
        if self.kind == "real":
            return f"real:{self.subject}"
        return f"{self.kind}:{'+'.join(self.verbs)}:{self.subject}"

    synthetic = property(lambda self: self.kind != "real")
    madeup = property(lambda self: self.kind.startswith("madeup"))


@dataclass(frozen=True)
class RepairTask:
    """A task (its examples relabeled by the rule), its family, a parent below gold and its reference."""

    task: Task
    side: str  # train | heldin
    family: str
    synthetic: bool
    madeup: bool
    parent: str
    reference: str
    property: str  # the text the rule tests (a mention of it in a program is counted)
    parent_balanced_accuracy: float
    reference_balanced_accuracy: float

    def to_json(self) -> dict[str, Any]:
        t = self.task
        return {"task_id": t.task_id, "side": self.side, "family": self.family, "synthetic": self.synthetic,
                "madeup": self.madeup, "page": t.page, "obs_id": t.obs_id, "goal": t.goal, "seed": t.seed,
                "state": t.state, "examples": [{"action": e.action, "legal": e.legal, "error": e.error,
                                                "dom_changed": e.dom_changed} for e in t.examples],
                "parent": self.parent, "reference": self.reference, "property": self.property,
                "parent_balanced_accuracy": self.parent_balanced_accuracy,
                "reference_balanced_accuracy": self.reference_balanced_accuracy}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RepairTask":
        examples = tuple(Example(d["state"], e["action"], e["legal"], e.get("error", ""), e.get("dom_changed", False),
                                 action_type(e["action"]), d["obs_id"]) for e in d["examples"])
        task = Task(d["task_id"], d["side"], d["seed"], d["obs_id"], d["page"], d.get("goal", ""), d["state"], examples)
        return cls(task, d["side"], d["family"], d["synthetic"], d["madeup"], d["parent"], d["reference"],
                   d["property"], d["parent_balanced_accuracy"], d["reference_balanced_accuracy"])


# ---- programs ---------------------------------------------------------------------------------------------
def excluded_attributes(heldout: Sequence[str]) -> tuple[str, ...]:
    """The attributes no training rule, answer or property may name: those of the held-out families."""
    return tuple(a for family in heldout for a in FAMILY_ATTRIBUTES.get(family, ()))


def guard(verbs: Sequence[str], kind: str, prop: str) -> str:
    """The rule as one guard clause at the target-element slot: `verb` and `line` are the compact program's."""
    on_verb = f'verb == "{verbs[0]}"' if len(verbs) == 1 else "verb in (" + ", ".join(f'"{v}"' for v in verbs) + ")"
    if kind == "role":
        test = f'line.startswith("{prop} ")'
    elif kind.endswith("absent"):
        test = f'"{prop}" not in line'
    else:
        test = f'"{prop}" in line'
    return f"    if {on_verb} and {test}:\n        return False\n"


def splice(parent: str, block: str, anchor: str = ANCHOR) -> str | None:
    """The parent with `block` inserted right after its first `anchor` line; None when it has no such line."""
    return parent.replace(anchor, anchor + block, 1) if anchor in parent else None


def real_pair(heldout: Sequence[str], family: str) -> tuple[str, str]:
    """(parent, reference) of a real family: the warm-start's program without / with the family's check."""
    reference = compact_program(heldout)
    if family in PRELUDE_CHECKS:
        return reference.replace(PRELUDE_CHECKS[family], "", 1), reference
    return compact_program(tuple(heldout) + (family,)), reference


def compile_harness(code: str) -> Callable[[str, str], Any]:
    scope: dict[str, Any] = {}
    exec(compile(code, "<repair-program>", "exec"), scope)  # our own generated programs only
    return scope["is_legal_action"]


def verdict(fn: Callable[[str, str], Any], state: str, action: str) -> bool | None:
    try:
        out = fn(state, action)
    except Exception:
        return None
    return out if isinstance(out, bool) else None


def balanced_accuracy(fn: Callable[[str, str], Any], examples: Sequence[Example]) -> float:
    """The reward arithmetic's balanced accuracy (harness.rewards) of an in-process program's verdicts."""
    return score_predictions([verdict(fn, e.state, e.action) for e in examples], examples, 0.0).balanced_accuracy


# ---- families ---------------------------------------------------------------------------------------------
def families_for(side: str, design: Design, knobs: RepairKnobs) -> list[Family]:
    """The candidate synthetic families of a side in a seeded order (make_side keeps those the data serves: named
    ones up to their share, made-up ones for the rest, so the made-up share is at least W8_REPAIR_MADEUP_SHARE)."""
    banned = excluded_attributes(design.heldout_rules)
    rng = random.Random(f"repair-families:{knobs.seed}:{side}")
    madeup = [Family("madeup-present", v, f) for v in VERB_SETS for f in MADEUP_FORMS[side]]
    named = [Family(k, v, s) for k, subjects in SUBJECTS[side].items() for s in subjects for v in VERB_SETS
             if not any(b in s for b in banned)]
    rng.shuffle(madeup)
    rng.shuffle(named)
    return named + madeup


def real_families(side: str, design: Design) -> list[str]:
    names = HELDIN_REAL if side == "heldin" else [f for f in (*PRELUDE_CHECKS, *BLOCK_FAMILIES) if f not in HELDIN_REAL]
    return [f for f in names if f not in design.heldout_rules]


def madeup_name(side: str, state: str, rng: random.Random) -> str:
    """A made-up property name that the state does not hold (the benchmark's hold a letter training never uses)."""
    consonants, vowels, must = NAME_LETTERS[side]
    while True:
        name = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(2, 3)))
        name += rng.choice(consonants + "0123456789") if rng.random() < 0.5 else ""
        if must and not any(c in name for c in must):
            continue
        if name not in state:
            return name


def write_property(state: str, prop: str, share: float, rng: random.Random) -> str:
    """The state with `, prop` appended to a `share` of its element lines."""
    lines = state.split("\n")
    bid_lines = [i for i, line in enumerate(lines) if _BID_LINE.match(line)]
    chosen = set(rng.sample(bid_lines, max(1, round(share * len(bid_lines))))) if bid_lines else set()
    return "\n".join(line + f", {prop}" if i in chosen else line for i, line in enumerate(lines))


# ---- tasks ------------------------------------------------------------------------------------------------
def side_records(side: str, design: Design) -> list[tuple[dict, list[Example]]]:
    """The side's observations (train pages, or held-out pages for the benchmark) with their examples that do
    not depend on H: a repair task is about its own rule only."""
    if design.kind != "rule":
        raise RepairError(f"repair tasks need the rule split (W8_SPLIT=rule), not {design.kind!r}")
    split = "train" if side == "train" else "heldout"
    out = []
    for record in load_snapshot():
        if design.split_of(record["page"]) == split:
            dependent = dependent_of(record, design)
            out.append((record, [e for e in examples_of(record) if e.action not in dependent]))
    return out


class _Programs:
    """Compiled programs by text, and their verdicts by (program, state, action): a named family's parent is
    the same program on the same observation for every family and draw."""

    def __init__(self) -> None:
        self.compiled: dict[str, Callable[[str, str], Any]] = {}
        self.verdicts: dict[tuple[str, str, str], bool | None] = {}

    def __call__(self, code: str) -> Callable[[str, str], Any]:
        if code not in self.compiled:
            self.compiled[code] = compile_harness(code)
        return self.compiled[code]

    def verdict(self, code: str, state: str, action: str) -> bool | None:
        if (code, state, action) not in self.verdicts:
            self.verdicts[code, state, action] = verdict(self(code), state, action)
        return self.verdicts[code, state, action]


def target_lines(state: str) -> dict[str, str]:
    """bid -> the text after `[bid] ` on its first line: the compact program's `line`."""
    out: dict[str, str] = {}
    for line in state.split("\n"):
        m = re.match(r"^\s*\[([^\]]+)\] (.*)", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2)
    return out


_parsed = lru_cache(maxsize=65536)(parse_action)  # the snapshot's ~12k action strings, parsed once


def rule_fires(family: Family, prop: str, action: str, lines: dict[str, str]) -> bool:
    """The synthetic rule on one action: its verb is the family's and the target's line meets the predicate."""
    parsed = _parsed(action)
    if not parsed or parsed[0] not in family.verbs or not parsed[1] or not isinstance(parsed[1][0], str):
        return False
    line = lines.get(parsed[1][0])
    if line is None:
        return False
    if family.kind == "role":
        return line.startswith(prop + " ")
    return (prop not in line) if family.kind.endswith("absent") else (prop in line)


def _split_examples(family: Family, prop: str, examples: list[Example], state: str, parent: str,
                    programs: _Programs) -> tuple[list[Example], list[Example]]:
    """(required, rest): the examples the parent gets wrong, and the others. Synthetic: the label becomes the
    real label AND NOT the rule (on the state with any made-up property written in)."""
    if family.synthetic:
        lines = target_lines(state)
        required, rest = [], []
        for e in examples:  # the state is set on the drawn examples only (_one_task): thousands of copies saved
            if e.legal and rule_fires(family, prop, e.action, lines):
                required.append(replace(e, legal=False, dom_changed=False))
            else:
                rest.append(e)
        return required, rest
    wrong = [programs.verdict(parent, state, e.action) is not e.legal for e in examples]
    return [e for e, w in zip(examples, wrong) if w], [e for e, w in zip(examples, wrong) if not w]


def _checked(chosen: list[Example], flipped: set[str], synthetic: bool, state: str, parent: str, reference: str,
             programs: _Programs) -> bool:
    """Run both programs on the drawn examples: the reference must give every label; for a synthetic family the
    parent (the warm-start's program) must give the real label, which the rule flipped on `flipped`."""
    for e in chosen:
        if programs.verdict(reference, state, e.action) is not e.legal:
            return False
        if synthetic and programs.verdict(parent, state, e.action) is not (e.legal or e.action in flipped):
            return False
    return True


def _one_task(side: str, family: Family, record: dict, examples: list[Example], design: Design, knobs: RepairKnobs,
              rng: random.Random, k: int, programs: _Programs) -> RepairTask | None:
    state = record["state"]
    if family.kind == "real":
        parent, reference = real_pair(design.heldout_rules, family.subject)
        prop = REAL_PROPERTY[family.subject]
    else:
        parent, prop = compact_program(design.heldout_rules), family.subject
        if family.madeup:
            prop = family.subject.format(madeup_name(side, state, rng))
            share = rng.uniform(*PRESENT_SHARE)
            state = write_property(state, prop, share, rng)
        reference = splice(parent, guard(family.verbs, family.kind, prop))
    required, rest = _split_examples(family, prop, examples, state, parent, programs)
    n = knobs.train_examples if side == "train" else knobs.heldin_examples
    chosen = draw_holding(required, rest, n, rng) if len(required) >= MIN_DEPENDENT else None
    flipped = {e.action for e in required}
    if chosen is None or not _checked(chosen, flipped, family.synthetic, state, parent, reference, programs):
        return None
    chosen = [e if e.state == state else replace(e, state=state) for e in chosen]
    parent_ba = balanced_accuracy(programs(parent), chosen)
    reference_ba = balanced_accuracy(programs(reference), chosen)
    if not parent_ba < knobs.gold_threshold <= reference_ba:
        return None
    task = Task(f"repair/{side}/{family.name}/{record['obs_id']}/{k}", side, k, record["obs_id"], record["page"],
                record.get("goal", ""), state, tuple(chosen))
    return RepairTask(task, side, family.name, family.synthetic, family.madeup, parent, reference, prop,
                      round(parent_ba, 6), round(reference_ba, 6))


def family_tasks(side: str, family: Family, records: list[tuple[dict, list[Example]]], design: Design,
                 knobs: RepairKnobs, wanted: int, programs: _Programs, needed: int = 0) -> list[RepairTask]:
    """Up to `wanted` tasks of one family: the side's observations in a seeded order, each up to
    MAX_TRIES_PER_OBS times (another draw of examples and, for a made-up family, another name)."""
    rng = random.Random(f"repair:{knobs.seed}:{side}:{family.name}")
    order = list(range(len(records)))
    rng.shuffle(order)
    out: list[RepairTask] = []
    tries = MAX_TRIES_PER_OBS if side == "train" else 1
    for k in range(tries):
        for done, i in enumerate(order):
            if len(out) >= wanted or len(out) + (tries - k) * len(order) - done < needed:
                return out  # enough, or too few observations left to reach `needed`
            task = _one_task(side, family, *records[i], design, knobs, rng, k, programs)
            if task is not None:
                out.append(task)
    return out


def make_side(side: str, design: Design, knobs: RepairKnobs,
              progress: Callable[[str], None] | None = None) -> list[RepairTask]:
    """The repair tasks of one side: its real families (as many tasks as the data serves), then synthetic
    families in a seeded order, made-up ones up to their share; a family the data serves with fewer than half
    the tasks wanted is passed over for the next candidate."""
    records = side_records(side, design)
    wanted = knobs.tasks_per_family if side == "train" else knobs.heldin_tasks_per_family
    n_families = knobs.families if side == "train" else knobs.heldin_families
    share = knobs.madeup_share if side == "train" else 0.5
    programs = _Programs()
    tasks: list[RepairTask] = []
    for name in real_families(side, design):
        got = family_tasks(side, Family("real", (), name), records, design, knobs, wanted, programs)
        tasks += got
        _say(progress, f"{side} real:{name}: {len(got)} task(s)")
    candidates = families_for(side, design, knobs)
    kept: list[Family] = []
    for madeup, quota in ((False, n_families - math.ceil(share * n_families)), (True, n_families)):
        for family in (f for f in candidates if f.madeup is madeup):
            if len(kept) >= n_families or sum(f.madeup is madeup for f in kept) >= quota:
                break
            if side == "heldin" and not madeup and any((f.kind, f.subject) == (family.kind, family.subject) for f in kept):
                continue  # the benchmark's named families each test their own role or property
            got = family_tasks(side, family, records, design, knobs, wanted, programs, max(1, wanted // 2))
            if len(got) >= max(1, wanted // 2):
                tasks += got
                kept.append(family)
                _say(progress, f"{side} {family.name}: {len(got)} task(s)")
    if len(kept) < n_families:
        raise RepairError(f"the snapshot serves only {len(kept)} of the {n_families} {side} families asked "
                          f"(W8_REPAIR_{'' if side == 'train' else 'HELDIN_'}FAMILIES)")
    return tasks


def make_repair_tasks(design: Design, knobs: RepairKnobs,
                      progress: Callable[[str], None] | None = None) -> tuple[list[RepairTask], list[RepairTask]]:
    """(train repair tasks, held-in benchmark tasks), the same for the same knobs and snapshot."""
    return make_side("train", design, knobs, progress), make_side("heldin", design, knobs, progress)


def _say(progress: Callable[[str], None] | None, line: str) -> None:
    if progress:
        progress(line)


def counts(tasks: Sequence[RepairTask]) -> list[dict[str, Any]]:
    """One row per (side, family): tasks, observations, pages, and the parents' and references' balanced accuracy."""
    rows: dict[tuple[str, str], list[RepairTask]] = {}
    for t in tasks:
        rows.setdefault((t.side, t.family), []).append(t)
    out, spread = [], lambda v: {"min": v[0], "median": v[len(v) // 2], "max": v[-1]}  # of sorted values
    for (side, family), group in rows.items():
        parents = sorted(t.parent_balanced_accuracy for t in group)
        refs = sorted(t.reference_balanced_accuracy for t in group)
        out.append({"side": side, "family": family, "source": "synthetic" if group[0].synthetic else "real",
                    "madeup": group[0].madeup, "tasks": len(group), "observations": len({t.task.obs_id for t in group}),
                    "pages": len({t.task.page for t in group}), "parent_ba": spread(parents), "reference_ba": spread(refs)})
    return out


def record(knobs: RepairKnobs, design: Design) -> dict[str, Any]:
    """What a set of repair tasks was made from (written beside the files)."""
    return {**asdict(knobs), **design.record()}
