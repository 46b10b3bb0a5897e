"""Validate the SkyRL GRPO and SFT overrides offline, on this CPU machine (part of `make dry-run`).

    W8_PRESET=gcp python scripts/validate_skyrl.py                  # the knobs' shape + 1, 2, 4 nodes of <GPU>:8
    W8_PRESET=gpu-smoke python scripts/validate_skyrl.py --shapes L4:1x1
    python scripts/validate_skyrl.py --shapes A100:8x1,H100:8x2 --out .w8-biayn/dry-run/plans
    python scripts/validate_skyrl.py --extra trainer.polcy.model.path=x   # a wrong key must fail

Builds the real training rows for the knobs (harness.training_data.training_data_for), renders
the overrides exactly as steps 02/03 do on the GPU node (harness.skyrl_config.render_all:
plan, one token budget, paths) for each cluster shape `<accelerator>x<nodes>`, and loads them
with SkyRL's own config classes and start-up checks (SkyRLTrainConfig.from_cli_overrides +
validate_cfg, SFTConfig + validate_sft_cfg + the SFT trainer's batch check), plus dataset
size vs train_batch_size, the longest real prompt vs max_prompt_length and
max_generate_length vs W8_OPERATOR_MAX_NEW_TOKENS; with the refine or self arm, their GRPO render
on a mixed parquet of zero-shot and refinement rows (stand-in parents, see refine_stand_in); under the
repair curriculum, the repair tasks' refinement rows (validate_repair). Several-node shapes get a placeholder
bucket (they need W8_BUCKET). Each shape's two override lists are written to --out, one
override a line. The model is W8_HARNESS_MODEL when it names a GPU model, else
Qwen/Qwen2.5-Coder-1.5B-Instruct. Exits 1 with the reason on the last stderr line. Ends with
one line: what was validated and how long it took.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config import ConfigError, load_config  # noqa: E402
from harness.dataset import DatasetError  # noqa: E402
from harness.repair import RepairError  # noqa: E402
from harness.rule_split import curriculum_of  # noqa: E402
from harness.skyrl_config import (SkyRLConfigError, measure_lengths, render_all, training_data_for,  # noqa: E402
                                  validate_overrides, write_overrides)

GPU_DEFAULT_MODEL = "Qwen/Qwen2.5-Coder-1.5B-Instruct"  # presets/gcp.env's W8_HARNESS_MODEL
STANDARD_NODES = (1, 2, 4)  # several-node shapes every dry-run proves (of 8 GPUs of the knobs' type)
PLACEHOLDER_BUCKET = "gs://w8-biayn-dry-run"


def parse_shapes(text: str) -> list[tuple[str, int]]:
    """'A100:8x1,A100:8x2' -> [('A100:8', 1), ('A100:8', 2)]; SkyRLConfigError naming a bad item."""
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        acc, _, nodes = item.partition("x")
        if not nodes.isdigit() or int(nodes) < 1:
            raise SkyRLConfigError(f"shape {item!r}: expected <accelerator>x<nodes>, e.g. A100:8x2")
        shapes.append((acc, int(nodes)))
    return shapes


def default_shapes(cfg) -> list[tuple[str, int]]:
    gpu = cfg.accelerators.split(":")[0]
    shapes = [(cfg.accelerators, cfg.num_nodes)] + [(f"{gpu}:8", n) for n in STANDARD_NODES]
    return list(dict.fromkeys(shapes))


def refine_stand_in(cfg, data, out: Path):
    """The refine and self arms' mixed GRPO parquet as step 03 writes it, with a stand-in for the harvest: every
    refinement row's parent is the oracle program (the longest program the search has, ~1.3k Qwen tokens) with
    the failures of an always-legal program on its task, so the rendered max_prompt_length holds a long parent
    and the most failures a refinement prompt shows. The real rows come from searches on train pages (step 03)."""
    import dataclasses

    from harness.failures import failures_to_show
    from harness.oracle import oracle_source
    from harness.rewards import RewardKnobs, score_harness
    from harness.rule_split import Design
    from harness.training_data import mixed_rows, refine_row, skyrl_row, train_tasks, write_parquet_rows

    reward = RewardKnobs.from_config(cfg)
    tasks = train_tasks(cfg.train_count, cfg.train_examples_per_obs, Design.of(cfg))
    weak = "def is_legal_action(state, action):\n    return True\n"
    refine = []
    for task in tasks[: max(1, cfg.harvest_tasks)]:
        score = score_harness(weak, task.examples, reward.recall_weight, reward.timeout_s, sandbox="local")
        refine.append(refine_row(task, oracle_source(), failures_to_show(score, task.examples), score.reward, reward,
                                 cfg.refine_improvement_bonus, cfg.refine_identical_penalty,
                                 source={"harvest": "dry-run stand-in", "task_id": task.task_id}))
    pool = [refine[i % len(refine)] for i in range(cfg.train_count)]
    rows, mix = mixed_rows([skyrl_row(t, reward) for t in tasks], pool, cfg.refine_share, cfg.train_count, 0)
    path = write_parquet_rows(rows, out / "refine-data" / "train.parquet")
    return dataclasses.replace(data, train_parquet=path, n_train=len(rows)), mix


def validate_grpo_rows(cfg, model: str, data, out: Path, name: str) -> dict:
    """Other GRPO rows than the zero-shot ones rendered (one node of the knobs' shape) and through SkyRL's checks;
    the longest of their prompts sets max_prompt_length. The overrides go to skyrl_grpo_overrides-<name>.txt."""
    lengths = measure_lengths(model, data)
    rendered = render_all(cfg, model, out / "run", data_dir=None, lengths=lengths, grpo_name=name, data=data)
    write_overrides(out / f"skyrl_grpo_overrides-{name}.txt", rendered.grpo)
    return validate_overrides(rendered.grpo, rendered.sft, lengths, cfg.operator_max_new_tokens)


def validate_refine(cfg, model: str, data, out: Path) -> str:
    """The refine/self arms' GRPO render (one node of the knobs' shape) on their mixed parquet, through SkyRL's checks."""
    mixed, mix = refine_stand_in(cfg, data, out)
    s = validate_grpo_rows(cfg, model, mixed, out, "refine")
    return (f"refine/self GRPO on the mixed parquet ({mix['n_refine']} refinement + {mix['n_zero_shot']} zero-shot "
            f"rows, share {cfg.refine_share}; stand-in parents: the oracle program): max_prompt_length "
            f"{s['max_prompt_length']}, batch {s['train_batch_size']}/{s['mini_batch']}/{s['micro']}")


