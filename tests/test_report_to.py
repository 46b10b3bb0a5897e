"""W8_REPORT_TO (issue 43): off by default; an integration that is not installed, or the skyrl backend, is refused
in one line naming the knob before any model loads; when on, the local trainer hands it to TRL and its files land
in the training's folder."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from harness.config import BY_NAME, REPORT_TO_MODULES, ConfigError, load_config
from harness.train_local import LOG_DIR_ENV, training_logs

REPO = Path(__file__).resolve().parents[1]


def installed(name: str) -> bool:
    return any(importlib.util.find_spec(module) for module in REPORT_TO_MODULES[name])


MISSING = [name for name in REPORT_TO_MODULES if not installed(name)]


def test_report_to_is_off_by_default():
    assert BY_NAME["report_to"].default == "none" and load_config(env={}).report_to == "none"


@pytest.mark.skipif(not MISSING, reason="every integration of W8_REPORT_TO is installed here")
@pytest.mark.parametrize("script", ["02_sft", "03_grpo"])
def test_an_integration_that_is_not_installed_is_refused_in_one_line_before_any_model_loads(script, tmp_path):
    name = MISSING[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("W8_")}
    env.update(W8_REPORT_TO=name, W8_HARNESS_SFT_STEPS="1", W8_RUNS_ROOT=str(tmp_path))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, f"scripts/{script}.py"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    module = REPORT_TO_MODULES[name][0]
    assert proc.stderr.splitlines() == [f"error: W8_REPORT_TO={name}: {module} is not installed in this environment "
                                        f"(pip install {module}), or leave W8_REPORT_TO=none"]
    assert time.monotonic() - start < 60 and not any(tmp_path.iterdir())  # no run folder, no model


def test_the_skyrl_backend_refuses_it_by_name():
    with pytest.raises(ConfigError, match=r"^W8_REPORT_TO=tensorboard with W8_BACKEND=skyrl: "):
        load_config(env={"W8_REPORT_TO": "tensorboard", "W8_BACKEND": "skyrl"})


def test_training_logs_point_the_integration_at_the_training_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    with training_logs("none", tmp_path) as reporters:
        assert reporters == [] and "TENSORBOARD_LOGGING_DIR" not in os.environ
    with training_logs("tensorboard", tmp_path / "sft") as reporters:
        assert reporters == ["tensorboard"] and os.environ["TENSORBOARD_LOGGING_DIR"] == str(tmp_path / "sft" / "logs")
    assert "TENSORBOARD_LOGGING_DIR" not in os.environ  # restored after training
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "mine"))  # the user's own folder wins
    with training_logs("wandb", tmp_path / "grpo") as reporters:
        assert reporters == ["wandb"] and os.environ["WANDB_DIR"] == str(tmp_path / "mine")
    with training_logs("mlflow", tmp_path) as reporters:
        assert reporters == ["mlflow"] and set(LOG_DIR_ENV) == {"tensorboard", "wandb"}


@pytest.mark.slow
@pytest.mark.skipif(not installed("tensorboard"), reason="tensorboard is not installed (W8_REPORT_TO is opt-in)")
def test_a_real_sft_step_writes_tensorboard_events_into_the_training_folder(tmp_path, monkeypatch):
    """One SFT step of a 2-layer model with report_to=tensorboard: TRL's TensorBoard callback writes its events
    into <out>/logs, which survives the trainer's scratch folder."""
    from test_train_local import tiny_model, tiny_rows

    from harness.hparams import LOCAL
    from harness.models import resolve_model
    from harness.train_local import train_sft

    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    model = tiny_model(tmp_path, str(resolve_model("smollm2-135m")))
    sft = train_sft(model, tmp_path / "sft", tiny_rows(tmp_path / "data"), 1, replace(LOCAL, sft_lr=1e-3),
                    report_to="tensorboard")
    assert sft.step == 1 and not (tmp_path / "sft" / ".scratch").exists()
    assert list((tmp_path / "sft" / "logs").glob("events.out.tfevents.*"))
