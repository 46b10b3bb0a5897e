"""The harness contract, and getting a valid program out of model output.

    def is_legal_action(state: str, action: str) -> bool: ...

`state` is the flattened accessibility-tree text a BrowserGym agent sees;
`action` is one BrowserGym action string (`click('12')`, `fill('19', 'hi')`, ...).
The function returns True iff the browser would execute the action without an
action error.

    from harness.interface import extract_code, validate_code, prepare
    code = extract_code(model_text)          # "" if there is no code at all
    v = validate_code(code)                  # v.ok, v.reason (one line: why not)
    code, reason = prepare(model_text)       # both; reason "" when usable

Extraction takes the fenced block that defines the function (plus earlier
helper blocks it uses), or bare code between prose, and drops example usage
after the definition. Validation is static (ast): it catches what can be seen
without running the code (syntax errors with their line, a missing, nested or
misnamed function, async def, generators, no return value, wrong arity).
What only running shows (a NameError at load, a non-bool return) is reported
by harness/sandbox.py, per example. Neither ever raises.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

FUNCTION_NAME = "is_legal_action"
SIGNATURE = f"def {FUNCTION_NAME}(state: str, action: str) -> bool:"
MAX_CODE_CHARS = 100_000  # larger "programs" are degenerate outputs; do not even parse them
MAX_OUTPUT_CHARS = 400_000  # model output beyond this is cut before extraction (bounds regex and parse time)


@dataclass(frozen=True)
class Validation:
    """Result of validate_code: ok, or the one-line reason why not."""

    ok: bool
    reason: str = ""


# ---- extraction ----------------------------------------------------------------

# chat-template leftovers that small models echo around their answer
_CHAT_TOKENS = re.compile(
    r"<\|(?:im_start|im_end|endoftext|eot_id|end|assistant|user|system|start_header_id|end_header_id)\|>"
    r"|</?s>|\[/?INST\]|<\|fim_\w+\|>")
_THINK = re.compile(r"<think>.*?</think>|</?think>", re.S)  # an unclosed <think> loses only its tag
_ROLE_LINE = re.compile(r"^\s*(?:assistant|user|system)\s*:?\s*$", re.I | re.M)
# a closing fence on its own line, glued to the last code line, or none at all (output cut off)
_FENCE = re.compile(r"^[ \t]*(```|~~~)[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\1[ \t]*$|\Z)", re.S | re.M)
_CODE_START = re.compile(r"^(?:import |from \w|def |async def |class |@|#|[A-Za-z_]\w*(?:\s*,\s*\w+)*\s*=[^=])")
_DEFINES = re.compile(rf"^\s*(?:async\s+)?def\s+{FUNCTION_NAME}\s*\(|^\s*{FUNCTION_NAME}\s*=", re.M)
_NON_PYTHON_LANGS = {"json", "text", "txt", "bash", "sh", "shell", "console", "html", "xml", "yaml", "markdown",
                     "md", "javascript", "js", "typescript", "ts", "output"}


def _as_text(output) -> str:
    if output is None:
        return ""
    if isinstance(output, (bytes, bytearray)):
        output = bytes(output).decode("utf-8", errors="replace")
    if not isinstance(output, str):
        return ""
    return output[:MAX_OUTPUT_CHARS].replace("\r\n", "\n").replace("\x00", "")


def _clean(text: str) -> str:
    text = _THINK.sub("", text)
    text = _CHAT_TOKENS.sub("\n", text)
    return _ROLE_LINE.sub("", text)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _fenced_blocks(text: str) -> list[str]:
    blocks = []
    for match in _FENCE.finditer(text):
        if match.group(2).lower() not in _NON_PYTHON_LANGS:
            blocks.append(textwrap.dedent(match.group(3)))  # fences inside list items are indented
    return blocks


def _pick(blocks: list[str]) -> str:
    """The block that defines the function (the last that also parses), plus earlier helper blocks it uses."""
    defining = [i for i, b in enumerate(blocks) if _DEFINES.search(b)]
    if not defining:
        return blocks[-1] if blocks else ""
    parsing = [i for i in defining if _parses(blocks[i])]
    chosen = (parsing or defining)[-1]
    helpers = [b for b in blocks[:chosen] if _helper_for(b, blocks[chosen])]
    return "\n\n".join(b.strip("\n") for b in helpers + [blocks[chosen]])


def _helper_for(block: str, main: str) -> bool:
    """A block of only imports/defs/assignments whose names `main` uses but does not define itself."""
    try:
        helper, body = ast.parse(block), ast.parse(main)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
    if not helper.body or not all(isinstance(node, kinds) for node in helper.body):
        return False
    used = {n.id for n in ast.walk(body) if isinstance(n, ast.Name)}
    return bool((_bound_names(helper) & used) - _bound_names(body))


def _bound_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


_BLOCK_WORDS = ("if ", "elif ", "else", "try:", "except", "finally:", "for ", "while ", "with ", "return",
                ")", "]", "}", "@")


def _code_like(line: str) -> bool:
    return (line.strip() == "" or line[:1] in (" ", "\t") or bool(_CODE_START.match(line))
            or line.startswith(_BLOCK_WORDS))


def _bare_code(text: str) -> str:
    """Code in unfenced output: from the first code-looking line before the def, trailing prose cut."""
    lines = text.split("\n")
    match = _DEFINES.search(text)
    if not match:
        return ""
    def_line = text.count("\n", 0, match.start())
    start = def_line
    for i in range(def_line - 1, -1, -1):  # extend upwards over imports, helpers, blank lines
        if _code_like(lines[i]):
            start = i
        else:
            break
    end = def_line + 1
    while end < len(lines) and _code_like(lines[end]):  # extend downwards until prose at column 0
        end += 1
    region = lines[start:end]
    tries = 0
    for end in range(len(region), def_line - start, -1):  # drop trailing prose until it parses
        candidate = "\n".join(region[:end])
        if len(candidate) > MAX_CODE_CHARS:
            continue  # validation refuses it anyway: do not pay for parsing it
        if _parses(candidate):
            return candidate.strip("\n")
        tries += 1
        if tries > 200:
            break
    return "\n".join(region).strip("\n")


def _is_usage(node: ast.stmt) -> bool:
    """A top-level example call, print or assert, or an `if __name__ == "__main__":` block."""
    if isinstance(node, (ast.Expr, ast.Assert)):
        return not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))  # keep docstrings
    if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
        return any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test))
    return False


def _drop_usage(code: str) -> str:
    """Remove example usage after the last definition of the function (small models append
    `is_legal_action(state, "click")` or prints, which fail at load and sink a valid harness)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    defining = [i for i, n in enumerate(tree.body) if _top_level_definitions(ast.Module(body=[n], type_ignores=[]))]
    if not defining:
        return code
    kept_lines = {line for n in tree.body if not _is_usage(n) for line in range(n.lineno, n.end_lineno + 1)}
    lines = code.split("\n")
    for node in reversed(tree.body[defining[-1] + 1:]):
        span = range(node.lineno, node.end_lineno + 1)
        if _is_usage(node) and not kept_lines.intersection(span):  # never cut a line it shares with kept code
            del lines[node.lineno - 1:node.end_lineno]
    return "\n".join(lines).strip("\n")


