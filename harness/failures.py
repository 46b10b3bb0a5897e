"""Which failing examples a refinement is shown, and how a trace records them.

    from harness.failures import failures_to_show, failure_record, failure_from_record
    shown = failures_to_show(score, task.examples, attempt=0)   # at most MAX_FAILURES, varied kinds
    node_failures = [failure_record(f) for f in failure_candidates(score, task.examples)]

A search node keeps every candidate failure as a small record (index, action, expected, got,
harness error); the refinement prompt is rebuilt from the records and the task's examples, so a
resumed search shows the same failures it would have shown uninterrupted.
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.dataset import Example
from harness.prompts import MAX_FAILURES
from harness.rewards import Failure, Score


def select_failures(failures: Sequence[Failure], k: int = MAX_FAILURES, attempt: int = 0) -> list[Failure]:
    """Up to k failures, round-robin over (expected label, action type) groups in first-seen order.

    So five shown failures cover several kinds of mistake rather than five of one kind.
    `attempt` (earlier refinements of the same node) slides the window along that order, so a
    node refined again shows other failures when it has more than k.
    """
    groups: dict[tuple[bool, str], list[Failure]] = {}
    for f in failures:
        groups.setdefault((f.expected, f.action_type), []).append(f)
    order: list[Failure] = []
    while any(groups.values()):
        for group in groups.values():
            if group:
                order.append(group.pop(0))
    if len(order) > k:
        start = (attempt * k) % len(order)
        order = (order[start:] + order[:start])[:k]
    return sorted(order, key=lambda f: f.index)


def failure_candidates(score: Score, examples: Sequence[Example]) -> list[Failure]:
    """What a refinement may be shown: the wrong examples, or for an invalid program every example + the reason."""
    if score.valid:
        return list(score.failures)
    return [Failure(i, e.state, e.action, e.legal, None, e.error, score.reason, e.action_type, e.dom_changed)
            for i, e in enumerate(examples)]


def failures_to_show(score: Score, examples: Sequence[Example], attempt: int = 0) -> list[Failure]:
    """The failures a refinement sees (at most MAX_FAILURES, see select_failures)."""
    return select_failures(failure_candidates(score, examples), attempt=attempt)


def failure_record(f: Failure) -> dict[str, Any]:
    return {"index": f.index, "action": f.action, "expected": f.expected, "got": f.got,
            "harness_error": f.harness_error}


def failure_from_record(record: dict[str, Any], examples: Sequence[Example]) -> Failure:
    e = examples[record["index"]]
    return Failure(record["index"], e.state, e.action, e.legal, record["got"], e.error, record["harness_error"],
                   e.action_type, e.dom_changed)
