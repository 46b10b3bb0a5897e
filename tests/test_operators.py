"""Prompts (harness.prompts), the rule library (harness.rules) and the mutation operators (harness.operators:
deterministic, hf on a tiny local model, openai over HTTP)."""

import json
import string
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.dataset import Example, make_task
from harness.interface import extract_code
from harness.operators import DeterministicOperator, HFOperator, OpenAIOperator, OperatorError, make_operator
from harness.prompts import (MAX_STATE_CHARS, SYSTEM_PROMPT, build_refine_prompt, build_zero_shot_prompt,
                             state_excerpt, truncate_state)
from harness.rules import RULE_NAMES, active_rules, compose_program
from harness.rewards import score_harness, validation_problem
from harness.failures import failures_to_show


@pytest.fixture(scope="module")
def task():
    return make_task("heldout", seed=7, examples_per_obs=24)


# ---- prompts --------------------------------------------------------------------------

def test_zero_shot_prompt_is_a_function_of_the_task(task):
    a, b = build_zero_shot_prompt(task), build_zero_shot_prompt(make_task("heldout", 7, 24))
    assert a == b
    assert [m["role"] for m in a] == ["system", "user"]
    assert "def is_legal_action(state: str, action: str) -> bool" in a[0]["content"]
    assert "select_option(bid, option)" in a[0]["content"]  # the action grammar
    user = a[1]["content"]
    assert task.state.splitlines()[1].strip() in user  # the observation
    lines = user.splitlines()
    shown = [e for e in task.examples if any(line.startswith(f"{e.action} -> ") for line in lines)]
    assert {e.legal for e in shown} == {True, False} and len(shown) == 6


def test_zero_shot_prompt_stays_compact_on_a_long_page(task):
    rows = "\n".join(f"\t[{i}] button 'Item number {i}', clickable, visible" for i in range(100, 600))
    long_task = replace(task, state=task.state + "\n" + rows)
    user = build_zero_shot_prompt(long_task)[1]["content"]
    assert len(user) < MAX_STATE_CHARS + 1500
    assert "more lines not shown" in user


def test_truncate_state_keeps_whole_bid_lines():
    state = "\n".join([f"\t[{i}] link 'L{i}', clickable, visible\n\t\tStaticText 'text {i}'" for i in range(300)])
    cut = truncate_state(state, 1000)
    lines = cut.splitlines()
    assert len(cut) < 1100 and all(ln in state.splitlines() for ln in lines[:-1])
    assert "StaticText" not in cut  # text lines go first
    assert truncate_state("short", 1000) == "short"


@pytest.mark.parametrize("action,expect", [
    ("click('31')", "[31] combobox"), ("select_option('31', 'Red')", "[32] option 'Red'"),
    ("click('999')", "no element [999]"), ("scroll(0, 100)", "names no element"), ("   ", "names no element"),
])
def test_state_excerpt(action, expect):
    state = ("RootWebArea 'Form'\n\t[31] combobox '', visible, expanded=False\n\t\t[32] option 'Red', selected=False\n"
             "\t[40] button 'Go', clickable, visible\n")
    assert expect in state_excerpt(state, action)


def test_refine_prompt_shows_code_and_five_failures(task):
    code = compose_program([])
    failures = failures_to_show(score_harness(code, task.examples), task.examples)
    messages = build_refine_prompt(task, code, failures + failures)
    user = messages[1]["content"]
    assert messages[0]["content"] == SYSTEM_PROMPT
    assert code.strip() in user
    assert user.count("   expected: ") == 5
    first = failures[0]
    assert first.action in user and state_excerpt(first.state, first.action).splitlines()[0] in user
    with_error = [f for f in failures if f.error]
    assert with_error and with_error[0].error.splitlines()[0][:60] in user  # the browser's error text


def test_refine_prompt_for_an_invalid_program_carries_the_reason(task):
    code = "def is_legal_action(state):\n    return True\n"
    s = score_harness(code, task.examples)
    user = build_refine_prompt(task, code, failures_to_show(s, task.examples))[1]["content"]
    assert not s.valid and s.reason.split(";")[0][:40] in user


# ---- the deterministic operator ------------------------------------------------------

def test_every_rule_subset_program_meets_the_contract():
    for k in range(len(RULE_NAMES) + 1):
        program = compose_program(RULE_NAMES[:k])
        assert validation_problem(program) == ""
        assert active_rules(program) == list(RULE_NAMES[:k])


def test_zero_shot_is_the_minimal_program(task):
    text = DeterministicOperator().zero_shot(task).text
    code = extract_code(text)
    assert active_rules(code) == [] and validation_problem(code) == ""


