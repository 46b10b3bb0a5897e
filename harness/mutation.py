"""Mutation operators and the one prompt builder they share.

    from harness.mutation import build_zero_shot_prompt, build_refine_prompt, make_operator
    messages = build_zero_shot_prompt(task)          # [{"role": ..., "content": ...}, ...]
    op = make_operator("deterministic")              # or "hf", "vllm", "openai"
    gen = op.zero_shot(task, seed=0)                 # gen.text (raw), gen.prompt_tokens, gen.completion_tokens
    gen = op.refine(task, code, failures, seed=1)    # failures: harness.rewards.Failure, up to five shown

`build_zero_shot_prompt(task)` is THE prompt of node 0 of every search, of the SkyRL env's
training rows and of the SFT rows: training targets exactly what the trace measures. It
holds the contract, the action grammar, the observation (truncated at line boundaries)
and a few labeled examples of the task. `build_refine_prompt` adds the current code and
up to five failing examples (state excerpt, action, expected, got, browser error).

Operators return raw model text plus token counts; taking the code out of the text is
harness.interface's job (one place), done by the caller. The LLM operators (hf, vllm,
openai) import their libraries only when built. `deterministic` uses no model: it
composes rule snippets from a fixed library (see DeterministicOperator) and exists for
tests and smoke runs.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from harness.rewards import Failure

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


# ---- prompts --------------------------------------------------------------------------

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


def build_refine_prompt(task: Any, code: str, failures: Sequence[Failure],
                        max_failures: int = MAX_FAILURES) -> list[dict[str, str]]:
    """Chat messages asking to fix `code` given up to `max_failures` failing examples."""
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
    lines += ["", "Return the complete corrected program."]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]


# ---- operators ------------------------------------------------------------------------

@dataclass(frozen=True)
class Generation:
    """One operator answer: the raw text and what it cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0


class Operator:
    """A mutation operator: a zero-shot harness for a task, or a refinement of a harness."""

    name = "operator"
    model = ""

    def zero_shot(self, task: Any, seed: int = 0) -> Generation:
        raise NotImplementedError

    def refine(self, task: Any, code: str, failures: Sequence[Failure], seed: int = 0) -> Generation:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model}


class ChatOperator(Operator):
    """An LLM operator: both calls go through the shared prompt builder and `complete`."""

    def __init__(self, max_new_tokens: int = 512, temperature: float = 0.0):
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature

    def complete(self, messages: list[dict[str, str]], seed: int) -> Generation:
        raise NotImplementedError

    def zero_shot(self, task: Any, seed: int = 0) -> Generation:
        return self._timed(build_zero_shot_prompt(task), seed)

    def refine(self, task: Any, code: str, failures: Sequence[Failure], seed: int = 0) -> Generation:
        return self._timed(build_refine_prompt(task, code, failures), seed)

    def _timed(self, messages: list[dict[str, str]], seed: int) -> Generation:
        start = time.perf_counter()
        gen = self.complete(messages, seed)
        return Generation(gen.text, gen.prompt_tokens, gen.completion_tokens, time.perf_counter() - start)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "max_new_tokens": self.max_new_tokens,
                "temperature": self.temperature}


class OperatorError(RuntimeError):
    """An operator cannot be built or reached; the message names the missing piece."""


def resolve_model_path(name: str) -> str:
    """harness.train_local.resolve_model(name) if the trainer module has it, else `name` itself."""
    try:
        from harness.train_local import resolve_model
    except ImportError:
        return name
    try:
        return str(resolve_model(name))
    except Exception as err:  # ModelError and friends: one line for the user, not a stack trace
        raise OperatorError(f"model {name!r}: {err}") from None


