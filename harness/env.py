"""SkyRL-Gym environment `harness_legality`: one turn, the answer's harness scored on the row's task.

    from harness.env import HarnessLegalityEnv, register_env
    env = HarnessLegalityEnv(extras=row_without_prompt_and_env_class)
    out = env.step(model_text)     # out["reward"]: composite reward; out["metadata"]: its parts
    env.get_metrics()              # balanced_accuracy, effective_recall, valid, gold, reward

What the env gets: SkyRL's generator calls `skyrl_gym.make("harness_legality",
env_config=..., extras=row)` where `row` is the dataset row minus `prompt` and
`env_class`, so our own fields (the reward knobs among them) sit under
`extras["extra_info"]` and the labeled examples under `extras["reward_spec"]["ground_truth"]`
(a JSON string, see harness.training_data.ground_truth_json). Both nestings are unwrapped
here; reading them flat is the classic cause of all-zero GRPO rewards, so a row without
examples or knobs raises an error that names the row instead of scoring 0.

The reward is harness.rewards' composite reward of the program extracted from the answer
(harness.interface via rewards.score_with), run in harness.sandbox with the row's knobs
(recall weight, gold threshold, sandbox timeout and backend); this module only wires them
up. The local TRL trainer calls the same `step` as its reward function.

Two kinds of row (extra_info["prompt_kind"], harness.training_data): a zero-shot row is scored
as above; a refinement row (the prompt holds a parent program and its failures) gets
harness.rewards.refinement_reward: the child's composite reward, plus the row's
improvement_bonus when the child scores strictly above parent_reward, minus its
identical_penalty when the child is the parent's program unchanged. Its metrics add
`improved`, `identical`, `child_reward` (the plain composite reward) and `parent_reward`;
`refine` (1 or 0, on every row) gives SkyRL's environment/refine, the batch's share of
refinement samples. SkyRL averages each metric over the samples that report it, so
environment/improved is the share of refinements that beat their parent.
"""

from __future__ import annotations

import json
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from harness.rewards import RewardKnobs, refinement_reward, score_with
from harness.training_data import ENV_CLASS, PROMPT_KINDS, examples_from_ground_truth

ENTRY_POINT = "harness.env:HarnessLegalityEnv"


class EnvRowError(ValueError):
    """A dataset row the env cannot score; the message names the row and the missing field."""


def row_extra_info(extras: dict[str, Any]) -> dict[str, Any]:
    """Our per-row fields: extras["extra_info"] (SkyRL nests the row's column there), or a flat row."""
    info = extras.get("extra_info", extras)
    if isinstance(info, (str, bytes)):
        info = json.loads(info)
    return dict(info or {})


def row_examples(extras: dict[str, Any], row_id: str) -> list:
    """The labeled examples of a row from reward_spec.ground_truth; EnvRowError if there are none."""
    spec = extras.get("reward_spec")
    if isinstance(spec, (str, bytes)):
        spec = json.loads(spec)
    truth = (spec or {}).get("ground_truth")
    if not truth:
        raise EnvRowError(f"row {row_id}: reward_spec.ground_truth is missing (got extras keys "
                          f"{sorted(extras)}); the env would score every answer 0")
    try:
        examples = examples_from_ground_truth(truth)
    except (ValueError, KeyError, TypeError) as err:
        raise EnvRowError(f"row {row_id}: reward_spec.ground_truth is not the examples JSON ({err})") from None
    if not examples:
        raise EnvRowError(f"row {row_id}: reward_spec.ground_truth holds no labeled examples")
    return examples


def row_refinement(info: dict[str, Any], row_id: str) -> dict[str, Any] | None:
    """A refinement row's parent and reward terms; None for a zero-shot row (or one written before the kinds
    existed); EnvRowError naming the row and the field when a refinement row lacks one."""
    kind = info.get("prompt_kind") or "zero_shot"
    if kind not in PROMPT_KINDS:
        raise EnvRowError(f"row {row_id}: extra_info.prompt_kind={kind!r}, expected one of {', '.join(PROMPT_KINDS)}")
    if kind == "zero_shot":
        return None
    fields = ("parent_code", "parent_reward", "improvement_bonus", "identical_penalty")
    missing = [name for name in fields if name not in info]
    if missing:
        raise EnvRowError(f"row {row_id}: a refinement row whose extra_info lacks '{missing[0]}' (refine_row "
                          f"writes {', '.join(fields)})")
    numbers = {}
    for name in fields[1:]:
        value = info[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise EnvRowError(f"row {row_id}: refinement row with {name}={value!r}, expected a number")
        numbers[name] = float(value)
    parent = {"parent_code": str(info["parent_code"] or ""), "parent_reward": numbers["parent_reward"],
              "bonus": numbers["improvement_bonus"], "penalty": numbers["identical_penalty"]}
    if not 0.0 <= parent["parent_reward"] <= 1.0:
        raise EnvRowError(f"row {row_id}: refinement row with parent_reward {parent['parent_reward']} outside [0, 1]")
    return parent


class HarnessLegalityEnv(BaseTextEnv):
    """Single-turn env: reward = composite reward of the answer's is_legal_action on the row's examples
    (on a refinement row, shaped against the parent: module doc)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        self.info = row_extra_info(extras)
        self.row_id = str(self.info.get("task_id") or extras.get("uid") or "<row without task_id>")
        self.examples = row_examples(extras, self.row_id)
        try:
            self.knobs = RewardKnobs.from_row(self.info)
        except (KeyError, TypeError, ValueError) as err:
            raise EnvRowError(f"row {self.row_id}: extra_info lacks the reward knob {err} (rows carry "
                              "recall_weight, gold_threshold, timeout_s, sandbox: harness.training_data)") from None
        self.refinement = row_refinement(self.info, self.row_id)
        self.max_turns = 1
        self._metrics: dict[str, float] = {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        code, score, gold = score_with(action, self.examples, self.knobs)
        # sandbox_failed: the sandbox, not the program, failed (the GRPO guard stops a run on it);
        # reason is text: SkyRL's aggregation averages the numbers and drops it, the guard reads it.
        self._metrics = {"reward": score.reward, "balanced_accuracy": score.balanced_accuracy,
                         "effective_recall": score.effective_recall, "valid": float(score.valid),
                         "gold": float(gold), "sandbox_failed": float(score.infra), "score_wall_s": score.wall_s,
                         "reason": score.reason, "refine": float(self.refinement is not None)}
        reward = float(score.reward)
        if self.refinement is not None:
            r = self.refinement
            shaped = refinement_reward(score.reward, r["parent_reward"], code, r["parent_code"], r["bonus"],
                                       r["penalty"])
            reward = shaped.reward
            self._metrics.update(reward=reward, child_reward=shaped.child_reward, parent_reward=r["parent_reward"],
                                 improved=float(shaped.improved), identical=float(shaped.identical))
        metadata = {**self._metrics, "task_id": self.row_id, "reason": score.reason,
                    "prompt_kind": "zero_shot" if self.refinement is None else "refine",
                    "n_examples": score.n_examples, "n_wrong": score.n_wrong, "code_chars": len(code)}
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        return dict(self._metrics)


def register_env() -> None:
    """Register `harness_legality` in skyrl_gym (idempotent). Call it inside the Ray task that trains."""
    from skyrl_gym.envs import register
    from skyrl_gym.envs.registration import registry

    if ENV_CLASS not in registry:
        register(id=ENV_CLASS, entry_point=ENTRY_POINT)
