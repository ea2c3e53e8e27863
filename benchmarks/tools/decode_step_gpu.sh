#!/usr/bin/env bash
# Issue 29: the decode step on one H200 in ONE device call of <= 4 minutes (not run yet: written on a CPU-only
# machine). Usage (repository root): bash benchmarks/tools/decode_step_gpu.sh $OUT
#   1. 70B, 8 layers, context 1024, 20 logits steps: (a) torch int4 + torch.compile + CUDA graph against
#      (b) without a library -- native ops, labelled so in the record -- the honest floor of (b);
#   2. the same with (b) on a library built from the champion genomes (cold_recheck_genomes.json, M=1 entries,
#      the seed genome for silu_mul), plus the verify steps K = 1,2,3,4,7; (a) eager + CUDA graph there
#      (--no-compile: torch.compile's time goes to step 1).
# Each writes $OUT/<name>.json (the record) and $OUT/<name>.log (progress, warnings, tracebacks).
set -u
OUT=${1:?OUT}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD
git log --oneline | head -1 > "$OUT/COMMIT.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/COMMIT.txt"
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$OUT/$name.json" 2> "$OUT/$name.log"
         echo "$name rc=$?"; tail -${TAILN:-8} "$OUT/$name.log"; }
TAILN=4 step decode_70b_native 100 python3 -m core decode-bench --model llama-3.1-70b --layers 8 --context 1024 \
    --steps 20 --json
TAILN=12 step decode_70b_champions 130 python3 -m core decode-bench --model llama-3.1-70b --layers 8 --context 1024 \
    --steps 20 --champions benchmarks/suites/cold_recheck_genomes.json --library-out "$OUT/lib" \
    --verify 1,2,3,4,7 --no-compile --json
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("decode_*.json")):
    try:
        r = json.loads(f.read_text())
    except Exception as exc:
        print(f.name, "no record:", exc); continue
    print(f.name, {w: (r[w]["label"], r[w]["ms_per_step"], r[w].get("projected_full_model_tokens_per_s"),
                       r[w]["logits"]["argmax_agree"], r[w]["logits"]["argmax_counted"], r[w]["logits"]["max_abs_error"])
                   for w in ("a", "b")}, "speedup", r["b_over_a_speedup"], "verify", r["verify"],
          "dispatch", r["dispatch_by_op"], "refused", r["refused"])
PY
rm -rf "$OUT/lib/.cc"
