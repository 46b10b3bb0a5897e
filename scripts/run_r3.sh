#!/usr/bin/env bash
# r3: does RL post-training make the harness-writing model reach a gold harness in fewer search steps?
#
#   frozen trace (01) -> oracle SFT warm-start (02, optional) -> GRPO (03) -> trained trace (04) -> compare (05)
#
# Hardware and time:
#   GCP, 8x A100, skyrl backend (sky/r3.yaml runs this file, W8_PRESET=gcp): about 1-2 h.
#   GCP, 1x L4, W8_PRESET=gpu-smoke: ~15 min after the node's set-up.
#   CPU, embedded SmolLM2-135M, local backend: `make smoke` ~7 min, `make local` under 20 min (2 cores;
#   README.md "Times" says on what machine and load).
#
# Examples:
#   W8_PRESET=local bash scripts/run_r3.sh                   # knobs: presets/local.env under W8_* env vars
#   W8_RUN_ID=r3-demo W8_TRACE_MAX_ITERATIONS=4 bash scripts/run_r3.sh
#   W8_RUN_ID=<an earlier id> bash scripts/run_r3.sh         # resume: finished steps are skipped
#   sky launch -c w8-biayn-r3 -y --down sky/r3.yaml          # the same on GCP GPU node(s) (make launch)
#
# Everything of a run goes to .w8-biayn/runs/<run-id>/ (W8_RUNS_ROOT overrides), one process
# at a time (<run>/.lock); its small artifacts are copied to results/<run-id>/ (W8_RESULTS_ROOT
# overrides; it must be writable before step 01 starts). A step writes temp-then-rename and
# then a marker steps/<step>.json with each output's sha256; a step whose outputs are still
# what its marker says is skipped, a damaged one is named and redone, so a preempted or
# crashed run resumes where it stopped (searches even resume mid-trace). On a node (or with
# W8_EMIT_RESULTS=1) the small artifacts are also printed as `W8_RESULT {json}` lines, and a
# failed step's log tails (ours, SkyRL's, Ray's) too, so a launch that dies still brings its
# evidence home after --down. W8_STEPS_DIR (tests only) swaps the step scripts.
#
# Secrets (DAYTONA_API_KEY, WANDB_API_KEY) stay in the environment: this script never traces
# commands (no `set -x`) and never prints the environment.
set -euo pipefail
# The whole script is one { ... } block, read completely before it runs: editing or pulling this
# file while a run is going (hours, overnight) cannot change the running instance mid-way (bash
# otherwise reads a script as it goes, and an edit made a running `make smoke` fail mid-run).
{
cd "$(dirname "$0")/.."

STEPS_DIR="${W8_STEPS_DIR:-scripts}"
RESULTS_ROOT="${W8_RESULTS_ROOT:-results}"
# The interpreter: W8_PYTHON, else the GPU node's SkyRL env (scripts/node_setup.sh), else .venv.
if [ -n "${W8_PYTHON:-}" ]; then PY="$W8_PYTHON"
elif [ -n "${SKYPILOT_NODE_RANK:-}" ] && [ -x "$HOME/skyrl/.venv/bin/python" ]; then PY="$HOME/skyrl/.venv/bin/python"
elif [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python
fi
START=$(date +%s)

# ---- several nodes: Ray on the head, workers join it and are done (SkyRL's SkyPilot example) ---
# SkyRL places policy, ref and vLLM engines on every node through this Ray cluster; the
# numbered steps run on the head only. Port 6479 is reached over the cluster's internal network
# (SkyPilot's intra-cluster firewall rule); sky/r3.yaml opens no port to the internet. Each node
# starts Ray with its own IP from SKYPILOT_NODE_IPS (one a line, by rank). A worker checks that
# *it* is in the cluster, not only that the head answers (SkyRL's example checks the head, so a
# worker that comes up after the head never joins), and the head waits for every node.
if [ "${SKYPILOT_NUM_NODES:-1}" -gt 1 ]; then
  RAY="$(dirname "$PY")/ray"
  RANK="${SKYPILOT_NODE_RANK:-0}"
  HEAD_IP=$(sed -n 1p <<< "$SKYPILOT_NODE_IPS")
  NODE_IP=$(sed -n "$((RANK + 1))p" <<< "$SKYPILOT_NODE_IPS")
  [ -n "$HEAD_IP" ] && [ -n "$NODE_IP" ] \
    || { echo "error: SKYPILOT_NODE_IPS has no IP for rank $RANK of $SKYPILOT_NUM_NODES nodes" >&2; exit 1; }
  # A driver needs a raylet on its own machine: before a worker joined, ray_nodes fails there (= not in it).
  ray_nodes() {  # alive Ray nodes at $1 (whose IP is $2, any if empty), asked from this node's raylet
    timeout 60 "$PY" -c "import sys, ray
ray.init(address=sys.argv[1], _node_ip_address=sys.argv[3], logging_level='ERROR', log_to_driver=False)
print(sum(1 for n in ray.nodes() if n['Alive'] and (not sys.argv[2] or n['NodeManagerAddress'] == sys.argv[2])))" \
      "$1" "${2:-}" "$NODE_IP" 2>/dev/null | tail -1
  }
  # Waits are bounded by the clock (10 min), each probe by `timeout`: a probe of an absent head can hang.
  wait_for_nodes() {  # $1 address, $2 IP or "", $3 how many
    local until=$((SECONDS + 600))
    while [ "$SECONDS" -lt "$until" ]; do
      [ "$(ray_nodes "$1" "$2" || true)" -ge "$3" ] 2>/dev/null && return 0
      sleep 5
    done
    echo "error: the Ray cluster at $1 has not $3 node(s) ${2:+at $2 }after 10 min (node rank $RANK)" >&2
    return 1
  }
  wait_for_head() {
    local until=$((SECONDS + 600))
    while [ "$SECONDS" -lt "$until" ]; do
      timeout 30 "$RAY" status --address "$1" >/dev/null 2>&1 && return 0
      sleep 5
    done
    echo "error: the Ray head at $1 did not come up in 10 min (node rank $RANK)" >&2
    return 1
  }
  if [ "$RANK" = "0" ]; then
    timeout 30 "$RAY" status --address "$HEAD_IP:6479" >/dev/null 2>&1 \
      || "$RAY" start --head --disable-usage-stats --port 6479 --node-ip-address "$HEAD_IP"
    wait_for_nodes "$HEAD_IP:6479" "" "$SKYPILOT_NUM_NODES"
    echo "node 0: the Ray cluster at $HEAD_IP:6479 has all $SKYPILOT_NUM_NODES nodes"
  else
    wait_for_head "$HEAD_IP:6479"
    [ "$(ray_nodes "$HEAD_IP:6479" "$NODE_IP" || true)" -ge 1 ] 2>/dev/null \
      || "$RAY" start --address "$HEAD_IP:6479" --disable-usage-stats --node-ip-address "$NODE_IP"
    wait_for_nodes "$HEAD_IP:6479" "$NODE_IP" 1
    echo "node $RANK: joined the Ray cluster at $HEAD_IP:6479 as $NODE_IP"
    exit 0
  fi
fi

# ---- 0. knobs and the run folder ---------------------------------------------------------
# Every knob is range-checked here, W8_HARNESS_MODEL resolved as the backend would (a bad one stops
# the run with its name, exit 2, no resume hint), the resolved
# knobs are echoed (W8_PRESET fills what you did not set) and written with versions, git sha
# and the hyperparameters to run_config.json before any work starts.
# The run folder and the results root are proven writable here, not after the last step.
RUN_DIR=$("$PY" -m harness.pipeline init "$RESULTS_ROOT")
RUN_ID=$(basename "$RUN_DIR")
export W8_RUN_ID="$RUN_ID"
# One process per run folder: descriptor 9 holds an fcntl lock on <run>/.lock until this script
# ends (the step scripts see it is their parent's); a second run of the same id stops here naming
# this one. The kernel drops the lock of a killed process, so a stale .lock is simply taken over.
exec 9>>"$RUN_DIR/.lock"
"$PY" -m harness.pipeline lock "$RUN_DIR" 9 || exit $?
"$PY" -m harness.pipeline invocation "$RUN_DIR" start  # counted in the run's wall time even if killed
# The resume command carries every W8_ variable of this run (preset, results root, knobs set by hand).
RESUME=$("$PY" -m harness.pipeline rerun-command "$RUN_ID")
echo "r3 run $RUN_ID -> $RUN_DIR"
echo "resume: $RESUME"
"$PY" -m harness.pipeline emit --when-wanted "$RUN_DIR" run_config.json

# On the GPU node the hub model is fetched into the HF cache once; locally nothing is downloaded.
MODEL=$("$PY" -m harness.pipeline knob harness_model)
if [ "$("$PY" -m harness.pipeline knob backend)" = "skyrl" ] && [ ! -e "$MODEL" ] && [[ "$MODEL" == */* ]]; then
  echo "model: fetching $MODEL into the HF cache (GPU node only)"
  "$PY" -c "import sys; from huggingface_hub import snapshot_download; snapshot_download(sys.argv[1])" "$MODEL"
fi

# With W8_BUCKET, each finished step's small files (and a failed step's log tails) are copied to
# <bucket>/runs/<run-id>/ at once: they survive --down and a dropped connection (make results
# RUN_ID=... reads the bucket). A bucket error is a warning; the W8_RESULT lines still carry them.
BUCKET=$("$PY" -m harness.pipeline knob bucket)
upload_results() {
  [ -n "$BUCKET" ] || return 0
  "$PY" scripts/upload_results.py --run-dir "$RUN_DIR" "$@" \
    || echo "warning: could not copy results to $BUCKET (reason above); they are in this log as W8_RESULT lines" >&2
}
upload_results  # run_config.json before any work (and, on a resume, what finished before)

# Each step script skips itself when its outputs are what its marker recorded ("complete, skipped"),
# ends with one line (summary, wall time, peak RSS, files) and, on a node, prints a W8_RESULT
# line per small file it wrote (also when skipped). Exit 2 is a bad knob: the folder is bound to
# its knobs, so the way on is a new run id, not a resume.
run_step() {
  local step="$1" t0 rc=0
  echo "== $step"
  t0=$(date +%s)
  "$PY" "$STEPS_DIR/$step.py" || rc=$?
  if [ "$rc" -ne 0 ]; then
    "$PY" -m harness.pipeline emit-failure "$RUN_DIR" "$step" "$rc" || true
    upload_results --failure "$step"
    "$PY" -m harness.pipeline invocation "$RUN_DIR" end "$rc" >/dev/null || true
    if [ "$rc" -eq 2 ]; then
      NEW=$("$PY" -m harness.pipeline rerun-command "$RUN_ID" --new)
      echo "error: $step failed on a knob (exit 2, above); run $RUN_ID is bound to its knobs, so resuming" \
           "cannot help. Fix the knob and start a new run id: $NEW" >&2
    else
      echo "error: $step failed (exit $rc) after $(( $(date +%s) - t0 ))s; finished steps are kept." \
           "Resume: $RESUME" >&2
    fi
    exit "$rc"
  fi
  upload_results "$step"
}

# ---- 1. frozen trace: the operator as shipped, searching the held-out task(s) --------------
run_step 01_frozen_trace

# ---- 2. oracle SFT warm-start (skipped, with a marker, when W8_HARNESS_SFT_STEPS=0) --------
run_step 02_sft

# ---- 3. GRPO post-training: TRL on CPU (local) or SkyRL on the GPU node (skyrl) -------------
run_step 03_grpo

# ---- 4. trained trace: the same search with the newest global_step_N/policy ----------------
run_step 04_trained_trace

# ---- 5. strict compare, plot, summary.md ---------------------------------------------------
run_step 05_compare

# ---- 6. results/<run-id>/: the small proof (never overwrites a finished run's files) -------
"$PY" scripts/collect_results.py --run-dir "$RUN_DIR" --out-root "$RESULTS_ROOT"
ELAPSED=$(( $(date +%s) - START ))
TOTAL=$("$PY" -m harness.pipeline invocation "$RUN_DIR" end 0)
echo "r3 run $RUN_ID finished in ${ELAPSED}s (all invocations: $TOTAL): $RESULTS_ROOT/$RUN_ID/summary.md"
exit 0
}
