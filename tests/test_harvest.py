"""A harvest's records: its wall time is real time, and its tasks are the run's (run_config.json).

Real parts: the deterministic operator and the local sandbox, two train-page searches side by side in one
batch (harness.search.run_searches), as step 03's harvests run them.
"""

from __future__ import annotations

import json

from harness.arm_training import harvest_summary
from harness.config import load_config
from harness.harvest import harvest_file, harvest_line, harvest_wall_s, load_harvest, run_harvest
from harness.pipeline import open_run

KNOBS = {"W8_RUN_ID": "h1", "W8_OPERATOR": "deterministic", "W8_SANDBOX": "local", "W8_TRAIN_COUNT": "1",
         "W8_TRAIN_EXAMPLES_PER_OBS": "8", "W8_TRACE_TASKS": "1", "W8_TRACE_EXAMPLES_PER_OBS": "8",
         "W8_SELF_ARM": "1", "W8_HARVEST_TASKS": "2", "W8_HARVEST_MAX_ITERATIONS": "3"}


def test_two_searches_side_by_side_record_the_harvests_real_time_not_their_sum(tmp_path):
    cfg = load_config(env=KNOBS)
    run_dir = open_run(cfg, root=tmp_path)
    run_harvest(cfg, run_dir, "self-r1", "smollm2-135m", say=lambda *a, **k: None)
    harvest = load_harvest(run_dir, "self-r1")
    own = [t["wall_s"] for t in harvest["traces"]]
    assert len(own) == 2 and all(t > 0 for t in own)
    # both searches are open for (nearly) the whole harvest: their times added up are worker-seconds
    assert max(own) <= harvest["wall_s"] + 5e-4 and harvest["wall_s"] < sum(own) - 1e-3  # beyond its rounding
    assert harvest["worker_s"] == round(sum(own), 3) and harvest["earlier_wall_s"] == 0.0
    assert harvest_summary(harvest)["wall_s"] == harvest["wall_s"]  # what the metrics file and the ledger read
    assert f"{harvest['wall_s']:.0f} s wall" in harvest_line(harvest)
    tasks = json.loads((run_dir / "run_config.json").read_text())["tasks"]
    assert [t["task"]["task_id"] for t in harvest["traces"]] == tasks["harvest"]

    # the harvest file lost, its searches saved: a rerun rebuilds it from the states and counts the earlier
    # process's time once (the longest search's own), not once per search
    harvest_file(run_dir, "self-r1").unlink()
    run_harvest(cfg, run_dir, "self-r1", "smollm2-135m", say=lambda *a, **k: None)
    again = load_harvest(run_dir, "self-r1")
    assert again["earlier_wall_s"] == round(max(own), 3)
    assert max(own) <= again["wall_s"] + 5e-4 and again["wall_s"] < sum(own) - 1e-3
    assert again["worker_s"] == harvest["worker_s"]


def test_a_harvest_record_from_before_worker_s_is_read_as_its_longest_search():
    old = {"name": "refine", "model": "m", "wall_s": 30.0, "traces": [{"wall_s": 10.0, "nodes": []},
                                                                     {"wall_s": 20.0, "nodes": []}]}
    assert harvest_wall_s(old) == 20.0  # its wall_s held the searches' times added up
    assert harvest_wall_s({**old, "worker_s": 30.0, "wall_s": 21.5}) == 21.5
