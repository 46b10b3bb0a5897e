"""harness/arms.py's table is the one list of arms: a run with every arm plans, traces, trains, compares, counts in
the ledger and draws each row of it, every comparison of the table is made, and each arm keeps one colour in
every figure. Constructed traces (tests/test_compare.py) whose numbers do not matter here."""

from __future__ import annotations

import importlib.util

import matplotlib.colors as mcolors
import pytest

from harness.arm_training import TRAININGS
from harness.arms import ARMS, BY_NAME, NAMES, arm, colour, comparison_name, comparisons, planned
from harness.budget import arm_plan, planned_arms, planned_training_generations
from harness.compare import COMPARISONS, compare_arms, trace_figure
from harness.config import load_config
from harness.files import REPO_ROOT
from harness.ledger import FROM_SFT, GRPO_METRICS, TRAINED, ledger, ledger_lines, warm_start
from harness.plots import budget_figure, token_figure
from harness.traces import ARMS as TRACED, SEARCHED_ARMS, frozen_budgets, search_plan
from tests.test_compare import arm as traces_of

EVERY_ARM = {"W8_FROZEN_MATCHED_ARM": "1", "W8_GRPO_ONLY_ARM": "1", "W8_REFINE_ARM": "1", "W8_SELF_ARM": "1",
             "W8_HARNESS_SFT_STEPS": "2", "W8_TRACE_TASKS": "2", "W8_TRACE_MAX_ITERATIONS": "3",
             "W8_HARVEST_TASKS": "2", "W8_HARVEST_MAX_ITERATIONS": "1"}


def script(name: str):
    spec = importlib.util.spec_from_file_location(name.replace(".py", ""), REPO_ROOT / "scripts" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cfg():
    return load_config(env=EVERY_ARM)


@pytest.fixture(scope="module")
def every_arm_run(cfg):
    """Traces of every table arm over 2 tasks x 2 seeds; frozen_matched is frozen's search cut at its budget."""
    budget = frozen_budgets(cfg)["frozen_matched"]
    golds = {"frozen": [None, None, None, 2], "sft": [0, None, 1, None], "repair_sft": [None, 1, 1, None],
             "trained": [0, 1, 0, None],
             "grpo_only": [None, 3, None, None], "refine": [1, 0, None, 2], "self": [None, None, 3, None]}
    arms = {name: traces_of(g, max_iterations=3) for name, g in golds.items()}
    arms["frozen_matched"] = traces_of([None, None, None, 2], max_iterations=budget)
    return {name: arms[name] for name in NAMES}, compare_arms({name: arms[name] for name in NAMES}, resamples=50)


def test_every_arm_is_planned_traced_and_trained_from_the_table(cfg):
    assert planned_arms(cfg) == list(NAMES) == list(TRACED) and [a.name for a in planned(cfg)] == list(NAMES)
    assert set(search_plan(cfg)["arms"]) == set(NAMES) and set(arm_plan(cfg, list(NAMES))) == set(NAMES)
    assert set(SEARCHED_ARMS) | {a.name for a in ARMS if a.cut_from} == set(NAMES)
    assert all(a.cut_from in SEARCHED_ARMS for a in ARMS if a.cut_from)
    assert "frozen_matched" in frozen_budgets(cfg)  # step 01 cuts it from frozen's searches
    searched_by_04 = {name for name, _ in script("04_trained_trace.py").TRAINED_ARMS}
    assert searched_by_04 == {a.name for a in ARMS if a.folder} == set(SEARCHED_ARMS) - {"frozen"}
    for a in ARMS:  # step 03 trains every row with a training function, into its folder, with its metrics file
        if a.training is not None:
            assert TRAININGS[a.training].__name__.startswith("train_")
            assert a.metrics == f"{a.folder}_metrics.json" == GRPO_METRICS[a.name]
    assert set(planned_training_generations(cfg, list(NAMES))) == set(TRAINED)


def test_each_row_holds_its_own_comparisons_and_every_one_is_made(every_arm_run):
    _, result = every_arm_run
    made = [(c["a"], c["b"]) for c in result["comparisons"]]
    assert made[:len(COMPARISONS)] == list(COMPARISONS) == [c.pair for c in comparisons()]
    for a in ARMS:
        for c in a.comparisons:
            assert a.name in c.pair and set(c.pair) <= set(NAMES)  # on the row of one of its arms
    compared = {name for pair in made for name in pair}
    assert compared == set(NAMES)
    assert comparison_name("trained", "sft") == "trained vs sft (what training added to the oracle warm-start)"
    assert comparison_name("refine", "frozen@10").startswith("refine vs frozen at refine's own training compute")


def test_every_arm_is_counted_in_the_ledger(every_arm_run, cfg, tmp_path):
    _, result = every_arm_run
    book = ledger(tmp_path, result, planned_training_generations(cfg, list(NAMES)))
    assert list(book) == list(NAMES)
    table = "\n".join(ledger_lines(book, result["n_tasks"], warm_start(cfg, tmp_path, ["grpo_only", "self"])))
    assert all(f"| {name} |" in table for name in NAMES)
    assert set(FROM_SFT) == {a.name for a in ARMS if a.from_answer_key}
    assert {name for name, e in book.items() if "grpo_generations" in e} == set(TRAINED)


def test_every_arm_is_drawn_in_its_own_colour_in_every_figure(every_arm_run):
    arms, result = every_arm_run
    assert len({a.colour for a in ARMS}) == len(ARMS)  # one colour per arm
    figures = {"trace.png": trace_figure(arms, resamples=20),
               "budget_curves.png": budget_figure(result["budget_curves"], budget=3),
               "budget_curves_tokens.png": token_figure(result["token_curves"])}
    for name, fig in figures.items():
        seen = {}
        for ax in fig.axes:
            for line in ax.get_lines():
                seen.setdefault(mcolors.to_hex(line.get_color()), set()).add(line.get_label())
        for a in ARMS:
            assert a.colour.lower() in seen, f"{name}: {a.name} not drawn in its colour {a.colour}"
            assert any(a.name in label for label in seen[a.colour.lower()]), f"{name}: {a.name}'s colour carries {seen[a.colour.lower()]}"
        for ax in fig.axes:
            assert ax.get_title(), f"{name}: a panel without a title"


def test_arm_lookups_name_the_table():
    assert arm("refine") is BY_NAME["refine"] and colour("refine") == BY_NAME["refine"].colour
    assert colour("frozen@12") != colour("frozen") and colour("other", ["other"]) not in {a.colour for a in ARMS}
    with pytest.raises(KeyError, match="not an arm of harness/arms.py"):
        arm("nope")