class HFOperator(ChatOperator):
    """transformers AutoModelForCausalLM + the tokenizer's chat template, on CPU or one GPU.

    temperature 0 decodes greedily; otherwise it samples with torch seeded by `seed`, so a
    node's answer is reproducible on the same hardware and library versions.
    """

    name = "hf"

    def __init__(self, model: str, max_new_tokens: int = 512, temperature: float = 0.0, device: str | None = None):
        super().__init__(max_new_tokens, temperature)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = model
        path = resolve_model_path(model)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.lm = AutoModelForCausalLM.from_pretrained(path).to(self.device).eval()

    def complete(self, messages: list[dict[str, str]], seed: int) -> Generation:
        import torch

        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = self.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(self.device)
        sampling = {"do_sample": False}
        if self.temperature > 0:
            torch.manual_seed(seed)
            sampling = {"do_sample": True, "temperature": self.temperature, "top_p": 1.0, "top_k": 0}
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with torch.no_grad():
            out = self.lm.generate(**inputs, max_new_tokens=self.max_new_tokens, pad_token_id=pad, **sampling)
        n_prompt = inputs["input_ids"].shape[1]
        new = out[0, n_prompt:]
        return Generation(self.tokenizer.decode(new, skip_special_tokens=True), int(n_prompt), int(new.shape[0]))


# The engine settings SkyRL's own vLLM servers use (skyrl/backends/skyrl_train/inference_servers/
# utils.py, build_vllm_cli_args): bf16 weights (InferenceEngineConfig.model_dtype) and vLLM's own
# generation defaults instead of the model's generation_config.json. The frozen and the trained
# search both decode through this class, so both arms decode the same way, and the same way
# GRPO sampled; compare refuses traces whose operators differ in these fields.
VLLM_ENGINE_ARGS = {"dtype": "bfloat16", "generation_config": "vllm", "enable_prefix_caching": True,
                    "trust_remote_code": True}


class VLLMOperator(ChatOperator):
    """In-process `vllm.LLM` (GPU nodes); vllm is imported only when this is built."""

    name = "vllm"

    def __init__(self, model: str, max_new_tokens: int = 512, temperature: float = 0.0,
                 gpu_memory_utilization: float = 0.6):
        super().__init__(max_new_tokens, temperature)
        try:
            import vllm
        except ImportError:
            raise OperatorError("operator vllm needs the vllm package (the GPU node's SkyRL env)") from None
        self.model = model
        self._vllm = vllm
        self.llm = vllm.LLM(model=resolve_model_path(model), gpu_memory_utilization=gpu_memory_utilization,
                            **VLLM_ENGINE_ARGS)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dtype": VLLM_ENGINE_ARGS["dtype"],
                "generation_config": VLLM_ENGINE_ARGS["generation_config"]}

    def complete(self, messages: list[dict[str, str]], seed: int) -> Generation:
        params = self._vllm.SamplingParams(max_tokens=self.max_new_tokens, temperature=self.temperature, seed=seed)
        out = self.llm.chat([messages], params, use_tqdm=False)[0]
        return Generation(out.outputs[0].text, len(out.prompt_token_ids or []), len(out.outputs[0].token_ids))


class OpenAIOperator(ChatOperator):
    """Any OpenAI-compatible /v1/chat/completions endpoint (e.g. `vllm serve`).

    Uses the `openai` package when installed, else plain urllib. The API key comes from
    OPENAI_API_KEY if set (a local `vllm serve` needs none). Token counts come from the
    response's `usage`; an endpoint that omits it yields 0.
    """

    name = "openai"

    def __init__(self, model: str, base_url: str, max_new_tokens: int = 512, temperature: float = 0.0,
                 timeout_s: float = 300.0):
        super().__init__(max_new_tokens, temperature)
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.api_key = os.environ.get("OPENAI_API_KEY", "EMPTY")

    def _payload(self, messages: list[dict[str, str]], seed: int) -> dict[str, Any]:
        return {"model": self.model, "messages": messages, "max_tokens": self.max_new_tokens,
                "temperature": self.temperature, "seed": seed}

    def complete(self, messages: list[dict[str, str]], seed: int) -> Generation:
        try:
            import openai
        except ImportError:
            return self._complete_urllib(messages, seed)
        client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s)
        try:
            resp = client.chat.completions.create(**self._payload(messages, seed))
        except openai.APIConnectionError as err:
            raise OperatorError(f"openai endpoint {self.base_url} unreachable: {err}") from None
        except openai.APIStatusError as err:
            raise OperatorError(f"openai endpoint {self.base_url} answered {err.status_code}: {err.message}") from None
        usage = resp.usage
        return Generation(resp.choices[0].message.content or "", getattr(usage, "prompt_tokens", 0) or 0,
                          getattr(usage, "completion_tokens", 0) or 0)

    def _complete_urllib(self, messages: list[dict[str, str]], seed: int) -> Generation:
        body = json.dumps(self._payload(messages, seed)).encode()
        req = urllib.request.Request(self.base_url + "/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.api_key}"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read().decode())
        except urllib.error.URLError as err:
            raise OperatorError(f"openai endpoint {self.base_url} unreachable: {err}") from None
        usage = data.get("usage") or {}
        text = (data.get("choices") or [{}])[0].get("message", {}).get("content") or ""
        return Generation(text, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))


