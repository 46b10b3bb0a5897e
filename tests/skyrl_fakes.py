"""Fakes at the one boundary a CPU cannot reach: SkyRL's vLLM inference engines (they need a GPU).

FakeInferenceClient stands where SkyRL's InferenceEngineClient stands: the generator calls
`await client.generate(engine_input, model=...)` and gets text, token ids and a stop reason.
It answers from a fixed list by the sample's repetition id, so a group of samples of one
prompt gets known answers (the oracle, garbage, a program cut mid-way) and the rewards the
real env computes can be checked. Everything else in the tests that use it is SkyRL's own
code (PromptDataset, prepare_generator_input, SkyRLGymGenerator, get_rollout_metrics).
"""

from __future__ import annotations

from harness.oracle import oracle_source


def fenced(code: str) -> str:
    return "```python\n" + code.rstrip() + "\n```"


ORACLE = fenced(oracle_source())
GARBAGE = "I am not able to write that function."
TRUNCATED = fenced(oracle_source())[: len(ORACLE) // 3]  # what a too-small token budget leaves: a syntax error


class FakeInferenceClient:
    """Canned answers by repetition id (session id `<uid>_<rep>`), tokenized with the real tokenizer."""

    def __init__(self, tokenizer, answers: list[str]):
        self.tokenizer, self.answers, self.calls = tokenizer, answers, 0

    async def generate(self, engine_input, model=None):
        self.calls += 1
        session = engine_input["session_ids"][0]
        text = self.answers[int(str(session).rsplit("_", 1)[1]) % len(self.answers)]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return {"responses": [text], "response_ids": [ids], "stop_reasons": ["stop"], "response_logprobs": None}

    async def finish_session(self, session_id: str) -> None:
        """SkyRL's clients release a session's routing here; nothing to release in a fake."""
