"""The harness contract: code extraction from model output and static validation (table-driven)."""

import random

import pytest

from harness.interface import FUNCTION_NAME, SIGNATURE, extract_code, prepare, validate_code

F = "def is_legal_action(state, action):\n    return 'click' in action"
USES_RE = "def is_legal_action(state, action):\n    return bool(BID.search(action))"
HELPERS = "import re\nBID = re.compile(r\"'(\\d+)'\")"
# two real outputs of the embedded SmolLM2-135M-Instruct for the zero-shot prompt of held-out tasks
SMOLLM2_CODE = ('To complete the function, you can use the `is_legal_action` function that returns a boolean '
                'indicating if the action performed is legal or not.\n\n```python\ndef is_legal_action(state, action):'
                '\n    if action == "click":\n        return is_legal_action(state, action)\n    elif action == "click":'
                '\n        return action == "click"\n\nis_legal_action(state, "click")\n```<|im_end|>')
SMOLLM2_PROSE = ('The provided code will take a step-by-step list of steps to write a web server (which is a type of '
                 'software used to run applications on the internet) that can be used to create a web-based '
                 'web-based web-server.<|im_end|>')

# (name, model output, the code extract_code must return)
EXTRACT = [
    ("fenced python", f"Here you go:\n```python\n{F}\n```\nIt checks clicks.", F),
    ("fenced py", f"```py\n{F}\n```", F),
    ("fenced python3, capitalised", f"```Python3\n{F}\n```", F),
    ("fence without language", f"```\n{F}\n```", F),
    ("tilde fence", f"~~~python\n{F}\n~~~", F),
    ("unterminated fence (cut at max tokens)", f"```python\n{F}\n", F),
    ("closing fence glued to the last line", f"```python\n{F}```\nDone.", F),
    ("fence indented in a list item", "1. Code:\n   ```python\n   def is_legal_action(state, action):\n"
                                      "       return True\n   ```\n",
     "def is_legal_action(state, action):\n    return True"),
    ("usage block after the definition", f"```python\n{F}\n```\nUsage:\n```python\n"
                                         "print(is_legal_action('', \"click('1')\"))\n```", F),
    ("json block before the code", f"```json\n{{\"a\": 1}}\n```\n```python\n{F}\n```", F),
    ("revised answer: the last parsing definition wins",
     "```python\ndef is_legal_action(state, action):\n    return True\n```\nCorrected:\n"
     f"```python\n{F}\n```\nBroken draft:\n```python\ndef is_legal_action(state, action):\n    return (\n```", F),
    ("helper block that the function uses is kept", f"```python\n{HELPERS}\n```\nThen:\n```python\n{USES_RE}\n```",
     f"{HELPERS}\n\n{USES_RE}"),
    ("helper block it does not use is dropped", f"```python\nimport os\nX = 1\n```\n```python\n{F}\n```", F),
    ("bare code between prose", f"Sure! Here is the function.\n\nimport re\n\n{F}\n\nThis returns True for clicks.",
     f"import re\n\n{F}"),
    ("bare code only", F, F),
    ("bare code followed by pages of prose", F + "\n\n" + ("Some prose about the page. " * 8 + "\n") * 3000, F),
    ("bare code with decorator and import", f"import functools\n@functools.lru_cache(None)\n{F}",
     f"import functools\n@functools.lru_cache(None)\n{F}"),
    ("bare lambda", "is_legal_action = lambda state, action: True", "is_legal_action = lambda state, action: True"),
    ("chat template leftovers", f"<|im_start|>assistant\n```python\n{F}\n```<|im_end|><|endoftext|>", F),
    ("role line before bare code", f"assistant\n{F}", F),
    ("closed think block", "<think>maybe ```python\ndef is_legal_action(s):\n``` no</think>\n"
                           f"```python\n{F}\n```", F),
    ("unclosed think tag", f"<think>\n```python\n{F}\n```", F),
    ("windows newlines", f"```python\r\n{F}\r\n```".replace("\n    ", "\r\n    "), F),
    ("bytes", f"```python\n{F}\n```".encode(), F),
    ("NUL bytes are dropped", f"```python\n{F}\x00\n```", F),
    ("example usage after the definition is dropped",
     f"```python\n{F}\n\nprint(is_legal_action('', \"click('1')\"))\nassert is_legal_action('', 'noop()')\n"
     "if __name__ == '__main__':\n    print('ok')\nRULES = {'click': 1}\n```", f"{F}\n\nRULES = {{'click': 1}}"),
    ("usage sharing a line with kept code stays", f"{F}\nx = 1; print(x)", f"{F}\nx = 1; print(x)"),
    ("real SmolLM2 output: a usage call that would fail at load is dropped", SMOLLM2_CODE,
     'def is_legal_action(state, action):\n    if action == "click":\n        return is_legal_action(state, action)'
     '\n    elif action == "click":\n        return action == "click"'),
    ("real SmolLM2 output: prose only", SMOLLM2_PROSE, ""),
    ("empty", "", ""),
    ("None", None, ""),
    ("whitespace", " \n\t\n", ""),
    ("prose only", "I cannot help with that request.", ""),
    ("random binary", bytes(range(256)) * 4, ""),
    ("not text at all", 12345, ""),
]


