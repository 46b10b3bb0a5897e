"""Live browser: a real headless Chromium labels a legal and an illegal action on a MiniWoB page."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import browser

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def session():
    with browser.PageSession() as s:  # fails loudly (no skip) when Chromium is missing
        yield s


def _bid(state, role):
    m = re.search(rf"\[(\w+)\] {role} ", state)
    assert m, f"no {role} in state"
    return m.group(1)


def test_reset_reproduces_and_labels_legal_and_illegal(session):
    obs = session.observe("enter-text", 1)
    textbox, button = _bid(obs.state, "textbox"), _bid(obs.state, "button")
    legal = session.execute(obs, f"fill('{textbox}', 'hello')")
    assert legal.legal and legal.error == ""
    assert legal.diff.dom_changed and legal.diff.form_value >= 1
    unknown = session.execute(obs, "click('98765')")
    assert not unknown.legal and "Could not find element" in unknown.error and not unknown.diff.dom_changed
    not_editable = session.execute(obs, f"fill('{button}', 'hello')")
    assert not not_editable.legal and not_editable.error
    # the fill above changed the page; this action still starts from a fresh reset
    again = session.execute(obs, f"fill('{textbox}', 'hello')")
    assert again.legal and again.diff == legal.diff


def test_dom_diff_counts_each_kind():
    before = [["0", "body", None, {"class": "a"}, None], ["0/0", "#text", "hi", None, None],
              ["0/1", "input", None, {}, ["", False, -1]]]
    after = [["0", "body", None, {"class": "b", "id": "x"}, None], ["0/0", "#text", "ho", None, None],
             ["0/1", "input", None, {}, ["typed", False, -1]], ["0/2", "div", None, {}, None]]
    d = browser.diff_dom(before, after)
    assert (d.structural, d.text, d.attribute, d.form_value) == (1, 1, 2, 1) and d.dom_changed
    assert not browser.diff_dom(before, before).dom_changed


def test_harvest_script_tiny_and_resumable(tmp_path):
    cmd = [sys.executable, "scripts/harvest.py", "--pages", "click-button", "--seeds", "1", "--workers", "1",
           "--actions-per-obs", "6", "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work")]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    assert "labeled actions/s" in first.stdout
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["totals"]["actions"] == 6 and manifest["versions"]["chromium"]
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert "1 observations kept from a previous run, 0 to label" in second.stdout


def test_missing_chromium_is_one_clear_error(tmp_path):
    env = {**os.environ, "W8_CHROMIUM": "/nonexistent/chromium"}
    r = subprocess.run([sys.executable, "scripts/harvest.py", "--pages", "click-button", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().startswith("error: Chromium not found at /nonexistent/chromium")
    assert not any(tmp_path.iterdir())
