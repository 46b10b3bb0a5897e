"""Step 01: search with the frozen operator model on the held-out trace task(s).

    python scripts/01_frozen_trace.py                                   # knobs from W8_* env vars
    W8_RUN_ID=demo python scripts/01_frozen_trace.py --trace-max-iterations 4
    # tiny CPU variant (seconds, no model): --operator deterministic --trace-max-iterations 2

Writes <run>/frozen_trace.json ({"role": "frozen", "model", "traces": [...]}), one trace per
task (seeds W8_TRACE_TASK_SEED, +1, ...). Prints a live `steps_to_gold frozen ...` line per
node. The search state is saved after every node, so a killed step resumes mid-search.
Ends with one line: gold reached on k/n task(s) and each task's steps_to_gold/budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.pipeline import StepResult, run_step  # noqa: E402
from harness.traces import run_trace_searches, steps_summary, write_traces  # noqa: E402
from harness.sandbox import sandbox_provenance  # noqa: E402

STEP = "01_frozen_trace"


def body(cfg, run_dir: Path, args) -> StepResult:
    traces = run_trace_searches(cfg, run_dir, "frozen")
    write_traces(run_dir / "frozen_trace.json", "frozen", cfg.harness_model, traces)
    return StepResult(["frozen_trace.json"], steps_summary(traces), extra={"sandbox": sandbox_provenance()})


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