# ---- the deterministic operator -------------------------------------------------------

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
def _rule_function(active: frozenset[str]) -> Any:
    """The compiled is_legal_action of a rule set (our own generated code, run in-process)."""
    scope: dict[str, Any] = {}
    exec(compile(compose_program(sorted(active)), "<rule-library>", "exec"), scope)
    return scope["is_legal_action"]


def _fixes(active: list[str], rule: str, failures: Sequence[Failure]) -> int:
    """How many of the shown failures the program with `rule` added gets right."""
    harness = _rule_function(frozenset(active + [rule]))
    fixed = 0
    for f in failures:
        try:
            fixed += harness(f.state, f.action) is f.expected
        except Exception:
            pass
    return fixed


class DeterministicOperator(Operator):
    """Rule-based edits from a library of checks; no model.

    zero_shot: the minimal program (no rule: everything that parses is legal).
    refine: adds the library rule that fixes the most shown failures (ties: library order);
    if none fixes any, the next unused rule in library order; if all are used, the same
    program. Deterministic given its inputs (the seed is ignored). Token counts are 0.
    """

    name = "deterministic"
    model = "rule-library"

    def zero_shot(self, task: Any, seed: int = 0) -> Generation:
        return Generation(_fence(compose_program([])))

    def refine(self, task: Any, code: str, failures: Sequence[Failure], seed: int = 0) -> Generation:
        start = time.perf_counter()
        active = active_rules(code)
        unused = [r for r in RULE_NAMES if r not in active]
        if unused:
            shown = list(failures)[:MAX_FAILURES]
            counts = [_fixes(active, r, shown) for r in unused]
            active = active + [unused[max(range(len(unused)), key=lambda i: (counts[i], -i))]]
        return Generation(_fence(compose_program(active)), wall_s=time.perf_counter() - start)


def _fence(code: str) -> str:
    return "```python\n" + code + "```\n"


# ---- construction -------------------------------------------------------------------

OPERATORS = ("deterministic", "hf", "vllm", "openai")


def make_operator(name: str, model: str = "", backend: str = "local", max_new_tokens: int = 512,
                  temperature: float = 0.0, base_url: str = "") -> Operator:
    """Build an operator by name; "auto" is hf on the local backend and vllm on skyrl."""
    if name == "auto":
        name = "vllm" if backend == "skyrl" else "hf"
    if name == "deterministic":
        return DeterministicOperator()
    if name == "hf":
        return HFOperator(model, max_new_tokens, temperature)
    if name == "vllm":
        return VLLMOperator(model, max_new_tokens, temperature)
    if name == "openai":
        if not base_url:
            raise OperatorError("operator openai needs an endpoint: set W8_OPERATOR_BASE_URL (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIOperator(model, base_url, max_new_tokens, temperature)
    raise OperatorError(f"unknown operator {name!r}: expected auto or one of {', '.join(OPERATORS)}")


def operator_from_config(cfg: Any) -> Operator:
    """make_operator with the knobs operator, harness_model, backend, operator_* ."""
    return make_operator(cfg.operator, cfg.harness_model, cfg.backend, cfg.operator_max_new_tokens,
                         cfg.operator_temperature, cfg.operator_base_url)
