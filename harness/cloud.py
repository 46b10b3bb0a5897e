"""GCP and SkyPilot plumbing: scoped credentials, sky commands, the launch command, SkyPilot's parser.

Standard library only, so the same module also runs under the SkyPilot tool env
(`.venv-sky`, which has `sky` and google-auth) for the two things that need them:

    python -m harness.cloud render sky/r3.yaml < scenarios.json     # SkyPilot's parser, see render_tasks
    python -m harness.cloud mint-token .gcp-service-account.json

GCP auth is the service-account JSON at the repo root, nothing else. `scoped_env`
hands `sky` subprocesses GOOGLE_APPLICATION_CREDENTIALS,
CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE and CLOUDSDK_CORE_PROJECT (from the key's
project_id), plus CLOUDSDK_CONFIG pointing at a private folder under .w8-biayn/ so
that gcloud calls made by SkyPilot write there and not into ~/.config/gcloud. This
module never runs `gcloud auth` and never edits the caller's environment.

Not done here: reaching GCP. Every network call lives in `sky` or google-auth.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.config import KNOBS
from harness.files import REPO_ROOT, WORK_DIR

SA_PATH = REPO_ROOT / ".gcp-service-account.json"  # W8_GCP_KEY_FILE points elsewhere (tests, a second key)
SKY_VENV = REPO_ROOT / ".venv-sky"
GCLOUD_CONFIG_DIR = WORK_DIR / "gcloud"
TASK_YAML = REPO_ROOT / "sky" / "r3.yaml"
CLUSTER = "w8-biayn-r3"
SECRETS = ("DAYTONA_API_KEY", "WANDB_API_KEY")  # optional; travel as SkyPilot secrets, never as --env
LAUNCHER_KNOBS = ("W8_KEEP_CLUSTER", "W8_GCP_IAP", "W8_GCP_VPC")  # read by scripts/launch.py; the node never needs them
SA_FIELDS = ("type", "project_id", "private_key", "client_email", "token_uri")
TOKEN_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# Idle minutes after which SkyPilot tears the cluster down once launch.py has armed autodown (as soon as
# the cluster is UP, before set-up). Idle = no job and no SSH session (SkyPilot's default wait_for,
# jobs_and_ssh): a set-up streaming over SSH keeps it alive; a laptop that went away does not.
# SkyPilot's own `--down` is armed only after set-up succeeds and then replaces this with 1 minute.
AUTODOWN_IDLE_MINUTES = 10
CLUSTER_STATES = ("UP", "INIT", "STOPPED")
# Host RAM a skyrl node needs: vLLM's engine and the FSDP policy (plus its CPU offload on one small GPU) load side
# by side, and SkyRL's own SkyPilot recipes ask for `memory: 64+`. One L4 alone may land on g2-standard-4 (16 GB).
MIN_HOST_MEMORY_GB = 64


class CloudError(RuntimeError):
    """A cloud prerequisite is missing or wrong; the message says what and how to fix it."""


def key_path() -> Path:
    """The service-account JSON in use: W8_GCP_KEY_FILE if set, else .gcp-service-account.json."""
    return Path(os.environ.get("W8_GCP_KEY_FILE") or SA_PATH)


# ---- service account and scoped env -----------------------------------------------------------
def load_service_account(path: Path | None = None) -> dict[str, Any]:
    """Read and check the key file; CloudError names the problem (the key itself is never printed)."""
    path = Path(path or key_path())
    if not path.is_file():
        raise CloudError(f"missing {path.name}: save the service account's JSON key at {path} "
                         "(IAM > Service Accounts > Keys > Add key > JSON); it is git-ignored")
    try:
        key = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CloudError(f"{path.name} is not valid JSON ({type(err).__name__})") from None
    if not isinstance(key, dict):
        raise CloudError(f"{path.name} is not a JSON object")
    missing = [name for name in SA_FIELDS if not key.get(name)]
    if missing:
        raise CloudError(f"{path.name} lacks {', '.join(missing)}: expected a service-account key")
    if key["type"] != "service_account":
        raise CloudError(f"{path.name} has type {key['type']!r}: expected 'service_account' "
                         "(user credentials are not used here)")
    return key


def scoped_env(base: Mapping[str, str] | None = None, sa_path: Path | None = None,
               gcloud_config_dir: Path = GCLOUD_CONFIG_DIR) -> dict[str, str]:
    """A copy of `base` (default os.environ) with GCP auth scoped to the key file; base is not changed."""
    sa_path = Path(sa_path or key_path())
    key = load_service_account(sa_path)
    env = dict(os.environ if base is None else base)
    sa_file = str(Path(sa_path).resolve())
    Path(gcloud_config_dir).mkdir(parents=True, exist_ok=True)
    env.update({
        "GOOGLE_APPLICATION_CREDENTIALS": sa_file,
        "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE": sa_file,
        "CLOUDSDK_CORE_PROJECT": key["project_id"],
        "CLOUDSDK_CONFIG": str(Path(gcloud_config_dir).resolve()),
    })
    return env


def sky_executable(env: Mapping[str, str] | None = None) -> str:
    """`sky` on PATH if there is one, else the repo's `.venv-sky/bin/sky`; CloudError with the fix otherwise."""
    found = shutil.which("sky", path=(os.environ if env is None else env).get("PATH"))
    if found:
        return found
    local = SKY_VENV / "bin" / "sky"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    raise CloudError("sky is not installed: run `make sky-env` (SkyPilot in its own env .venv-sky)")


