#!/usr/bin/env bash
# The GPU check, about 8 minutes on one GPU: CUDA tests, greedy parity on the GPU, and profiles (t(n), the
# draft's c(w), overheads; fp32 vs bf16 chosen by measurement) for a random model shaped like the default
# target with the default EAGLE head, and for a 7B-shaped Llama with a 68M-shaped draft (timing needs no real
# weights, and neither needs the default target's GGUF package, which is too big to travel to a lent GPU).
#
#   OUT=outputs/device_check bash experiments/device_check.sh
#   DEVICE=cpu QUICK=1 bash experiments/device_check.sh        # rehearsal on the CPU, tiny sizes, minutes
#
# Needs a Python with torch (a CUDA build for the real check) and treespec's dependencies (PY=..., default
# python3). Writes into $OUT: pytest.log, the hardware profiles (hardware_*.yaml, also installed into
# conf/hardware/ unless DEVICE=cpu) and summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-outputs/device_check}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  SIZES_SMALL="[1,2,4]" SIZES_BIG="[1,2]" REPEATS=1 PREFIX=32 MODEL_BIG=tiny
else
  SIZES_SMALL="[1,2,4,8,16,32,64,128]" SIZES_BIG="[1,2,4,8,16,32,64,128,256]" REPEATS=7 PREFIX=512 MODEL_BIG=llama7b_random
fi
INSTALL=$([ "$DEVICE" = cuda ] && echo true || echo false)
LIMIT=$([ "$DEVICE" = cuda ] && echo 180 || echo 900)   # a CPU rehearsal measures 135M-sized models in fp32 and bf16
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
status=0
step() { echo "== $*" | tee -a "$OUT/summary.txt"; }

step "device"
if [ "$DEVICE" = cuda ]; then
  $PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name(0))" \
    2>&1 | tee -a "$OUT/summary.txt" || exit 1
  step "CUDA tests (greedy parity with transformers on the GPU, tree masks, batched rows)"
  timeout 240 $PY -m pytest -q tests/models/test_cuda.py tests/decode/test_batch.py -k "cuda or gpu" 2>&1 | tee "$OUT/pytest.log" \
    | tail -3 | tee -a "$OUT/summary.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  $PY -c "import torch; print(torch.__version__, 'rehearsal on the CPU')" 2>&1 | tee -a "$OUT/summary.txt" || exit 1
fi

step "profile: SmolLM2-135M-shaped target (random weights) with the default EAGLE head, dtype chosen by measurement"
timeout $LIMIT $PY experiments/profile_latency.py model=smollm2_random device=$DEVICE dtype=auto name=${DEVICE}_smollm2 \
  install=$INSTALL "sizes=$SIZES_SMALL" repeats=$REPEATS prefix_len=$PREFIX "hydra.run.dir=$OUT/smollm2" 2>&1 \
  | tail -5 | tee -a "$OUT/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cp "$OUT"/smollm2/hardware_*.yaml "$OUT"/ 2>/dev/null

step "profile: 7B-shaped Llama with a 68M-shaped draft, random weights, dtype chosen by measurement"
timeout $LIMIT $PY experiments/profile_latency.py model=$MODEL_BIG device=$DEVICE dtype=auto name=${DEVICE}_llama7b \
  install=$INSTALL "sizes=$SIZES_BIG" prefix_len=$PREFIX repeats=$REPEATS "hydra.run.dir=$OUT/llama7b" 2>&1 \
  | tail -5 | tee -a "$OUT/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cp "$OUT"/llama7b/hardware_*.yaml "$OUT"/ 2>/dev/null

step "exit status $status"
exit $status
