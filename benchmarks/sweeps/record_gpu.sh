#!/usr/bin/env bash
# Record the two GPU tables of issue 32 on an H200, then replay the strategies on them.
# Run from the repository root: bash benchmarks/sweeps/record_gpu.sh
# Each sweep resumes where it stopped: run the script again after an interruption.
# DEVICES=all (or 0,1,...) spreads the genomes over several GPUs: DEVICES=all bash benchmarks/sweeps/record_gpu.sh
set -euo pipefail
python -m core sweep --workload gemm --backend triton \
    --problem '{"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16"}' \
    --vary block_m,block_n,block_k,num_warps,num_stages,group_m --repeats 3 ${DEVICES:+--devices "$DEVICES"} \
    --out benchmarks/sweeps/gemm-triton-4096
python -m core sweep --workload w4a16 --backend cuda --problem '{"m": 1, "n": 4096, "k_groups": 112}' \
    --vary threads,ksplit,rows_per_block,kblocks,vec,w_load,stages --repeats 3 ${DEVICES:+--devices "$DEVICES"} \
    --out benchmarks/sweeps/w4a16-cuda-down-m1
for t in gemm-triton-4096 w4a16-cuda-down-m1; do
  python -m core replay "benchmarks/sweeps/$t" --strategy ga,random,tpe,cmaes,nsga2 --budget 50 --seeds 20 --save
  python -m core replay "benchmarks/sweeps/$t" --strategy ga,random --surrogate 4 --budget 50 --seeds 20 --save
done
