"""The refine and self arms' training inputs: the programs they train on are written out for the results
folder, and step 03's harvests and data folders are checked like its outputs (a damaged one is named, removed
and rebuilt by redoing the step, never skipped over).

Real parts: harvests searched by the deterministic operator in the local sandbox (harness.harvest), the refine
arm's mixed parquet (harness.arm_training), the step runner and its markers (harness.pipeline, harness.markers)
in their own processes. Only GRPO itself is left out: the step script here builds step 03's refine data as
scripts/03_grpo.py does and stops before training.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.arm_training import (arm_training_inputs, harvest, mixed_training_data, programs_file, row_source,
                                  write_training_programs)
from harness.config import load_config
from harness.harvest import load_harvest, run_harvest
from harness.markers import output_problems, read_marker, step_is_done
from harness.pipeline import open_run, small_artifacts
from harness.training_data import training_data_for

REPO = Path(__file__).resolve().parents[1]
KNOBS = {"W8_RUN_ID": "arm-inputs", "W8_OPERATOR": "deterministic", "W8_SANDBOX": "local",
         "W8_HARNESS_SFT_STEPS": "1", "W8_REFINE_ARM": "1", "W8_REFINE_SHARE": "0.5", "W8_TRAIN_COUNT": "4",
         "W8_TRAIN_EXAMPLES_PER_OBS": "8", "W8_TRACE_TASKS": "1", "W8_TRACE_EXAMPLES_PER_OBS": "8",
         "W8_HARVEST_TASKS": "2", "W8_HARVEST_MAX_ITERATIONS": "2"}


def quiet(*args, **kwargs) -> None:
    pass


def test_the_refine_programs_file_holds_each_refinement_rows_program_source_and_reward(tmp_path):
    cfg = load_config(env=KNOBS)
    run_dir = open_run(cfg, root=tmp_path)
    run_harvest(cfg, run_dir, "refine", "smollm2-135m", say=quiet)
    found = load_harvest(run_dir, "refine")
    data, mix, programs = mixed_training_data(cfg, run_dir, "refine", training_data_for(cfg, run_dir / "data"),
                                              [found])
    path = write_training_programs(run_dir, "refine", programs)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [r for r in pq.read_table(data.train_parquet).to_pylist() if r["extra_info"]["prompt_kind"] == "refine"]
    assert path.name == programs_file("refine") and len(lines) == len(rows) == mix["n_refine"] == 2
    traces = {t["task"]["task_id"]: t for t in found["traces"]}
    for line, row in zip(lines, rows):
        info, source = row["extra_info"], row_source(row)
        assert line["code"] == info["parent_code"] and line["reward"] == info["parent_reward"]
        assert (line["task_id"], line["page"], line["seed"]) == (info["task_id"], info["page"], info["seed"])
        assert (line["harvest"], line["node"], line["parent"]) == ("refine", source["node"], source["parent"])
        node = traces[line["task_id"]]["nodes"][line["parent"]]  # the harvest node that holds the program
        assert (node["code"], node["reward"]) == (line["code"], line["reward"])
        assert line["seed"] >= 1000 and line["task_id"].startswith("rule/train/")  # a harvest task, never held out


def test_a_cut_harvest_record_is_named_and_harvested_again_from_its_saved_searches(tmp_path, capsys):
    cfg = load_config(env=KNOBS)
    run_dir = open_run(cfg, root=tmp_path)
    run_harvest(cfg, run_dir, "refine", "smollm2-135m", say=quiet)
    record = run_dir / "harvest" / "refine.json"
    whole = json.loads(record.read_text())
    record.write_text(record.read_text()[:100])
    again = harvest(cfg, run_dir, "refine", "smollm2-135m")
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith(f"{record}: corrupt JSON (")
    assert said[0].endswith("; step 03 harvests it again from its saved searches")
    assert again["traces"] == whole["traces"] and any("resumed" in line for line in said)


STEP_03_DATA = r'''
import sys
sys.path.insert(0, {repo!r})
from harness.arm_training import arm_training_inputs, harvest, mixed_training_data, programs_file
from harness.arm_training import write_training_programs
from harness.pipeline import StepResult, atomic_write_json, run_step
from harness.training_data import training_data_for

def body(cfg, run_dir, args):  # scripts/03_grpo.py's train_refine up to the training
    found = harvest(cfg, run_dir, "refine", "smollm2-135m")
    data, mix, programs = mixed_training_data(cfg, run_dir, "refine", training_data_for(cfg, run_dir / "data"),
                                              [found])
    write_training_programs(run_dir, "refine", programs)
    atomic_write_json(run_dir / "refine_metrics.json", {{"mix": mix}})
    return StepResult(["refine_metrics.json", programs_file("refine")], "refine data",
                      training_inputs=arm_training_inputs(run_dir, "refine"))

raise SystemExit(run_step("03_grpo", "step 03's refine data, without the training", body))
'''


def test_a_halved_refine_parquet_is_named_and_rebuilt_by_redoing_step_03(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_") and k != "DAYTONA_API_KEY"}
    env.update(KNOBS, W8_RUNS_ROOT=str(tmp_path / "runs"))
    script = tmp_path / "step_03_data.py"
    script.write_text(STEP_03_DATA.format(repo=str(REPO)))
    run_dir = tmp_path / "runs" / KNOBS["W8_RUN_ID"]

    def step() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)

    first = step()
    assert first.returncode == 0, first.stderr
    marker = read_marker(run_dir, "03_grpo")
    assert marker["training_inputs"] == arm_training_inputs(run_dir, "refine") == ["data/refine", "harvest/refine.json"]
    assert set(marker["training_files"]) == {"data/refine/train.parquet", "harvest/refine.json"}
    assert "refine_programs.jsonl" in small_artifacts(run_dir, ["03_grpo"])  # results/<run-id>/ gets it
    assert not any(name.startswith(("data/", "harvest/")) for name in small_artifacts(run_dir))
    parquet = run_dir / "data" / "refine" / "train.parquet"
    whole = parquet.read_bytes()
    parquet.write_bytes(whole[: len(whole) // 2])

    problem = (f"data/refine/train.parquet: {len(whole) // 2} bytes, the marker says {len(whole)} "
               "(truncated or overwritten)")
    assert output_problems(run_dir, "03_grpo") == [problem] and not step_is_done(run_dir, "03_grpo")
    redo = step()
    assert redo.returncode == 0, redo.stderr
    assert redo.stdout.splitlines()[1] == f"[03_grpo] {problem}: redoing the step"  # after the no-preset line
    assert parquet.read_bytes() == whole and output_problems(run_dir, "03_grpo") == []

    # a harvest record changed but still JSON: named, removed and rebuilt from the saved searches, not read
    record = run_dir / "harvest" / "refine.json"
    harvested = json.loads(record.read_text())
    forged = {**harvested, "traces": [{**t, "nodes": [{**n, "reward": 1.0} for n in t["nodes"]]}
                                      for t in harvested["traces"]]}
    record.write_text(json.dumps(forged))
    again = step()
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1].startswith("[03_grpo] harvest/refine.json: ")
    assert json.loads(record.read_text())["traces"] == harvested["traces"]
    assert parquet.read_bytes() == whole
    assert "complete, skipped" in step().stdout
