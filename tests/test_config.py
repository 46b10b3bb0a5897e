"""Knob validation: every bad value stops at start with the variable's (or flag's) name, in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import BY_NAME, KNOBS, ConfigError, load_config

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = ["01_frozen_trace", "02_sft", "03_grpo", "04_trained_trace", "05_compare"]


@pytest.mark.parametrize("env, message", [
    ({"W8_HARNESS_GOLD_THRESHOLD": "0"}, "W8_HARNESS_GOLD_THRESHOLD='0': expected a number in (0, 1]"),
    ({"W8_HARNESS_GOLD_THRESHOLD": "1.01"}, "W8_HARNESS_GOLD_THRESHOLD='1.01': expected a number in (0, 1]"),
    ({"W8_HARNESS_GOLD_THRESHOLD": "high"}, "W8_HARNESS_GOLD_THRESHOLD='high': expected a number in (0, 1]"),
    ({"W8_REWARD_RECALL_WEIGHT": "-0.1"}, "W8_REWARD_RECALL_WEIGHT='-0.1': expected a number in [0, 1]"),
    ({"W8_HARNESS_SFT_STEPS": "-1"}, "W8_HARNESS_SFT_STEPS='-1': expected an integer >= 0"),
    ({"W8_TRAIN_COUNT": "0"}, "W8_TRAIN_COUNT='0': expected an integer >= 1"),
    ({"W8_TRAIN_COUNT": "2.5"}, "W8_TRAIN_COUNT='2.5': expected an integer >= 1"),
    ({"W8_TRACE_MAX_ITERATIONS": "-3"}, "W8_TRACE_MAX_ITERATIONS='-3': expected an integer in [0, 1000]"),
    ({"W8_TRACE_EXAMPLES_PER_OBS": "1"}, "W8_TRACE_EXAMPLES_PER_OBS='1': expected an integer in [2, 64]"),
    ({"W8_BACKEND": "tpu"}, "W8_BACKEND='tpu': expected one of local | skyrl"),
    ({"W8_SANDBOX": "docker"}, "W8_SANDBOX='docker': expected one of auto | local | daytona"),
    ({"W8_SEARCH_C": "0"}, "W8_SEARCH_C='0': expected a number > 0"),
    ({"W8_ACCELERATORS": "A100:abc"}, "W8_ACCELERATORS='A100:abc': expected a SkyPilot accelerator string"),
    ({"W8_ACCELERATORS": "A100:0"}, "W8_ACCELERATORS='A100:0': expected a SkyPilot accelerator string"),
    ({"W8_ACCELERATORS": "A100 8"}, "W8_ACCELERATORS='A100 8': expected a SkyPilot accelerator string"),
])
def test_bad_knob_names_its_variable(env, message):
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("value", ["A100:8", "H100", "A100-80GB:8", "L4:1", "tpu-v5-lite-podslice:4", "T4:0.5"])
def test_accelerator_strings_skypilot_accepts_pass(value):
    assert load_config(env={"W8_ACCELERATORS": value}).accelerators == value


def test_defaults_flags_and_env_precedence():
    cfg = load_config(argv=["--trace-max-iterations", "3"], env={"W8_TRACE_MAX_ITERATIONS": "5", "W8_TRAIN_COUNT": "7"})
    assert cfg.trace_max_iterations == 3 and cfg.train_count == 7
    assert load_config(env={}).as_dict() == {k.name: k.default for k in KNOBS}
    with pytest.raises(ConfigError, match="--harness-gold-threshold='2': expected a number in"):
        load_config(argv=["--harness-gold-threshold", "2"], env={})


def test_every_knob_has_a_doc_and_a_checked_default():
    for knob in KNOBS:
        assert knob.doc and knob.env.startswith("W8_")
        assert knob.check(knob.default), knob.name
    assert BY_NAME["harness_gold_threshold"].default == 0.90 and BY_NAME["backend"].default == "local"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_")}
    return {**env, **extra}


@pytest.mark.parametrize("script", SCRIPTS)
def test_numbered_script_help_lists_the_knob_flags(script):
    proc = subprocess.run([sys.executable, f"scripts/{script}.py", "--help"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"Step {script[:2]}" in proc.stdout and "--trace-max-iterations" in proc.stdout
    assert "W8_HARNESS_GOLD_THRESHOLD" in proc.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_numbered_script_bad_knob_is_one_line_exit_2(script, tmp_path):
    proc = subprocess.run([sys.executable, f"scripts/{script}.py"], cwd=REPO,
                          env=_env(W8_HARNESS_GOLD_THRESHOLD="1.5", W8_RUNS_ROOT=str(tmp_path)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: W8_HARNESS_GOLD_THRESHOLD='1.5': expected a number in (0, 1]"
    assert list(tmp_path.iterdir()) == []  # nothing was started


@pytest.mark.parametrize("name, message", [
    ("W8_TRACE_SEDS", "W8_TRACE_SEDS: unknown knob; did you mean W8_TRACE_SEEDS?"),
    ("W8_RESULT_ROOT", "W8_RESULT_ROOT: unknown knob; did you mean W8_RESULTS_ROOT?"),
    ("W8_HARNES_MODEL", "W8_HARNES_MODEL: unknown knob; did you mean W8_HARNESS_MODEL?"),
    ("W8_ZZZ", "W8_ZZZ: unknown knob; see harness/config.py (KNOBS, OTHER_ENV)"),
])
def test_a_misspelled_knob_stops_with_the_closest_name(name, message):
    with pytest.raises(ConfigError) as err:
        load_config(env={name: "2"})
    assert str(err.value) == message


def test_a_typo_knob_stops_a_script_before_anything_starts(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/01_frozen_trace.py"], cwd=REPO,
                          env=_env(W8_TRACE_SEDS="2", W8_RUNS_ROOT=str(tmp_path)), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: W8_TRACE_SEDS: unknown knob; did you mean W8_TRACE_SEEDS?"
    assert list(tmp_path.iterdir()) == []


def test_every_w8_variable_the_tree_reads_is_a_knob_or_listed_once():
    """grep the tree for W8_ names: each is a knob, a listed non-knob variable, or a log prefix / file name."""
    import re
    from harness.config import BY_ENV, OTHER_ENV

    not_variables = {"W8_RESULT", "W8_RESULT_SKIPPED", "W8_SANDBOX_RESULT", "W8_SOURCE", "W8_KNOB"}
    assert not set(OTHER_ENV) & set(BY_ENV)
    found = set()
    for folder in ("harness", "scripts", "sky", "tests", "presets"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".sh", ".yaml", ".env", ".txt"):
                found |= set(re.findall(r"W8_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_])", path.read_text(errors="replace")))
    found |= set(re.findall(r"W8_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_])", (REPO / "Makefile").read_text()))
    found -= {"W8_TRACE_SEDS", "W8_RESULT_ROOT", "W8_HARNES_MODEL", "W8_ZZZ"}  # the typos of the tests above
    assert sorted(found - set(BY_ENV) - set(OTHER_ENV) - not_variables) == []
