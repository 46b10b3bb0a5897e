"""The rule split: held-out tasks whose gold harness needs legality rules that no training example shows.

    from harness.rule_split import Design, depends_on, restricted_target
    design = Design("rule", ("pointer", "fill_editable"))   # W8_SPLIT=rule, W8_HELDOUT_RULES
    design.split_of("click-pie")                  # "train" or "heldout", by page
    depends_on(design.heldout_rules, state, action)   # True: the full and the restricted oracle disagree
    restricted_target(design.heldout_rules, "compact")  # the warm-start's program: the oracle without H

Why: legality here is the same Playwright rules on every page, so under the page split one program (the
oracle, which the warm-start teaches) is gold on every held-out page, and the study measures recall. The
rule split holds out rule families H instead. The oracle's rule families are the rules of harness.rules
(one early return each; all of them together give the oracle's verdict on every snapshot example, tested).
The *restricted oracle* is that program without H. An example *depends on H* when the restricted and the
full oracle disagree on it. Then:
- train tasks (SFT rows, GRPO prompts, harvests) are drawn from train pages with every example that
  depends on H left out, so no training label shows H, and the restricted program is gold on all of them;
- held-out tasks come from the other pages, from observations with at least MIN_DEPENDENT examples that
  depend on H, and hold all of those (plus a balanced draw of the rest), so the restricted program is below
  gold there and the search's feedback (the failing examples of a refinement prompt) is the way to gold;
- the warm-start teaches the restricted program: `compact` for small local models (the compact harness's
  lines without H's), `oracle` on the GPU node (the rule library's program without H).
Held-out pages are a fixed 40% of pages (crc32 of the page name mod 5 in {0, 1}; the page split holds out
{0}): MIN_DEPENDENT and that share are what give at least 32 held-out pages with such an observation on the
committed snapshot (docs/benchmark.md has the counts).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from harness.oracle import COMPACT_PRELUDE
from harness.rules import RULE_NAMES, rule_function, compose_program

SPLIT_KINDS = ("page", "rule")
# The families that may be held out: the checks on the target element. Syntax, arity, scroll/noop and
# bid-exists shape the whole program (every later check needs their parse), so removing them is no rule split.
HOLDABLE = ("press_focus", "hidden", "pointer", "disabled", "fill_editable", "select_option")
MIN_DEPENDENT = 3  # examples of a held-out task that depend on H: 3 wrong of 24 puts balanced accuracy < 0.9
HELDOUT_BUCKETS = {"page": (0,), "rule": (0, 1)}  # crc32(page) % 5 in these -> held out


class SplitError(ValueError):
    """A split that cannot be made as asked; one line naming the knob."""


@dataclass(frozen=True)
class Design:
    """How train and held-out differ: by page (kind "page"), or by page and rule family (kind "rule")."""

    kind: str = "page"
    heldout_rules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in SPLIT_KINDS:
            raise SplitError(f"W8_SPLIT={self.kind!r}: expected one of {', '.join(SPLIT_KINDS)}")
        if self.kind == "rule" and len(set(self.heldout_rules)) < 2:
            raise SplitError(f"W8_HELDOUT_RULES={','.join(self.heldout_rules)}: the rule split holds out at least "
                             f"two families of {', '.join(HOLDABLE)}")
        check_heldout_rules(self.heldout_rules if self.kind == "rule" else ())

    @classmethod
    def of(cls, cfg: Any) -> "Design":
        """The design of a config (W8_SPLIT, W8_HELDOUT_RULES)."""
        if cfg.split != "rule":
            return cls(cfg.split)
        return cls("rule", parse_rules(cfg.heldout_rules))

    def split_of(self, page: str) -> str:
        return "heldout" if zlib.crc32(page.encode()) % 5 in HELDOUT_BUCKETS[self.kind] else "train"

    def record(self) -> dict[str, Any]:
        return {"split": self.kind, "heldout_rules": list(self.heldout_rules)}


def curriculum_of(cfg: Any) -> str:
    """W8_CURRICULUM resolved: auto is repair under the rule split and none under the page split."""
    return cfg.curriculum if cfg.curriculum != "auto" else ("repair" if cfg.split == "rule" else "none")


def parse_rules(text: str | Sequence[str]) -> tuple[str, ...]:
    """'pointer,fill_editable' -> ('pointer', 'fill_editable'), in library order."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    check_heldout_rules(names)
    return tuple(n for n in RULE_NAMES if n in names)


def check_heldout_rules(names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in RULE_NAMES]
    if unknown:
        raise SplitError(f"W8_HELDOUT_RULES: {unknown[0]!r} names no rule of the oracle; its families are "
                         f"{', '.join(RULE_NAMES)}")
    fixed = [n for n in names if n not in HOLDABLE]
    if fixed:
        raise SplitError(f"W8_HELDOUT_RULES: {fixed[0]!r} cannot be held out (every other check needs it); "
                         f"holdable: {', '.join(HOLDABLE)}")


def restricted_rules(heldout: Sequence[str]) -> list[str]:
    return [n for n in RULE_NAMES if n not in heldout]


def depends_on(heldout: Sequence[str], state: str, action: str) -> bool:
    """The full oracle and the oracle without `heldout` disagree on this example."""
    full, restricted = rule_function(frozenset(RULE_NAMES)), rule_function(frozenset(restricted_rules(heldout)))
    return full(state, action) != restricted(state, action)


@lru_cache(maxsize=4096)
def dependent_actions(heldout: tuple[str, ...], state: str, actions: tuple[str, ...]) -> frozenset[str]:
    """The actions of one observation that depend on `heldout` (cached: one observation, many tasks)."""
    return frozenset(a for a in actions if depends_on(heldout, state, a))


# The compact harness, one rule family per block (None: always there), written the way a model would
# answer. All blocks together agree with the oracle on every snapshot example, and without a family's
# block with the rule library's program without that family (tests/test_rule_split.py).
_COMPACT_BLOCKS: tuple[tuple[str | None, str], ...] = (
    (None, COMPACT_PRELUDE),
    ("press_focus", '''    if verb in ("press", "focus"):
        return True
'''),
    ("hidden", '''    if "visible" not in line and "offscreen" not in line:
        return False
'''),
    ("pointer", '''    if verb in ("click", "dblclick", "hover") and ("zero_size" in line or "covered" in line):
        return False
'''),
    ("disabled", '''    if verb != "hover" and "disabled=True" in line:
        return False
'''),
    ("fill_editable", '''    if verb in ("fill", "clear"):
        return "editable=" in line and "readonly=True" not in line
'''),
    ("select_option", '''    if verb == "select_option":
        return "option %r" % args[1] in state
'''),
    (None, '''    return True
'''),
)


def compact_program(heldout: Sequence[str] = ()) -> str:
    """The compact harness without the blocks of the `heldout` families."""
    return "".join(text for rule, text in _COMPACT_BLOCKS if rule is None or rule not in heldout)


def restricted_target(heldout: Sequence[str], target: str) -> str:
    """The warm-start's program under the rule split: `compact` (small local models) or `oracle` (the rule
    library's program, the GPU node's), each without the `heldout` families."""
    if target == "compact":
        return compact_program(heldout)
    if target == "oracle":
        return compose_program(restricted_rules(heldout))
    raise SplitError(f"unknown SFT target {target!r} under the rule split: expected compact | oracle")
