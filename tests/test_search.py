"""Thompson-sampling search: sampling behaviour, stopping, traces, bad operator output, resume after a real kill."""

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.dataset import make_task
from harness.config import load_config
from dataclasses import replace

from harness.operators import ChatOperator, DeterministicOperator, Generation, Operator
from harness.search import (Node, SandboxDown, SearchKnobs, SearchSpec, SearchStateError, Trace, run_search,
                            run_searches, steps_to_first_gold, thompson_pick, without_timing)

def knobs(**over):
    """SearchKnobs from the knob table (local sandbox), with some knobs set: how the pipeline builds them."""
    env = {"W8_SANDBOX": "local", **{f"W8_{'TRACE_' if k == 'max_iterations' else 'HARNESS_'}{k.upper()}": str(v)
                                     for k, v in over.items()}}
    return SearchKnobs.from_config(load_config(env=env))


REPO = Path(__file__).resolve().parents[1]
TASK_SEED = 3  # the deterministic operator needs 11 refinements here: long enough to kill mid-way


@pytest.fixture(scope="module")
def task():
    return make_task("heldout", seed=TASK_SEED, examples_per_obs=24)


@pytest.fixture(scope="module")
def reference(task):
    """The uninterrupted deterministic search every resume must reproduce."""
    return run_search(task, DeterministicOperator(), knobs(), progress=None).to_trace()


def node(index, reward, gold=False):
    return Node(index=index, parent=None if index == 0 else 0, reward=reward, balanced_accuracy=reward,
                accuracy=reward, effective_recall=reward, valid=True, reason="", gold=gold, code="")


# ---- Thompson sampling --------------------------------------------------------------

def test_thompson_pick_is_seeded():
    nodes = [node(0, 0.4), node(1, 0.6), node(2, 0.5)]
    picks = [[thompson_pick(nodes, [0, 1, 2], 20.0, rng) for _ in range(50)] for rng in
             (random.Random(5), random.Random(5))]
    assert picks[0] == picks[1]
    assert len(set(picks[0])) > 1  # it samples, it does not just take the argmax


class RecordingRandom(random.Random):
    """Records the Beta parameters asked for and returns scripted draws."""

    def __init__(self, draws):
        super().__init__(0)
        self.asked, self.draws = [], list(draws)

    def betavariate(self, alpha, beta):
        self.asked.append((alpha, beta))
        return self.draws.pop(0)


def test_thompson_draws_beta_1_plus_c_h_and_1_plus_c_1_minus_h_plus_n_per_node():
    nodes = [node(0, 0.25), node(1, 0.5), node(2, 1.0)]
    rng = RecordingRandom([0.3, 0.9, 0.1])
    assert thompson_pick(nodes, [2, 0, 5], 20.0, rng) == 1
    assert rng.asked == [(1 + 20.0 * 0.25, 1 + 20.0 * 0.75 + 2), (1 + 20.0 * 0.5, 1 + 20.0 * 0.5 + 0),
                         (1 + 20.0 * 1.0, 1 + 0.0 + 5)]


def test_thompson_ties_go_to_the_lower_index():
    nodes = [node(0, 0.5), node(1, 0.5), node(2, 0.5)]
    assert thompson_pick(nodes, [0, 0, 0], 20.0, RecordingRandom([0.2, 0.7, 0.7])) == 1
    assert thompson_pick(nodes, [0, 0, 0], 20.0, RecordingRandom([0.7, 0.7, 0.7])) == 0


def test_better_node_is_refined_more_often():
    rng = random.Random(0)
    nodes = [node(0, 0.3), node(1, 0.8)]
    picks = [thompson_pick(nodes, [0, 0], 20.0, rng) for _ in range(2000)]
    assert picks.count(1) > 0.9 * len(picks)


def test_refinement_count_pushes_towards_other_nodes():
    rng = random.Random(0)
    nodes = [node(0, 0.7), node(1, 0.7)]
    picks = [thompson_pick(nodes, [0, 30], 20.0, rng) for _ in range(2000)]
    assert picks.count(0) > 0.9 * len(picks)


def test_larger_c_exploits_more():
    nodes = [node(0, 0.5), node(1, 0.6)]

    def share_of_better(c):
        rng = random.Random(1)
        return sum(thompson_pick(nodes, [0, 0], c, rng) for _ in range(3000)) / 3000

    assert share_of_better(200.0) > share_of_better(1.0) + 0.1


# ---- steps_to_first_gold ---------------------------------------------------------------

@pytest.mark.parametrize("golds,expected", [
    ([False, False, True, True], 2), ([True], 0), ([False] * 17, None), ([False, True], 1), ([], None)])
