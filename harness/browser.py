"""Real-browser harvest: MiniWoB++ pages in Chromium via BrowserGym -> labeled actions + DOMDiff.

One `PageSession` owns one headless Chromium (Debian's `/usr/bin/chromium`, passed to
Playwright as `executable_path`, so Playwright never downloads its own build) and one
tab. For an observation (page, seed) it:

1. resets the page (load the MiniWoB page, start the episode with the seed: exactly
   BrowserGym's MiniWoB `setup`) and marks BrowserGym ids (bids);
2. extracts the state: BrowserGym's flattened AXTree, keeping what legality depends on
   (generic nodes that carry a bid, `editable`/`readonly`/`disabled`, visible/clickable);
3. for every candidate action: resets again (fresh page, same seed), checks that the reset
   reproduced the observation's DOM, executes the action through BrowserGym's own action
   mapping (`HighLevelActionSet.to_python_code` + `execute_python_code`, the code path of
   `BrowserEnv.step`) and records legal = no action error, the error text, and the DOMDiff.

An observation whose reset does not reproduce its DOM or AXTree is dropped.

What makes it fast (BrowserGym's plain `reset()`+`step()` relaunches the browser and
waits 0.5 s per step): one browser per worker for the whole harvest; a reset is a page
load from file:// (no relaunch); the action timeout is BrowserGym's own 500 ms per
Playwright call (`harness/browser.py` adds none), so an illegal click on a hidden
element costs ~0.5 s, not the 5 s MiniWoB default; the DOM diff waits one settle delay
(SETTLE_MS) instead of the 0.5 s pre-observation delay.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from harness.actions import candidate_actions

CHROMIUM = os.environ.get("W8_CHROMIUM", "/usr/bin/chromium")
# Flags: --no-sandbox because we run as root in a container; the background-networking
# flags stop Chromium phoning home on a closed network (each refused connection costs time).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-features=OverlayScrollbars,ExtendedOverlayScrollbars",
]
VIEWPORT = {"width": 332, "height": 214}  # BrowserGym's MiniWoB viewport
SETTLE_MS = 40  # wait after an action before the DOM is diffed (timers, re-renders)
# Errors BrowserGym raises before its action touches the page (parsing, call signature,
# bid lookup by query): after one of these the tab is still the fresh reset, provably,
# so the next action may start from it instead of reloading.
TIMEOUT_ATTEMPTS = 2  # a timeout is the label only if it repeats on this many fresh resets
UNTOUCHED_ERRORS = ("unknown_bid", "bad_bid_type", "empty_or_unparsable", "unknown_verb", "wrong_arguments")
# AXTree roles that only repeat their parent's text: dropped to keep states short.
IGNORED_ROLES = ["LineBreak", "InlineTextBox"]


class BrowserMissing(RuntimeError):
    """No Chromium executable where we expect one."""


def chromium_path() -> str:
    path = shutil.which(CHROMIUM) or (CHROMIUM if os.access(CHROMIUM, os.X_OK) else None)
    if not path:
        raise BrowserMissing(f"Chromium not found at {CHROMIUM}: run `make setup` (apt-get install chromium) "
                             "or set W8_CHROMIUM to a Chromium executable")
    return path


def use_system_chromium() -> None:
    """Make every Playwright Chromium launch in this process use the system Chromium.

    For code that launches browsers itself, such as BrowserGym's `BrowserEnv` (which also
    opens a second browser for its chat window): without this Playwright looks for its
    own build and asks for `playwright install`, which needs a download.
    """
    from playwright.sync_api import BrowserType

    if getattr(BrowserType.launch, "_w8_system_chromium", False):
        return
    original = BrowserType.launch

    def launch(self, *args, **kwargs):
        kwargs.setdefault("executable_path", chromium_path())
        return original(self, *args, **kwargs)

    launch._w8_system_chromium = True
    BrowserType.launch = launch


def miniwob_base_url() -> str:
    """file:// URL of the MiniWoB++ pages shipped inside the `miniwob` package."""
    import miniwob

    html = Path(miniwob.__file__).parent / "html" / "miniwob"
    return html.as_uri() + "/"


@cache
def page_classes() -> dict[str, type]:
    """MiniWoB page name -> BrowserGym task class (without registering gym envs)."""
    import inspect

    import browsergym.miniwob.all as all_tasks

    return {cls.subdomain: cls for _, cls in inspect.getmembers(all_tasks, inspect.isclass)
            if getattr(cls, "subdomain", None)}


