"""The hand-written reference harness: is_legal_action(state, action) -> bool.

It is the benchmark's sanity check (the labels must be predictable from the state) and
the SFT target (`sft_target_source`: the oracle itself on the GPU node, COMPACT_HARNESS,
its shorter form with the same verdicts, on CPU), so this module is self-contained:
standard library only, no imports from the repo. `oracle_source()` is its program text.

The rules mirror what BrowserGym 0.14.3 + Playwright do with a bid action:
- the action string must parse to one known call with arguments its function accepts;
- the bid must exist in the page (the state lists every element that carries one);
- click/dblclick/hover need a visible (or `offscreen`: Playwright scrolls to it) target
  that receives the pointer (not `zero_size`, not `covered` by another element):
  Playwright's actionability wait times out otherwise;
  click/dblclick also need it enabled;
- fill/clear need a visible, enabled, editable text target (input, textarea, contenteditable);
- select_option needs a <select> (combobox/listbox with options) and an existing option;
- press/focus work on any existing element, visible or not; scroll and noop always work.
"""

from __future__ import annotations

import ast
import re

_LINE = re.compile(r"^(?P<indent>\t*)\[(?P<bid>[^\]]+)\] (?P<role>\S+)(?: (?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"))?(?P<rest>.*)$")

# name -> (required positional args, max args) of BrowserGym's bid action functions
_SIGNATURES = {
    "click": (1, 3), "dblclick": (1, 3), "hover": (1, 1), "fill": (2, 3), "clear": (1, 1),
    "select_option": (2, 2), "press": (2, 2), "focus": (1, 1), "scroll": (2, 2), "noop": (0, 1),
    "drag_and_drop": (2, 2), "upload_file": (2, 2),
}
KNOWN_VERBS = set(_SIGNATURES)
_EDITABLE_ROLES = {"textbox", "searchbox", "spinbutton", "combobox"}


class Element:
    __slots__ = ("bid", "role", "name", "props", "options", "depth")

    def __init__(self, bid, role, name, props, depth):
        self.bid, self.role, self.name, self.props, self.depth = bid, role, name, props, depth
        self.options = []

    @property
    def visible(self):
        """Shown in the viewport, or `offscreen`: Playwright scrolls it into view first."""
        return "visible" in self.props or "offscreen" in self.props

    @property
    def pointable(self):
        return self.visible and "zero_size" not in self.props and "covered" not in self.props

    @property
    def disabled(self):
        return self.props.get("disabled") == "True"

    @property
    def readonly(self):
        return self.props.get("readonly") == "True"

    @property
    def editable(self):
        return self.props.get("editable") in ("'plaintext'", "'richtext'") and self.role != "generic" \
            or (self.role in _EDITABLE_ROLES and "editable" in self.props)


def _props(rest):
    """', clickable, visible, editable='plaintext', disabled=True' -> dict (bare flags map to '')."""
    out = {}
    for part in re.split(r", (?=[A-Za-z_]+(?:=|,|$))", rest.lstrip(", ")):
        key, _, value = part.partition("=")
        if key:
            out[key.strip()] = value.strip()
    return out


def parse_state(state):
    """bid -> Element for every line of the AXTree text that carries a bid."""
    elements = {}
    select_stack = []
    for line in state.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        depth = len(m.group("indent"))
        name = m.group("name")
        name = ast.literal_eval(name) if name else ""
        rest = m.group("rest")
        if rest.startswith(" value="):
            rest = re.sub(r"^ value=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\S+)", "", rest)
        el = Element(m.group("bid"), m.group("role"), name, _props(rest), depth)
        elements[el.bid] = el
        while select_stack and select_stack[-1].depth >= depth:
            select_stack.pop()
        if el.role == "option" and select_stack:
            select_stack[-1].options.append(name)
        if el.role in ("combobox", "listbox"):
            select_stack.append(el)
    return elements


