#!/usr/bin/env bash
# Session 19, device call C: the decode step with the library's attention (70B at 1k and 8k, 8B at 1k;
# (a) torch.compile in the same process), the library's launch path on the GPU and its host cost, and the
# wgmma GEMM template's first GPU check. Usage (on the H200, repository root, wheels in .whl/):
#   bash benchmarks/tools/session19_call_c.sh $OUT
set -u
OUT=${1:?OUT}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
step() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc=$?"; tail -${TAILN:-6} "$OUT/$name.log"; }
CHAMPS=benchmarks/suites/cold_recheck_genomes.json
dec() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" python3 -m core decode-bench --json "$@" \
          > "$OUT/$name.json" 2> "$OUT/$name.log"; echo "$name rc=$?"; tail -4 "$OUT/$name.log"; }
dec decode_70b_1k 150 --model llama-3.1-70b --layers 8 --context 1024 --steps 20 --champions $CHAMPS \
    --library-out /tmp/lib70 --verify 1,4,7
TAILN=12 step lib_gpu_tests 150 python3 -m pytest -q -p no:cacheprovider -rf --tb=short tests/test_library_attention.py \
    tests/test_library_launch_plan.py tests/test_library_launch_compiled.py tests/test_library_ops.py tests/test_library_patch_gpu.py
TAILN=40 step lib_overhead 80 python3 -m benchmarks.tools.library_overhead --device cuda
TAILN=40 step wgmma 200 python3 benchmarks/tools/wgmma_gpu_check.py --out "$OUT/wgmma"
dec decode_70b_8k 100 --model llama-3.1-70b --layers 8 --context 8192 --steps 10 --champions $CHAMPS --library-out /tmp/lib70k
dec decode_8b_1k 100 --model llama-3.1-8b --layers 8 --context 1024 --steps 10 --champions $CHAMPS --library-out /tmp/lib8
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("decode_*.json")):
    try:
        r = json.loads(f.read_text())
    except Exception as exc:
        print(f.name, "no record:", exc); continue
    print(f.name, {w: (r[w]["label"][:60], r[w]["ms_per_step"], r[w].get("projected_full_model_tokens_per_s"),
                       r[w]["logits"]["argmax_agree"], r[w]["logits"]["argmax_counted"], round(r[w]["logits"]["max_abs_error"], 4))
                   for w in ("a", "b")}, "b/a", r["b_over_a_speedup"],
          "verify", [(v["K"], v["b"]["x_one_token_step"]) for v in r["verify"]], "attention", r["dispatch_by_op"].get("attention_decode"),
          "refused", r["refused"], "b kinds", {k: v["us"] for k, v in r["b"]["breakdown"]["by_kind"].items()})
PY
rm -rf "$OUT/wgmma/cache" "$OUT/wgmma/.cache" 2>/dev/null
