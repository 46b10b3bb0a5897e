"""The prompts: the one zero-shot prompt every part trains on, and the refinement prompt.

    from harness.prompts import build_zero_shot_prompt, build_refine_prompt
    messages = build_zero_shot_prompt(task)                 # [{"role": ..., "content": ...}, ...]
    messages = build_refine_prompt(task, code, failures)     # failures: harness.rewards.Failure

`build_zero_shot_prompt(task)` is THE prompt of node 0 of every search, of the SkyRL env's
training rows and of the SFT rows: training targets exactly what the trace measures. It
holds the contract, the action grammar, the observation (truncated at line boundaries)
and a few labeled examples of the task. `build_refine_prompt` adds the current code and
up to five failing examples (state excerpt, action, expected, got, browser error).
A task and a failure are read by attribute only (duck-typed), so this module imports
nothing of the repo.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

MAX_STATE_CHARS = 3000  # ~1k tokens of AXTree: fits SmolLM2's context with room for the answer
MAX_EXCERPT_LINES = 4  # lines of state shown per failing example (target element + children)
N_PROMPT_EXAMPLES = 6  # labeled examples in the zero-shot prompt (half legal, half illegal)
MAX_FAILURES = 5

SYSTEM_PROMPT = """You write Python harnesses for a web agent. A harness is one function

def is_legal_action(state: str, action: str) -> bool

that returns True iff the browser executes `action` on the page described by `state` without an error, else False. Use only the Python standard library (re, ast). Answer with the complete program in one ```python code block.

state: the page's accessibility tree, one element per line: [bid] role 'name', properties (e.g. visible, clickable, disabled=True, editable='plaintext', readonly=True, expanded=False). Indentation shows nesting; the options of a combobox or listbox are its children.

action: one call, bid is the string in brackets:
click(bid) dblclick(bid) hover(bid) focus(bid) clear(bid)
fill(bid, text) select_option(bid, option) press(bid, key)
scroll(dx, dy) noop(wait_ms)
Any other string is not a valid action."""



def truncate_state(state: str, max_chars: int = MAX_STATE_CHARS) -> str:
    """The observation cut to `max_chars` at line boundaries.

    Lines without a bid (plain text) go first, then trailing lines; a final note says
    how many lines were cut, so the model knows the page continues.
    """
    if len(state) <= max_chars:
        return state
    lines = state.splitlines()
    kept = [ln for ln in lines if "[" in ln]
    out, size = [], 0
    for ln in kept:
        if size + len(ln) + 1 > max_chars:
            break
        out.append(ln)
        size += len(ln) + 1
    return "\n".join(out) + f"\n... ({len(lines) - len(out)} more lines not shown)"


_BID = re.compile(r"""^\s*[a-z_]+\(\s*(['"])(.*?)\1""")


def action_bid(action: str) -> str | None:
    """The bid an action string names (its first quoted argument), or None."""
    m = _BID.match(action or "")
    return m.group(2) if m else None


def state_excerpt(state: str, action: str, max_lines: int = MAX_EXCERPT_LINES) -> str:
    """The lines of `state` about the action's target: its own line and its first children.

    Children keep their nesting relative to the target (two spaces a level).
    """
    bid = action_bid(action)
    if bid is None:
        return "(the action names no element)"
    lines = state.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith(f"[{bid}] "):
            depth = _depth(line)
            out = [line.strip()]
            for child in lines[i + 1:i + max_lines]:
                if _depth(child) <= depth:
                    break
                out.append("  " * (_depth(child) - depth) + child.strip())
            return "\n".join(out)
    return f"(no element [{bid}] in the state)"


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip("\t "))


def show_action(action: str) -> str:
    """The action as the prompt shows it: quoted when blank or padded, so the model sees it."""
    return action if action and action.strip() == action else repr(action)


def _pick_examples(examples: Sequence[Any], n: int) -> list[Any]:
    """The first n/2 legal and first n/2 illegal examples, in task order (deterministic)."""
    legal = [e for e in examples if e.legal][: (n + 1) // 2]
    illegal = [e for e in examples if not e.legal][: n // 2]
    chosen = {id(e) for e in legal + illegal}
    return [e for e in examples if id(e) in chosen]


def _label(legal: bool | None) -> str:
    return {True: "legal", False: "illegal", None: "error (no bool returned)"}[legal]


def build_zero_shot_prompt(task: Any, n_examples: int = N_PROMPT_EXAMPLES) -> list[dict[str, str]]:
    """Chat messages for node 0 (and for the env and SFT rows): a function of the task only."""
    lines = [f"Page: {task.page}. Goal of the page: {task.goal}".rstrip(),
             "", "Observation (state):", truncate_state(task.state), "", "Labeled actions on this page:"]
    for e in _pick_examples(task.examples, n_examples):
        note = f"  (browser error: {e.error.splitlines()[0][:120]})" if (not e.legal and e.error) else ""
        lines.append(f"{show_action(e.action)} -> {_label(e.legal)}{note}")
    lines += ["", "Write is_legal_action(state, action) for pages like this one."]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]


def build_refine_prompt(task: Any, code: str, failures: Sequence[Any], attempt: int = 0,
                        max_failures: int = MAX_FAILURES) -> list[dict[str, str]]:
    """Chat messages asking to fix `code` given up to `max_failures` failing examples.

    `attempt` counts the earlier refinements of this same harness: the search shows each
    attempt another window of its failures and says so, so no prompt is asked twice.
    """
    lines = [f"Page: {task.page}. Goal of the page: {task.goal}".rstrip(), "", "Current harness:",
             "```python", (code or "").strip() or "# (no code was found in the previous answer)", "```", "",
             "It is wrong on these actions:"]
    for k, f in enumerate(list(failures)[:max_failures], 1):
        excerpt = state_excerpt(f.state, f.action).replace("\n", "\n          ")
        lines += [f"{k}. action: {show_action(f.action)}", f"   state: {excerpt}",
                  f"   expected: {_label(f.expected)}, got: {_label(f.got)}"]
        if f.error:
            lines.append(f"   browser error: {f.error.splitlines()[0][:160]}")
        if f.harness_error:
            lines.append(f"   harness error: {f.harness_error.splitlines()[0][:160]}")
    if attempt:
        lines += ["", f"This harness was already refined {attempt} time(s) without reaching the goal: "
                      "try a different fix."]
    lines += ["", "Return the complete corrected program."]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]
