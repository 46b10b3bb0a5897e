"""Harvest throughput: our labeler vs BrowserGym's plain reset+step loop, in one run.

    make bench-harvest
    python scripts/bench/bench_harvest.py --baseline-actions 8 --obs 8 --workers 4

Both sides label the same kind of actions (harness/actions.py candidates) on the same
MiniWoB pages, each on a fresh reset of the page and seed:
- baseline: `BrowserEnv.reset(seed)` + `BrowserEnv.step(action)` per action, as the
  BrowserGym docs run it (a new Chromium per reset, 0.5 s pre-observation delay);
- ours: scripts/harvest.py's workers (one Chromium each, page-load resets, BrowserGym's
  500 ms action timeout, no reload after an action that provably never touched the page).
Prints labeled actions per second for both, side by side. Noisy on a shared machine:
run it when nothing else is busy.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness import browser  # noqa: E402
from harness.actions import candidate_actions  # noqa: E402

PAGES = ["login-user", "book-flight-nodelay", "click-checkboxes", "enter-text", "choose-list",
         "click-tab-2", "use-spinner", "click-dialog", "click-button", "enter-password", "social-media",
         "search-engine"]


def baseline(n_actions: int) -> float:
    """BrowserGym's plain loop: reset + step per action. Returns labeled actions per second."""
    from browsergym.core.env import BrowserEnv

    page = PAGES[0]
    browser.use_system_chromium()  # BrowserEnv and its chat window launch Chromium themselves
    env = BrowserEnv(task_entrypoint=browser.page_classes()[page],
                     task_kwargs={"base_url": browser.miniwob_base_url()}, headless=True,
                     action_mapping=browser.action_set().to_python_code)
    try:
        obs, _ = env.reset(seed=1)
        from browsergym.utils.obs import flatten_axtree_to_str

        actions = candidate_actions(flatten_axtree_to_str(obs["axtree_object"]), seed=1, n=n_actions)
        t0 = time.time()
        for action in actions:
            env.reset(seed=1)
            env.step(action)
        return len(actions) / (time.time() - t0)
    finally:
        env.close()


def _ours_worker(pages: list[str], out: mp.Queue) -> None:
    with browser.PageSession() as session:
        n = 0
        for page in pages:
            try:
                n += len(browser.harvest_observation(session, page, 1, 34)["actions"])
            except browser.ResetMismatch:
                pass
        out.put(n)


def ours(n_obs: int, workers: int) -> float:
    pages = [PAGES[i % len(PAGES)] for i in range(n_obs)]
    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=_ours_worker, args=(pages[w::workers], out)) for w in range(workers)]
    t0 = time.time()  # includes browser start-up, as a real harvest pays it
    for p in procs:
        p.start()
    labeled = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return labeled / (time.time() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-actions", type=int, default=8)
    parser.add_argument("--obs", type=int, default=8, help="observations (34 actions each) for our labeler")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    try:
        browser.chromium_path()
    except browser.BrowserMissing as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    base = baseline(args.baseline_actions)
    mine = ours(args.obs, args.workers)
    print(f"{'labeler':<44} {'labeled actions/s':>18}")
    print(f"{'BrowserGym reset+step loop (baseline)':<44} {base:>18.2f}")
    print(f"{f'harness.browser, {args.workers} workers':<44} {mine:>18.2f}")
    print(f"bench-harvest: {mine:.1f} labeled actions/s vs baseline {base:.2f}/s ({mine / base:.0f}x; target >= 5/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
