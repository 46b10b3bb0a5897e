"""Composite reward and the gold test for a harness program on labeled examples.

    from harness.rewards import score_harness, is_gold
    s = score_harness(code, task.examples)   # runs the code in the sandbox, scores in this process
    s.reward, s.balanced_accuracy, s.effective_recall, s.valid, s.reason, s.failures
    is_gold(s)                               # balanced_accuracy >= W8_HARNESS_GOLD_THRESHOLD (0.90)

The arithmetic (legal = positive):
- balanced_accuracy = (TPR + TNR) / 2; if a class has no examples, the other class's
  rate alone (make_task never builds such a task; this only keeps hand-made sets defined);
- effective_recall = share of `dom_changed` examples predicted legal (the DOMDiff term:
  never block an action that demonstrably changes the page). With no `dom_changed`
  example it falls back to the TPR (share of legal examples predicted legal), so the term
  keeps meaning "do not block what works" and never pays a harness for blocking;
- reward = (1 - w) * balanced_accuracy + w * effective_recall, w = reward_recall_weight;
- a prediction that is not a bool (the harness raised, timed out on that example or
  returned something else: the sandbox reports None) is wrong for either label, and is
  not "predicted legal" for the recall term;
- an invalid program (no code, no valid function, crash on load, whole-run timeout) gets
  reward 0, all metrics 0, valid=False and a one-line reason.

A refinement (the child of a parent program, harness/env.py on a refinement row) is scored the
same way and then shaped by `refinement_reward`:
  reward = child + bonus * improved - penalty * identical
  identical = the child has code and it is the parent's program (harness.interface.program_key:
              ast.unparse of both, so comments, blank lines, spacing and quote style do not count)
  improved  = not identical and child > parent (strictly)
Not `child - parent`: every completion of a GRPO group has the same parent, so a term linear in
the child's reward is an affine map of it that group normalisation cancels; an indicator is not.

Labels never enter the process that runs the code: only `Example.unlabeled()` goes to the
sandbox; this module compares the returned predictions with the labels.
`score_harness` never raises on bad programs: whatever the sandbox or validation reports
becomes a scored, invalid result with its reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from harness.config import default
from harness.dataset import Example
from harness.interface import extract_code, program_key, validate_code
from harness.sandbox import run_harness

MAX_ERROR_CHARS = 300  # harness/browser error texts are clipped: they feed prompts and traces


@dataclass(frozen=True)
class RewardKnobs:
    """How a run scores programs; the search, the env's rows and both trainers share one of these."""

    recall_weight: float  # W8_REWARD_RECALL_WEIGHT
    gold_threshold: float  # W8_HARNESS_GOLD_THRESHOLD
    timeout_s: float  # W8_SANDBOX_TIMEOUT_S
    sandbox: str  # W8_SANDBOX: auto | local | daytona

    ROW_KEYS = ("recall_weight", "gold_threshold", "timeout_s", "sandbox")

    @classmethod
    def from_config(cls, cfg: Any) -> "RewardKnobs":
        return cls(cfg.reward_recall_weight, cfg.harness_gold_threshold, cfg.sandbox_timeout_s, cfg.sandbox)

    @classmethod
    def from_row(cls, info: dict[str, Any]) -> "RewardKnobs":
        """From a training row's extra_info; KeyError names the first missing field."""
        missing = [k for k in cls.ROW_KEYS if k not in info]
        if missing:
            raise KeyError(missing[0])
        return cls(float(info["recall_weight"]), float(info["gold_threshold"]), float(info["timeout_s"]),
                   str(info["sandbox"]))

    def as_row(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.ROW_KEYS}


@dataclass(frozen=True)
class Failure:
    """One example the harness got wrong, with what the mutation operator is shown."""

    index: int  # position in the scored example list
    state: str
    action: str
    expected: bool  # the browser's label
    got: bool | None  # the harness's answer (None: raised, timed out or returned a non-bool)
    error: str = ""  # the browser's error text for this action ("" when legal)
    harness_error: str = ""  # what went wrong inside the harness on this example, if anything
    action_type: str = ""
    dom_changed: bool = False

    def to_json(self, state_chars: int | None = None) -> dict[str, Any]:
        out = asdict(self)
        if state_chars is not None:
            out["state"] = self.state[:state_chars]
        return out


