#!/usr/bin/env bash
# Issue 29: every record behind benchmarks/DECODE_STEP.md, in ONE device call of <= 5 minutes on one H200 (written
# on a CPU-only machine: not run yet). Usage (repository root, wheels in .whl/ or already in /tmp/site):
#   bash benchmarks/tools/decode_step_full_gpu.sh $OUT
# 1. Llama-3.1-70B, 8 of 80 layers (whole-model figures projected), contexts 1024, 8192, 32768 from one model, (a)
#    torch int4 + torch.compile per layer + CUDA graph, (b) a CUDA C library built from the champion genomes
#    (M=1 entries, seed genomes where none renders), verify steps K = 1,2,3,4,7 at every context;
# 2. Llama-3.1-8B, all 32 layers (measured, not projected), the same contexts, verify K = 4;
# 3. if 30 s or more are left: step 1 at context 1024 with (b) fusing RMSNorm into the QKV GEMV (--fuse norm-qkv,
#    the rmsnorm_w4a16 champion), (a) eager + CUDA graph (--no-compile: its speed-up goal is not judged there).
# Each step runs under `timeout` within what is left of the 290 s budget; each context's record is saved as soon as
# it is measured (--save $OUT/records: a step cut short keeps the contexts it finished), the step's text report and
# progress go to $OUT/<name>.txt and $OUT/<name>.log; the libraries and their compile caches stay in /tmp. Then
# $OUT/DECODE_STEP.md = python -m benchmarks.tools.decode_report $OUT/records/*.json: copy it to benchmarks/.
source "$(dirname "$0")/common.sh" "$@"
if [ -d .whl ] && [ ! -d /tmp/site ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
{ git log --oneline | head -1; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } \
    > "$OUT/COMMIT.txt" 2>&1
END=$((SECONDS + 290))
step() {  # name, most seconds, command...
    local name=$1 most=$2; shift 2
    local left=$((END - SECONDS)); local limit=$((left < most ? left : most))
    if [ "$limit" -lt 30 ]; then echo "== $name skipped: ${left}s left"; return; fi
    echo "== $name (timeout ${limit}s)"
    timeout "$limit" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.log"
    echo "$name rc=$? after ${SECONDS}s"; grep -v '^USDT' "$OUT/$name.log" | tail -"${TAILN:-6}"
}
COMMON=(--context 1024,8192,32768 --steps 20 --champions benchmarks/suites/cold_recheck_genomes.json
        --save "$OUT/records")
TAILN=8 step decode_70b 190 python3 -m core decode-bench --model llama-3.1-70b --layers 8 --verify 1,2,3,4,7 \
    --library-out /tmp/decode-lib-70b --build-cache /tmp/decode-cc-70b "${COMMON[@]}"
TAILN=8 step decode_8b 150 python3 -m core decode-bench --model llama-3.1-8b --verify 4 \
    --library-out /tmp/decode-lib-8b "${COMMON[@]}"
TAILN=8 step decode_70b_fused 60 python3 -m core decode-bench --model llama-3.1-70b --layers 8 --context 1024 \
    --steps 20 --champions benchmarks/suites/cold_recheck_genomes.json --fuse norm-qkv --no-compile \
    --library-out /tmp/decode-lib-70b-fused --build-cache /tmp/decode-cc-70b --save "$OUT/records"
python3 -m benchmarks.tools.decode_report "$OUT"/records/*.json --out "$OUT/DECODE_STEP.md" \
    && head -30 "$OUT/DECODE_STEP.md"
echo "total ${SECONDS}s"