@cache
def action_set():
    from browsergym.core.action.functions import noop
    from browsergym.core.action.highlevel import HighLevelActionSet

    return HighLevelActionSet(subsets=["bid"], custom_actions=[noop], multiaction=False, strict=False)


# DOM snapshot in one evaluate: per node its tree path, tag, text, attributes and form
# value. BrowserGym's temporary marking attributes are excluded; `bid` is kept (bids
# must be reproduced by a reset too).
_DOM_SNAPSHOT_JS = r"""
() => {
  const skip = new Set(['browsergym_visibility_ratio', 'browsergym_set_of_marks', 'aria-description', 'aria-roledescription']);
  const out = [];
  function walk(node, path) {
    if (node.nodeType === Node.TEXT_NODE) {
      const t = node.textContent.trim();
      if (t) out.push([path, '#text', t, null, null]);
      return;
    }
    if (node.nodeType !== Node.ELEMENT_NODE) return;
    const tag = node.tagName.toLowerCase();
    if (tag === 'script' || tag === 'style') return;
    const attrs = {};
    for (const a of node.attributes) if (!skip.has(a.name)) attrs[a.name] = a.value;
    let form = null;
    if (tag === 'input' || tag === 'textarea' || tag === 'select') {
      form = [String(node.value), !!node.checked, node.selectedIndex === undefined ? -1 : node.selectedIndex];
    }
    out.push([path, tag, null, attrs, form]);
    let i = 0;
    for (const child of node.childNodes) walk(child, path + '/' + (i++));
  }
  walk(document.documentElement, '0');
  return out;
}
"""


# Playwright's click/dblclick/hover wait until the target has a non-empty box and is the
# element that receives the pointer at its center (after scrolling it into view).
# BrowserGym's `visible` flag (a visibility ratio) does not show either, so labels of
# clicks on zero-size icons or on elements under a dialog were unpredictable from the
# state. This hit test finds them; the state then carries `zero_size` / `covered`.
_POINTER_JS = r"""
() => {
  const out = {};
  const sx = window.scrollX, sy = window.scrollY;
  for (const el of document.querySelectorAll('[bid]')) {
    const bid = el.getAttribute('bid');
    const r0 = el.getBoundingClientRect();
    if (r0.width === 0 || r0.height === 0) { out[bid] = 'zero_size'; continue; }
    el.scrollIntoView({block: 'center', inline: 'center'});
    const r = el.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    out[bid] = (hit && (hit === el || el.contains(hit))) ? 'ok' : 'covered';
  }
  window.scrollTo(sx, sy);
  return out;
}
"""
_VISIBLE_LINE = re.compile(r"^(\t*\[([^\]]+)\] .*, visible)(.*)$")
_ANY_BID_LINE = re.compile(r"^\t*\[([^\]]+)\] ")


def annotate_pointer(state: str, pointer: dict[str, str]) -> str:
    """Add the hit test to the state, only where BrowserGym's `visible` flag misleads.

    A `visible` element gets `zero_size` or `covered` when Playwright could not point at
    it; an element without `visible` gets `offscreen` when Playwright could (it scrolls
    it into view first, e.g. items below the 214 px MiniWoB viewport).
    """
    lines = []
    for line in state.splitlines():
        visible, any_bid = _VISIBLE_LINE.match(line), _ANY_BID_LINE.match(line)
        if visible and pointer.get(visible.group(2)) in ("zero_size", "covered"):
            line = f"{visible.group(1)}, {pointer[visible.group(2)]}{visible.group(3)}"
        elif any_bid and not visible and pointer.get(any_bid.group(1)) == "ok":
            line = f"{line}, offscreen"
        lines.append(line)
    return "\n".join(lines)



# ---- what a browser error means ------------------------------------------------------------
_KINDS = [  # (kind, pattern on the browser's error text), first match wins
    ("unknown_bid", r"Could not find element with bid"),
    ("bad_bid_type", r"expected a string"),
    ("empty_or_unparsable", r"Received an empty action|Received a multi-action"),
    ("unknown_verb", r"^NameError"),
    ("wrong_arguments", r"^TypeError"),
    ("not_editable", r"not an <input>|cannot be filled|not editable|Element is not an"),
    ("not_a_select", r"not a <select>"),
    ("timeout", r"Timeout|timeout"),
    ("syntax", r"^SyntaxError|ParseException"),
]


def error_kind(error: str) -> str:
    """A short class for the browser's error text ('' for a legal action)."""
    if not error:
        return ""
    for kind, pattern in _KINDS:
        if re.search(pattern, error):
            return kind
    return "other:" + error.split(":")[0][:40]