def sky_python() -> str:
    python = SKY_VENV / "bin" / "python"
    if not python.is_file():
        raise CloudError("the SkyPilot env .venv-sky is missing: run `make sky-env`")
    return str(python)


def run_sky(args: list[str], env: Mapping[str, str] | None = None, sa_path: Path | None = None,
            **kwargs: Any) -> subprocess.CompletedProcess:
    """Run `sky ARGS` with the scoped env from the repo root (workdir `.` of sky/r3.yaml is the repo)."""
    scoped = scoped_env(env, sa_path)
    kwargs.setdefault("cwd", REPO_ROOT)
    return subprocess.run([sky_executable(scoped), *args], env=scoped, check=False, **kwargs)


def popen_sky(args: list[str], env: Mapping[str, str] | None = None, sa_path: Path | None = None,
              **kwargs: Any) -> subprocess.Popen:
    """Start `sky ARGS` with the scoped env (for streaming its output)."""
    scoped = scoped_env(env, sa_path)
    kwargs.setdefault("cwd", REPO_ROOT)
    return subprocess.Popen([sky_executable(scoped), *args], env=scoped, **kwargs)


# ---- sky launch command ------------------------------------------------------------------------
def knob_envs(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The W8_* knobs set (non-empty) in `env`, in knob-table order, minus the launcher's own."""
    return [(knob.env, env[knob.env]) for knob in KNOBS
            if env.get(knob.env, "") != "" and knob.env not in LAUNCHER_KNOBS]


def launch_command(env: Mapping[str, str], resolved: Mapping[str, Any] | None = None,
                   yaml_path: str = "sky/r3.yaml", cluster: str = CLUSTER, sky: str = "sky") -> list[str]:
    """sky launch -c CLUSTER -y --down YAML --gpus G --num-nodes N [--image-id I] [--memory M] --env K=V ... [--secret NAME].

    `env` holds what the user set (W8_* knobs, W8_PRESET, secrets); `resolved` the knobs as the node will
    resolve them (preset under env), which decide the resources. Knobs go as --env with their values (they
    are not secret). A secret goes as `--secret NAME` without a value, so sky reads it from the
    environment and it never appears in a command line or log.
    """
    cmd = [sky, "launch", "-c", cluster, "-y", "--down", str(yaml_path)]
    resolved = resolved or {}
    if resolved.get("accelerators"):
        cmd += ["--gpus", str(resolved["accelerators"])]
    if resolved.get("num_nodes"):
        cmd += ["--num-nodes", str(resolved["num_nodes"])]
    if resolved.get("image_id"):
        cmd += ["--image-id", str(resolved["image_id"])]
    if resolved.get("memory"):
        cmd += ["--memory", str(resolved["memory"])]
    for name, value in knob_envs(env):
        cmd += ["--env", f"{name}={value}"]
    sha = env.get("W8_GIT_SHA", "")
    if sha:
        cmd += ["--env", f"W8_GIT_SHA={sha}"]
    for name in SECRETS:
        if env.get(name):
            cmd += ["--secret", name]
    return cmd


def check_host_memory(backend: str, memory: str) -> str:
    """'' when W8_MEMORY gives a skyrl node enough host RAM, else the problem in one line (before money is spent)."""
    if backend != "skyrl":
        return ""
    if not memory:
        return (f"W8_MEMORY is not set: SkyPilot may pick a node with too little host RAM for vLLM and FSDP side by "
                f"side (one L4: g2-standard-4, 16 GB); set W8_MEMORY={MIN_HOST_MEMORY_GB}+ (the preset should)")
    if int(memory.rstrip("+")) < MIN_HOST_MEMORY_GB:
        return (f"W8_MEMORY={memory}: under the {MIN_HOST_MEMORY_GB} GB a skyrl node needs (vLLM and FSDP load side "
                f"by side; SkyRL's recipes ask for {MIN_HOST_MEMORY_GB}+); set W8_MEMORY={MIN_HOST_MEMORY_GB}+")
    return ""


# ---- reading sky's output ------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cluster_state(listing: str, cluster: str = CLUSTER) -> str | None:
    """The cluster's STATUS (UP, INIT, STOPPED) in `sky status` output, or None when it is not listed."""
    for line in _ANSI.sub("", listing).splitlines():
        words = line.split()
        if words[:1] == [cluster]:
            return next((w for w in words[1:] if w in CLUSTER_STATES), "listed")
    return None


def chosen_cost_per_hour(lines: Iterable[str]) -> float | None:
    """$/hour of the resources SkyPilot's optimizer chose (the ✔ row of its table in `sky launch` output,
    all nodes together); None when the launch printed no table (it failed before the optimizer)."""
    cost = None
    for line in lines:
        match = re.search(r"(\d+\.\d+)\s*(?:[│|]\s*)?✔", _ANSI.sub("", line))
        if match:
            cost = float(match.group(1))
    return cost


# ---- run inside .venv-sky ----------------------------------------------------------------------
def render_tasks(scenarios: list[dict[str, Any]], yaml_path: Path = TASK_YAML, timeout_s: float = 180) -> list[dict]:
    """Parse the task YAML with SkyPilot's own parser (in .venv-sky), once per scenario, in one process.

    A scenario is {"env": [[NAME, VALUE], ...], "gpus": "A100:8" | None, "secrets": [NAME, ...]}: what
    `sky launch --env/--gpus/--secret` would apply. Secret values are never passed: each named secret
    gets a placeholder. Each result is the rendered summary, or {"error": SkyPilot's one-line rejection}.
    """
    # A private HOME: importing sky creates ~/.sky; a validation should leave no trace.
    home = WORK_DIR / "sky-home"
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sky_python(), "-m", "harness.cloud", "render", str(yaml_path)], cwd=REPO_ROOT, env=env,
                          input=json.dumps(scenarios), capture_output=True, text=True, timeout=timeout_s)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise CloudError(f"cannot run SkyPilot's parser on {Path(yaml_path).name}: {reason}")
    return json.loads(lines[-1])


