"""Step 04: the post-training arms search the same (task, seed) pairs as step 01: sft, trained, grpo_only.

    python scripts/04_trained_trace.py                          # needs step 03's <run>/grpo/global_step_N/policy
    W8_RUN_ID=demo python scripts/04_trained_trace.py
    # tiny CPU variant: same knobs as the step-01 call of the same run

The arms, each the newest `global_step_N/policy` (by N) of its training folder (harness/arms.py's
table: every row with a folder, those step 03 trained in this run):
  sft        <run>/sft        the oracle SFT warm-start alone (when W8_HARNESS_SFT_STEPS > 0)
  repair_sft <run>/repair_sft the repair warm-start alone (under the repair curriculum)
  trained    <run>/grpo       SFT + GRPO (GRPO alone when there was no SFT)
  grpo_only  <run>/grpo_only  GRPO from the frozen model (when W8_GRPO_ONLY_ARM=1)
  refine     <run>/refine     SFT + GRPO on zero-shot and refinement prompts (when W8_REFINE_ARM=1)
  self       <run>/self       no answer key: rejection sampling + GRPO on mixed prompts (when W8_SELF_ARM=1 and
                              a harvest kept a program; else self_data.json says "no training data")
Only the model differs from step 01: same tasks, seeds, knobs and decoding. Each arm runs in
its own process (`python -m harness.traces`, the run's own knobs), so a GPU holds one arm's
vLLM engine at a time; an arm whose trace file exists is skipped, and its searches resume
mid-round. Writes <run>/<arm>_trace.json and prints live `steps_to_gold <arm> ...` lines.
Under the repair curriculum it then runs the held-in repair benchmark (step 01's <run>/repair_heldin.jsonl,
W8_REPAIR_BUDGET refinements a task) for frozen, every arm above and the rule-library ceiling:
<run>/repair_eval.json (per arm and task the solved node and each refinement's mention of the rule's property;
arms compared in pairs), its searches under <run>/repair_eval/<arm>/ (resumable).
Ends with one line per arm: gold reached in k/n searches and the mean steps_to_gold.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.arms import ARMS  # noqa: E402
from harness.exports import newest_export  # noqa: E402
from harness.files import REPO_ROOT  # noqa: E402
from harness.pipeline import StepError, StepResult, record_sandbox, run_step  # noqa: E402
from harness.repair_training import run_benchmark  # noqa: E402
from harness.rule_split import curriculum_of  # noqa: E402
from harness.traces import arm_file, load_traces, steps_summary  # noqa: E402

STEP = "04_trained_trace"
TRAINED_ARMS = tuple((a.name, a.folder) for a in ARMS if a.folder and a.cut_from is None)  # (arm, its training folder)


def arm_models(run_dir: Path) -> dict[str, Path]:
    """The post-training arms that exist in this run, each with its newest export."""
    found = {arm: newest_export(run_dir / folder) for arm, folder in TRAINED_ARMS}
    if found["trained"] is None:
        raise StepError(f"no GRPO export under {run_dir / 'grpo'} (global_step_N/policy with config.json): "
                        "run step 03 first")
    return {arm: path for arm, path in found.items() if path is not None}


def trace_arm(run_dir: Path, arm: str, policy: Path) -> None:
    """`python -m harness.traces RUN_DIR ARM MODEL`, its lines streamed; StepError with its last error line."""
    cmd = [sys.executable, "-m", "harness.traces", str(run_dir), arm, str(policy)]
    with subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        last_error = ""
        for line in proc.stdout:
            print(line, end="", flush=True)
            last_error = line.strip() if line.startswith("error:") else last_error
    if proc.returncode != 0:
        raise StepError(f"the {arm} arm's searches failed (exit {proc.returncode}): {last_error or 'see above'}")


def body(cfg, run_dir: Path, args) -> StepResult:
    arms = arm_models(run_dir)
    for arm, policy in arms.items():
        if not (run_dir / arm_file(arm)).is_file():
            print(f"[{STEP}] {arm} arm: {policy.relative_to(run_dir)}", flush=True)
            trace_arm(run_dir, arm, policy)
    for arm in arms:  # which sandbox ran each arm's programs (its own process): run_config.json and summary.md
        record_sandbox(run_dir, f"04 {arm} arm", json.loads((run_dir / arm_file(arm)).read_text()).get("sandbox") or {})
    summary = "; ".join(f"{arm}: {steps_summary(load_traces(run_dir / arm_file(arm)))}" for arm in arms)
    outputs = [arm_file(arm) for arm in arms]
    if curriculum_of(cfg) == "repair" and (run_dir / "repair_heldin.jsonl").is_file():
        # the held-in repair benchmark of every arm (frozen: the model as shipped) and the rule-library ceiling
        print(f"[{STEP}] the held-in repair benchmark: {', '.join(['frozen', *arms])} and the ceiling", flush=True)
        run_benchmark(cfg, run_dir, {"frozen": cfg.harness_model, **{a: str(p) for a, p in arms.items()}},
                      progress=None, say=lambda line: print(f"[{STEP}] {line}", flush=True))
        outputs.append("repair_eval.json")
    return StepResult(outputs, summary,
                      extra={"arms": {arm: str(path.relative_to(run_dir)) for arm, path in arms.items()}})


if __name__ == "__main__":
    raise SystemExit(run_step(STEP, __doc__, body))
