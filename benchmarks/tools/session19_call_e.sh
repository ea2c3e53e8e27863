#!/usr/bin/env bash
# Session 19, device call E: issue 35's cost of the judge (GA evaluations per minute, the same run from main and
# from the pre-judge tree 73d2781 in .old/, same call), then the records behind benchmarks/DECODE_STEP.md
# (70B 8 of 80 layers at 1k/8k/32k, verify K = 4), and the CUDA C planted cheats through the batched judge.
# Everything under $OUT is packed into one archive. Usage (H200, repository root, .whl/ and .old/ carried):
#   bash benchmarks/tools/session19_call_e.sh $OUT
set -u
OUT=${1:?OUT}
D=$OUT/e
mkdir -p "$D"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$D/$name.txt" 2> "$D/$name.log"
         echo "$name rc=$? at ${SECONDS}s"; grep -v '^USDT' "$D/$name.log" | tail -${TAILN:-4}; }
RUNS='rmsnorm:cuda:32:2'
step runs_new 140 python3 -m benchmarks.tools.gpu_runs --out "$D/runs_new" --runs "$RUNS" --bench-rounds 0 --runs-dir /tmp/rn
(cd .old && export PYTHONPATH=/tmp/site:$PWD && step runs_old 140 python3 -m benchmarks.tools.gpu_runs --out "$D/runs_old" \
    --runs "$RUNS" --bench-rounds 0 --runs-dir /tmp/ro)
grep -H '"evals_per_min\|"seconds"\|"timing"\|"stability"\|"verify"' "$D"/runs_new.txt "$D"/runs_old.txt | head -40
TAILN=16 step cheats 100 python3 -m benchmarks.tools.gpu_cheat_check --out "$D/cheats" --rows 16 --cols 8192
COMMON=(--steps 20 --champions benchmarks/suites/cold_recheck_genomes.json --save "$D/records")
step decode_70b 160 python3 -m core decode-bench --model llama-3.1-70b --layers 8 --context 1024,8192,32768 \
    --verify 4 --library-out /tmp/decode-lib-70b "${COMMON[@]}"
python3 -m benchmarks.tools.decode_report "$D"/records/*.json --out "$D/DECODE_STEP.md" && sed -n 5,20p "$D/DECODE_STEP.md"
tar -cJf "$OUT/call_e.tar.xz" -C "$OUT" e && rm -rf "$D"
