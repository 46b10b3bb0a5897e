"""The numbered scripts' command line (issue 43): a mistyped flag is one line with the closest flag, and a script
run without a preset says first, in one line, which experiment the knob table's defaults run: the rule split,
as every preset runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import BY_NAME, add_flags, preset_names, read_preset
from harness.knob_parser import KnobParser, unknown_flag_message

REPO = Path(__file__).resolve().parents[1]
STEPS = ("01_frozen_trace", "02_sft", "03_grpo", "04_trained_trace", "05_compare")


def clean_env(**knobs: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_") and k != "DAYTONA_API_KEY"}
    return {**env, **knobs}


def run(script: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"scripts/{script}.py", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


# ---- a mistyped flag: one line, the closest flag, exit 2 ----------------------------------------------------
@pytest.mark.parametrize("script", STEPS)
def test_a_mistyped_flag_of_a_numbered_script_is_one_line_naming_the_closest_flag(script, tmp_path):
    proc = run(script, "--trace-sedds", "2", env=clean_env(W8_RUNS_ROOT=str(tmp_path)))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"error: scripts/{script}.py: --trace-sedds: unknown flag; did you mean "
                                        "--trace-seeds? (--help lists the flags)"]
    assert not any(tmp_path.iterdir())  # refused before a run folder was made


def test_a_prefix_of_a_flag_is_no_abbreviation_of_it():
    parser = KnobParser(prog="scripts/01_frozen_trace.py")
    add_flags(parser)
    assert parser.parse_args(["--trace-seeds", "2"]).trace_seeds == "2"
    with pytest.raises(SystemExit):
        parser.parse_args(["--trace-seed", "2"])  # argparse's default would read it as --trace-seeds


def test_no_bench_script_is_left_beside_the_pipeline_and_the_makefile_runs_them_from_scripts_bench():
    assert not list((REPO / "scripts").glob("bench_*.py"))
    makefile = (REPO / "Makefile").read_text()
    named = set(re.findall(r"scripts/bench/(bench_\w+\.py)", makefile))
    assert named and all((REPO / "scripts" / "bench" / name).is_file() for name in named)
    assert "scripts/bench_" not in makefile


def test_step_05s_own_flag_is_offered_too():
    proc = run("05_compare", "--resluts", "results/x", env=clean_env())
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["error: scripts/05_compare.py: --resluts: unknown flag; did you mean "
                                        "--results? (--help lists the flags)"]


@pytest.mark.parametrize("extras, message", [
    (["--trace-task=3"], "--trace-task: unknown flag; did you mean --trace-tasks?"),
    (["--trace-max-iteratons", "2", "--x"], "--trace-max-iteratons: unknown flag; did you mean --trace-max-iterations?"),
    (["--zzzz"], "--zzzz: unknown flag; no flag is close"),
    (["stray"], "unexpected argument 'stray': every value follows its flag (--name value)"),
])
def test_unknown_flag_message(extras, message):
    parser = KnobParser()
    add_flags(parser)
    assert unknown_flag_message(extras, list(parser._option_string_actions)) == message


def test_a_bad_value_of_a_flag_is_one_line_too(capsys):
    parser = KnobParser(prog="scripts/01_frozen_trace.py")
    parser.add_argument("--force", action="store_true")
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--force=yes"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: scripts/01_frozen_trace.py: argument --force: ignored explicit argument "
                                "'yes' (--help lists the flags)"]


# ---- no silent other experiment ------------------------------------------------------------------------------
def test_the_split_default_is_the_rule_split_that_every_preset_runs():
    assert BY_NAME["split"].default == "rule"
    for name in preset_names():
        assert read_preset(name).get("W8_SPLIT", BY_NAME["split"].default) == "rule", name
    assert "study" in preset_names() and " | ".join(preset_names()) in BY_NAME["preset"].doc


TINY = {"W8_RUN_ID": "bare", "W8_OPERATOR": "deterministic", "W8_SANDBOX": "local", "W8_TRACE_MAX_ITERATIONS": "1",
        "W8_TRACE_EXAMPLES_PER_OBS": "8", "W8_TRAIN_COUNT": "1", "W8_TRAIN_EXAMPLES_PER_OBS": "8"}


def test_a_script_run_without_a_preset_says_so_first_in_one_line(tmp_path):
    proc = run("01_frozen_trace", env=clean_env(**TINY, W8_RUNS_ROOT=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "[01_frozen_trace] no preset (W8_PRESET unset): rule split, budget 1 refinements, 1 task(s) x 1 seed(s); "
        "knobs not set by a flag or W8_* variable take harness/config.py's defaults (presets: "
        f"{', '.join(preset_names())})")
    assert sum("no preset" in line for line in proc.stdout.splitlines()) == 1
    assert (tmp_path / "bare" / "split_check.json").is_file()  # the rule split's own output: it ran that split

    page = run("01_frozen_trace", "--split", "page", "--run-id", "bare-page",
               env=clean_env(**TINY, W8_RUNS_ROOT=str(tmp_path)))
    assert page.returncode == 0 and page.stdout.startswith("[01_frozen_trace] no preset (W8_PRESET unset): page "
                                                          "split, budget 1 refinements")


def test_a_script_run_with_a_preset_prints_no_such_line(tmp_path):
    proc = run("01_frozen_trace", env=clean_env(**TINY, W8_PRESET="smoke", W8_RUNS_ROOT=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "no preset" not in proc.stdout
