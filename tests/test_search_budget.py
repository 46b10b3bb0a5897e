"""The study measures search: the budget never steers the search (so one long frozen search serves frozen and
frozen_matched), the equal-compute rule, the checks before any model loads, solved-by-budget curves with a
band over tasks, refinement statistics and the search ledger, on constructed traces whose answers are known
and on real searches of the snapshot with the deterministic operator and the real sandbox."""

from __future__ import annotations

import math

import pytest

from harness.budget import (check_budgets, check_refine_fits, frozen_search_budget, grpo_generations, matched_budget,
                            matched_budgets, planned_arms, planned_training_generations)
from harness.compare import compare_arms
from harness.config import ConfigError, load_config
from harness.dataset import make_task
from harness.operators import DeterministicOperator
from harness.rewards import RewardKnobs
from harness.search import SearchKnobs, run_search, trace_prefix, without_timing
from harness.search_stats import budget_curve, first_gold_both, refinement_stats, search_ledger, solved_matrix
from harness.traces import prefix_trace
from tests.test_compare import trace


def cfg_of(**env):
    return load_config(env={f"W8_{k.upper()}": str(v) for k, v in env.items()})


class Recording(DeterministicOperator):
    """The real deterministic operator, recording every request it was asked (seed, parent program, failures)."""

    def __init__(self):
        self.asked = []

    def answer(self, requests):
        self.asked += [(r.seed, r.code, tuple(f.index for f in r.failures), r.attempt) for r in requests]
        return super().answer(requests)


# ---- the search does not look at its budget ------------------------------------------------------

@pytest.mark.parametrize("task_seed", [7, 8])
def test_a_longer_search_starts_with_the_shorter_one_node_for_node(task_seed):
    task = make_task("heldout", task_seed, 24)
    reward = RewardKnobs(0.2, 0.99, 2.0, "local")  # a threshold few programs reach: searches run long
    short_op, long_op = Recording(), Recording()
    short = run_search(task, short_op, SearchKnobs(3, 20.0, 5, reward), progress=None)
    long = run_search(task, long_op, SearchKnobs(9, 20.0, 5, reward), progress=None)
    assert len(long.nodes) > len(short.nodes) or long.nodes[-1].gold
    cut = trace_prefix(long.to_trace(), 3)
    assert without_timing(cut) == without_timing(short.to_trace())
    assert long_op.asked[: len(short_op.asked)] == short_op.asked  # same seeds, parents and failures asked
    assert cut["knobs"]["max_iterations"] == 3 and cut["finished"]


def test_a_prefix_of_a_search_that_stopped_at_gold_is_the_whole_search():
    t = trace(1, max_iterations=6)
    cut = prefix_trace(t, 4)
    assert cut["n_nodes"] == 2 and cut["steps_to_first_gold"] == 1 and cut["knobs"]["max_iterations"] == 4
    assert cut["cut_from_budget"] == 6 and cut["finished"]
    with pytest.raises(ValueError, match="budget 9 from a search of budget 6"):
        prefix_trace(t, 9)


# ---- the equal-compute rule and its checks ---------------------------------------------------------

def test_matched_budget_is_the_budget_plus_training_generations_per_task_rounded_up():
    assert matched_budget(4, 20, 16) == 6  # 20 / 16 = 1.25 -> 2
    assert matched_budget(4, 32, 16) == 6
    assert matched_budget(4, 33, 16) == 7
    assert matched_budget(0, 0, 16) == 0


def test_planned_generations_follow_the_knobs():
    cfg = cfg_of(trace_max_iterations=4, trace_tasks=16, harness_sft_steps=9, train_count=16, grpo_max_steps=5,
                 grpo_epochs=1, grpo_group_size=4, refine_arm=1, self_arm=1, harvest_tasks=8,
                 harvest_max_iterations=4, self_rounds=2, frozen_matched_arm=1, curriculum="none")
    arms = planned_arms(cfg)
    assert arms == ["frozen", "frozen_matched", "sft", "trained", "refine", "self"]
    grpo = grpo_generations(cfg)
    assert grpo == 5 * 4 * (1 + cfg.grpo_dynamic_tries)  # each step may replace a flat group that many times
    gens = planned_training_generations(cfg, arms)
    assert gens == {"sft": 0, "trained": grpo, "refine": 8 * 5 + grpo, "self": 3 * 8 * 5 + grpo}
    budgets = matched_budgets(cfg, arms)
    assert budgets["trained"] == 4 + math.ceil(grpo / 16) and "sft" not in budgets
    assert frozen_search_budget(cfg, arms) == budgets["self"] == 4 + math.ceil((120 + grpo) / 16)


