#!/usr/bin/env bash
# On one H200, in one call (prepared in session 9, not yet run): the down projection at M = 1
# (K 28672 -> N 8192) on the weights-as-A path with its cp.async ring, which won QKV and gate_up in
# call 28: a sweep around call 28's gate_up champion beside the GEMV champion of call 18 and the
# baselines, then a GA run and core bench. Goal: <= 36 us (80% of the copy roofline).
# Usage: bash benchmarks/gpu_down_m1.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
G='{"instruction_sequence":{"dequant":"half2","first":"words","math":"mma_w","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"copy":"lanes","layout":"gptq","stages":4,"vec":1,"w_load":"","x_load":""},"parallel_config":{"kblocks":1,"ksplit":8,"rows_per_block":1,"threads":256},"register_allocation":{"batch":1,"min_blocks":1,"pipeline":"off","regs":{"scale":"word","unroll":1}}}'
M1='{"instruction_sequence":{"dequant":"half2","first":"words","math":"fma","nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"]},"memory_pattern":{"layout":"gptq","stages":0,"vec":4,"w_load":".nc.L1::no_allocate","x_load":".nc"},"parallel_config":{"kblocks":1,"ksplit":64,"rows_per_block":1,"threads":512},"register_allocation":{"batch":1,"min_blocks":2,"pipeline":"next","regs":{"scale":"word","unroll":2}}}'
SWEEP="python3 benchmarks/gpu_kernel_sweep.py w4a16"
timeout 40 $SWEEP '{"m":1}' "$M1" > "$OUT/gemv.log" 2>&1
timeout 120 $SWEEP '{"m":1}' "$G" --grid --vary memory_pattern.stages=2,4,8 --vary parallel_config.kblocks=1,2,4 \
  --vary parallel_config.threads=128,256,512 --vary register_allocation.min_blocks=1,2 > "$OUT/grid1.log" 2>&1
grep -A8 "^NVIDIA" "$OUT/gemv.log"; grep -A14 "^NVIDIA" "$OUT/grid1.log"; grep -ci "wrong\|error" "$OUT/grid1.log"
timeout 300 python3 benchmarks/gpu_runs.py --out "$OUT/ga" --runs 'w4a16:cuda:32:14' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 2 --timeout-s 280 > "$OUT/ga.log" 2>&1
cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
