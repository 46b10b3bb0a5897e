"""The harness-legality benchmark: snapshot loading and task sampling.

    from harness.dataset import load_snapshot, make_task
    task = make_task(split="heldout", seed=7, examples_per_obs=24)
    task.state, task.examples[0].action, task.examples[0].legal

A task is one observation (the flattened AXTree text a BrowserGym agent sees)
plus `examples_per_obs` actions on it, labeled by executing each in Chromium,
drawn deterministically from `seed` and balanced (each class >= 40%).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any


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
