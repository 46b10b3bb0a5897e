"""Both splits built from the committed snapshot, and the rule split's contract (harness/rule_split.py).

The contract: no train example depends on the held-out rules H; the restricted target (the warm-start's
program) is gold on every train task and below gold on at least 80% of held-out tasks; the full oracle is
gold on every held-out task; the first refinement prompt of the restricted target shows examples of H.
"""

from __future__ import annotations

import itertools

import pytest

from harness.config import ConfigError, load_config
from harness.dataset import DatasetError, PAGE, examples_of, is_balanced, load_snapshot, make_task, n_pages
from harness.failures import failure_candidates, select_failures
from harness.oracle import COMPACT_HARNESS, is_legal_action
from harness.prompts import build_refine_prompt
from harness.rewards import score_harness
from harness.rule_split import (HOLDABLE, MIN_DEPENDENT, Design, SplitError, compact_program, depends_on,
                                restricted_rules, restricted_target)
from harness.rules import RULE_NAMES, compose_program, rule_function
from harness.split_check import check_split

RULE = Design("rule", ("pointer", "fill_editable"))
GOLD = 0.9


def heldout_tasks(design: Design, count: int, n: int = 24) -> list:
    """Held-out tasks from distinct pages, seeds 7, 8, ... (as harness.traces.trace_tasks draws them)."""
    tasks, pages = [], set()
    for seed in range(7, 1007):
        task = make_task("heldout", seed, n, design=design)
        if task.page not in pages:
            pages.add(task.page)
            tasks.append(task)
        if len(tasks) == count:
            return tasks
    raise AssertionError(f"only {len(tasks)} pages")


@pytest.fixture(scope="module")
def rule_heldout():
    return heldout_tasks(RULE, n_pages("heldout", design=RULE))


@pytest.fixture(scope="module")
def rule_train():
    return [make_task("train", seed, 24, design=RULE) for seed in range(64)]


def test_the_page_split_is_the_seeds_own():
    """Unchanged by the rule split: the six-arm study's first task (results/study-b4-6arms-20261206)."""
    task = make_task("heldout", 7, 24)
    assert (task.task_id, task.examples_hash) == ("heldout/social-media-all/2/seed7/n24", "5883b323342fa738")
    assert make_task("heldout", 7, 24, design=PAGE) == task
    assert n_pages("heldout") == 25


def test_the_rule_library_is_the_oracle_and_the_compact_blocks_are_its_families():
    """compose_program(all) is the oracle on every snapshot example; compact_program without a family's block
    gives the rule library's verdicts without that family, for each holdable family and for H."""
    examples = [(e.state, e.action) for r in load_snapshot() for e in examples_of(r)]
    full = rule_function(frozenset(RULE_NAMES))
    assert all(full(s, a) == is_legal_action(s, a) for s, a in examples)
    for heldout in [()] + [(f,) for f in HOLDABLE] + [RULE.heldout_rules]:
        scope: dict = {}
        exec(compact_program(heldout), scope)
        mine, library = scope["is_legal_action"], rule_function(frozenset(restricted_rules(heldout)))
        wrong = [(s, a) for s, a in examples if mine(s, a) != library(s, a)]
        assert not wrong, f"{heldout}: {len(wrong)} disagreements, e.g. {wrong[0][1]}"
    assert compact_program(()) != COMPACT_HARNESS  # its own text, one family per block; same verdicts


def test_held_out_and_train_pages_never_meet_and_the_pool_gives_32_tasks(rule_heldout, rule_train):
    assert len(rule_heldout) >= 32
    assert not {t.page for t in rule_heldout} & {t.page for t in rule_train}
    for task in rule_heldout + rule_train:
        n_legal = sum(e.legal for e in task.examples)
        assert is_balanced(n_legal, len(task.examples) - n_legal) and len(task.examples) == 24
        assert task.task_id.startswith("rule/")


def test_no_train_example_depends_on_h_and_the_restricted_target_is_gold_on_every_train_task(rule_train):
    target = restricted_target(RULE.heldout_rules, "compact")
    for task in rule_train:
        assert not any(depends_on(RULE.heldout_rules, e.state, e.action) for e in task.examples), task.task_id
        assert score_harness(target, list(task.examples)).balanced_accuracy >= GOLD, task.task_id


def test_held_out_tasks_need_h_the_full_oracle_is_gold_and_the_target_is_not(rule_heldout):
    report = check_split(RULE, rule_heldout, [], GOLD)
    n = report["n_heldout"]
    assert report["full_gold"] == n
    assert report["restricted_below_gold"] >= 0.8 * n
    assert all(r["n_dependent"] >= MIN_DEPENDENT for r in report["rows"])
    assert all(r["constant"] == 0.5 for r in report["rows"])
    # the search's feedback carries what is missing, and an operator that adds a rule from it reaches gold
    assert report["prompts_showing_h"] == n
    assert report["rule_operator_gold"] == n


def test_the_first_refinement_prompt_shows_h_examples_in_its_text(rule_heldout):
    task = rule_heldout[0]
    target = restricted_target(RULE.heldout_rules, "compact")
    shown = select_failures(failure_candidates(score_harness(target, list(task.examples)), task.examples))
    prompt = build_refine_prompt(task, target, shown)[-1]["content"]
    dependent = [e.action for e in task.examples if depends_on(RULE.heldout_rules, e.state, e.action)]
    assert dependent and all(action in prompt for action in dependent[:len(shown)])


def test_the_gpu_warm_start_is_the_restricted_full_oracle():
    program = restricted_target(RULE.heldout_rules, "oracle")
    assert program == compose_program(restricted_rules(RULE.heldout_rules))
    assert "# rule: pointer" not in program and "# rule: fill_editable" not in program
    assert "# rule: disabled" in program


@pytest.mark.parametrize("env, match", [
    ({"W8_SPLIT": "rules"}, "W8_SPLIT='rules': expected one of page | rule"),
    ({"W8_SPLIT": "rule", "W8_HELDOUT_RULES": "pointer,no_such_rule"}, "W8_HELDOUT_RULES='pointer,no_such_rule'"),
    ({"W8_SPLIT": "rule", "W8_HELDOUT_RULES": "pointer"}, "W8_HELDOUT_RULES='pointer': expected two or more"),
    ({"W8_SPLIT": "rule", "W8_HELDOUT_RULES": "malformed,pointer"}, "W8_HELDOUT_RULES='malformed,pointer'"),
])
def test_bad_split_knobs_are_refused_by_name(env, match):
    with pytest.raises(ConfigError, match=match):
        load_config(env=env)


def test_a_family_that_names_no_rule_says_which():
    with pytest.raises(SplitError, match="'no_such_rule' names no rule of the oracle"):
        Design("rule", ("pointer", "no_such_rule"))
    with pytest.raises(SplitError, match="'arg_count' cannot be held out"):
        Design("rule", ("pointer", "arg_count"))
    with pytest.raises(SplitError, match="at least two families"):
        Design("rule", ("pointer",))


def test_every_pair_of_holdable_families_gives_train_tasks_free_of_it():
    for pair in itertools.combinations(HOLDABLE, 2):
        design = Design("rule", pair)
        task = make_task("train", 0, 24, design=design)
        assert not any(depends_on(pair, e.state, e.action) for e in task.examples), pair


def test_a_rule_split_the_snapshot_cannot_serve_is_refused_with_what_it_can_give():
    design = Design("rule", ("disabled", "select_option"))  # almost no example depends on these
    assert n_pages("heldout", design=design) < 32
    with pytest.raises(DatasetError, match="no heldout observation can give 24 balanced examples"):
        make_task("heldout", 7, 24, design=design)
