#!/usr/bin/env bash
# The GPU node's set-up: SkyRL's own install recipe at a pinned release, our few additions on top,
# then a preflight that fails in minutes instead of an hour into a run.
#
#   bash scripts/node_setup.sh                        # sky/r3.yaml's `setup:`, from ~/sky_workdir (this repo)
#   W8_SKYRL_REF=<tag or commit> bash scripts/node_setup.sh   # another SkyRL ref (check-checkout must pass)
#   bash scripts/node_setup.sh --check-only           # rehearsal on any machine: pins, lock check, checkout
#                                                     # check; stops before uv sync (no CUDA downloads)
#   SKYRL_GIT_URL=/path/to/a/SkyRL/mirror HOME=/tmp/node bash scripts/node_setup.sh --check-only
#
# Stages, one line each (`node setup: <stage> ok (Ns)`):
#   uv        uv 0.13.8 (Astral's installer for that version) unless it is already on PATH
#   checkout  github.com/NovaSky-AI/SkyRL cloned into ~/skyrl, detached at skyrl-v0.4.0
#   venv      ~/skyrl/.venv (uv venv --python 3.12 --seed)
#   lock      `harness.node_lock check-checkout`: sky/requirements-node.txt compiled against the checkout's
#             own uv.lock (uv export --frozen --extra fsdp), so a misfit costs seconds, not a full sync
#   check     `harness.node_env check-checkout`: the checkout pins what `make dry-run` validated from the sdist
#   (--check-only stops here)
#   sync      `uv sync --extra fsdp` in ~/skyrl (SkyRL's recipe, as its gsm8k SkyPilot example)
#   ours      sky/requirements-node.txt, with `-c` = every package sync installed (cannot move one)
#   preflight python -m harness.preflight: driver vs CUDA, GPUs, vllm/flash-attn/flashinfer, sandbox, reward
#
# Time: not measured on a node yet; expect tens of minutes on a fresh one (sync downloads tens of GB of
# CUDA wheels) and about a minute on a reused cluster: every stage is idempotent (an existing checkout,
# venv and packages are reused, uv skips what is installed).
# Secrets (DAYTONA_API_KEY, WANDB_API_KEY) are in the environment: never `set -x` here.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK_ONLY=0
case "${1:-}" in
  --check-only) CHECK_ONLY=1 ;;
  "") ;;
  *) echo "error: node setup: unknown argument '$1' (only --check-only)" >&2; exit 2 ;;
esac

# The pins: tests/test_node_env.py checks they equal UV_VERSION and SKYRL_REF in harness/node_env.py.
UV_VERSION=0.13.8
SKYRL_REF="${W8_SKYRL_REF:-skyrl-v0.4.0}"
SKYRL_GIT_URL="${SKYRL_GIT_URL:-https://github.com/NovaSky-AI/SkyRL.git}"  # a local mirror for a rehearsal
SKYRL_DIR="$HOME/skyrl"
SKYRL_PY="$SKYRL_DIR/.venv/bin/python"
REPO="$PWD"
CONSTRAINTS="$REPO/.w8-biayn/node/skyrl-constraints.txt"
export PATH="$HOME/.local/bin:$PATH"

STAGE_START=0
begin() { STAGE_START=$(date +%s); }
done_stage() { echo "node setup: $1 ok ($(( $(date +%s) - STAGE_START ))s)"; }
die() { echo "error: node setup: $*" >&2; exit 1; }
uv_version() { uv --version 2>/dev/null | awk '{print $2}'; }

# ---- uv ---------------------------------------------------------------------------------------------
begin
if [ "$(uv_version)" != "$UV_VERSION" ] && [ "$CHECK_ONLY" = 0 ]; then
  # Astral's installer for that version (docs.astral.sh/uv: installation); no shell profile edits
  curl -LsSf "https://astral.sh/uv/$UV_VERSION/install.sh" \
    | UV_INSTALL_DIR="$HOME/.local/bin" UV_NO_MODIFY_PATH=1 sh >/dev/null \
    || die "could not install uv $UV_VERSION from https://astral.sh/uv/$UV_VERSION/install.sh"
  hash -r
fi
[ "$(uv_version)" = "$UV_VERSION" ] || die "uv on PATH is '$(uv_version)', not $UV_VERSION: remove it or fix PATH"
done_stage "uv $UV_VERSION"

# ---- SkyRL checkout at the pinned ref ------------------------------------------------------------------
begin
[ -d "$SKYRL_DIR/.git" ] || git clone --quiet "$SKYRL_GIT_URL" "$SKYRL_DIR"
git -C "$SKYRL_DIR" fetch --quiet --tags origin
git -C "$SKYRL_DIR" rev-parse --verify --quiet "$SKYRL_REF^{commit}" >/dev/null \
  || die "SkyRL has no ref '$SKYRL_REF' ($SKYRL_GIT_URL): set W8_SKYRL_REF to one of its tags or commits, or unset it"
git -C "$SKYRL_DIR" checkout --quiet --detach "$SKYRL_REF"
done_stage "checkout $SKYRL_REF ($(git -C "$SKYRL_DIR" rev-parse --short HEAD))"

# ---- venv, the lock check, and the checkout is the validated release ---------------------------------
# The venv's Python 3.12 runs node_lock and check-checkout (standard library only): the image's python3 may
# predate tomllib.
begin
[ -x "$SKYRL_PY" ] || (cd "$SKYRL_DIR" && uv venv --quiet --python 3.12 --seed) \
  || die "uv venv --python 3.12 --seed failed in $SKYRL_DIR (uv's reason above); rm -rf $SKYRL_DIR/.venv and rerun"
done_stage "venv"

begin
LOCK_LINE=$("$SKYRL_PY" -m harness.node_lock check-checkout "$SKYRL_DIR" --out "$REPO/.w8-biayn/node") \
  || die "sky/requirements-node.txt does not fit SkyRL's uv.lock at $SKYRL_REF (reason above); nothing was synced"
echo "node setup: $LOCK_LINE"
done_stage "lock"

begin
"$SKYRL_PY" -m harness.node_env check-checkout "$SKYRL_DIR" || exit 1
done_stage "check-checkout"

if [ "$CHECK_ONLY" = 1 ]; then
  echo "node setup: check-only: stopped before uv sync (sync, our additions and the preflight did not run)"
  exit 0
fi

# ---- SkyRL's own recipe ------------------------------------------------------------------------------
begin
(cd "$SKYRL_DIR" && uv sync --quiet --extra fsdp) \
  || die "uv sync --extra fsdp failed in $SKYRL_DIR (uv's reason above): SkyRL's own env does not install here"
done_stage "uv sync --extra fsdp"

# ---- our additions, constrained to what sync installed -------------------------------------------------
begin
mkdir -p "$(dirname "$CONSTRAINTS")"
"$SKYRL_PY" -m harness.node_env constraints > "$CONSTRAINTS.tmp"
mv "$CONSTRAINTS.tmp" "$CONSTRAINTS"
uv pip install --quiet --python "$SKYRL_PY" -r sky/requirements-node.txt -c "$CONSTRAINTS" \
  || die "sky/requirements-node.txt does not fit SkyRL's env (uv's reason above): pin versions that fit it"
done_stage "sky/requirements-node.txt ($(grep -c '==' "$CONSTRAINTS") constraints)"

# ---- preflight -----------------------------------------------------------------------------------------
begin
"$SKYRL_PY" -m harness.preflight || exit 1
done_stage "preflight"