def _extract(text: str) -> str:
    blocks = _fenced_blocks(text)
    if blocks:
        picked = _pick(blocks)
        if _DEFINES.search(picked) or not _DEFINES.search(text):
            return picked.strip("\n")
    bare = _bare_code(text)
    if bare:
        return bare
    return text.strip("\n") if _parses(text) else ""


def extract_code(output) -> str:
    """Python source from model output: fenced block(s), bare code, or "" when there is none.

    Handles chat-template leftovers, <think> blocks, an unterminated final
    fence (generation cut at max tokens), several blocks (the one defining
    is_legal_action wins, with earlier helper blocks it uses), example usage
    after the definition (dropped) and bytes. Never raises.
    """
    text = _clean(_as_text(output))
    if not text.strip():
        return ""
    return _drop_usage(_extract(text))


# ---- validation ------------------------------------------------------------------

def _arity_reason(args: ast.arguments, what: str) -> str:
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    if args.vararg is None and positional < 2:
        return f"{what} takes {positional} positional argument{'s' if positional != 1 else ''}; " \
               "it must accept (state, action)"
    if required > 2:
        return f"{what} requires {required} positional arguments; it must accept exactly (state, action)"
    missing_kw = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if missing_kw:
        return f"{what} requires keyword-only argument(s) {', '.join(missing_kw)}; it must accept (state, action)"
    return ""


