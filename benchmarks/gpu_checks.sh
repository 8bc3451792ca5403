#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one run (about 6 minutes on one H200):
#   1. `hwtune bench` on the GPU: its profile (GEMM in fp32/tf32/bf16/fp16/fp8, STREAM,
#      memory-bound ops, attention; no collectives on one GPU)  -> $OUT/profile.yaml
#   2. the serving iteration model against Llama-3.1-8B (bf16, random weights) steps, tier 1
#      and tier 2 on that profile                                -> $OUT/serving_ref.json
#   3. idle and full-load power through the NVML meter           -> $OUT/energy.json
#   4. the compact optimizers' CUDA tests and the real-NVML test (pytest)
#   5. optimizer step time on GPT-2 XL shapes against torch and the 8-bit peers
#      (OPTIMS="torch-fused ours-compiled" runs a subset)
#   6. the parallel runtime on CUDA/NCCL, world 1 (`hwtune compile --run --device cuda`)
# Everything printed goes to $OUT/log.txt. Usage, from the repository root:
#   OUT=gpu-out PY=python3 bash benchmarks/gpu_checks.sh
# Each step has its own time limit, so one that hangs does not take the others with it;
# STEPS="1 2 4" runs a subset.
set -u
STEPS=${STEPS:-1 2 3 4 5 6}
OPTIMS=${OPTIMS:-torch-fused ours-eager ours-compiled bnb-AdamW8bit torchao-AdamW8bit}
on() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
OUT=${OUT:-gpu-out}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/log.txt"
step() { echo "== $(date +%T) $*" | tee -a "$LOG"; }

step "machine"
{ nvidia-smi; "$PY" -c "import torch, transformers; print('torch', torch.__version__,
  'cuda', torch.version.cuda, torch.cuda.get_device_name(), 'transformers',
  transformers.__version__)"; } >>"$LOG" 2>&1

on 1 && step "1. hwtune bench (GPU profile)" && timeout "${BENCH_TIMEOUT:-150}" "$PY" -c "from hwtune.cli.main import app; app()" bench \
  --device cuda --quick --budget "${BENCH_BUDGET:-100}" \
  --sections gemm,memory,elementwise,attention -o "$OUT/profile.yaml" >>"$LOG" 2>&1
echo "rc $?" >>"$LOG"

if on 2 && [ -f "$OUT/profile.yaml" ]; then
  step "2. serving reference (Llama-3.1-8B bf16) vs tier 1 / tier 2"
  timeout 200 "$PY" benchmarks/calibrate_serving.py --device cuda --profile "$OUT/profile.yaml" \
    --json "$OUT/serving_ref.json" >>"$LOG" 2>&1
  echo "rc $?" >>"$LOG"
fi

on 3 && step "3. NVML idle and GEMM-load power" && timeout 60 "$PY" benchmarks/energy_gemm_nvml.py ${GPU_NAME:+--gpu "$GPU_NAME"} --seconds 8 \
  --json "$OUT/energy.json" >>"$LOG" 2>&1
echo "rc $?" >>"$LOG"

on 4 && step "4. pytest: CUDA optimizer tests, GPU timing, real NVML" && timeout 300 \
  "$PY" -m pytest -q -p no:cacheprovider tests/optim/test_cuda.py \
  tests/energy/test_vendor_backends.py tests/calibrate/test_bench.py -k "cuda or gpu or real" \
  >>"$LOG" 2>&1
echo "rc $?" >>"$LOG"

if on 5; then
  step "5. optimizer step time, GPT-2 XL shapes (one process per optimizer)"
  for o in $OPTIMS; do
    timeout "${OPTIM_TIMEOUT:-60}" env PYTHONPATH="${PEERS:+$PEERS:}$PYTHONPATH" "$PY" \
      benchmarks/optim_speed.py --device cuda --layers 48 --d-model 1600 --warmup 2 \
      --steps 3 --only "$o" >>"$LOG" 2>&1
    echo "rc $? ($o)" >>"$LOG"
  done
fi
on 6 && step "6. parallel runtime on CUDA/NCCL, world 1" && timeout 150 "$PY" -c "from hwtune.cli.main import app; app()" \
  compile --dp 1 --tp 1 --pp 1 --global-batch 4 --micro-batch 2 --run --steps 5 --device cuda \
  --json >"$OUT/runtime_cuda.json" 2>>"$LOG"
echo "rc $? (runtime cuda)" >>"$LOG"
step "done"
