"""Small shared pieces of the tests: the reward knobs of the knob table (local sandbox), a fenced answer."""

from __future__ import annotations

from harness.config import load_config
from harness.rewards import RewardKnobs

REWARD = RewardKnobs.from_config(load_config(env={"W8_SANDBOX": "local"}))  # 0.2 / 0.9 / 2.0 s / local


def fenced(code: str) -> str:
    return "Here is the harness:\n```python\n" + code + "\n```"