def _top_level_definitions(tree: ast.Module) -> list[ast.AST]:
    """Top-level statements that bind FUNCTION_NAME (also inside top-level if/try blocks)."""
    found = []
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == FUNCTION_NAME:
            found.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == FUNCTION_NAME for t in targets):
                found.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            stack.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                stack.extend(handler.body)
    return found


def _other_functions(tree: ast.Module) -> list[str]:
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _own_nodes(fn: ast.FunctionDef):
    """Nodes of fn's body, not descending into nested functions, lambdas or classes."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    stack = [n for n in fn.body if not isinstance(n, scopes)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, scopes))


def _body_reason(fn: ast.FunctionDef) -> str:
    nodes = list(_own_nodes(fn))
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in nodes):
        return f"{FUNCTION_NAME} is a generator (it uses yield); it must return a bool"
    if not any(isinstance(n, ast.Return) and n.value is not None for n in nodes):
        return f"{FUNCTION_NAME} never returns a value (it would return None); it must return a bool"
    return ""


def _definition_reason(node: ast.AST) -> str:
    if isinstance(node, ast.AsyncFunctionDef):
        return f"{FUNCTION_NAME} is async; it must be a plain function"
    if isinstance(node, ast.ClassDef):
        return f"{FUNCTION_NAME} is a class; it must be a function returning bool"
    if isinstance(node, ast.FunctionDef):
        return _arity_reason(node.args, FUNCTION_NAME) or _body_reason(node)
    value = node.value
    if isinstance(value, ast.Lambda):
        return _arity_reason(value.args, FUNCTION_NAME)
    if isinstance(value, ast.Constant):
        return f"{FUNCTION_NAME} is assigned a constant ({type(value.value).__name__}), not a function"
    return ""  # bound to some other expression: only running it tells


def validate_code(code) -> Validation:
    """Validation(ok=True) if `code` can be a harness, else the one-line reason (syntax error with line, ...)."""
    reason = _invalid_reason(code)
    return Validation(not reason, reason)


def _invalid_reason(code) -> str:
    if isinstance(code, (bytes, bytearray)):
        code = bytes(code).decode("utf-8", errors="replace")
    if not isinstance(code, str):
        return f"program must be text, got {type(code).__name__}"
    if not code.strip():
        return "empty program"
    if len(code) > MAX_CODE_CHARS:
        return f"program is {len(code)} characters; the limit is {MAX_CODE_CHARS}"
    if "\x00" in code:
        return "program contains NUL bytes"
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        detail = f" (col {exc.offset})" if exc.offset else ""
        return f"syntax error at line {exc.lineno}{detail}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"program cannot be parsed ({type(exc).__name__}: nested or chained too deeply)"
    found = _top_level_definitions(tree)
    if not found:
        nested = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == FUNCTION_NAME
                     for n in ast.walk(tree))
        if nested:
            return f"{FUNCTION_NAME} is defined inside a class or function; it must be at top level"
        others = _other_functions(tree)
        hint = f" (it defines: {', '.join(others[:5])})" if others else ""
        return f"no function {FUNCTION_NAME} defined{hint}"
    return _definition_reason(found[-1])


def prepare(output) -> tuple[str, str]:
    """(code, reason): extract_code then validate_code; reason is "" when the code is usable."""
    code = extract_code(output)
    if not code:
        text = _as_text(output)
        return "", "empty output" if not text.strip() else "no Python code found in the output"
    return code, validate_code(code).reason


# ---- sameness ----------------------------------------------------------------------

def program_key(code: str) -> str:
    """What "the same program" means when a child is compared with its parent: the code as ast.unparse
    writes it back (comments, blank lines, spacing and quote style do not count), or the stripped text of
    code that does not parse."""
    try:
        return ast.unparse(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "\n".join(line.rstrip() for line in code.strip().splitlines() if line.strip())