@dataclass(frozen=True)
class Score:
    """Reward and its parts for one program on one example set."""

    reward: float
    balanced_accuracy: float
    accuracy: float
    effective_recall: float
    valid: bool
    reason: str  # "" for a valid program; else why it scored 0
    tpr: float = 0.0
    tnr: float = 0.0
    n_examples: int = 0
    n_wrong: int = 0
    n_bad_returns: int = 0  # examples where the harness raised, timed out or returned a non-bool
    failures: tuple[Failure, ...] = field(default_factory=tuple)
    predictions: tuple[bool | None, ...] = field(default_factory=tuple)
    wall_s: float = 0.0
    infra: bool = False  # invalid because the sandbox failed, not the program (GRPO must not learn from it)

    def summary(self) -> dict[str, Any]:
        """The scalar fields (no failures, no predictions): what traces and logs keep."""
        keys = ("reward", "balanced_accuracy", "accuracy", "effective_recall", "valid", "reason",
                "tpr", "tnr", "n_examples", "n_wrong", "n_bad_returns", "wall_s", "infra")
        return {k: getattr(self, k) for k in keys}


def _clip(text: str, n: int = MAX_ERROR_CHARS) -> str:
    text = str(text or "")
    return text if len(text) <= n else text[: n - 3] + "..."


def _rate(hits: int, total: int) -> float | None:
    return hits / total if total else None


def invalid_score(reason: str, n_examples: int = 0, wall_s: float = 0.0, infra: bool = False) -> Score:
    """The score of a program that could not be run at all: reward 0 and the reason."""
    return Score(0.0, 0.0, 0.0, 0.0, False, _clip(reason) or "invalid program", n_examples=n_examples,
                 wall_s=wall_s, infra=infra)


def score_predictions(predictions: Sequence[Any], examples: Sequence[Example], recall_weight: float | None = None,
                      example_errors: Sequence[str] | None = None, wall_s: float = 0.0) -> Score:
    """The reward arithmetic on predictions (one per example; anything but a bool is wrong)."""
    recall_weight = default("reward_recall_weight") if recall_weight is None else recall_weight
    if len(predictions) != len(examples):
        return invalid_score(f"harness returned {len(predictions)} predictions for {len(examples)} examples",
                             len(examples), wall_s)
    if not examples:
        return invalid_score("no examples to score", 0, wall_s)
    preds = tuple(p if isinstance(p, bool) else None for p in predictions)
    errors = list(example_errors or []) + [""] * len(examples)
    tp = sum(1 for p, e in zip(preds, examples) if e.legal and p is True)
    tn = sum(1 for p, e in zip(preds, examples) if not e.legal and p is False)
    n_pos = sum(1 for e in examples if e.legal)
    n_neg = len(examples) - n_pos
    tpr, tnr = _rate(tp, n_pos), _rate(tn, n_neg)
    rates = [r for r in (tpr, tnr) if r is not None]
    balanced = sum(rates) / len(rates)
    changed = [p for p, e in zip(preds, examples) if e.dom_changed]
    if changed:
        recall = sum(1 for p in changed if p is True) / len(changed)
    else:  # no DOMDiff evidence: fall back to recall on the legal examples (see module doc)
        recall = tpr if tpr is not None else 1.0 - (tnr or 0.0)
    reward = (1.0 - recall_weight) * balanced + recall_weight * recall
    failures = tuple(
        Failure(i, e.state, e.action, e.legal, p, _clip(e.error), _clip(errors[i]), e.action_type, e.dom_changed)
        for i, (p, e) in enumerate(zip(preds, examples)) if p is not e.legal)
    return Score(reward=reward, balanced_accuracy=balanced, accuracy=(tp + tn) / len(examples),
                 effective_recall=recall, valid=True, reason="", tpr=tpr if tpr is not None else 0.0,
                 tnr=tnr if tnr is not None else 0.0, n_examples=len(examples), n_wrong=len(failures),
                 n_bad_returns=sum(1 for p in preds if p is None), failures=failures, predictions=preds,
                 wall_s=wall_s)


@dataclass(frozen=True)
class Refinement:
    """A refinement's reward (see the module doc) and its parts."""

    reward: float
    child_reward: float  # the plain composite reward of the child
    improved: bool
    identical: bool


IMPROVEMENT_EPS = 1e-9  # "strictly above" without float noise: the same arithmetic on the same predictions is exact