def validate_repair(cfg, model: str, data, out: Path) -> str:
    """The repair curriculum's GRPO rows (harness.repair_rows: each train repair task's parent with the failures
    the search shows) on a sample of two tasks per family, repeated to W8_TRAIN_COUNT rows: read back as SkyRL
    reads them, through the env's refinement path (reference gold and improved, parent unchanged penalised),
    and rendered through SkyRL's checks (the longest repair prompt sets max_prompt_length)."""
    import dataclasses

    from harness.repair import RepairKnobs, make_side
    from harness.repair_rows import check_repair_rows, repair_refine_rows
    from harness.rewards import RewardKnobs
    from harness.rule_split import Design
    from harness.training_data import write_parquet_rows

    tasks = make_side("train", Design.of(cfg), dataclasses.replace(RepairKnobs.from_config(cfg), tasks_per_family=2))
    reward = dataclasses.replace(RewardKnobs.from_config(cfg), sandbox="local")  # the node's sandbox is local too
    rows = repair_refine_rows(tasks, reward, cfg.refine_improvement_bonus, cfg.refine_identical_penalty)
    pool = [rows[i % len(rows)] for i in range(max(cfg.train_count, len(rows)))]
    path = write_parquet_rows(pool, out / "repair-data" / "train.parquet")
    checked = check_repair_rows(path, tasks)
    s = validate_grpo_rows(cfg, model, dataclasses.replace(data, train_parquet=path, n_train=len(pool)), out, "repair")
    return (f"repair curriculum: {len(rows)} refinement rows (2 tasks x {len({t.family for t in tasks})} families) "
            f"as {len(pool)} GRPO rows: SkyRL's columns, the env's refinement path (reference "
            f"{checked['reference_reward']:.2f}, parent unchanged {checked['parent_reward']:.2f}), max_prompt_length "
            f"{s['max_prompt_length']}, batch {s['train_batch_size']}/{s['mini_batch']}/{s['micro']}")


def validate_shape(cfg, model: str, acc: str, nodes: int, lengths, data_dir, out: Path, extra: list[str]) -> str:
    shaped = cfg.replace(accelerators=acc, num_nodes=nodes, bucket=cfg.bucket or (PLACEHOLDER_BUCKET if nodes > 1
                                                                                   else ""))
    rendered = render_all(shaped, model, out / "run", data_dir=data_dir, lengths=lengths)
    grpo = rendered.grpo + extra
    tag = f"{acc.replace(':', '-')}x{nodes}"
    write_overrides(out / f"skyrl_grpo_overrides-{tag}.txt", grpo)
    write_overrides(out / f"skyrl_sft_overrides-{tag}.txt", rendered.sft)
    s = validate_overrides(grpo, rendered.sft, lengths, cfg.operator_max_new_tokens)
    return (f"{acc} x {nodes} node(s): {s['nodes'] * s['gpus']} GPUs, {s['engines']} engines x TP{s['tp']}, batch "
            f"{s['train_batch_size']}/{s['mini_batch']}/{s['micro']}, max_prompt_length {s['max_prompt_length']}, "
            f"max_generate_length {s['max_generate_length']}, SFT batch {s['sft_batch']} x {s['sft_steps']} steps")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=None, help="comma-separated <accelerator>x<nodes>; default: the knobs' "
                                                       "shape and 1, 2, 4 nodes of <GPU>:8")
    parser.add_argument("--extra", action="append", default=[], help="an extra GRPO override (key=value)")
    parser.add_argument("--data-dir", default=None, help="where the rows are written (default ~/data/...)")
    parser.add_argument("--out", type=Path, default=Path(".w8-biayn/dry-run/plans"),
                        help="where the rendered override lists go")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        cfg = load_config().replace(backend="skyrl")
        model = cfg.harness_model if "/" in cfg.harness_model else GPU_DEFAULT_MODEL
        shapes = parse_shapes(args.shapes) if args.shapes else default_shapes(cfg)
        data = training_data_for(cfg, args.data_dir)
        lengths = measure_lengths(model, data)
        lines = [validate_shape(cfg, model, acc, nodes, lengths, args.data_dir, args.out, args.extra)
                 for acc, nodes in shapes]
        if cfg.refine_arm or cfg.self_arm:
            lines.append(validate_refine(cfg, model, data, args.out))
        if curriculum_of(cfg) == "repair":
            lines.append(validate_repair(cfg, model, data, args.out))
    except (ConfigError, SkyRLConfigError, DatasetError, RepairError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    how = "exact" if lengths.exact else f"estimated with {lengths.tokenizer} x 1.25"
    print(f"skyrl config ok: {model}, {len(shapes)} shape(s); {data.n_train} train / {data.n_eval} eval rows, "
          f"longest prompt {lengths.prompt_max} tokens, SFT answer {lengths.answer_max} <= budget "
          f"{cfg.operator_max_new_tokens} ({how}); overrides in {args.out}/; {time.monotonic() - start:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