def test_steps_to_first_gold_on_crafted_traces(golds, expected):
    t = Trace({"task_id": "x"}, {"max_iterations": 16}, {"name": "crafted"},
              [node(i, 0.95 if g else 0.5, g) for i, g in enumerate(golds)])
    assert t.steps_to_first_gold() == expected
    assert steps_to_first_gold(t.to_trace()) == expected
    assert t.to_trace()["steps_to_first_gold"] == expected


# ---- whole searches (deterministic operator, real sandbox) ------------------------

def test_search_reaches_gold_and_stops(task, reference):
    nodes = reference["nodes"]
    assert reference["steps_to_first_gold"] == len(nodes) - 1 <= 16
    assert reference["stop_reason"] == "gold" and reference["finished"]
    assert [n["gold"] for n in nodes] == [False] * (len(nodes) - 1) + [True]
    assert nodes[-1]["balanced_accuracy"] >= 0.9
    assert nodes[0]["parent"] is None and all(n["parent"] < n["index"] for n in nodes[1:])
    assert reference["task"]["examples_hash"] == task.examples_hash
    assert reference["knobs"] == {"search_c": 20.0, "max_iterations": 16, "gold_threshold": 0.9,
                                  "reward_recall_weight": 0.2, "search_seed": 0, "sandbox_timeout_s": 2.0}
    assert reference["tokens"] == {"prompt": 0, "completion": 0, "total": 0}
    assert all(len(n["shown"]) <= 5 for n in nodes) and nodes[0]["failures"] and not nodes[0]["shown"]


def test_same_seed_same_trace(task, reference):
    again = run_search(task, DeterministicOperator(), knobs(), progress=None).to_trace()
    assert without_timing(again) == without_timing(reference)


def test_budget_caps_the_nodes(task):
    lines = []
    t = run_search(task, DeterministicOperator(), knobs(max_iterations=2), progress=lines.append).to_trace()
    assert t["n_nodes"] == 3 and t["steps_to_first_gold"] is None and t["stop_reason"] == "budget"
    assert [ln.split()[:4] for ln in lines] == [["node", "0", "parent", "-"], ["node", "1", "parent", "0"],
                                                ["node", "2", "parent", lines[2].split()[3]]]


def test_gold_nodes_record_heldout_accuracy():
    task = make_task("heldout", seed=0, examples_per_obs=24)
    others = [e for e in make_task("train", seed=0, examples_per_obs=24).examples]
    t = run_search(task, DeterministicOperator(), knobs(), heldout=others, progress=None).to_trace()
    gold = [n for n in t["nodes"] if n["gold"]]
    assert gold and 0.0 <= gold[0]["heldout_accuracy"] <= 1.0
    assert all(n["heldout_accuracy"] is None for n in t["nodes"] if not n["gold"])
    seen = []
    run_search(task, DeterministicOperator(), knobs(), heldout=lambda code: seen.append(code) or 0.25, progress=None)
    assert len(seen) == 1 and "def is_legal_action" in seen[0]


class ScriptedOperator(Operator):
    """Plays back fixed answers: the bad outputs a small model produces."""

    name = "scripted"

    def __init__(self, texts):
        self.texts = list(texts)

    def answer(self, requests):
        return [Generation(self.texts.pop(0), 10 if r.code is None else 20, 5 if r.code is None else 7)
                for r in requests]


def test_bad_operator_output_never_kills_the_search(task):
    texts = [b"\x00\xff\xfe binary", "", "I cannot help with that.",
             "def is_legal_action(state, action):\n    print('x' * 3_000_000)\n    return 'yes'\n",
             "import os\ndef is_legal_action(state, action):\n    os.kill(os.getpid(), 9)\n    return True\n",
             "```python\ndef is_legal_action(state, action):\n    return (\n```"]
    t = run_search(task, ScriptedOperator(texts), knobs(max_iterations=5), progress=None).to_trace()
    nodes = t["nodes"]
    assert len(nodes) == 6 and t["stop_reason"] == "budget"
    assert all(n["reward"] == 0.0 for n in nodes)
    assert [n["valid"] for n in nodes] == [False, False, False, True, True, False]
    assert all(n["reason"] for n in nodes if not n["valid"])
    assert "syntax" in nodes[5]["reason"]
    assert t["tokens"] == {"prompt": 10 + 5 * 20, "completion": 5 + 5 * 7, "total": 150}


