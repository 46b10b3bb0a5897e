"""The README's front matter stays true: its commands come first and exist, its docs exist, the knob table
in docs/knobs.md is the config's."""

import json
import re
import subprocess
from pathlib import Path

from harness.config import OTHER_ENV, knob_table_markdown, read_preset

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
OTHERS_DOCS = {"docs/gpu-launch.md"}  # written by the GPU-launch work; linked from here before it lands
FIRST_SCREEN = "\n".join(README.splitlines()[:40])
STUDY = ROOT / "results" / "study-rule-b8-20261207"


def test_knob_table_matches_config():
    knobs = (ROOT / "docs" / "knobs.md").read_text()
    assert knob_table_markdown() in knobs, "docs/knobs.md is stale: paste harness.config.knob_table_markdown()"
    assert all(f"`{name}`" in knobs for name in OTHER_ENV)


def test_the_first_screen_runs_the_project():
    first = "\n".join(README.splitlines()[:30])
    for command in ("make local", "make test", "make smoke"):
        assert command in first, command
    assert len(README.splitlines()) < 120, "the README is a front door; reference sections go to docs/"


def test_every_doc_the_readme_links_exists():
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", README))
    assert {"docs/knobs.md", "docs/pipeline.md", "docs/reading-results.md", "docs/gpu-launch.md"} <= linked
    assert sorted(p for p in linked - OTHERS_DOCS if not (ROOT / p).is_file()) == []


def test_every_make_target_named_in_readme_exists():
    targets = set(re.findall(r"(?:^|`)make ([a-z][a-z-]*)", README, re.M))
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    known = {line.split()[0] for line in listed.splitlines() if line.strip()}
    assert {"local", "test"} <= targets
    assert targets - known == set()


def test_make_help_gives_the_readme_times():
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    for target in ("local", "test", "smoke"):
        readme_time = re.search(rf"^make {target}\s.*?(~\d+ min)$", README, re.M).group(1)
        help_line = next(line for line in listed.splitlines() if line.split()[:1] == [target])
        assert readme_time in help_line, (target, readme_time, help_line)


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_first_screen_cites_states_the_result_and_shows_the_gcp_path():
    prose = " ".join(FIRST_SCREEN.split())
    for cited in ("AutoHarness (Lou et al., Google DeepMind, 2026)", "REx (Tang et al., 2024",
                  "MiniWoB++", "BrowserGym", "The pipeline is named r3"):
        assert cited in prose, cited
    assert "](docs/results-so-far.md)" in FIRST_SCREEN
    for command in ("make doctor", "make dry-run", "make launch", "make watch", "make down"):
        line = next((l for l in FIRST_SCREEN.splitlines() if l.startswith(command)), None)
        assert line and "#" in line, f"{command}: a line of its own in the first 40 lines, with what it costs"


def test_the_first_screen_result_is_the_rule_split_study_s():
    """The three result lines quote the committed study's split check, so a redone study cannot leave them stale."""
    check = json.loads((STUDY / "split_check.json").read_text())
    needs_rule = check["restricted_below_gold"]
    in_one = sum(row["rule_operator_steps"] == 1 for row in check["rows"])
    assert f"the {needs_rule} held-out tasks that need a held-out rule" in FIRST_SCREEN
    assert f"solves {in_one} of {check['n_heldout']} in one refinement" in FIRST_SCREEN
    assert f"`results/{STUDY.name}/`" in FIRST_SCREEN


def test_the_gcp_preset_s_search_count_is_its_knobs():
    knobs = read_preset("gcp")
    searches = int(knobs["W8_TRACE_TASKS"]) * int(knobs["W8_TRACE_SEEDS"])
    preset_text = (ROOT / "presets" / "gcp.env").read_text()
    assert re.findall(r"= (\d+) searches per arm", preset_text) == [str(searches)]
    docs = {name: (ROOT / "docs" / name).read_text() for name in ("reading-results.md", "results-so-far.md")}
    assert f"`W8_TRACE_TASKS={knobs['W8_TRACE_TASKS']}` x {knobs['W8_TRACE_SEEDS']} seeds = {searches} searches" \
        in docs["reading-results.md"]
    for name, text in docs.items():
        for tasks in re.findall(r"GCP preset's (\d+) (?:trace )?tasks", text):
            assert tasks == knobs["W8_TRACE_TASKS"], (name, tasks)
    assert f"{knobs['W8_TRACE_TASKS']} held-out tasks x {knobs['W8_TRACE_SEEDS']} seeds = {searches} searches per arm" \
        in docs["results-so-far.md"].replace("\n", " ")


def test_the_dry_run_time_is_one_figure_everywhere():
    """The one measured dry-run time (README's first screen) is the one each page that times the dry-run quotes."""
    figure = re.search(r"^make dry-run .*?(\d+ s) here", README, re.M).group(1)
    assert re.search(rf"^\| `make dry-run` \| {figure} ", README, re.M), "the README's times table"
    measured = (ROOT / "docs" / "measurements.md").read_text()
    assert re.search(rf"^\| `make dry-run` \|[^|]*\| \*\*{figure}\*\*", measured, re.M), "docs/measurements.md's row"
    for name in ("AGENTS.md", "docs/pipeline.md", "docs/gpu-launch.md"):
        assert figure in (ROOT / name).read_text(), (name, figure)
