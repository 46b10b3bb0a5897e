"""Composite reward: table-driven (program, examples, expected reward/BA/recall) through the real sandbox."""

import pytest

from harness.dataset import Example
from harness.oracle import oracle_source
from harness.rewards import Failure, is_gold, score_harness, score_predictions, score_text
from harness.sandbox import run_harness

STATE = """RootWebArea 'Search form', focused
\t[13] textbox 'From:', clickable, visible, focusable=True, editable='plaintext'
\t[27] button 'Search', clickable, visible
\t[31] combobox '', visible, hasPopup='menu', expanded=False
\t\t[32] option 'Red', selected=False
\t\t[33] option 'Blue', selected=False
\t[40] button 'Hidden', clickable
"""


def ex(action, legal, changed=False, error=""):
    return Example(STATE, action, legal, error=error or ("" if legal else "Error: action failed"), dom_changed=changed,
                   action_type=action.split("(")[0])


# 4 legal (3 change the DOM) and 4 illegal actions on one form
EXAMPLES = [
    ex("click('27')", True, changed=True),
    ex("fill('13', 'hi')", True, changed=True),
    ex("select_option('31', 'Red')", True, changed=True),
    ex("scroll(0, 100)", True),
    ex("click('99')", False, error='ValueError: Could not find element with bid "99"'),
    ex("fill('27', 'x')", False, error="Error: Element is not an <input>, <textarea> or [contenteditable] element"),
    ex("click('40')", False, error="TimeoutError: Locator.click: Timeout 500ms exceeded."),
    ex("clikc('27')", False, error="NameError: Invalid action type 'clikc'."),
]

F = "def is_legal_action(state, action):\n"
# (name, program, reward, balanced accuracy, accuracy, effective recall, valid, bad returns)
TABLE = [
    ("always_true", F + "    return True\n", 0.6, 0.5, 0.5, 1.0, True, 0),
    ("always_false", F + "    return False\n", 0.4, 0.5, 0.5, 0.0, True, 0),
    ("oracle", oracle_source(), 1.0, 1.0, 1.0, 1.0, True, 0),
    # TP=1 (click 27), TN=2 -> TPR 1/4, TNR 2/4 -> BA 0.375; recall 1/3
    ("clicks_only", F + "    return action.startswith('click')\n", 0.8 * 0.375 + 0.2 / 3, 0.375, 3 / 8, 1 / 3, True, 0),
    # fill raises -> wrong on both fills; TP=3, TN=0 -> BA 0.375; recall 2/3
    ("raises_on_fill", F + "    if action.startswith('fill'):\n        raise ValueError('boom')\n    return True\n",
     0.8 * 0.375 + 0.2 * 2 / 3, 0.375, 3 / 8, 2 / 3, True, 2),
    ("non_bool", F + "    return 'yes'\n", 0.0, 0.0, 0.0, 0.0, True, 8),
    ("numpy_style_truthy", F + "    return 1\n", 0.0, 0.0, 0.0, 0.0, True, 8),
    ("syntax_error", F + "    return (\n", 0.0, 0.0, 0.0, 0.0, False, 0),
    ("no_function", "def legal(state, action):\n    return True\n", 0.0, 0.0, 0.0, 0.0, False, 0),
    ("crash_on_load", "raise RuntimeError('no')\n" + F + "    return True\n", 0.0, 0.0, 0.0, 0.0, False, 0),
    ("kills_itself_per_call", "import os\n" + F + "    os.kill(os.getpid(), 9)\n    return True\n", 0.0, 0.0, 0.0, 0.0, True, 8),
    ("kills_itself_on_load", "import os\nos.kill(os.getpid(), 9)\n" + F + "    return True\n", 0.0, 0.0, 0.0, 0.0,
     False, 0),
    ("prints_megabytes", F + "    print('x' * 5_000_000)\n    return True\n", 0.6, 0.5, 0.5, 1.0, True, 0),
]


