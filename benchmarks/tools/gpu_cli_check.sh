#!/usr/bin/env bash
# On the H200: the engine end to end from the CLI on both GPU backends, then the side-by-side bench.
# It is a script, not a suite: each bench takes the id of the run before it.
# Usage (device machine, wheels for duckdb/moocore carried in .whl): bash benchmarks/tools/gpu_cli_check.sh OUTDIR
DEFAULT_OUT=/tmp/abebot_gpu_check
source "$(dirname "$0")/common.sh" "$@"
R=/tmp/abebot_gpu_runs
for spec in "rmsnorm cuda 8 3" "gemm cuda 6 2"; do
  set -- $spec
  timeout 150 python3 -m core run --workload $1 --backend $2 --population $3 --generations $4 --seed 1 --runs-dir $R --timeout-s 20
  id=$(ls -t $R | grep "$1-$2" | head -1)
  timeout 60 python3 -m core bench "$id" --runs-dir $R --rounds 2
done
tar czf "$OUT/gpu_cli_runs.tar.gz" --exclude=.cache --exclude=worker.lock -C $R .
