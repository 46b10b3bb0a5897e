"""Dynamic sampling for TRL's GRPOTrainer, as DAPO does: a group whose rewards are all equal is dropped and
replaced by a new group, so that a step trains on a group with signal.

    sampling = DynamicSampling(rows, tries=4, seed=0)
    Trainer = with_dynamic_sampling(GRPOTrainer, sampling, lambda: reward.last)   # reward: the reward function
    ...                                   # after each step: sampling.take_step() -> the step's groups

A GRPO group's advantages are its rewards minus their mean: when every sample of a group scored the same,
every advantage is 0 and the step takes no gradient from the reward. The trainer's generation step
(`_generate_and_score_completions`, one prompt x its group on this CPU: batch 1 x accumulation = group) is
asked again with another prompt drawn from the training rows (seeded) while the group is flat, at most
`tries` times; the last group is kept even when flat (its step then has no signal, and the record says so).
Every group sampled, kept or dropped, is recorded with its rewards, so a step's log shows the share of flat
groups before the filter (what the sampled prompts give) and whether the kept group had signal (after it).
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

FLAT = 1e-9  # rewards closer than this count as equal


def flat(rewards: Sequence[float]) -> bool:
    """All rewards of a group equal (no GRPO signal); an empty group is flat."""
    return not rewards or max(rewards) - min(rewards) <= FLAT


class DynamicSampling:
    """The replacement prompts and the record of every group a step sampled."""

    def __init__(self, rows: Sequence[dict[str, Any]], tries: int, seed: int):
        if tries < 0:
            raise ValueError(f"dynamic sampling: tries {tries}: expected 0 or more")
        self.rows, self.tries = list(rows), tries
        self.rng = random.Random(f"dynamic-sampling:{seed}")
        self.groups: list[dict[str, Any]] = []

    def replacement(self, size: int) -> list[dict[str, Any]]:
        """A new group's inputs: one training row drawn at random, repeated `size` times."""
        row = self.rng.choice(self.rows)
        return [dict(row) for _ in range(size)]

    def record(self, inputs: Sequence[dict[str, Any]], rewards: Sequence[float], kept: bool) -> None:
        info = (inputs[0].get("extra_info") or {}) if inputs else {}
        self.groups.append({"task_id": info.get("task_id"), "rewards": [round(float(r), 4) for r in rewards],
                            "flat": flat(rewards), "kept": kept})

    def take_step(self) -> dict[str, Any]:
        """The groups sampled since the last call, as one step's log fields (and forget them)."""
        groups, self.groups = self.groups, []
        sampled = len(groups)
        return {"groups_sampled": sampled, "groups_dropped": sum(not g["kept"] for g in groups),
                "zero_variance_share_sampled": round(sum(g["flat"] for g in groups) / sampled, 4) if sampled else None,
                "kept_group_flat": any(g["flat"] and g["kept"] for g in groups), "groups": groups}


def with_dynamic_sampling(trainer_cls: type, sampling: DynamicSampling, last_rewards: Callable[[], list[float]]):
    """A subclass of TRL's GRPOTrainer (trainer_cls) whose generation step replaces flat groups (module doc).
    last_rewards() returns the rewards the reward function gave in its latest call (the group just scored)."""

    class DynamicGRPOTrainer(trainer_cls):
        def _generate_and_score_completions(self, inputs):
            if not self.model.training:  # evaluation: as TRL does it
                return super()._generate_and_score_completions(inputs)
            for attempt in range(sampling.tries + 1):
                out = super()._generate_and_score_completions(inputs)
                rewards = list(last_rewards())
                keep = not flat(rewards) or attempt == sampling.tries
                sampling.record(inputs, rewards, keep)
                if keep:
                    return out
                inputs = sampling.replacement(len(inputs))
            return out  # not reached: the last attempt is always kept

    DynamicGRPOTrainer.__name__ = f"Dynamic{trainer_cls.__name__}"
    return DynamicGRPOTrainer