@pytest.mark.parametrize("name,program,reward,ba,acc,recall,valid,bad", TABLE, ids=[row[0] for row in TABLE])
def test_reward_table(name, program, reward, ba, acc, recall, valid, bad):
    s = score_harness(program, EXAMPLES)
    assert s.valid is valid, s.reason
    assert s.reward == pytest.approx(reward)
    assert s.balanced_accuracy == pytest.approx(ba)
    assert s.accuracy == pytest.approx(acc)
    assert s.effective_recall == pytest.approx(recall)
    assert s.n_bad_returns == bad
    assert bool(s.reason) is (not valid)
    if valid:
        assert len(s.failures) == round((1 - acc) * len(EXAMPLES))


def test_invalid_reasons_name_the_problem():
    assert "syntax error" in score_harness(F + "    return (\n", EXAMPLES).reason
    assert "is_legal_action" in score_harness("def legal(s, a):\n    return True\n", EXAMPLES).reason
    assert "RuntimeError" in score_harness("raise RuntimeError('no')\n" + F + "    return True\n", EXAMPLES).reason


@pytest.mark.parametrize("text", [b"\x00\xff\xfe\x00binary", "", None, "Sure! Here is my answer.", "```python\n```"])
def test_empty_or_binary_output_is_scored_not_raised(text):
    code, s = score_text(text, EXAMPLES)
    assert not s.valid and s.reward == 0.0 and s.reason


def test_per_example_errors_reach_the_failures():
    s = score_harness(F + "    if action.startswith('fill'):\n        raise ValueError('boom')\n    return True\n", EXAMPLES)
    fill_legal = next(f for f in s.failures if f.action == "fill('13', 'hi')")
    assert fill_legal.got is None and fill_legal.expected is True and "boom" in fill_legal.harness_error
    hidden = next(f for f in s.failures if f.action == "click('40')")
    assert hidden.got is True and "Timeout" in hidden.error  # the browser's error text travels with it


def test_labels_never_reach_the_runner():
    seen = []

    def recording_runner(code, examples, timeout_s, backend):
        seen.extend(examples)
        return run_harness(code, examples, timeout_s=timeout_s, backend=backend)

    score_harness(F + "    return True\n", EXAMPLES, runner=recording_runner)
    assert seen and all(set(e) == {"state", "action"} for e in seen)


def test_recall_falls_back_to_tpr_without_dom_changes():
    plain = [Example(STATE, e.action, e.legal, e.error, False) for e in EXAMPLES]
    preds = [True, False, False, True, False, False, False, False]  # TPR 2/4, TNR 1
    s = score_predictions(preds, plain, recall_weight=0.2)
    assert s.effective_recall == pytest.approx(0.5)
    assert s.balanced_accuracy == pytest.approx(0.75)
    assert s.reward == pytest.approx(0.8 * 0.75 + 0.2 * 0.5)
    always_reject = score_predictions([False] * 8, plain)
    assert always_reject.reward == pytest.approx(0.4)  # blocking everything earns no recall


@pytest.mark.parametrize("w,expected", [(0.0, 0.375), (1.0, 1 / 3), (0.5, 0.5 * 0.375 + 0.5 / 3)])
def test_recall_weight(w, expected):
    preds = [True, False, False, False, True, False, True, False]
    assert score_predictions(preds, EXAMPLES, recall_weight=w).reward == pytest.approx(expected)


def test_one_class_examples_use_the_present_class():
    legal_only = [e for e in EXAMPLES if e.legal]
    s = score_predictions([True, True, False, False], legal_only)
    assert s.balanced_accuracy == pytest.approx(0.5)


def test_prediction_count_mismatch_is_invalid():
    s = score_predictions([True], EXAMPLES)
    assert not s.valid and "1 predictions for 8 examples" in s.reason


@pytest.mark.parametrize("ba,threshold,gold", [(0.9, 0.9, True), (0.8999, 0.9, False), (1.0, 1.0, True),
                                               (0.95, 0.96, False)])
def test_is_gold_threshold(ba, threshold, gold):
    assert is_gold(ba, threshold) is gold


def test_invalid_program_is_never_gold():
    s = score_harness("def nope(:\n", EXAMPLES)
    assert not is_gold(s, 0.0001)


def test_failure_json_clips_state():
    f = Failure(0, "x" * 1000, "click('1')", True, False)
    assert len(f.to_json(state_chars=100)["state"]) == 100
