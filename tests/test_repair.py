"""Repair tasks and the held-in repair benchmark (harness/repair.py, harness/repair_eval.py, scripts/repair_*.py).

Real parts: the committed snapshot, the real sandbox for scoring, the real search; the operators that stand in
for a model are the rule library (the ceiling) and a fixed-answer operator.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from harness.config import load_config
from harness.operators import Generation, Operator
from harness.prompts import build_refine_prompt
from harness.repair import (ANCHOR, FAMILY_ATTRIBUTES, NAME_LETTERS, SUBJECTS, RepairError, RepairKnobs, RepairTask,
                            counts, excluded_attributes, guard, make_repair_tasks, make_side, real_pair,
                            splice)
from harness.repair_eval import RootedOperator, RuleLibraryOperator, arm_summary, evaluate_arm, mentions, paired
from harness.repair_eval import _parse_family as family_parts
from harness.rewards import score_harness
from harness.rule_split import Design, compact_program, depends_on
from harness.search import SearchKnobs
from tests.helpers import REWARD

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = Design("rule", ("pointer", "fill_editable"))
SMALL = {"W8_SPLIT": "rule", "W8_REPAIR_FAMILIES": "4", "W8_REPAIR_TASKS_PER_FAMILY": "3",
         "W8_REPAIR_HELDIN_FAMILIES": "3", "W8_REPAIR_HELDIN_TASKS_PER_FAMILY": "2"}


def knobs_of(env: dict[str, str]) -> RepairKnobs:
    return RepairKnobs.from_config(load_config(env=env))


@cache
def small(heldout: tuple[str, ...] = DEFAULT.heldout_rules) -> tuple[list[RepairTask], list[RepairTask]]:
    return make_repair_tasks(Design("rule", heldout), knobs_of(SMALL))


def named_attribute(text: str, attributes) -> str | None:
    return next((a for a in attributes if a in text), None)


def check_no_heldout_attribute(tasks: list[RepairTask], heldout: tuple[str, ...]) -> None:
    banned = excluded_attributes(heldout)
    assert banned
    for t in tasks:
        for part in (t.family, t.property, t.parent, t.reference):
            assert named_attribute(part, banned) is None, f"{t.task.task_id} names {named_attribute(part, banned)}"
        for e in t.task.examples:  # no label depends on a held-out family
            assert not depends_on(heldout, t.task.state, e.action), (t.task.task_id, e.action)


@pytest.mark.parametrize("heldout", [("pointer", "fill_editable"),
                                     pytest.param(("hidden", "disabled"), marks=pytest.mark.slow)])
def test_no_training_row_names_a_heldout_attribute(heldout):
    train, heldin = small(heldout)
    check_no_heldout_attribute(train, heldout)
    if "hidden" in heldout:  # the benchmark's real family follows W8_HELDOUT_RULES too
        assert not any(t.family == "real:hidden" for t in heldin)


@pytest.mark.slow
def test_every_default_training_row_is_free_of_heldout_attributes():
    """The knobs' defaults: every train repair task, rule and answer (the study's curriculum)."""
    train = make_side("train", DEFAULT, knobs_of({"W8_SPLIT": "rule"}))
    assert len(train) >= 2000
    check_no_heldout_attribute(train, DEFAULT.heldout_rules)
    rows = counts(train)
    synthetic = [r for r in rows if r["source"] == "synthetic"]
    assert len(synthetic) >= 20
    made_up = sum(r["tasks"] for r in synthetic if r["madeup"])
    assert made_up / sum(r["tasks"] for r in synthetic) >= 0.5


def test_sides_pages_and_families():
    train, heldin = small()
    assert train and heldin
    assert {DEFAULT.split_of(t.task.page) for t in train} == {"train"}
    assert {DEFAULT.split_of(t.task.page) for t in heldin} == {"heldout"}
    assert not {t.family for t in train} & {t.family for t in heldin}
    heldin_only = NAME_LETTERS["heldin"][2]
    for t in heldin:
        if t.madeup:  # the benchmark's made-up names hold a letter training's names never use
            name = re.split(r"[=']", t.property)[0]
            assert any(c in name for c in heldin_only) and not any(c in name for c in heldin_only if c in
                                                                    NAME_LETTERS["train"][0])
    for side in ("role", "present", "absent"):
        assert not set(SUBJECTS["train"][side]) & set(SUBJECTS["heldin"][side])


def test_reference_is_the_parent_plus_one_rule():
    train, heldin = small()
    for t in train + heldin:
        kind, verbs, _ = family_parts(t.family)
        if t.synthetic:
            assert t.parent == compact_program(DEFAULT.heldout_rules)
            assert t.reference == splice(t.parent, guard(verbs, kind, t.property))
            assert t.reference.index(ANCHOR) < t.reference.index(t.property)
            assert mentions(t.reference, t.property) and not mentions(t.parent, t.property)
        else:
            assert (t.parent, t.reference) == real_pair(DEFAULT.heldout_rules, t.family.split(":")[1])


def test_parents_below_gold_references_gold_in_the_sandbox():
    train, heldin = small()
    for t in (train[:3] + train[-3:] + heldin[:3]):
        parent = score_harness(t.parent, t.task.examples, REWARD.recall_weight, REWARD.timeout_s, sandbox="local")
        ref = score_harness(t.reference, t.task.examples, REWARD.recall_weight, REWARD.timeout_s, sandbox="local")
        assert parent.valid and parent.balanced_accuracy < 0.9, t.task.task_id
        assert ref.valid and ref.balanced_accuracy == 1.0 and ref.reward == 1.0, t.task.task_id
        assert parent.balanced_accuracy == pytest.approx(t.parent_balanced_accuracy, abs=1e-6)


def test_the_rule_s_property_is_in_the_first_refinement_prompt():
    """The operator sees the parent as the search shows it, and the prompt names what the rule tests: on the
    failures' lines (a role, a property present, a made-up one), or in the system prompt (an absence rule)."""
    from harness.repair_rows import parent_as_shown
    train, heldin = small()
    for t in [t for t in train + heldin if t.synthetic]:
        _, shown = parent_as_shown(t, REWARD)
        system, user = build_refine_prompt(t.task, t.parent, shown)
        assert "Current harness:" in user["content"] and t.parent.strip() in user["content"]
        where = system["content"] if "absent" in t.family else user["content"].split("It is wrong on these")[1]
        assert t.property in where, t.task.task_id