@dataclass(frozen=True)
class DomDiff:
    structural: int = 0  # nodes added or removed (or retagged)
    text: int = 0  # text nodes whose content changed
    attribute: int = 0  # attribute values added, removed or changed
    form_value: int = 0  # input/textarea/select value, checked or selected index changed

    @property
    def dom_changed(self) -> bool:
        return bool(self.structural or self.text or self.attribute or self.form_value)

    def as_dict(self) -> dict[str, int]:
        return {"structural": self.structural, "text": self.text, "attribute": self.attribute,
                "form_value": self.form_value}


def diff_dom(before: list, after: list) -> DomDiff:
    """Compare two DOM snapshots (from _DOM_SNAPSHOT_JS) node by node, keyed by tree path."""
    b = {(n[0], n[1]): n for n in before}
    a = {(n[0], n[1]): n for n in after}
    common = b.keys() & a.keys()
    structural = len(b.keys() ^ a.keys())
    text = sum(1 for k in common if k[1] == "#text" and b[k][2] != a[k][2])
    attribute = 0
    for k in common:
        if k[1] == "#text":
            continue
        ba, aa = b[k][3] or {}, a[k][3] or {}
        attribute += sum(1 for name in ba.keys() | aa.keys() if ba.get(name) != aa.get(name))
    form_value = sum(1 for k in common if b[k][4] != a[k][4])
    return DomDiff(structural, text, attribute, form_value)


@dataclass
class Observation:
    page: str
    seed: int
    goal: str
    state: str  # the flattened AXTree text
    dom: list = field(repr=False, default_factory=list)  # the DOM snapshot a reset must reproduce


@dataclass(frozen=True)
class Outcome:
    action: str
    legal: bool
    error: str
    diff: DomDiff


class ResetMismatch(RuntimeError):
    """A reset of the same page and seed did not reproduce the observation."""


