"""The hand-written reference harness reaches the benchmark's bar on the committed snapshot."""

from collections import defaultdict

import pytest

from harness.dataset import examples_of, load_snapshot
from harness.oracle import is_legal_action, oracle_source, parse_action, parse_state


@pytest.fixture(scope="module")
def scored():
    examples = [e for r in load_snapshot() for e in examples_of(r)]
    return [(e, is_legal_action(e.state, e.action)) for e in examples]


def test_oracle_accuracy_and_balanced_accuracy(scored):
    right = sum(p == e.legal for e, p in scored)
    pos = [p for e, p in scored if e.legal]
    neg = [not p for e, p in scored if not e.legal]
    balanced = (sum(pos) / len(pos) + sum(neg) / len(neg)) / 2
    assert right / len(scored) >= 0.97
    assert balanced >= 0.97


def test_oracle_per_action_type(scored):
    per_type = defaultdict(list)
    for e, p in scored:
        per_type[e.action_type].append(p == e.legal)
    # every type is predictable from the state, not just the overall mix
    assert {t: round(sum(v) / len(v), 3) for t, v in per_type.items() if sum(v) / len(v) < 0.9} == {}


def test_oracle_source_is_self_contained():
    namespace = {}
    exec(compile(oracle_source(), "<oracle>", "exec"), namespace)
    state = "RootWebArea 'x'\n\t[12] button 'OK', clickable, visible\n\t[13] textbox '', visible, editable='plaintext'"
    for action in ["click('12')", "fill('12', 'a')", "fill('13', 'a')", "click('99')", "click(", "noop()"]:
        assert namespace["is_legal_action"](state, action) == is_legal_action(state, action)


@pytest.mark.parametrize("action, parsed", [
    ("click('12')", ("click", ["12"])),
    ("fill(\"5\", 'a b')", ("fill", ["5", "a b"])),
    ("scroll(0, -50)", ("scroll", [0, -50])),
    ("click('12'", None),
    ("click 12", None),
    ("", None),
    ("page.click('1')", None),
])
def test_parse_action(action, parsed):
    assert parse_action(action) == parsed


def test_parse_state_reads_flags_and_options():
    state = ("\t[5] combobox 'Color', visible, hasPopup='menu', expanded=False\n"
             "\t\t[6] option 'Red', visible, selected=False\n\t\t[7] option 'Blue', selected=False\n"
             "\t[8] button 'Go', visible, disabled=True\n\t[9] textbox 'Name', visible, editable='plaintext', readonly=True")
    els = parse_state(state)
    assert els["5"].options == ["Red", "Blue"]
    assert els["8"].disabled and els["8"].visible and not els["7"].visible
    assert els["9"].editable and els["9"].readonly