def test_refine_adds_the_rule_that_fixes_most_shown_failures():
    state = "RootWebArea 'F'\n\t[5] button 'Go', clickable, visible\n"
    failures = [Example(state, a, False) for a in ("click('77')", "hover('78')", "clikc('5')")]
    from harness.rewards import score_predictions
    shown = score_predictions([True, True, True], failures).failures
    op = DeterministicOperator()
    code = extract_code(op.refine(None, compose_program([]), shown).text)
    assert active_rules(code) == ["unknown_bid"]  # fixes two; unknown_verb or malformed fix one each
    again = extract_code(op.refine(None, compose_program([]), shown, seed=99).text)
    assert again == code  # deterministic, seed ignored


def test_refine_with_nothing_left_returns_the_same_program():
    full = compose_program(RULE_NAMES)
    assert extract_code(DeterministicOperator().refine(None, full, []).text) == full.strip("\n")


def test_all_rules_reach_gold_on_the_task(task):
    s = score_harness(compose_program(RULE_NAMES), task.examples)
    assert s.valid and s.balanced_accuracy >= 0.9


# ---- construction ----------------------------------------------------------------------

def test_make_operator_errors_are_one_line():
    with pytest.raises(OperatorError, match="unknown operator 'gpt'"):
        make_operator("gpt")
    with pytest.raises(OperatorError, match="W8_OPERATOR_BASE_URL"):
        make_operator("openai", model="m")
    assert make_operator("deterministic").name == "deterministic"


def test_vllm_operator_says_what_is_missing():
    try:
        import vllm  # noqa: F401
        pytest.skip("vllm is installed here; the missing-package message cannot be shown")
    except ImportError:
        pass
    with pytest.raises(OperatorError, match="vllm package"):
        make_operator("vllm", model="Qwen/Qwen2.5-Coder-1.5B-Instruct")


# ---- openai: a real HTTP endpoint on 127.0.0.1 -------------------------------------

class _ChatHandler(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible /v1/chat/completions endpoint answering with the minimal harness."""

    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        if not self.path.startswith("/v1/"):
            self.send_error(404, "no such route")
            return
        words = sum(len(m["content"].split()) for m in body["messages"])
        answer = "Here it is:\n```python\ndef is_legal_action(state, action):\n    return True\n```"
        reply = {"choices": [{"message": {"role": "assistant", "content": answer}}],
                 "usage": {"prompt_tokens": words, "completion_tokens": len(answer.split())}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    _ChatHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_openai_operator_over_http(task, endpoint):
    op = OpenAIOperator("served-model", endpoint, max_new_tokens=64, temperature=0.7)
    gen = op.zero_shot(task, seed=11)
    path, body = _ChatHandler.requests[0]
    assert path == "/v1/chat/completions"
    assert body["messages"] == build_zero_shot_prompt(task)  # the same prompt the env trains on
    assert (body["model"], body["max_tokens"], body["temperature"], body["seed"]) == ("served-model", 64, 0.7, 11)
    assert gen.prompt_tokens == sum(len(m["content"].split()) for m in body["messages"]) > 0
    assert gen.completion_tokens > 0
    assert validation_problem(extract_code(gen.text)) == ""
    op.refine(task, extract_code(gen.text), [], seed=12)
    assert "Current harness" in _ChatHandler.requests[1][1]["messages"][1]["content"]


def test_openai_operator_error_status_is_one_line(task, endpoint):
    op = OpenAIOperator("served-model", endpoint.replace("/v1", "/missing"), max_new_tokens=32)
    with pytest.raises(OperatorError, match="answered 404"):
        op.zero_shot(task, seed=5)


def test_openai_operator_unreachable_endpoint_is_one_line():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there any more
    op = OpenAIOperator("m", f"http://127.0.0.1:{port}/v1", timeout_s=5)
    with pytest.raises(OperatorError, match="unreachable"):
        op.complete([{"role": "user", "content": "hi"}], seed=0)


# ---- hf: transformers on a tiny randomly initialised local model --------------------

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A 1-layer Llama with a character-level tokenizer and a chat template, built offline."""
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(set(string.printable)):
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}<s>assistant: {% endif %}")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=8192, bos_token_id=1, eos_token_id=2))
    out = tmp_path_factory.mktemp("tinylm")
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


@pytest.mark.slow
def test_hf_operator_counts_tokens_and_is_reproducible(task, tiny_model_dir):

    greedy = HFOperator(str(tiny_model_dir), max_new_tokens=8)
    a, b = greedy.zero_shot(task, seed=1), greedy.zero_shot(task, seed=2)
    text = greedy.tokenizer.apply_chat_template(build_zero_shot_prompt(task), add_generation_prompt=True,
                                                tokenize=False)
    assert a.prompt_tokens == len(text) - 2 * text.count("<s>")  # one token per character, "<s>" is one
    assert 0 < a.completion_tokens <= 8 and a.text == b.text  # greedy ignores the seed
    sampled = HFOperator(str(tiny_model_dir), max_new_tokens=8, temperature=1.0)
    s1, s2 = sampled.zero_shot(task, seed=3), sampled.zero_shot(task, seed=3)
    assert s1.text == s2.text  # seeded sampling is reproducible
    assert {sampled.zero_shot(task, seed=k).text for k in (4, 5)} != {s1.text}  # and it does sample