@pytest.mark.slow
def test_same_knobs_same_tasks_and_the_seed_changes_them():
    a = make_side("heldin", DEFAULT, knobs_of(SMALL))
    b = make_side("heldin", DEFAULT, knobs_of(SMALL))
    assert [t.to_json() for t in a] == [t.to_json() for t in b]
    c = make_side("heldin", DEFAULT, knobs_of({**SMALL, "W8_REPAIR_SEED": "1"}))
    assert [t.to_json() for t in a] != [t.to_json() for t in c]


def test_json_round_trip():
    train, _ = small()
    for t in train[:5]:
        again = RepairTask.from_json(json.loads(json.dumps(t.to_json())))
        assert again.to_json() == t.to_json() and again.task.examples_hash == t.task.examples_hash


def test_guard_text():
    assert guard(("click",), "madeup-present", "zq7=True") == \
        '    if verb == "click" and "zq7=True" in line:\n        return False\n'
    assert guard(("press", "focus"), "absent", "clickable") == \
        '    if verb in ("press", "focus") and "clickable" not in line:\n        return False\n'
    assert 'line.startswith("button ")' in guard(("hover",), "role", "button")
    assert splice("def f():\n    pass\n", "x") is None
    assert FAMILY_ATTRIBUTES["pointer"] == ("zero_size", "covered")
    assert mentions("if 'zq7' in line", "zq7=True") and not mentions("x", "zq7=True")


def test_rule_split_required():
    with pytest.raises(RepairError, match="W8_SPLIT=rule"):
        make_side("train", Design("page"), knobs_of(SMALL))


def test_too_many_families_is_refused_by_name():
    with pytest.raises(RepairError, match="W8_REPAIR_HELDIN_FAMILIES"):
        make_side("heldin", DEFAULT, knobs_of({**SMALL, "W8_REPAIR_HELDIN_TASKS_PER_FAMILY": "1000"}))


class Fixed(Operator):
    """Answers every refinement with one program (a stand-in for a model that writes it)."""

    name, model = "fixed", "fixed"

    def __init__(self, text: str):
        self.text = text

    def answer(self, requests):
        return [Generation("```python\n" + self.text + "```", 10, 20) for _ in requests]