def scenario_of(cmd: list[str]) -> dict[str, Any]:
    """The `sky launch` command launch_command builds, as a render scenario (what the dry-run parses)."""
    scenario: dict[str, Any] = {"env": [], "secrets": []}
    flags = {"--gpus": "gpus", "--num-nodes": "num_nodes", "--image-id": "image_id", "--memory": "memory"}
    for flag, value in zip(cmd, cmd[1:]):
        if flag == "--env":
            scenario["env"].append(value.split("=", 1))
        elif flag == "--secret":
            scenario["secrets"].append(value)
        elif flag in flags:
            scenario[flags[flag]] = value
    return scenario


def render_task(env_overrides: Iterable[tuple[str, str]] = (), gpus: str | None = None,
                secret_names: Iterable[str] = (), yaml_path: Path = TASK_YAML) -> dict:
    """One scenario of render_tasks; CloudError carries SkyPilot's rejection."""
    [result] = render_tasks([{"env": [list(kv) for kv in env_overrides], "gpus": gpus,
                              "secrets": list(secret_names)}], yaml_path)
    if "error" in result:
        raise CloudError(f"SkyPilot rejects {Path(yaml_path).name}: {result['error']}")
    return result


def open_ports(task: Mapping[str, Any]) -> list[str]:
    """The ports a rendered task opens (render_tasks' summary); [] is the only safe answer."""
    return sorted({str(port) for ports in task.get("ports") or [] for port in ports})