class PageSession:
    """One Chromium + one tab, reused for every reset. Use as a context manager."""

    def __init__(self, headless: bool = True):
        self.headless = headless
        self._pw = self._browser = self._page = None
        self._pristine: tuple[str, int] | None = None  # (page, seed) the tab is a fresh reset of
        self.resets = 0

    def __enter__(self) -> "PageSession":
        from browsergym.core.constants import BROWSERGYM_ID_ATTRIBUTE
        from playwright.sync_api import sync_playwright

        executable = chromium_path()
        self._pw = sync_playwright().start()
        self._pw.selectors.set_test_id_attribute(BROWSERGYM_ID_ATTRIBUTE)
        self._browser = self._pw.chromium.launch(executable_path=executable, headless=self.headless,
                                                 args=CHROMIUM_ARGS, ignore_default_args=["--hide-scrollbars"])
        self._new_page()
        return self

    def _new_page(self) -> None:
        if self._page is not None:
            self._page.context.close()
        context = self._browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(5000)  # page loads only; actions use BrowserGym's 500 ms
        self._page = context.new_page()

    def __exit__(self, *exc) -> None:
        for close in (lambda: self._browser.close(), lambda: self._pw.stop()):
            try:
                close()
            except Exception:
                pass

    @property
    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"chromium": self._browser.version, "browsergym": version("browsergym-core"),
                "playwright": version("playwright"), "miniwob": version("miniwob")}

    # -- reset and observe -------------------------------------------------------------
    def reset(self, page: str, seed: int) -> str:
        """Load `page` fresh and start its episode with `seed`; mark bids. Returns the goal."""
        from browsergym.core.observation import _post_extract, _pre_extract

        task = page_classes()[page](seed=seed, base_url=miniwob_base_url())
        goal, _ = task.setup(page=self._page)
        self.resets += 1
        self._pristine = (page, seed)
        _pre_extract(self._page, tags_to_mark="standard_html", lenient=False)
        _post_extract(self._page)
        return goal

    def dom_snapshot(self) -> list:
        return self._page.evaluate(_DOM_SNAPSHOT_JS)

    def axtree_text(self) -> str:
        from browsergym.core.observation import (_post_extract, _pre_extract, extract_dom_extra_properties,
                                                 extract_dom_snapshot, extract_merged_axtree)
        from browsergym.utils.obs import flatten_axtree_to_str

        _pre_extract(self._page, tags_to_mark="standard_html", lenient=False)
        try:
            dom = extract_dom_snapshot(self._page)
            axtree = extract_merged_axtree(self._page)
            extra = extract_dom_extra_properties(dom, scale_factor=1.0)
        finally:
            _post_extract(self._page)
        # skip_generic=False and no ignored properties: the label depends on them (README, the benchmark).
        text = flatten_axtree_to_str(axtree, extra_properties=extra, with_visible=True, with_clickable=True,
                                     skip_generic=False, ignored_properties=(), ignored_roles=IGNORED_ROLES)
        # the root's url is a file:// path of this machine: keep only the page's own name
        text = text.replace(miniwob_base_url(), "miniwob/")
        return annotate_pointer(text, self._page.evaluate(_POINTER_JS))

    def observe(self, page: str, seed: int) -> Observation:
        """Reset twice; the observation counts only if both resets give the same AXTree and DOM."""
        goal = self.reset(page, seed)
        state, dom = self.axtree_text(), self.dom_snapshot()
        self.reset(page, seed)
        if self.axtree_text() != state or self.dom_snapshot() != dom:
            raise ResetMismatch(f"{page}/{seed}: two resets gave different observations")
        self._pristine = None  # the AXTree extraction marked the page: the first action reloads
        return Observation(page=page, seed=seed, goal=goal, state=state, dom=dom)

    # -- execute ---------------------------------------------------------------------------
    def execute(self, obs: Observation, action: str) -> Outcome:
        """Label `action` on a fresh reset of `obs`; a timeout must repeat to count.

        Playwright's 500 ms actionability wait can also run out on a legal action when
        the machine is busy, so a timed-out action is retried on another fresh reset
        (TIMEOUT_ATTEMPTS in all) and is illegal only if every attempt times out.
        """
        for _ in range(TIMEOUT_ATTEMPTS):
            outcome = self._execute_once(obs, action)
            if error_kind(outcome.error) != "timeout":
                break
        return outcome

    def _execute_once(self, obs: Observation, action: str) -> Outcome:
        """Fresh reset, check it reproduces `obs`, run `action` as BrowserEnv.step would."""
        from browsergym.core.action.base import execute_python_code

        if self._pristine != (obs.page, obs.seed):
            self.reset(obs.page, obs.seed)
        self._pristine = None
        before = self.dom_snapshot()
        if before != obs.dom:
            raise ResetMismatch(f"{obs.page}/{obs.seed}: a reset did not reproduce the observation's DOM")
        try:
            code = action_set().to_python_code(action)
            execute_python_code(code, self._page, send_message_to_user=lambda text: None,
                                report_infeasible_instructions=lambda reason: None)
            error = ""
        except Exception as err:  # exactly BrowserEnv.step's notion of an action error
            error = f"{type(err).__name__}: {err}"
        if len(self._page.context.pages) != 1 or self._page.is_closed():
            self._new_page()  # the action opened or closed a tab: start clean
            return Outcome(action, not error, _short(error), DomDiff(structural=1))
        if error and error_kind(error) in UNTOUCHED_ERRORS:
            self._pristine = (obs.page, obs.seed)  # verified against obs.dom before the next action
            return Outcome(action, False, _short(error), DomDiff())
        self._page.wait_for_timeout(SETTLE_MS)
        try:
            after = self.dom_snapshot()
        except Exception:  # navigated away mid-snapshot: the page certainly changed
            return Outcome(action, not error, _short(error), DomDiff(structural=1))
        return Outcome(action, not error, _short(error), diff_dom(before, after))


def _short(error: str, limit: int = 300) -> str:
    """First line(s) of Playwright's error, without its call log."""
    text = error.split("\nCall log:")[0].strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def harvest_observation(session: PageSession, page: str, seed: int, actions_per_obs: int) -> dict[str, Any]:
    """Observe (page, seed), generate candidate actions, label each in the browser.

    Returns a snapshot record; raises ResetMismatch if the page is not reproducible.
    """
    obs = session.observe(page, seed)
    page_bids = {n[3]["bid"] for n in obs.dom if n[3] and "bid" in n[3]}
    labeled = []
    for action in candidate_actions(obs.state, seed=seed, n=actions_per_obs, page_bids=page_bids):
        out = session.execute(obs, action)
        labeled.append({"action": out.action, "legal": out.legal, "error": out.error,
                        "dom_changed": out.diff.dom_changed, "dom_diff": out.diff.as_dict()})
    return {"obs_id": f"{page}/{seed}", "page": page, "seed": seed, "goal": obs.goal, "state": obs.state,
            "actions": labeled}
