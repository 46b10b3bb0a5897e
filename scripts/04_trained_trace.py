"""Step 04: the same search as step 01, with the trained model (the newest GRPO export).

    python scripts/04_trained_trace.py                          # needs step 03's <run>/grpo/global_step_N/policy
    W8_RUN_ID=demo python scripts/04_trained_trace.py --trace-max-iterations 4
    # tiny CPU variant: same knobs as the step-01 call of the same run

Finds the newest `global_step_*/policy` under <run>/grpo (by N) and searches the same
held-out task(s) with the same knobs; only the model differs. Writes
<run>/trained_trace.json and prints live `steps_to_gold trained ...` lines. Ends with one
line: gold reached on k/n task(s) and each task's steps_to_gold/budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.exports import newest_export  # noqa: E402
from harness.pipeline import StepError, StepResult, run_step  # noqa: E402
from harness.traces import run_trace_searches, steps_summary, write_traces  # noqa: E402
from harness.sandbox import sandbox_provenance  # noqa: E402

STEP = "04_trained_trace"


def body(cfg, run_dir: Path, args) -> StepResult:
    policy = newest_export(run_dir / "grpo")
    if policy is None:
        raise StepError(f"no GRPO export under {run_dir / 'grpo'} (global_step_N/policy with config.json): "
                        "run step 03 first")
    print(f"[{STEP}] trained model: {policy}", flush=True)
    trained = cfg.replace(harness_model=str(policy))
    traces = run_trace_searches(trained, run_dir, "trained")
    write_traces(run_dir / "trained_trace.json", "trained", str(policy.relative_to(run_dir)), traces)
    return StepResult(["trained_trace.json"], steps_summary(traces),
                      extra={"policy": str(policy.relative_to(run_dir)), "sandbox": sandbox_provenance()})


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
