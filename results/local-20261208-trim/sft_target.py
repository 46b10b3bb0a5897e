import ast
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
    m = isinstance(args[0], str) and re.search(r"^\s*\[%s\] (.*)" % re.escape(args[0]), state, re.M)
    if not m:
        return False
    line = m.group(1)
    if verb in ("press", "focus"):
        return True
    if "visible" not in line and "offscreen" not in line:
        return False
    if verb != "hover" and "disabled=True" in line:
        return False
    if verb == "select_option":
        return "option %r" % args[1] in state
    return True