@pytest.mark.parametrize("name,output,expected", EXTRACT, ids=[c[0] for c in EXTRACT])
def test_extract_code(name, output, expected):
    assert extract_code(output) == expected


# (name, code, reason substring; "" = valid)
VALIDATE = [
    ("plain function", F, ""),
    ("annotated signature", SIGNATURE + "\n    return True", ""),
    ("lambda", "is_legal_action = lambda s, a: a.startswith('click')", ""),
    ("defaults beyond two", "def is_legal_action(state, action=None, strict=False):\n    return True", ""),
    ("*args", "def is_legal_action(*args):\n    return True", ""),
    ("optional keyword-only", "def is_legal_action(s, a, *, strict=False):\n    return True", ""),
    ("defined in a top-level try", "try:\n    import re\n    def is_legal_action(s, a):\n        return True\n"
                                   "except ImportError:\n    pass", ""),
    ("bound to another callable (only running tells)", "import foo\nis_legal_action = foo.make()", ""),
    ("return only in a nested helper", "def is_legal_action(s, a):\n    def inner():\n        return 1\n"
                                       "    inner()", "never returns a value"),
    ("empty", "", "empty program"),
    ("whitespace", "  \n\n", "empty program"),
    ("not text", 42, "must be text, got int"),
    ("NUL bytes", "def is_legal_action(s, a):\n    return True\x00", "NUL bytes"),
    ("too long", "x = 1\n" * 20_000 + F, "the limit is 100000"),
    ("syntax error names its line", "import re\n\ndef is_legal_action(state, action)\n    return True",
     "syntax error at line 3"),
    ("bad indentation names its line", F + "\n  x = 1", "syntax error at line 3"),
    ("python 2 print", "print 'hi'\n" + F, "syntax error at line 1"),
    ("too deeply nested", "x = " + "(" * 300 + ")" * 300 + "\n" + F, "syntax error at line 1"),
    ("parser recursion", "x = " + "+".join(["1"] * 30_000) + "\n" + F, "cannot be parsed"),
    ("no function, says what it found", "def is_legal(state, action):\n    return True",
     "no function is_legal_action defined (it defines: is_legal)"),
    ("no function at all", "x = 1", "no function is_legal_action defined"),
    ("method of a class", "class H:\n    def is_legal_action(self, s, a):\n        return True",
     "inside a class or function"),
    ("one argument", "def is_legal_action(state):\n    return True", "takes 1 positional argument;"),
    ("no arguments", "def is_legal_action():\n    return True", "takes 0 positional arguments"),
    ("three required", "def is_legal_action(state, action, extra):\n    return True", "requires 3 positional"),
    ("self first", "def is_legal_action(self, state, action):\n    return True", "requires 3 positional"),
    ("required keyword-only", "def is_legal_action(s, a, *, strict):\n    return True",
     "keyword-only argument(s) strict"),
    ("lambda with one argument", "is_legal_action = lambda s: True", "takes 1 positional argument"),
    ("async", "async def is_legal_action(state, action):\n    return True", "is async"),
    ("generator", "def is_legal_action(s, a):\n    yield True", "is a generator"),
    ("no return", "def is_legal_action(s, a):\n    pass", "never returns a value"),
    ("stub", "def is_legal_action(s, a):\n    ...", "never returns a value"),
    ("class", "class is_legal_action:\n    pass", "is a class"),
    ("constant", "is_legal_action = True", "assigned a constant (bool)"),
    ("the last definition counts", F + "\ndef is_legal_action(state):\n    return True", "takes 1 positional"),
]


@pytest.mark.parametrize("name,code,reason", VALIDATE, ids=[c[0] for c in VALIDATE])
def test_validate_code(name, code, reason):
    result = validate_code(code)
    assert result.ok == (reason == ""), result.reason
    assert reason in result.reason
    assert "\n" not in result.reason and "Traceback" not in result.reason


def test_prepare_says_why_nothing_came_out():
    assert prepare("") == ("", "empty output")
    assert prepare("no code here, sorry") == ("", "no Python code found in the output")
    assert prepare(f"```python\n{F}\n```") == (F, "")
    code, reason = prepare("```python\ndef is_legal_action(state):\n    return True\n```")
    assert code.startswith("def is_legal_action") and "takes 1 positional argument" in reason


def test_the_reference_harness_survives_a_chat_wrapper_unchanged():
    from harness.oracle import oracle_source

    source = oracle_source()
    output = f"<|im_start|>assistant\nHere is the harness:\n```python\n{source}```\nIt mirrors Playwright.<|im_end|>"
    assert extract_code(output) == source.strip("\n")
    assert validate_code(extract_code(output)).ok


def test_contract_names():
    assert FUNCTION_NAME == "is_legal_action"
    assert SIGNATURE == "def is_legal_action(state: str, action: str) -> bool:"


def test_extraction_and_validation_never_raise_on_garbage():
    rng = random.Random(0)
    alphabet = "def is_legal_action(state, action):\n return```python\t'\"#<|>{}[]\\\x00é"
    for _ in range(300):
        size = rng.randrange(0, 400)
        text = "".join(rng.choice(alphabet) for _ in range(size))
        blob = bytes(rng.randrange(256) for _ in range(size))
        for output in (text, blob):
            code, reason = prepare(output)
            assert isinstance(code, str) and isinstance(reason, str)
            assert isinstance(validate_code(code).ok, bool)
