"""Strict compare of frozen vs trained traces, on crafted traces; and the trace plot."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.compare import CompareError, compare_pair, compare_traces, plot_traces, sign_test, steps_or_budget

REPO = Path(__file__).resolve().parents[1]


def trace(gold_at=None, n_nodes=None, task_id="heldout/click-tab-2/1/seed7/n24", examples_hash="43ce9b59d98f640a",
          max_iterations=16, threshold=0.9, n_legal=12, n_illegal=12, finished=True):
    """A finished trace whose first gold node is `gold_at` (None: budget used up)."""
    if n_nodes is None:
        n_nodes = gold_at + 1 if gold_at is not None else max_iterations + 1
    nodes = []
    for i in range(n_nodes):
        gold = gold_at is not None and i >= gold_at
        ba = 0.95 if gold else 0.5 + 0.02 * i
        nodes.append({"index": i, "parent": None if i == 0 else i - 1, "reward": 0.8 * ba + 0.2, "gold": gold,
                      "balanced_accuracy": ba, "valid": True})
    return {"task": {"task_id": task_id, "split": "heldout", "seed": 7, "obs_id": "click-tab-2/1",
                     "examples_per_obs": n_legal + n_illegal, "examples_hash": examples_hash,
                     "n_legal": n_legal, "n_illegal": n_illegal},
            "knobs": {"gold_threshold": threshold, "max_iterations": max_iterations, "reward_recall_weight": 0.2,
                      "search_c": 20.0, "search_seed": 0},
            "operator": {"name": "hf", "model": "x"}, "finished": finished, "n_nodes": n_nodes,
            "tokens": {"total": 100 * n_nodes}, "nodes": nodes}


@pytest.mark.parametrize("frozen_gold,trained_gold,f_steps,t_steps,shrunk", [
    (5, 3, 5, 3, True),
    (5, 5, 5, 5, False),  # equal is not success
    (3, 5, 3, 5, False),
    (None, None, 17, 17, False),  # neither reached: both budget + 1, not shrunk
    (None, 16, 17, 16, True),  # reached at the last node beats not reached
    (0, None, 0, 17, False),
    (1, 0, 1, 0, True),
])
def test_strict_steps(frozen_gold, trained_gold, f_steps, t_steps, shrunk):
    r = compare_pair(trace(frozen_gold), trace(trained_gold))
    assert (r["frozen_steps"], r["trained_steps"], r["shrunk"]) == (f_steps, t_steps, shrunk)
    assert r["delta"] == t_steps - f_steps
    assert r["trained_reached"] is (trained_gold is not None)


def test_not_reached_counts_as_budget_plus_one():
    assert steps_or_budget(trace(None, max_iterations=4)) == 5
    assert steps_or_budget(trace(2, max_iterations=4)) == 2


@pytest.mark.parametrize("change,field", [
    ({"examples_hash": "ffffffffffffffff"}, "task.examples_hash"),
    ({"task_id": "heldout/click-tab-2/1/seed8/n24"}, "task.task_id"),
    ({"max_iterations": 8}, "knobs.max_iterations"),
    ({"threshold": 0.95}, "knobs.gold_threshold"),
])
def test_different_tasks_or_budgets_are_refused(change, field):
    with pytest.raises(CompareError, match=field.replace(".", r"\.")):
        compare_pair(trace(3), trace(2, **change))


def test_unbalanced_task_is_refused():
    with pytest.raises(CompareError, match="unbalanced"):
        compare_pair(trace(3, n_legal=20, n_illegal=4), trace(2, n_legal=20, n_illegal=4))


def test_unfinished_trace_is_refused():
    with pytest.raises(CompareError, match="unfinished"):
        compare_pair(trace(None, n_nodes=4, finished=False), trace(2))


def test_multi_task_mean_and_sign_test():
    ids = [f"heldout/p/{k}/seed{k}/n24" for k in range(5)]
    frozen = [trace(g, task_id=i) for g, i in zip([10, None, 4, 6, 2], ids)]
    trained = [trace(g, task_id=i) for g, i in zip([3, 12, 4, 2, 5], ids)]
    r = compare_traces(frozen, trained)
    assert r["n_tasks"] == 5
    assert r["mean_frozen_steps"] == pytest.approx((10 + 17 + 4 + 6 + 2) / 5)
    assert r["mean_trained_steps"] == pytest.approx((3 + 12 + 4 + 2 + 5) / 5)
    assert (r["shrunk_tasks"], r["tied_tasks"], r["grown_tasks"]) == (3, 1, 1)
    assert r["sign_test_p"] == pytest.approx(sign_test(3, 1)) == pytest.approx(0.625)
    assert r["shrunk"] is True
    assert [t["task_id"] for t in r["tasks"]] == ids


def test_multi_task_equal_means_is_not_shrunk():
    ids = ["heldout/a/1/seed1/n24", "heldout/b/1/seed2/n24"]
    r = compare_traces([trace(3, task_id=ids[0]), trace(5, task_id=ids[1])],
                       [trace(5, task_id=ids[0]), trace(3, task_id=ids[1])])
    assert r["mean_delta"] == 0 and r["shrunk"] is False and r["sign_test_p"] == 1.0


def test_multi_task_refuses_mismatched_pairs_and_counts():
    with pytest.raises(CompareError, match="task_id"):
        compare_traces([trace(3, task_id="heldout/a/1/seed1/n24")], [trace(3, task_id="heldout/b/1/seed1/n24")])
    with pytest.raises(CompareError, match="same non-zero number"):
        compare_traces([trace(3)], [])
    with pytest.raises(CompareError, match="listed twice"):
        compare_traces([trace(3), trace(4)], [trace(2), trace(2)])


@pytest.mark.parametrize("wins,losses,p", [(0, 0, 1.0), (5, 0, 0.0625), (0, 5, 0.0625), (3, 1, 0.625),
                                           (10, 0, 2 / 1024), (4, 4, 1.0)])
def test_sign_test(wins, losses, p):
    assert sign_test(wins, losses) == pytest.approx(p)


def test_plot_writes_png(tmp_path):
    path = plot_traces([trace(None), trace(4, task_id="heldout/x/1/seed1/n24")],
                       [trace(6), trace(2, task_id="heldout/x/1/seed1/n24")], tmp_path / "trace.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_cli_writes_compare_and_plot(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps(trace(7)))
    (tmp_path / "t.json").write_text(json.dumps(trace(3)))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "harness.compare", "--frozen", str(tmp_path / "f.json"),
                          "--trained", str(tmp_path / "t.json"), "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    result = json.loads((out / "trace_compare.json").read_text())
    assert result["tasks"][0]["frozen_steps"] == 7 and result["shrunk"] is True
    assert (out / "trace.png").stat().st_size > 0


def test_cli_refuses_different_tasks_in_one_line(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps(trace(7)))
    (tmp_path / "t.json").write_text(json.dumps(trace(3, examples_hash="0000000000000000")))
    run = subprocess.run([sys.executable, "-m", "harness.compare", "--frozen", str(tmp_path / "f.json"),
                          "--trained", str(tmp_path / "t.json"), "--out", str(tmp_path / "out")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "examples_hash" in run.stderr
    assert not (tmp_path / "out" / "trace_compare.json").exists()
