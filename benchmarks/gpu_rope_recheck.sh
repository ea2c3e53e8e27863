#!/usr/bin/env bash
# On one H200, in one call (prepared in session 13, not yet run): first the GPU tests of session 13's
# timing (the launch checks under both graph timings, and the empty-launch floor), then RoPE at T = 16
# and T = 1 evolved and benched (5 rounds) under the chained graph timing (torch_runtime.replay_chain),
# which times no preparation. The goal table's T = 16 figure (1.77 us against torch.compile's 3.32 us)
# was taken with the old timing, which booked preparation savings to some small kernels
# (DECODE_H200.md, session 13).
# Usage: bash benchmarks/gpu_rope_recheck.sh OUT
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_launch_checks.py tests/test_graph_timing.py \
  tests/test_evaluate.py -k "gpu or chain or graph" > "$OUT/pytest.log" 2>&1
timeout 400 python3 benchmarks/gpu_runs.py --out "$OUT/ga" \
  --runs 'rope:cuda:32:8:{"tokens":16};rope:triton:16:4:{"tokens":16};rope:cuda:32:8:{"tokens":1}' \
  --extra '--weights time=0.8,memory=0.1,stability=0.1' --bench-rounds 5 --timeout-s 200 > "$OUT/ga.log" 2>&1
tail -3 "$OUT/pytest.log"; cat "$OUT/ga/runs.md"; grep -h -A8 "median of" "$OUT"/ga/*.bench.log
