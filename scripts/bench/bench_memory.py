"""Peak memory of the embedded trainers, gradient checkpointing off (the baseline) and on, side by side.

    python scripts/bench/bench_memory.py                 # SFT and GRPO at `make local`'s knobs (~10 min, 2 idle cores)
    python scripts/bench/bench_memory.py --steps 2       # more steps per training (the peak is set by the first)

Each training runs in its own process, so each peak is its own: harness.pipeline.peak_rss_mb, the
figure a run's step markers record (the process or any child it waited for, the sandbox included).
SFT starts from the embedded SmolLM2-135M; GRPO from the first SFT export, as step 03 of `make
local` does (group of 4, completions up to W8_OPERATOR_MAX_NEW_TOKENS). The knobs are
presets/local.env's unless W8_* variables say otherwise. Not a test: a measurement. Writes only
under --out (default .w8-biayn/bench-memory).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.files import WORK_DIR  # noqa: E402


def child(trainer: str, checkpointing: bool, steps: int, out: Path, start: str) -> None:
    """One training in this process; prints one JSON line: peak RSS (MB) and wall seconds."""
    from harness.config import load_config
    from harness.hparams import for_config
    from harness.models import resolve_model
    from harness.pipeline import peak_rss_mb
    from harness.train_local import train_grpo, train_sft
    from harness.training_data import training_data_for

    cfg = load_config(env={"W8_PRESET": "local", **{k: v for k, v in os.environ.items() if k.startswith("W8_")}})
    data = training_data_for(cfg, out.parent / "data")
    t0 = time.monotonic()
    if trainer == "sft":
        train_sft(str(resolve_model(cfg.harness_model)), out, data, steps, for_config(cfg),
                  gradient_checkpointing=checkpointing, report_to=cfg.report_to, precision=cfg.train_precision)
    else:
        train_grpo(start, out, data, steps, cfg.operator_max_new_tokens, for_config(cfg),
                   gradient_checkpointing=checkpointing, report_to=cfg.report_to, precision=cfg.train_precision)
    print(json.dumps({"peak_rss_mb": round(peak_rss_mb()), "wall_s": round(time.monotonic() - t0, 1)}), flush=True)


def measure(trainer: str, checkpointing: bool, steps: int, out: Path, start: str = "") -> dict:
    folder = out / f"{trainer}-{'on' if checkpointing else 'off'}"
    shutil.rmtree(folder, ignore_errors=True)  # a fresh training each time: a kept export would skip it
    cmd = [sys.executable, __file__, "--child", trainer, "--checkpointing", str(int(checkpointing)),
           "--steps", str(steps), "--out", str(folder), "--start", start]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"error: {trainer} with checkpointing {'on' if checkpointing else 'off'} exited "
                         f"{proc.returncode} (its output is above)")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1, help="training steps per measurement")
    p.add_argument("--out", default=str(WORK_DIR / "bench-memory"))
    p.add_argument("--child", choices=("sft", "grpo"), help=argparse.SUPPRESS)
    p.add_argument("--checkpointing", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--start", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    out = Path(args.out)
    if args.child:
        child(args.child, bool(args.checkpointing), args.steps, out, args.start)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    start = str(out / "sft-off" / f"global_step_{args.steps}" / "policy")  # GRPO's start: the first SFT export
    for trainer in ("sft", "grpo"):
        off = measure(trainer, False, args.steps, out, start)
        on = measure(trainer, True, args.steps, out, start)
        rows.append((trainer, off, on))
    print(f"\npeak RSS per training ({args.steps} step(s), `make local` knobs): checkpointing off = baseline")
    print(f"{'trainer':8} {'off (baseline)':>22} {'on':>22} {'change':>8}")
    for trainer, off, on in rows:
        cell = lambda r: f"{r['peak_rss_mb'] / 1024:.2f} GB, {r['wall_s']:.0f} s"  # noqa: E731
        print(f"{trainer:8} {cell(off):>22} {cell(on):>22} {(on['peak_rss_mb'] / off['peak_rss_mb'] - 1):>+8.0%}")
    (out / "bench_memory.json").write_text(json.dumps(
        [{"trainer": t, "off": off, "on": on, "steps": args.steps} for t, off, on in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