def test_the_repair_curriculum_plans_repair_sft_and_counts_its_relabeling_harvest():
    cfg = cfg_of(trace_max_iterations=4, trace_tasks=16, harness_sft_steps=9, train_count=16, grpo_max_steps=5,
                 grpo_epochs=1, grpo_group_size=8, grpo_dynamic_tries=2, frozen_matched_arm=1, curriculum="repair",
                 repair_soar_tasks=48, repair_sft_rows=512)
    arms = planned_arms(cfg)
    assert arms == ["frozen", "frozen_matched", "sft", "repair_sft", "trained"]
    gens = planned_training_generations(cfg, arms)
    assert grpo_generations(cfg) == 5 * 8 * 3
    # trained starts from repair_sft, so its compute holds the warm-start's 48 relabeling refinements too
    assert gens == {"sft": 0, "repair_sft": 48, "trained": 48 + 120}
    assert matched_budgets(cfg, arms)["trained"] == 4 + math.ceil(168 / 16)
    assert planned_arms(cfg.replace(curriculum="none")) == ["frozen", "frozen_matched", "sft", "trained"]
    # the pass-rate filter: 4 answers to each of 2 x 16 prompts from the trained arm's start, before its GRPO
    filtered = cfg.replace(grpo_prefilter_samples=4)
    assert planned_training_generations(filtered, arms) == {"sft": 0, "repair_sft": 48, "trained": 48 + 128 + 120}
    assert planned_training_generations(filtered.replace(curriculum="none"), arms)["trained"] == 120


def test_a_matched_budget_over_the_cap_is_one_line_naming_the_cap():
    cfg = cfg_of(trace_max_iterations=4, trace_tasks=2, train_count=64, grpo_max_steps=0, grpo_epochs=1,
                 matched_max_iterations=20, frozen_matched_arm=1)
    with pytest.raises(ConfigError) as err:
        check_budgets(cfg, planned_arms(cfg))
    message = str(err.value)
    assert message.startswith("W8_MATCHED_MAX_ITERATIONS=20:") and "trained" in message and "\n" not in message


def test_a_token_budget_whose_refinement_prompt_overflows_the_context_is_refused():
    task = make_task("heldout", 7, 24)
    check_refine_fits(cfg_of(trace_max_iterations=4, operator_max_new_tokens=448), [task])
    with pytest.raises(ConfigError, match=r"^W8_OPERATOR_MAX_NEW_TOKENS=3900: a refinement prompt .* 8192-token"):
        check_refine_fits(cfg_of(trace_max_iterations=4, operator_max_new_tokens=3900), [task])
    check_refine_fits(cfg_of(trace_max_iterations=0, operator_max_new_tokens=3900), [task])  # no refinement asked