def test_benchmark_search_starts_from_the_parent(tmp_path):
    _, heldin = small()
    tasks = heldin[:2]
    knobs = SearchKnobs(2, 20.0, 0, REWARD)
    ceiling = evaluate_arm("rule-library", RuleLibraryOperator(heldin, DEFAULT.heldout_rules), tasks, knobs,
                           tmp_path / "ceiling", progress=None)
    assert [r["solved_node"] for r in ceiling] == [1, 1] and all(r["first_refinement"] for r in ceiling)
    assert all(r["mentions"] == [True] for r in ceiling)
    # an operator that answers with the parent again: never solved, node 0 is the parent at no cost
    stuck = evaluate_arm("stuck", Fixed(tasks[0].parent), tasks[:1], knobs, tmp_path / "stuck", progress=None)
    assert stuck[0]["solved_node"] is None and stuck[0]["refinements"] == 2 and stuck[0]["mentions"] == [False, False]
    trace = json.loads(next((tmp_path / "stuck").glob("*.state.json")).read_text())["trace"]
    assert trace["nodes"][0]["code"].strip() == tasks[0].parent.strip()
    assert trace["nodes"][0]["completion_tokens"] == 0 and trace["nodes"][1]["completion_tokens"] == 20
    summary = arm_summary(ceiling + stuck)
    assert summary["all"]["first_refinement"] == 2 and summary["all"]["within_budget"] == 2
    assert summary["all"]["mention_share"] == pytest.approx(2 / 4)
    versus = paired(ceiling, [replace_row(r, False) for r in ceiling])
    assert (versus["better"], versus["worse"], versus["tasks"]) == (2, 0, 2)


def replace_row(row: dict, solved: bool) -> dict:
    return {**row, "first_refinement": solved, "solved_node": 1 if solved else None}


def test_rooted_operator_passes_other_requests_on():
    train, _ = small()
    t = train[0]
    rooted = RootedOperator(Fixed("x"), {t.task.task_id: t.parent})
    from harness.operators import Request
    other = replace(t.task, task_id="other")
    gens = rooted.answer([Request(t.task, 0), Request(other, 0), Request(t.task, 1, t.parent, ())])
    assert t.parent in gens[0].text and gens[0].completion_tokens == 0
    assert gens[1].text.startswith("```python\nx") and gens[2].completion_tokens == 20


@pytest.mark.slow
def test_report_and_outside_rescore(tmp_path):
    env = {"PATH": "/usr/bin:/bin", **{k: v for k, v in SMALL.items()}}
    run = subprocess.run([sys.executable, "scripts/repair_report.py", "--out", str(tmp_path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "parents below gold" in run.stdout and "repair-report:" in run.stdout.splitlines()[-1]
    lines = (tmp_path / "repair_heldin.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    assert {"task_id", "family", "synthetic", "page", "state", "examples", "parent", "reference", "property"} <= set(row)
    assert set(row["examples"][0]) >= {"action", "legal"}
    counted = json.loads((tmp_path / "repair_counts.json").read_text())
    assert counted["heldin"]["tasks"] == len(lines)
    # a parent that is gold: the outside rescore names it and fails
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**row, "parent": row["reference"]}) + "\n")
    again = subprocess.run([sys.executable, "-I", "scripts/rescore_repair.py", str(bad)], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and row["task_id"] in again.stderr


def test_report_refuses_the_page_split(tmp_path):
    run = subprocess.run([sys.executable, "scripts/repair_report.py", "--out", str(tmp_path)], cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "W8_SPLIT": "page"}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "W8_SPLIT=rule" in run.stderr
    assert not list(tmp_path.iterdir())


def test_repair_rows_read_back_through_the_env(tmp_path):
    """The GRPO rows of repair tasks as SkyRL reads them: schema, the env's refinement path, reference vs parent."""
    from harness.repair_rows import check_repair_rows, repair_refine_rows, repair_sft_rows
    from harness.training_data import skyrl_row, write_parquet_rows
    train, _ = small()
    tasks = [train[0], next(t for t in train if t.madeup)]
    rows = repair_refine_rows(tasks, REWARD, 0.2, 0.2)
    path = write_parquet_rows(rows, tmp_path / "train.parquet")
    checked = check_repair_rows(path, tasks)
    assert checked["rows"] == 2 and checked["reference_reward"] > 1.0 > checked["parent_reward"]
    info = rows[1]["extra_info"]
    assert info["prompt_kind"] == "refine" and info["parent_code"] == tasks[1].parent
    assert tasks[1].property in rows[1]["prompt"][1]["content"]
    sft = repair_sft_rows(tasks[1:], REWARD)
    assert sft[0]["messages"][-1]["content"].startswith("```python\n" + tasks[1].reference[:20])
    zero = write_parquet_rows([skyrl_row(tasks[0].task, REWARD)], tmp_path / "zero.parquet")
    with pytest.raises(Exception, match="not a refinement row"):
        check_repair_rows(zero, tasks)
