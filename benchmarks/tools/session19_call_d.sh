#!/usr/bin/env bash
# Session 19, device call D: the records behind benchmarks/DECODE_STEP.md with the library's attention
# (70B, 8 of 80 layers, contexts 1k/8k/32k, verify K = 1,2,3,4,7; 8B, all 32 layers, 1k/8k/32k, verify K = 4),
# then 8B's (a) eager, to see whether (a)'s wrong logits at 8B in call 69 come from torch.compile. The steps of
# benchmarks/tools/decode_step_full_gpu.sh with tighter limits (no fused run). Everything under $OUT is packed
# into one archive at the end (the device tool returns few files).
# Usage (on the H200, repository root, wheels in .whl/): bash benchmarks/tools/session19_call_d.sh $OUT
set -u
OUT=${1:?OUT}
mkdir -p "$OUT/d"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$OUT/d
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$D/$name.txt" 2> "$D/$name.log"
         echo "$name rc=$? at ${SECONDS}s"; grep -v '^USDT' "$D/$name.log" | tail -${TAILN:-5}; }
COMMON=(--steps 20 --champions benchmarks/suites/cold_recheck_genomes.json --save "$D/records")
step decode_70b 150 python3 -m core decode-bench --model llama-3.1-70b --layers 8 --context 1024,8192,32768 \
    --verify 1,2,3,4,7 --library-out /tmp/decode-lib-70b "${COMMON[@]}"
step decode_8b 110 python3 -m core decode-bench --model llama-3.1-8b --context 1024,8192,32768 --verify 4 \
    --library-out /tmp/decode-lib-8b "${COMMON[@]}"
step decode_8b_eager 45 python3 -m core decode-bench --model llama-3.1-8b --layers 8 --context 1024 --steps 10 \
    --no-compile --library-out /tmp/decode-lib-8b --json
python3 -m benchmarks.tools.decode_report "$D"/records/*.json --out "$D/DECODE_STEP.md" && head -40 "$D/DECODE_STEP.md"
python3 -c "import json,sys; r=json.load(open('$D/decode_8b_eager.txt')); print('8b eager (a)', r['a']['logits'])" 2>&1 | tail -1
tar -cJf "$OUT/call_d.tar.xz" -C "$OUT" d && rm -rf "$D"
