"""Candidate actions for an observation: legal-looking and realistic illegal ones.

The harvest labels whatever this proposes by executing it, so the intent tags here
("expect legal" / "expect illegal") only steer the mix towards balance; the label is
always the browser's verdict. Target bids come from the elements the state shows, plus
unknown bids just past the page's range (what a model that miscounts would write).
"""

from __future__ import annotations

import random

from harness.oracle import parse_state

TEXT_VALUES = ["hello", "Alice", "42", "New York", "2024-01-15", "test@example.com"]
KEYS = ["Enter", "Tab", "ArrowDown", "Escape", "Control+a", "Backspace"]


def _legal_candidates(elements, rng: random.Random) -> list[str]:
    out = []
    for bid, el in elements.items():
        if el.pointable and not el.disabled:
            out += [f"click('{bid}')", f"hover('{bid}')", f"dblclick('{bid}')"]
        out.append(f"focus('{bid}')")
        out.append(f"press('{bid}', '{rng.choice(KEYS)}')")
        if el.editable and not el.readonly and el.visible and not el.disabled:
            out += [f"fill('{bid}', '{rng.choice(TEXT_VALUES)}')", f"clear('{bid}')"]
        for option in el.options:
            out.append(f"select_option('{bid}', {option!r})")
    out += ["scroll(0, 100)", "scroll(0, -50)", "noop(10)"]
    return out


def _illegal_candidates(elements, rng: random.Random, taken: set[str]) -> list[str]:
    bids = sorted(elements, key=lambda b: (len(b), b))
    numeric = [int(b) for b in bids if b.isdigit()]
    top = max(numeric, default=10)
    unknown = [u for u in [str(top + k) for k in (1, 2, 5, 17, 40)] + ["999", "a999"] if u not in taken]
    some = bids or ["1"]
    out = []
    for u in unknown:
        out += [f"click('{u}')", f"fill('{u}', '{rng.choice(TEXT_VALUES)}')", f"hover('{u}')",
                f"press('{u}', 'Enter')", f"select_option('{u}', 'A')", f"focus('{u}')"]
    for bid, el in elements.items():
        if not el.pointable or el.disabled:
            out += [f"click('{bid}')", f"hover('{bid}')", f"dblclick('{bid}')"]
        if not el.editable:
            out += [f"fill('{bid}', '{rng.choice(TEXT_VALUES)}')", f"clear('{bid}')"]
        if el.options:
            out.append(f"select_option('{bid}', 'Not an option')")
        elif el.visible:
            out.append(f"select_option('{bid}', 'A')")
    b = rng.choice(some)
    out += [  # wrong argument counts and types, malformed syntax, unknown verbs
        "click()", f"fill('{b}')", f"press('{b}')", f"select_option('{b}')", "scroll(100)",
        f"click({b})" if b.isdigit() else f"click({len(some)})", f"click('{b}', 'left', [], 'extra')",
        f"click('{b}'", f"click {b}", f"clikc('{b}')", f"type('{b}', 'hi')", f"fill('{b}', \"unterminated)",
        "", "   ", f"submit('{b}')",
    ]
    return out


def _verb(action: str) -> str:
    head = action.strip().split("(")[0]
    return head if head.isidentifier() else "malformed"


def _stratified(actions: list[str], k: int, rng: random.Random) -> list[str]:
    """Up to k actions, round-robin over verbs so no single kind crowds out the rest."""
    groups: dict[str, list[str]] = {}
    for a in actions:
        groups.setdefault(_verb(a), []).append(a)
    for g in groups.values():
        rng.shuffle(g)
    order = sorted(groups)
    rng.shuffle(order)
    out: list[str] = []
    while len(out) < k and any(groups.values()):
        for verb in order:
            if groups[verb] and len(out) < k:
                out.append(groups[verb].pop())
    return out


def candidate_actions(state: str, seed: int, n: int, page_bids: set[str] = frozenset()) -> list[str]:
    """`n` distinct actions for `state`: about half expected legal, half illegal.

    `page_bids` are all bids in the page's DOM (some never appear in the state, e.g.
    <head>): an "unknown" bid is drawn outside them, so it really is unknown.
    """
    rng = random.Random(f"{seed}:{len(state)}:{state[:200]}")
    elements = parse_state(state)
    legal = list(dict.fromkeys(_legal_candidates(elements, rng)))
    illegal = [a for a in dict.fromkeys(_illegal_candidates(elements, rng, set(page_bids) | set(elements)))
               if a not in set(legal)]
    take_legal = _stratified(legal, max(n // 2, n - len(illegal)), rng)
    chosen = take_legal + _stratified(illegal, n - len(take_legal), rng)
    rng.shuffle(chosen)
    return chosen
