"""The strict compare of arms: pairing by key, every refused mismatch, recomputed gold, statistics over
tasks (seeds averaged inside a task; sign test, Wilcoxon and its interval, no interval when every
difference is equal, smallest detectable effect), headroom warnings, curves; constructed traces whose
answers are known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.compare import CompareError, compare_arms, plot_arms, solved_by_node, solved_by_tokens, steps_or_budget
from harness.search import node_seed
from harness.stats import paired_measure, sign_test

REPO = Path(__file__).resolve().parents[1]


def trace(gold_at=None, n_nodes=None, task_id="heldout/click-tab-2/1/seed7/n24", examples_hash="43ce9b59d98f640a",
          max_iterations=16, threshold=0.9, n_legal=12, n_illegal=12, finished=True, seed=0, **changes):
    """A finished trace whose first gold node is `gold_at` (None: budget used up)."""
    if n_nodes is None:
        n_nodes = gold_at + 1 if gold_at is not None else max_iterations + 1
    nodes = []
    for i in range(n_nodes):
        gold = gold_at is not None and i >= gold_at
        ba = 0.95 if gold else 0.5 + 0.02 * i
        nodes.append({"index": i, "parent": None if i == 0 else i - 1, "reward": 0.8 * ba + 0.2, "gold": gold,
                      "balanced_accuracy": ba, "valid": True, "code": f"def is_legal_action(s, a):\n    return {i}",
                      "heldout_accuracy": 0.9 if gold else None, "prompt_tokens": 100, "completion_tokens": 50})
    knobs = {"gold_threshold": threshold, "max_iterations": max_iterations, "reward_recall_weight": 0.2,
             "search_c": 20.0, "search_seed": seed, "sandbox_timeout_s": 2.0}
    operator = {"name": "hf", "model": "x", "max_new_tokens": 448, "temperature": 0.5}
    for key, value in changes.items():
        (knobs if key in knobs else operator)[key] = value
    return {"task": {"task_id": task_id, "split": "heldout", "seed": 7, "obs_id": "click-tab-2/1",
                     "examples_per_obs": n_legal + n_illegal, "examples_hash": examples_hash,
                     "n_legal": n_legal, "n_illegal": n_illegal},
            "knobs": knobs, "operator": operator, "finished": finished, "n_nodes": n_nodes,
            "tokens": {"total": 150 * n_nodes}, "nodes": nodes}


def arm(golds, **kw):
    """Traces of one arm over tasks t0.. with seeds 0/1 alternating."""
    return [trace(g, task_id=f"heldout/p{i // 2}/1/seed{i // 2}/n24", seed=i % 2, **kw) for i, g in enumerate(golds)]


def test_not_reached_counts_as_budget_plus_one():
    assert steps_or_budget(trace(None, max_iterations=4)) == 5
    assert steps_or_budget(trace(2, max_iterations=4)) == 2


def test_gold_is_recomputed_from_balanced_accuracy_never_trusted_from_the_file():
    lying = trace(None, max_iterations=4)
    lying["nodes"][1]["gold"] = True  # says gold, balanced accuracy 0.52
    assert steps_or_budget(lying) == 5
    hiding = trace(None, max_iterations=4)
    hiding["nodes"][3]["balanced_accuracy"] = 0.93  # gold by the threshold, flagged False
    assert steps_or_budget(hiding) == 3
    invalid = trace(None, max_iterations=4)
    invalid["nodes"][2].update(balanced_accuracy=0.99, valid=False)
    assert steps_or_budget(invalid) == 5


def test_arms_compare_over_tasks_with_seeds_averaged_inside_a_task():
    frozen = arm([None, None, 4, 6, 2, None])  # tasks p0 (17, 17), p1 (4, 6), p2 (2, 17)
    trained = arm([3, 12, 4, 2, 5, 0])          # tasks p0 (3, 12), p1 (4, 2), p2 (5, 0)
    r = compare_arms({"frozen": frozen, "trained": trained}, resamples=2000)
    [c] = r["comparisons"]
    steps = c["measures"]["steps"]
    assert (c["a"], c["b"], c["n_tasks"], c["n_searches"], r["unit"]) == ("trained", "frozen", 3, 6, "task")
    assert steps["mean_a"] == pytest.approx((7.5 + 3 + 2.5) / 3, abs=1e-4)
    assert steps["mean_b"] == pytest.approx((17 + 5 + 9.5) / 3, abs=1e-4)
    assert (steps["better_tasks"], steps["tied_tasks"], steps["worse_tasks"]) == (3, 0, 0)
    assert steps["sign_test_p"] == pytest.approx(0.25)  # 3 tasks, not 6 searches (that would be 0.031)
    assert c["shrunk"] is True and r["shrunk"] is True
    assert steps["ci95"] is None and "over 3 tasks the signed-rank test rejects no shift" in steps["in_words"]
    solved = c["measures"]["solved"]
    assert solved["mean_b"] == pytest.approx((0 + 1 + 0.5) / 3, abs=1e-4) and solved["mean_a"] == 1.0
    node0 = c["measures"]["node0_gold"]
    assert node0["mean_a"] == pytest.approx((0 + 0 + 0.5) / 3, abs=1e-4) and node0["mean_b"] == 0.0
    assert r["arms"]["frozen"]["n_tasks"] == 3 and r["arms"]["trained"]["solved_share"] == 1.0
    assert r["arms"]["trained"]["gold_heldout_accuracy_mean"] == 0.9


def test_three_tasks_two_seeds_with_equal_differences_get_no_interval_and_task_level_p():
    # the committed result's shape: 3 tasks x 2 seeds, every search trained 0 vs frozen 3 (budget 2)
    r = compare_arms({"frozen": arm([None] * 6, max_iterations=2), "trained": arm([0] * 6, max_iterations=2)},
                     resamples=500)
    steps = r["comparisons"][0]["measures"]["steps"]
    assert steps["all_differences_equal"] is True and steps["ci95"] is None and steps["ci_excludes_zero"] is False
    assert "every one of the 3 tasks differs by exactly -3" in steps["in_words"]
    assert steps["sign_test_p"] == pytest.approx(0.25) and steps["wilcoxon_p"] == pytest.approx(0.25)


def test_equal_means_are_not_shrunk():
    r = compare_arms({"frozen": arm([3, 5, 4, 4]), "trained": arm([5, 3, 3, 5])}, resamples=500)
    assert r["comparisons"][0]["measures"]["steps"]["mean_diff"] == 0 and r["shrunk"] is False
    assert "no measurable difference in steps to gold" in r["comparisons"][0]["verdict"]


def test_the_comparisons_of_four_arms_and_none_needs_the_frozen_arm():
    r = compare_arms({"frozen": arm([None, None]), "sft": arm([0, 1]), "trained": arm([0, 0]),
                      "grpo_only": arm([None, 2])}, resamples=200)
    assert [(c["a"], c["b"]) for c in r["comparisons"]] == [("trained", "frozen"), ("trained", "sft"),
                                                             ("sft", "frozen"), ("grpo_only", "frozen"),
                                                             ("trained", "grpo_only")]
    only = compare_arms({"sft": arm([0, 1]), "trained": arm([0, 0])}, resamples=200)
    assert [(c["a"], c["b"]) for c in only["comparisons"]] == [("trained", "sft")] and only["shrunk"] is False
    with pytest.raises(CompareError, match="two arms"):
        compare_arms({"trained": arm([0, 0])})


def test_pairs_are_matched_by_key_not_by_position():
    frozen = arm([None, None, 1, 1])
    trained = list(reversed(arm([0, 0, 1, 1])))  # same pairs, other order
    r = compare_arms({"frozen": frozen, "trained": trained}, resamples=200)
    c = r["comparisons"][0]
    by_task = {t["task_id"]: t for t in c["tasks"]}
    assert by_task["heldout/p0/1/seed0/n24"]["trained_steps"] == 0 and by_task["heldout/p0/1/seed0/n24"]["frozen_steps"] == 17
    assert by_task["heldout/p1/1/seed1/n24"]["trained_steps"] == 1 == by_task["heldout/p1/1/seed1/n24"]["frozen_steps"]


def test_programs_that_differ_at_node_0_are_counted_by_task():
    sft = arm([0, 0, 0, 0])
    trained = arm([0, 0, 0, 0])
    trained[3]["nodes"][0]["code"] = "def is_legal_action(s, a):\n    return True"
    c = compare_arms({"sft": sft, "trained": trained}, resamples=100)["comparisons"][0]
    assert c["programs_differ_at_node0"] == {"tasks": 1, "searches": 1, "of_tasks": 2, "of_searches": 4}


def test_no_grpo_effect_is_reported_without_headroom_or_without_variance():
    r = compare_arms({"sft": arm([0, 0]), "trained": arm([0, 0])}, resamples=100)
    assert r["grpo_effect_readable"] is False and "gold at node 0 on every task (1/1)" in r["warnings"][0]
    r = compare_arms({"sft": arm([None, 0]), "trained": arm([0, 1])}, resamples=100,
                     grpo_zero_variance={"trained": 1.0})
    assert r["grpo_effect_readable"] is False and "zero reward variance" in r["warnings"][0]
    r = compare_arms({"sft": arm([None, 0]), "trained": arm([0, 1])}, resamples=100,
                     grpo_zero_variance={"trained": 0.25})
    assert r["grpo_effect_readable"] is True and r["warnings"] == []


def test_paired_measure_tests_on_constructed_tasks():
    m = paired_measure([0, 1, 2, 3, 4, 5], [1, 3, 5, 7, 9, 11], lower_is_better=True)
    assert m["wilcoxon_p"] == pytest.approx(2 / 64) and m["wilcoxon_method"] == "exact"  # all 6 better, no ties
    assert m["sign_test_p"] == pytest.approx(2 / 64) and m["better_tasks"] == 6
    # mde80 = (1.96 + 0.8416) * sd / sqrt(n): differences -1..-6 have sd 1.8708
    assert m["mde80"] == pytest.approx(2.8016 * 1.8708 / 6 ** 0.5, rel=1e-3)
    higher = paired_measure([1.0, 1.0, 0.0], [0.0, 0.0, 0.0], lower_is_better=False)
    assert (higher["better_tasks"], higher["worse_tasks"], higher["tied_tasks"]) == (2, 0, 1)
    flat = paired_measure([1.0, 1.0], [1.0, 1.0], lower_is_better=False)
    assert flat["wilcoxon_p"] == 1.0 and flat["mde80"] is None and flat["ci95"] is None


@pytest.mark.parametrize("change, field", [
    ({"examples_hash": "ffffffffffffffff"}, "task.task_id"),
    ({"max_iterations": 8}, "knobs.max_iterations"),
    ({"threshold": 0.95}, "knobs.gold_threshold"),
    ({"search_c": 5.0}, "knobs.search_c"),
    ({"reward_recall_weight": 0.5}, "knobs.reward_recall_weight"),
    ({"sandbox_timeout_s": 1.0}, "knobs.sandbox_timeout_s"),
    ({"temperature": 0.0}, "operator.temperature"),
    ({"max_new_tokens": 2048}, "operator.max_new_tokens"),
    ({"name": "vllm"}, "operator.name"),
    ({"dtype": "float32"}, "operator.dtype"),
    ({"top_p": 0.9}, "operator.top_p"),
    ({"top_k": 50}, "operator.top_k"),
])
def test_every_mismatched_field_is_refused_by_name(change, field):
    with pytest.raises(CompareError, match=field.replace(".", r"\.")):
        compare_arms({"frozen": arm([3, 4]), "trained": arm([2, 2], **change)})


def test_different_pairs_unbalanced_or_unfinished_traces_are_refused():
    with pytest.raises(CompareError, match="do not search the same"):
        compare_arms({"frozen": arm([3, 4]), "trained": arm([3])})
    with pytest.raises(CompareError, match="unbalanced"):
        compare_arms({"frozen": arm([3], n_legal=20, n_illegal=4), "trained": arm([2], n_legal=20, n_illegal=4)})
    with pytest.raises(CompareError, match="unfinished"):
        compare_arms({"frozen": arm([None], n_nodes=4, finished=False), "trained": arm([2])})
    with pytest.raises(CompareError, match="listed twice"):
        compare_arms({"frozen": [trace(3), trace(4)], "trained": [trace(2), trace(2)]})


@pytest.mark.parametrize("wins,losses,p", [(0, 0, 1.0), (5, 0, 0.0625), (0, 5, 0.0625), (3, 1, 0.625),
                                           (10, 0, 2 / 1024), (4, 4, 1.0)])
def test_sign_test(wins, losses, p):
    assert sign_test(wins, losses) == pytest.approx(p)


def test_similarity_to_the_sft_target_marks_a_copied_program_at_node_0_and_at_gold():
    target = "def is_legal_action(s, a):\n    return 0"
    r = compare_arms({"frozen": arm([None, None]), "trained": arm([0, 0])}, sft_target=target, resamples=100)
    assert r["arms"]["trained"]["gold_similarity_to_sft_target_mean"] == 1.0
    assert r["arms"]["trained"]["node0_similarity_to_sft_target_mean"] == 1.0
    assert r["arms"]["frozen"]["gold_similarity_to_sft_target_mean"] is None
    assert r["arms"]["frozen"]["node0_similarity_to_sft_target_mean"] == 1.0  # its node 0 is that text too


def test_sampling_seeds_mix_in_the_task():
    assert node_seed(0, 0, "heldout/a/1/seed7/n24") != node_seed(0, 0, "heldout/b/1/seed8/n24")
    assert node_seed(0, 3, "heldout/a/1/seed7/n24") == node_seed(0, 3, "heldout/a/1/seed7/n24")


def test_curves_and_plot(tmp_path):
    traces = arm([0, 2, None, 1], max_iterations=3)
    assert solved_by_node(traces) == [0.25, 0.5, 0.75, 0.75]
    # 50 completion tokens a node (prompts not counted, as in budget_curves_tokens.png): gold at node 0, 1, 2 costs
    # 50, 100, 150; the unsolved search spent 4 nodes = 200
    assert solved_by_tokens(traces) == ([0, 50, 100, 150, 200], [0.0, 0.25, 0.5, 0.75, 0.75])
    assert solved_by_tokens(arm([None, None], max_iterations=1)) == ([0, 100], [0.0, 0.0])
    path = plot_arms({"frozen": arm([None, 4]), "sft": arm([0, 1]), "trained": arm([0, 0])}, tmp_path / "trace.png",
                     resamples=100)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_cli_writes_compare_and_plot_or_refuses_in_one_line(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps({"role": "frozen", "traces": arm([7, None])}))
    (tmp_path / "t.json").write_text(json.dumps({"role": "trained", "traces": arm([3, 2])}))
    out = tmp_path / "out"
    ok = subprocess.run([sys.executable, "-m", "harness.compare", "--arm", f"frozen={tmp_path / 'f.json'}",
                         "--arm", f"trained={tmp_path / 't.json'}", "--out", str(out)],
                        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((out / "trace_compare.json").read_text())["shrunk"] is True and (out / "trace.png").exists()
    (tmp_path / "t2.json").write_text(json.dumps({"role": "trained", "traces": arm([3, 2], temperature=1.0)}))
    bad = subprocess.run([sys.executable, "-m", "harness.compare", "--arm", f"frozen={tmp_path / 'f.json'}",
                          "--arm", f"trained={tmp_path / 't2.json'}", "--out", str(tmp_path / "bad")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "operator.temperature" in bad.stderr
    assert not (tmp_path / "bad" / "trace_compare.json").exists()
