"""Step 01: the frozen arm: the operator model as shipped searches every (task, seed) pair of the run.

    python scripts/01_frozen_trace.py                                   # knobs from W8_* env vars
    W8_RUN_ID=demo python scripts/01_frozen_trace.py --trace-tasks 3 --trace-seeds 2
    # tiny CPU variant (seconds, no model): --operator deterministic --trace-max-iterations 2

W8_TRACE_TASKS held-out tasks, each from a different held-out page, times W8_TRACE_SEEDS
search seeds: the same pairs every later arm searches (harness.traces). The searches
advance together in rounds (one operator batch per round, answers scored in parallel).
The frozen operator is searched once per (task, seed) with the largest budget any arm's
compute is matched to (harness.budget: the run's budget + the training generations per task),
and the traces are cut into <run>/frozen_trace.json (the run's budget), frozen_matched_trace.json
(the trained arm's compute) and, when larger, frozen_long_trace.json ({"role", "model", "traces"});
the search never looks at its budget, so each cut is the search that budget would have run.
Prints a live `steps_to_gold frozen ...` line per node. Each search's state is saved after every
node, so a killed step resumes mid-round; where the saved nodes' programs ran is kept beside them
(search/frozen.sandbox.json), so a trace rebuilt from saved nodes keeps its sandbox record. It also writes
heldout_tasks.jsonl (every trace task's state and labeled actions: rescore any program on them) and,
under the rule split, split_check.json (harness.split_check). Ends with one line: gold reached in k/n
searches and the mean steps_to_gold.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.pipeline import StepResult, run_step  # noqa: E402
from harness.split_check import write_repair_files, write_task_files  # noqa: E402
from harness.traces import arm_sandbox, load_traces, steps_summary, trace_frozen_to_files  # noqa: E402

STEP = "01_frozen_trace"


def body(cfg, run_dir: Path, args) -> StepResult:
    # the traces first: their sandbox record is this process's, which the split check's programs would join
    paths = trace_frozen_to_files(cfg, run_dir, cfg.harness_model)
    task_files = write_task_files(cfg, run_dir) + write_repair_files(cfg, run_dir)
    summary = "; ".join(f"{path.name.removesuffix('_trace.json')}: {steps_summary(load_traces(path))}" for path in paths)
    return StepResult([path.name for path in paths] + task_files, summary,
                      extra={"sandbox": arm_sandbox(run_dir, "frozen")})


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
