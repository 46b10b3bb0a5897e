"""The committed snapshot and the task sampler: balance, determinism, splits, clear refusals."""

import gzip

import pytest

from harness.dataset import (DatasetError, MIN_CLASS_SHARE, examples_of, heldout_examples, load_snapshot,
                             make_task, split_of)


@pytest.fixture(scope="module")
def records():
    return load_snapshot()


def test_snapshot_meets_the_benchmark_floor(records):
    pages = {r["page"] for r in records}
    assert len(records) >= 300 and len(pages) >= 60
    assert all(len(r["actions"]) >= 32 for r in records)
    assert sum(len(r["actions"]) for r in records) >= 10_000
    legal = sum(a["legal"] for r in records for a in r["actions"])
    total = sum(len(r["actions"]) for r in records)
    assert 0.35 <= legal / total <= 0.65


def test_splits_are_by_page_and_disjoint(records):
    train = {r["page"] for r in records if r["split"] == "train"}
    heldout = {r["page"] for r in records if r["split"] == "heldout"}
    assert train and heldout and not train & heldout
    assert all(r["split"] == split_of(r["page"]) for r in records)


@pytest.mark.parametrize("split", ["train", "heldout"])
@pytest.mark.parametrize("n", [8, 24, 32])
def test_tasks_are_balanced(split, n):
    for seed in range(25):
        task = make_task(split, seed, n)
        legal = sum(e.legal for e in task.examples)
        assert len(task.examples) == n
        assert min(legal, n - legal) >= MIN_CLASS_SHARE * n
        assert task.split == split and all(e.state == task.state for e in task.examples)


def test_tasks_are_deterministic_for_a_seed():
    a, b = make_task("heldout", 7, 24), make_task("heldout", 7, 24)
    assert a == b and a.examples_hash == b.examples_hash
    others = {make_task("heldout", s, 24).examples_hash for s in range(8)}
    assert len(others) > 1


def test_task_examples_are_distinct_actions():
    task = make_task("train", 3, 32)
    assert len({e.action for e in task.examples}) == len(task.examples)


def test_heldout_check_examples_exclude_the_task_observation():
    task = make_task("heldout", 7, 24)
    others = heldout_examples(task.obs_id)
    assert others and all(e.obs_id != task.obs_id for e in others)


@pytest.mark.parametrize("split, n, message", [
    ("validation", 24, "unknown split"),
    ("heldout", 0, "positive integer"),
    ("heldout", -3, "positive integer"),
    ("heldout", 10_000, "no heldout observation can give 10000 balanced examples"),
])
def test_impossible_requests_are_refused(split, n, message):
    with pytest.raises(DatasetError, match=message):
        make_task(split, 1, n)


def test_missing_snapshot_is_named(tmp_path):
    with pytest.raises(DatasetError, match="snapshot not found"):
        load_snapshot(tmp_path / "nope.jsonl.gz")


def test_corrupt_snapshot_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b this is not gzip")
    with pytest.raises(DatasetError, match="snapshot is corrupt"):
        load_snapshot(bad)
    half = tmp_path / "half.jsonl.gz"
    with gzip.open(half, "wt") as f:
        f.write('{"obs_id": "x", "page"')
    with pytest.raises(DatasetError, match="snapshot is corrupt"):
        load_snapshot(half)


def test_examples_carry_browser_errors(records):
    examples = examples_of(records[0])
    assert all((e.error == "") == e.legal for e in examples)