def _render_one(sky: Any, config: dict, scenario: dict) -> dict:
    envs = [tuple(kv) for kv in scenario.get("env") or []]
    secrets = [(name, "<redacted>") for name in scenario.get("secrets") or []]
    try:
        task = sky.Task.from_yaml_config(config, env_overrides=envs or None, secrets_overrides=secrets or None)
        override = {k: scenario[s] for k, s in (("accelerators", "gpus"), ("image_id", "image_id"), ("memory", "memory"))
                    if scenario.get(s)}
        if override:  # what `sky launch --gpus/--image-id/--memory` do: override every resource's fields
            task.set_resources_override(override)
        if scenario.get("num_nodes"):  # sky launch --num-nodes
            task.num_nodes = int(scenario["num_nodes"])
    except Exception as err:  # SkyPilot raises ValueError and its own exception types
        return {"error": f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"}
    resources = list(task.resources)
    return {
        "name": task.name,
        "accelerators": [r.accelerators for r in resources],
        "cloud": [str(r.cloud) for r in resources],
        "disk_size": [r.disk_size for r in resources],
        "image_id": [r.image_id for r in resources],
        "ports": [list(r.ports or []) for r in resources],
        "memory": [r.memory for r in resources],  # SkyPilot opens these to 0.0.0.0/0 on GCP
        "num_nodes": task.num_nodes,
        "envs": dict(task.envs),
        "secret_names": sorted(task.secrets),  # names only: values never leave this process
        "setup": task.setup or "",
        "run": task.run or "",
        "workdir": task.workdir,
    }


def _render_in_sky_env(argv: list[str]) -> int:
    import copy

    import sky  # only in .venv-sky
    import yaml

    config = yaml.safe_load(Path(argv[0]).read_text())
    scenarios = json.loads(sys.stdin.read() or "[{}]")
    # from_yaml_config edits its argument: each scenario gets a fresh copy
    print(json.dumps([_render_one(sky, copy.deepcopy(config), s) for s in scenarios], sort_keys=True, default=str))
    return 0


def mint_token(sa_path: Path | None = None, timeout_s: float = 60) -> dict[str, Any]:
    """Mint an access token from the key with google-auth (in .venv-sky); the token is never returned.

    {"ok": True, "expiry": ...} or {"ok": False, "network": bool, "error": one line}.
    """
    sa_path = Path(sa_path or key_path()).resolve()
    proc = subprocess.run([sky_python(), "-m", "harness.cloud", "mint-token", str(sa_path)], cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True,
                          timeout=timeout_s)
    lines = proc.stdout.strip().splitlines()
    if not lines:
        return {"ok": False, "network": False, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def _mint_in_sky_env(argv: list[str]) -> int:
    from google.auth import exceptions
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    try:
        creds = service_account.Credentials.from_service_account_file(argv[0], scopes=[TOKEN_SCOPE])
        creds.refresh(Request())
        result = {"ok": True, "expiry": str(creds.expiry), "account": creds.service_account_email}
    except exceptions.TransportError as err:
        result = {"ok": False, "network": True, "error": _one_line(err)}
    except (exceptions.GoogleAuthError, ValueError) as err:
        result = {"ok": False, "network": False, "error": _one_line(err)}
    print(json.dumps(result))
    return 0


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}"


if __name__ == "__main__":
    command, rest = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "render" and len(rest) == 1:
        raise SystemExit(_render_in_sky_env(rest))
    if command == "mint-token" and len(rest) == 1:
        raise SystemExit(_mint_in_sky_env(rest))
    print("usage: python -m harness.cloud render YAML < SCENARIOS | mint-token KEY.json",
          file=sys.stderr)
    raise SystemExit(2)