def refinement_reward(child_reward: float, parent_reward: float, child_code: str, parent_code: str,
                      bonus: float, penalty: float) -> Refinement:
    """Shape a child's composite reward against its parent's (pure; the table is in tests/test_env.py)."""
    identical = bool((child_code or "").strip()) and program_key(child_code) == program_key(parent_code or "")
    improved = not identical and child_reward > parent_reward + IMPROVEMENT_EPS
    return Refinement(child_reward + bonus * improved - penalty * identical, child_reward, improved, identical)


def is_gold(score: Score | float, threshold: float | None = None) -> bool:
    """Gold iff the program is valid and its balanced accuracy reaches the threshold (a float: a
    balanced accuracy, as a trace node records it)."""
    threshold = default("harness_gold_threshold") if threshold is None else threshold
    if isinstance(score, Score):
        return score.valid and score.balanced_accuracy >= threshold
    return float(score) >= threshold


def score_harness(code: str | None, examples: Sequence[Example], recall_weight: float | None = None,
                  timeout_s: float | None = None, runner: Callable[..., Any] | None = None,
                  sandbox: str | None = None) -> Score:
    """Validate `code`, run it on the unlabeled examples in the sandbox and score the predictions.

    `code` is program text already extracted from model output (harness.interface does the
    extraction); None or "" means nothing was extracted. `runner` defaults to
    harness.sandbox.run_harness (same signature); `sandbox` is its backend. Values left None
    are the knob table's defaults. Never raises for a bad program.
    """
    examples = list(examples)
    recall_weight = default("reward_recall_weight") if recall_weight is None else recall_weight
    try:
        return _score_harness(code, examples, recall_weight, timeout_s, runner or run_harness, sandbox)
    except Exception as err:  # a scored result with a reason, never an exception into the search
        return invalid_score(f"scoring failed: {type(err).__name__}: {err}", len(examples))


def _score_harness(code: str | None, examples: list[Example], recall_weight: float, timeout_s: float | None,
                   runner: Callable[..., Any], sandbox: str | None) -> Score:
    if not code or not str(code).strip():
        return invalid_score("no code in the model output", len(examples))
    problem = validation_problem(code)
    if problem:
        return invalid_score(problem, len(examples))
    try:
        run = runner(code, [e.unlabeled() for e in examples], timeout_s=timeout_s, backend=sandbox)
    except Exception as err:  # the sandbox must not take the search down with it
        return invalid_score(f"sandbox failed: {type(err).__name__}: {err}", len(examples), infra=True)
    wall_s = float(getattr(run, "wall_s", 0.0) or 0.0)
    if not run.ok:
        return invalid_score(run.error or "program failed", len(examples), wall_s, bool(getattr(run, "infra", False)))
    errors = list(getattr(run, "example_errors", None) or [])
    return score_predictions(list(run.predictions or []), examples, recall_weight, errors, wall_s)


def validation_problem(code: str) -> str:
    """harness.interface's one-line rejection reason for `code`, or "" if it meets the contract."""
    try:
        result = validate_code(code)
    except Exception as err:  # validation is static, but bad input must still become a reason
        return f"validation failed: {type(err).__name__}: {err}"
    if isinstance(result, str):
        return result
    return "" if getattr(result, "ok", False) else str(getattr(result, "reason", "") or "invalid program")


def score_text(text: str | bytes | None, examples: Sequence[Example], recall_weight: float | None = None,
               timeout_s: float | None = None, runner: Callable[..., Any] | None = None,
               sandbox: str | None = None) -> tuple[str, Score]:
    """Extract the program from raw model output (harness.interface) and score it: (code, score)."""
    try:
        code = extract_code(text if text is not None else "")
    except Exception as err:
        return "", invalid_score(f"extraction failed: {type(err).__name__}: {err}", len(list(examples)))
    return code, score_harness(code, examples, recall_weight, timeout_s, runner, sandbox)


def score_with(text: str | bytes | None, examples: Sequence[Example], knobs: RewardKnobs) -> tuple[str, Score, bool]:
    """score_text with a run's reward knobs: (code, score, gold)."""
    code, score = score_text(text, examples, knobs.recall_weight, knobs.timeout_s, sandbox=knobs.sandbox)
    return code, score, is_gold(score, knobs.gold_threshold)
