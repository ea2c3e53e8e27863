#!/usr/bin/env bash
# On one H200, in one call (session 9, call 26): the bulk-copy ring with a group cut into 1, 2 or 4
# slots (register_allocation.batch), checked on odd shapes, timed beside cuBLAS around call 24's best
# bulk variant at M = 16 and M = 1 (down projection), then a GA run at M = 16 and core bench.
# Usage: bash benchmarks/gpu_mma_w_slots.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
B='{"instruction_sequence":{"dequant":"half2","first":"words","math":"mma_w","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"copy":"bulk","layout":"gptq","stages":2,"vec":2,"w_load":"","x_load":""},"parallel_config":{"kblocks":8,"ksplit":2,"rows_per_block":1,"threads":256},"register_allocation":{"batch":1,"min_blocks":2,"pipeline":"off","regs":{"scale":"word","unroll":1}}}'
SWEEP="python3 benchmarks/gpu_kernel_sweep.py w4a16"
for P in '{"m":3,"n":1000,"k_groups":9}' '{"m":16,"n":1000,"k_groups":9,"zero_points":true}' '{"m":5,"n":512,"k_groups":3,"dtype":"float16","zero_points":true}' '{"m":13,"n":4096,"k_groups":64,"dtype":"float16"}'; do
  echo "== $P"; timeout 40 $SWEEP "$P" "$B" --grid --vary register_allocation.batch=2,4 --vary memory_pattern.stages=2,8 \
    --vary parallel_config.kblocks=1,16 2>&1 | grep -E "WRONG|FAIL|rror|us$" | head -12
done > "$OUT/checks.log" 2>&1
timeout 90 $SWEEP '{"m":16}' "$B" --grid --vary register_allocation.batch=1,2,4 --vary memory_pattern.stages=2,4,8 \
  --vary parallel_config.kblocks=4,8,16 > "$OUT/grid16.log" 2>&1
timeout 80 $SWEEP '{"m":1}' "$B" --grid --vary register_allocation.batch=1,2,4 --vary memory_pattern.stages=2,4,8 \
  --vary parallel_config.kblocks=2,4,8 > "$OUT/grid1.log" 2>&1
cat "$OUT/checks.log"; for f in grid16 grid1; do grep -A12 "^NVIDIA" "$OUT/$f.log"; grep -ci "wrong\|error" "$OUT/$f.log"; done
timeout 270 python3 benchmarks/gpu_runs.py --out "$OUT/ga" --runs 'w4a16:cuda:32:12:{"m":16}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 2 --timeout-s 240 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