def test_a_sandbox_that_fails_stops_the_search_instead_of_scoring_zeros(task, tmp_path, monkeypatch):
    """W8_SANDBOX=daytona asked for explicitly with no key: the sandbox cannot run anything (a real
    SandboxError, no fake). The search stops before recording a node, keeps the round's other
    searches' nodes, and says so in one line."""
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    broken = replace(knobs(), reward=replace(knobs().reward, sandbox="daytona"))
    specs = [SearchSpec(task, knobs(), state_path=tmp_path / "ok.json"),
             SearchSpec(task, broken, state_path=tmp_path / "down.json", label="down")]
    with pytest.raises(SandboxDown) as err:
        run_searches(specs, DeterministicOperator(), progress=None)
    assert "\n" not in str(err.value) and str(err.value).startswith("down: the sandbox failed node 0 twice")
    assert json.loads((tmp_path / "ok.json").read_text())["trace"]["n_nodes"] == 1
    assert not (tmp_path / "down.json").exists()


def test_state_of_another_search_is_refused(task, tmp_path):
    state = tmp_path / "state.json"
    run_search(task, DeterministicOperator(), knobs(max_iterations=1), state_path=state, progress=None)
    with pytest.raises(SearchStateError, match=r"knobs\.gold_threshold"):
        run_search(task, DeterministicOperator(), knobs(max_iterations=1, gold_threshold=0.95), state_path=state,
                   progress=None)
    other = make_task("heldout", seed=TASK_SEED + 1, examples_per_obs=24)
    with pytest.raises(SearchStateError, match=r"task\.(task_id|seed|examples_hash)"):
        run_search(other, DeterministicOperator(), knobs(max_iterations=1), state_path=state, progress=None)


def test_finished_state_is_returned_as_is(task, tmp_path):
    state = tmp_path / "state.json"
    first = run_search(task, DeterministicOperator(), knobs(max_iterations=1), state_path=state, progress=None)
    lines = []
    second = run_search(task, DeterministicOperator(), knobs(max_iterations=1), state_path=state, progress=lines.append)
    assert without_timing(second.to_trace()) == without_timing(first.to_trace())
    assert lines == [f"resumed {state}: 2 node(s) done"]


# ---- resume after a real SIGKILL --------------------------------------------------------

KILLER = textwrap.dedent("""
    import os, signal, sys
    from harness.dataset import make_task
    from harness.config import load_config
    from harness.operators import DeterministicOperator
    from harness.search import SearchKnobs, run_search

    mode, at, state = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    class KilledOperator(DeterministicOperator):
        calls = 0

        def answer(self, requests):
            KilledOperator.calls += sum(r.code is not None for r in requests)
            if mode == "operator" and KilledOperator.calls == at:  # dies while node `at` is being made
                os.kill(os.getpid(), signal.SIGKILL)
            return super().answer(requests)

    def progress(line):
        print(line, flush=True)
        if mode == "progress" and line.split()[1] == str(at):  # dies right after node `at` was saved
            os.kill(os.getpid(), signal.SIGKILL)

    knobs = SearchKnobs.from_config(load_config(env={"W8_SANDBOX": "local"}))
    run_search(make_task("heldout", seed=%d, examples_per_obs=24), KilledOperator(), knobs, state_path=state,
               progress=progress)
""" % TASK_SEED)