def test_the_run_refuses_a_bad_budget_before_any_model_loads(tmp_path):
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "W8_RUNS_ROOT": str(tmp_path), "W8_RUN_ID": "cap",
           "W8_TRACE_MAX_ITERATIONS": "4", "W8_TRAIN_COUNT": "64", "W8_MATCHED_MAX_ITERATIONS": "8",
           "W8_FROZEN_MATCHED_ARM": "1"}
    out = subprocess.run([sys.executable, "-m", "harness.pipeline", "init", str(tmp_path / "results")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [line for line in out.stderr.strip().splitlines()
                                               if line.startswith("error: W8_MATCHED_MAX_ITERATIONS=8")]
    assert not (tmp_path / "cap").exists()


# ---- curves, refinements, ledger -----------------------------------------------------------------

def tasks(golds, budget=3, **kw):
    return [trace(g, max_iterations=budget, task_id=f"heldout/p{i}/1/seed{i}/n24", **kw) for i, g in enumerate(golds)]


def test_solved_by_budget_counts_tasks_solved_by_node_k():
    curve = budget_curve(tasks([0, 2, None, 1]), resamples=500)
    assert curve["k"] == [0, 1, 2, 3] and curve["solved"] == [0.25, 0.5, 0.75, 0.75] and curve["n_tasks"] == 4
    assert all(lo <= m <= hi for lo, m, hi in zip(curve["lo"], curve["solved"], curve["hi"]))
    assert curve["lo"][0] == 0.0 and curve["hi"][2] == 1.0


def test_seeds_are_averaged_inside_their_task():
    two_seeds = [trace(0, max_iterations=2, task_id="heldout/a/1/s/n24", seed=0),
                 trace(None, max_iterations=2, task_id="heldout/a/1/s/n24", seed=1)]
    assert solved_matrix(two_seeds) == [[0.5, 0.5, 0.5]]


def test_a_band_made_of_identical_tasks_has_no_width():
    curve = budget_curve(tasks([1, 1, 1]), resamples=200)
    assert curve["lo"] == curve["solved"] == curve["hi"] == [0.0, 1.0, 1.0, 1.0]


def test_refinement_statistics_of_a_known_search():
    t = trace(None, max_iterations=3)
    rewards = [0.5, 0.7, 0.6, 0.6]
    for node, r in zip(t["nodes"], rewards):
        node["reward"] = r
    t["nodes"][2]["parent"] = 1  # 0 -> 1 better, 1 -> 2 worse, 1 -> 3 worse and identical code, invalid
    t["nodes"][3]["parent"] = 1
    t["nodes"][3]["code"] = t["nodes"][1]["code"] + "\n\n# same program\n"
    t["nodes"][3]["valid"] = False
    stats = refinement_stats([t])
    assert stats["refinements"] == 3 and stats["better_share"] == round(1 / 3, 4)
    assert stats["identical_share"] == round(1 / 3, 4) and stats["valid_share"] == round(2 / 3, 4)
    assert stats["mean_reward_change"] == round((0.2 - 0.1 - 0.1) / 3, 4)
    assert refinement_stats([trace(0)])["refinements"] == 0


def test_the_search_ledger_counts_nodes_tokens_and_held_out_checks():
    book = search_ledger(tasks([0, None], budget=2))
    assert book["search_generations"] == 1 + 3
    assert book["completion_tokens"] == 50 * 4 and book["prompt_tokens"] == 100 * 4
    assert book["sandbox_evaluations"] == 4 + 1  # the gold node's held-out check


def test_first_gold_where_both_solved_pairs_only_tasks_both_arms_solved():
    a, b = tasks([0, 2, None, 1]), tasks([1, None, 3, 1])
    assert first_gold_both(a, b) == ([0.0, 1.0], [1.0, 1.0])


def test_frozen_matched_compares_in_budget_free_terms_only():
    frozen, matched, trained = tasks([None, None, 2, None]), tasks([5, None, 2, 4], budget=6), tasks([0, 1, 0, None])
    r = compare_arms({"frozen": frozen, "frozen_matched": matched, "trained": trained}, resamples=200)
    by = {(c["a"], c["b"]): c for c in r["comparisons"]}
    equal = by[("trained", "frozen_matched")]
    assert "steps" not in equal["measures"] and equal["budget_b"] == 6
    assert equal["measures"]["solved"]["mean_a"] == 0.75 and equal["measures"]["solved"]["mean_b"] == 0.75
    assert equal["first_gold_where_both_solved"]["n_tasks"] == 2
    assert "steps" in by[("trained", "frozen")]["measures"]
    assert r["budget_curves"]["frozen_matched"]["budget"] == 6 and r["arms"]["frozen_matched"]["budget"] == 6
    assert r["budget_curves"]["trained"]["solved"] == [0.5, 0.75, 0.75, 0.75]


def test_arms_other_than_frozen_matched_must_share_the_budget():
    from harness.compare import CompareError

    with pytest.raises(CompareError, match="max_iterations"):
        compare_arms({"frozen": tasks([0, 1]), "trained": tasks([0, 1], budget=5)}, resamples=50)