def parse_action(action):
    """'fill(\"12\", \"x\")' -> ('fill', ['12', 'x']); None if it is not one plain call."""
    try:
        tree = ast.parse(action.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name) or tree.keywords:
        return None
    try:
        args = [ast.literal_eval(a) for a in tree.args]
    except ValueError:
        return None
    return tree.func.id, args


def is_legal_action(state: str, action: str) -> bool:
    parsed = parse_action(action)
    if parsed is None:
        return False
    name, args = parsed
    if name not in _SIGNATURES:
        return False
    lo, hi = _SIGNATURES[name]
    if not lo <= len(args) <= hi:
        return False
    if name in ("scroll", "noop"):
        return all(isinstance(a, (int, float)) for a in args)
    bid = args[0]
    if not isinstance(bid, str):
        return False
    el = parse_state(state).get(bid)
    if el is None:
        return False
    if name in ("press", "focus"):
        return True
    if name in ("click", "dblclick", "hover") and not el.pointable:
        return False
    if not el.visible:
        return False
    if name == "hover":
        return True
    if el.disabled:
        return False
    if name in ("click", "dblclick"):
        return True
    if name in ("fill", "clear"):
        return el.editable and not el.readonly
    if name == "select_option":
        options = args[1] if isinstance(args[1], list) else [args[1]]
        return bool(el.options) and all(o in el.options for o in options)
    return False


# --- end of the harness: everything above this line is the oracle's source ---


def oracle_source() -> str:
    """The harness above as program text (the SFT target; runs in the sandbox as is)."""
    from pathlib import Path

    return Path(__file__).read_text().split("# --- end of the harness")[0].rstrip() + "\n"


# The SFT target of small local models: the oracle's verdicts on the whole snapshot
# (tests/test_env.py checks the agreement) in ~385 SmolLM2 tokens with its code fence,
# written the way a model would answer. The full oracle above (~1.7k SmolLM2 tokens) does
# not fit the completion budgets of the CPU trainer and the local search, so a 135M model
# trained on it would only ever emit truncated, invalid programs. The GPU node trains on
# the full oracle (its budget holds it; harness.training_data.sft_target_for).
# Its first lines (parse the action, check verb and arity, find the target's line) are shared with the
# rule split's compact program (harness.rule_split), which adds one block per rule family after them.
COMPACT_PRELUDE = '''import ast
import re


def is_legal_action(state, action):
    try:
        call = ast.parse(action.strip(), mode="eval").body
        verb, args = call.func.id, [ast.literal_eval(a) for a in call.args]
    except Exception:
        return False
    n = {"noop": 1, "scroll": 2, "fill": 2, "press": 2, "select_option": 2}.get(verb, 1)
    if verb not in "click dblclick hover focus clear fill press select_option scroll noop".split():
        return False
    if not n - (verb == "noop") <= len(args) <= n:
        return False
    if verb in ("scroll", "noop"):
        return True
    m = isinstance(args[0], str) and re.search(r"^\\s*\\[%s\\] (.*)" % re.escape(args[0]), state, re.M)
    if not m:
        return False
    line = m.group(1)
'''
COMPACT_HARNESS = COMPACT_PRELUDE + '''    if verb in ("press", "focus"):
        return True
    if "visible" not in line and "offscreen" not in line or verb != "hover" and "disabled=True" in line:
        return False
    if verb in ("click", "dblclick", "hover") and ("zero_size" in line or "covered" in line):
        return False
    if verb in ("fill", "clear"):
        return "editable=" in line and "readonly=True" not in line
    if verb == "select_option":
        return "option %r" % args[1] in state
    return True
'''


def sft_target_source(target: str) -> str:
    """Program text of the SFT answer: 'oracle' (the harness above), 'compact' (COMPACT_HARNESS),
    or a program given as text (tests train tiny models on tiny programs)."""
    if "def is_legal_action" in target:
        return target
    if target == "oracle":
        return oracle_source()
    if target == "compact":
        return COMPACT_HARNESS
    raise ValueError(f"unknown SFT target {target!r}: expected oracle | compact | program text")