@pytest.mark.slow
@pytest.mark.parametrize("mode,at,saved", [("progress", 3, 4), ("operator", 6, 6)])
def test_resume_after_kill_gives_the_same_trace(task, reference, tmp_path, mode, at, saved):
    state = tmp_path / "state.json"
    killed = subprocess.run([sys.executable, "-c", KILLER, mode, str(at), str(state)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    partial = json.loads(state.read_text())["trace"]
    assert partial["n_nodes"] == saved < reference["n_nodes"] and not partial["finished"]
    lines = []
    resumed = run_search(task, DeterministicOperator(), knobs(), state_path=state, progress=lines.append).to_trace()
    assert lines[0] == f"resumed {state}: {saved} node(s) done" and lines[1].startswith(f"node {saved:>3}")
    assert without_timing(resumed) == without_timing(reference)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp file left behind


def test_cli_runs_one_search(tmp_path):
    out = tmp_path / "trace.json"
    run = subprocess.run([sys.executable, "-m", "harness.search", "--operator", "deterministic", "--task-seed",
                          str(TASK_SEED), "--trace-max-iterations", "2", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "steps_to_first_gold not reached | nodes 3" in run.stdout
    assert run.stderr.count("\nnode ") == 3
    trace = json.loads(out.read_text())
    assert trace["n_nodes"] == 3 and trace["task"]["seed"] == TASK_SEED
    assert Path(f"{out}.state.json").exists()


def test_cli_bad_knob_is_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "harness.search", "--operator", "deterministic",
                          "--harness-gold-threshold", "1.5", "--out", str(tmp_path / "t.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip().count("\n") == 0
    assert "--harness-gold-threshold" in run.stderr


class PromptRecorder(ChatOperator):
    """An LLM stand-in that always answers the same wrong program and records every prompt it is asked."""

    name = "recorder"

    def __init__(self):
        super().__init__(max_new_tokens=64, temperature=0.7)
        self.prompts = []

    def complete_batch(self, batch, seeds):
        self.prompts += [json.dumps(messages) for messages in batch]
        return [Generation("```python\ndef is_legal_action(state, action):\n    return True\n```", 1, 1)] * len(batch)


def test_a_search_never_asks_the_same_prompt_twice(task):
    """The frozen model's failure mode: the same wrong program refined again and again. Each refinement
    of one node shows another window of its failures and says which attempt it is."""
    recorder = PromptRecorder()
    run_search(task, recorder, knobs(max_iterations=8), progress=None)
    assert len(recorder.prompts) == 9 and len(set(recorder.prompts)) == 9


def test_select_failures_slides_its_window_with_the_attempt(task):
    from harness.rewards import score_harness
    from harness.failures import failure_candidates, select_failures

    score = score_harness("def is_legal_action(state, action):\n    return True\n", task.examples)
    candidates = failure_candidates(score, task.examples)
    assert len(candidates) > 5
    windows = [tuple(f.index for f in select_failures(candidates, attempt=a)) for a in range(3)]
    assert all(len(w) == 5 for w in windows) and len(set(windows)) == 3
    assert set().union(*windows) <= {f.index for f in candidates}


def test_batched_searches_give_the_same_traces_as_one_by_one(tmp_path):
    """Rounds over several (task, seed) searches with one operator, scored in parallel, equal each
    search run alone (deterministic operator: the answers depend on the request only)."""
    from harness.search import SearchSpec, run_searches

    tasks = [make_task("heldout", seed, 12) for seed in (7, 8)]
    specs = [SearchSpec(t, knobs(max_iterations=4)) for t in tasks for _ in (0,)]
    seeded = [SearchSpec(t, replace(knobs(max_iterations=4), seed=s)) for t in tasks for s in (0, 1)]
    batched = run_searches(seeded + specs, DeterministicOperator(), progress=None)
    alone = [run_search(sp.task, DeterministicOperator(), sp.knobs, progress=None) for sp in seeded + specs]
    assert [without_timing(b.to_trace()) for b in batched] == [without_timing(a.to_trace()) for a in alone]
    # a crash in the third round (the operator dies): each search's state holds the nodes it finished
    paths = [tmp_path / f"s{i}.json" for i in range(len(seeded))]

    class DiesInRoundThree(DeterministicOperator):
        rounds = 0

        def answer(self, requests):
            DiesInRoundThree.rounds += 1
            if DiesInRoundThree.rounds == 3:
                raise RuntimeError("killed mid-round")
            return super().answer(requests)

    with pytest.raises(RuntimeError, match="killed mid-round"):
        run_searches([SearchSpec(sp.task, sp.knobs, state_path=p) for sp, p in zip(seeded, paths)],
                     DiesInRoundThree(), progress=None)
    resumed = run_searches([SearchSpec(sp.task, sp.knobs, state_path=p) for sp, p in zip(seeded, paths)],
                           DeterministicOperator(), progress=None)
    assert [without_timing(r.to_trace())["nodes"] for r in resumed] == \
        [without_timing(a.to_trace())["nodes"] for a in alone[:len(seeded)]]


def test_memorisation_shows_on_held_out_observations(task):
    """A lookup table of the task's own labeled actions is gold on the task and poor elsewhere; the oracle
    is good on both. The held-out accuracy every gold node carries is the check that tells them apart."""
    from harness.dataset import heldout_examples
    from harness.oracle import oracle_source
    from harness.rewards import is_gold, score_harness
    from harness.search import heldout_accuracy

    reward = knobs().reward
    labels = {e.action: e.legal for e in task.examples}
    lookup = f"LABELS = {labels!r}\n\ndef is_legal_action(state, action):\n    return LABELS.get(action, False)\n"
    held = heldout_examples(task.obs_id)
    assert len(held) > 50 and {e.obs_id for e in held}.isdisjoint({task.obs_id})
    on_task = score_harness(lookup, task.examples)
    assert is_gold(on_task, reward.gold_threshold) and on_task.balanced_accuracy == 1.0
    assert heldout_accuracy(lookup, held, reward) < 0.7
    assert score_harness(oracle_source(), task.examples).balanced_accuracy >= 0.9
    assert heldout_accuracy(oracle_source(), held, reward) >= 0.9
