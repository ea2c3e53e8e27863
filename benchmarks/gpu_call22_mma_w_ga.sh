#!/usr/bin/env bash
# Call 22 (H200): the weights-as-A path on fp16 shapes, its vec = 1 variants, and a GA run at M = 16 with it in the gene space.
# Usage: OUT=dir bash benchmarks/gpu_call22_mma_w_ga.sh (writes $OUT/c4)
mkdir -p $OUT/c4; export PYTHONUNBUFFERED=1
W='{"parallel_config":{"threads":256,"ksplit":4,"rows_per_block":1,"kblocks":4},"memory_pattern":{"vec":1,"w_load":".L1::no_allocate","x_load":".L1::evict_last","layout":"gptq","stages":0},"register_allocation":{"batch":4,"pipeline":"off","regs":{"scale":"word","unroll":1},"min_blocks":1},"instruction_sequence":{"nibbles":["N0","N1","N2","N3","N4","N5","N6","N7"],"first":"words","dequant":"half2","math":"mma_w"}}'
for P in '{"m":5,"n":512,"k_groups":3,"dtype":"float16","zero_points":true}' '{"m":13,"n":4096,"k_groups":64,"dtype":"float16"}'; do
  echo "== $P"; timeout 50 python3 benchmarks/gpu_kernel_sweep.py w4a16 "$P" "$W" --vary memory_pattern.stages=4 --vary memory_pattern.vec=2 --vary parallel_config.kblocks=1,16 --vary register_allocation.batch=8 2>&1 | grep -v "^\s*$" | tail -12
done > $OUT/c4/checks_fp16.log 2>&1
timeout 60 python3 benchmarks/gpu_kernel_sweep.py w4a16 '{"m":16}' "$W" --vary register_allocation.batch=8 --vary parallel_config.threads=512 --vary parallel_config.ksplit=8 --vary parallel_config.kblocks=8 > $OUT/c4/vec1.log 2>&1
timeout 330 python3 benchmarks/gpu_runs.py --out $OUT/c4/ga --runs 'w4a16:cuda:32:10:{"m":16}' --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 2 --timeout-s 300 > $OUT/c4/ga.log 2>&1
cat $OUT/c4/checks_fp16.log; grep -A12 "^NVIDIA" $OUT/c4/vec1.log; tail -5 $OUT/c4/ga.log; cat $OUT/c4/ga/runs.md 2>/dev/null | head -40
