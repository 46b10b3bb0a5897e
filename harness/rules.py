"""The rule library the deterministic operator composes harness programs from (no model).

    from harness.rules import compose_program, active_rules, best_rule
    code = compose_program(["malformed", "unknown_bid"])   # a complete harness program
    active_rules(code)                                      # -> ['malformed', 'unknown_bid']

Each rule is one early return of is_legal_action; the library's order fixes the order of
the checks, so any subset composes to the same program text. It exists for tests and
smoke runs: a search whose operator is exact and fast. The composed programs are our own
code, compiled in-process only to rank which rule fixes the most shown failures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

# The program every deterministic harness shares: parse the action and the state.
_PRELUDE = '''import ast
import functools
import re

_LINE = re.compile(r"""^(\\s*)\\[([^\\]]+)\\] (\\S+)(?: ('(?:[^'\\\\]|\\\\.)*'|"(?:[^"\\\\]|\\\\.)*"))?(.*)$""")
_ARITY = {"click": (1, 3), "dblclick": (1, 3), "hover": (1, 1), "focus": (1, 1), "clear": (1, 1),
          "fill": (2, 3), "select_option": (2, 2), "press": (2, 2), "scroll": (2, 2), "noop": (0, 1)}


@functools.lru_cache(maxsize=8)
def _elements(state):
    """bid -> {role, rest (the property text), depth, options}; cached: one page, many actions."""
    out, selects = {}, []
    for line in state.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        el = {"role": m.group(3), "rest": m.group(5), "depth": len(m.group(1)), "options": []}
        out[m.group(2)] = el
        while selects and selects[-1]["depth"] >= el["depth"]:
            selects.pop()
        if el["role"] == "option" and selects and m.group(4):
            selects[-1]["options"].append(ast.literal_eval(m.group(4)))
        if el["role"] in ("combobox", "listbox"):
            selects.append(el)
    return out


def _flag(el, name):
    return re.search(r"(^|, )" + name + r"(,|$)", el["rest"].strip()) is not None


def _call(action):
    try:
        node = ast.parse(action.strip(), mode="eval").body
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            return node.func.id, [ast.literal_eval(a) for a in node.args]
    except (SyntaxError, ValueError):
        pass
    return None

'''


@dataclass(frozen=True)
class Rule:
    name: str
    doc: str
    lines: tuple[str, ...]  # body lines (4-space indent is added), inserted at the rule's slot
    slot: str  # where in the function body: "call", "verb", "element"


# The library, in program order. Each rule is one early return; the order of the library
# fixes the order of the checks, so composing any subset yields the same program text.
RULES: tuple[Rule, ...] = (
    Rule("malformed", "an action that is not one plain call is illegal",
         ("if call is None:", "    return False"), "call"),
    Rule("unknown_verb", "a call to an unknown action function is illegal",
         ("if call[0] not in _ARITY:", "    return False"), "verb"),
    Rule("arg_count", "a wrong number of arguments is illegal",
         ("if call[0] in _ARITY and not _ARITY[call[0]][0] <= len(call[1]) <= _ARITY[call[0]][1]:",
          "    return False"), "verb"),
    Rule("scroll_noop", "scroll and noop are always legal",
         ("if call[0] in (\"scroll\", \"noop\"):", "    return True"), "verb"),
    Rule("unknown_bid", "an action on a bid the state does not show is illegal",
         ("if el is None:", "    return False"), "element"),
    Rule("press_focus", "press and focus work on any existing element",
         ("if call[0] in (\"press\", \"focus\"):", "    return True"), "target"),
    Rule("hidden", "an element that is neither visible nor offscreen rejects the action",
         ("if not (_flag(el, \"visible\") or _flag(el, \"offscreen\")):", "    return False"), "target"),
    Rule("pointer", "click/dblclick/hover need an element that receives the pointer (not zero_size, not covered)",
         ("if call[0] in (\"click\", \"dblclick\", \"hover\") and (_flag(el, \"zero_size\") or _flag(el, \"covered\")):",
          "    return False"), "target"),
    Rule("disabled", "a disabled element rejects every action but hover",
         ("if \"disabled=True\" in el[\"rest\"] and call[0] != \"hover\":", "    return False"), "target"),
    Rule("fill_editable", "fill/clear need an editable, non-readonly, non-generic element",
         ("if call[0] in (\"fill\", \"clear\") and (\"editable=\" not in el[\"rest\"] or el[\"role\"] == \"generic\"",
          "        or \"readonly=True\" in el[\"rest\"]):", "    return False"), "target"),
    Rule("select_option", "select_option needs a combobox/listbox that has every given option",
         ("if call[0] == \"select_option\":",
          "    wanted = call[1][1] if isinstance(call[1][1], list) else [call[1][1]]",
          "    return bool(el[\"options\"]) and all(w in el[\"options\"] for w in wanted)"), "target"),
)
RULE_NAMES = tuple(r.name for r in RULES)
_MARK = re.compile(r"# rule: (\w+)")


def compose_program(active: Sequence[str]) -> str:
    """The harness program with the named rules (library order; unknown names ignored)."""
    on = set(active)
    body = ["call = _call(action)"]
    body += _rule_lines("call", on)
    body += ["if call is None:", "    return True"]
    body += _rule_lines("verb", on)
    body += ["args = call[1]", "el = _elements(state).get(args[0]) if args and isinstance(args[0], str) else None"]
    body += _rule_lines("element", on)
    body += ["if el is None:", "    return True"]
    body += _rule_lines("target", on)
    body += ["return True"]
    return _PRELUDE + "\ndef is_legal_action(state, action):\n" + "\n".join("    " + ln for ln in body) + "\n"


def _rule_lines(slot: str, on: set[str]) -> list[str]:
    out = []
    for rule in RULES:
        if rule.slot == slot and rule.name in on:
            out += [f"# rule: {rule.name}", *rule.lines]
    return out


def active_rules(code: str) -> list[str]:
    """The library rules a deterministic program contains (read from its rule markers)."""
    found = set(_MARK.findall(code or ""))
    return [name for name in RULE_NAMES if name in found]


@lru_cache(maxsize=512)
def rule_function(active: frozenset[str]) -> Any:
    """The compiled is_legal_action of a rule set (our own generated code, run in-process)."""
    scope: dict[str, Any] = {}
    exec(compile(compose_program(sorted(active)), "<rule-library>", "exec"), scope)
    return scope["is_legal_action"]


def _fixes(active: list[str], rule: str, failures: Sequence[Any]) -> int:
    """How many of the shown failures the program with `rule` added gets right."""
    harness = rule_function(frozenset(active + [rule]))
    fixed = 0
    for f in failures:
        try:
            fixed += harness(f.state, f.action) is f.expected
        except Exception:
            pass
    return fixed


def best_rule(active: list[str], failures: Sequence[Any]) -> str | None:
    """The unused rule that fixes the most shown failures (ties: library order); None when all are used."""
    unused = [r for r in RULE_NAMES if r not in active]
    if not unused:
        return None
    counts = [_fixes(active, r, failures) for r in unused]
    return unused[max(range(len(unused)), key=lambda i: (counts[i], -i))]
