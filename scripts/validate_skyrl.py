"""Validate the SkyRL GRPO and SFT overrides offline, on this CPU machine (part of `make dry-run`).

    python scripts/validate_skyrl.py                                  # W8_* knobs, W8_ACCELERATORS
    python scripts/validate_skyrl.py --accelerators A100:8,H100:8,L4:1
    python scripts/validate_skyrl.py --extra trainer.polcy.model.path=x   # a wrong key must fail

Builds the real training rows for the knobs (harness.dataset.prepare_training_data, under
~/data/w8-biayn/harness-legality), renders the overrides exactly as steps 02/03 do on the GPU
node (harness.skyrl_config) and loads them with SkyRL's own config classes and start-up checks
(SkyRLTrainConfig.from_cli_overrides + validate_cfg, SFTConfig + validate_sft_cfg + the SFT
trainer's batch check), plus dataset size vs train_batch_size and the longest real prompt vs
max_prompt_length. The model is W8_HARNESS_MODEL when it names a GPU model, else the GPU
default Qwen/Qwen2.5-Coder-1.5B-Instruct. Exits 1 with SkyRL's message on the last stderr line.
Ends with one line: what was validated and how long it took.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config import ConfigError, load_config  # noqa: E402

GPU_DEFAULT_MODEL = "Qwen/Qwen2.5-Coder-1.5B-Instruct"  # sky/r3.yaml's W8_HARNESS_MODEL


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerators", default=None, help="comma-separated, default W8_ACCELERATORS")
    parser.add_argument("--extra", action="append", default=[], help="an extra GRPO override (key=value)")
    parser.add_argument("--data-dir", default=None, help="where the rows are written (default ~/data/...)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        cfg = load_config().replace(backend="skyrl")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    from harness.dataset import DatasetError
    from harness.skyrl_config import (SkyRLConfigError, measure_lengths, plan_for, render_grpo, render_sft,
                                      training_data_for, validate_overrides)

    model = cfg.harness_model if "/" in cfg.harness_model else GPU_DEFAULT_MODEL
    accelerators = (args.accelerators or cfg.accelerators).split(",")
    export = Path(tempfile.gettempdir()) / "w8-biayn-dry-run"
    lines = []
    try:
        data = training_data_for(cfg, args.data_dir)
        lengths = measure_lengths(model, data)
        for acc in accelerators:
            plan = plan_for(acc.strip(), model, data.n_train)
            grpo = render_grpo(model, plan, data, lengths, export / "grpo", cfg.grpo_epochs) + list(args.extra)
            sft = render_sft(model, plan, data, lengths, export / "sft", max(1, cfg.harness_sft_steps))
            s = validate_overrides(grpo, sft, lengths)
            lines.append(f"{acc.strip()}: {s['gpus']} GPUs, {s['engines']} engines x TP{s['tp']}, batch "
                         f"{s['train_batch_size']}/{s['mini_batch']}/{s['micro']}, max_prompt_length "
                         f"{s['max_prompt_length']}, SFT batch {s['sft_batch']} x {s['sft_steps']} steps")
    except (SkyRLConfigError, DatasetError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    how = "exact" if lengths.exact else f"estimated with {lengths.tokenizer}"
    print(f"skyrl config ok: {model} on {', '.join(a.strip() for a in accelerators)}; {data.n_train} train / "
          f"{data.n_eval} eval rows, longest prompt {lengths.prompt_max} tokens ({how}); "
          f"{time.monotonic() - start:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
