"""attention_decode: the spec's reference, settings, tolerances and baselines, and the C kernel's
split merge where whole splits are hidden from a query row. The generic checks (every shape, seeds
and random genomes on the C backend, nvcc -ptx, the Triton interpreter) are the conformance
suite's: ``pytest tests/test_conformance.py -k attention_decode``."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from core.workloads import get_workload
from tests.helpers import SIMULATED_GPU

WL = get_workload("attention_decode")


def _inputs(shape: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape(shape)) for t in WL.tensors(shape) if t.read}


def _loop_reference(t: dict) -> np.ndarray:
    """One query row at a time: token j of Q sees the first L - Q + j + 1 keys of its KV head."""
    q, k, v = t["q"], t["k_cache"], t["v_cache"]
    b, nq, kvh, g, d = q.shape
    n = k.shape[2]
    out = np.zeros(q.shape)
    for i in range(b):
        for j in range(nq):
            seen = n - nq + j + 1
            for h in range(kvh):
                for x in range(g):
                    s = k[i, h, :seen] @ q[i, j, h, x] / math.sqrt(d)
                    p = np.exp(s - s.max())
                    out[i, j, h, x] = p @ v[i, h, :seen] / p.sum()
    return out


def test_the_reference_lets_each_drafted_token_see_the_context_and_the_drafts_up_to_itself():
    shape = {"batch": 2, "queries": 4, "kv_heads": 2, "group": 3, "head_dim": 5, "context": 9}
    t = _inputs(shape)
    assert np.allclose(WL.reference(np, t, shape)["out"], _loop_reference(t), rtol=1e-12, atol=1e-12)


def test_the_reference_is_the_same_in_numpy_and_torch():
    torch = pytest.importorskip("torch")
    shape = {"batch": 1, "queries": 3, "kv_heads": 2, "group": 2, "head_dim": 7, "context": 11}
    t = _inputs(shape, 1)
    via_torch = WL.reference(torch, {k: torch.from_numpy(v) for k, v in t.items()}, shape)["out"].numpy()
    assert np.allclose(WL.reference(np, t, shape)["out"], via_torch, rtol=1e-12, atol=1e-12)


def test_a_context_shorter_than_the_query_tokens_is_refused_in_one_line():
    with pytest.raises(ValueError, match="context must be at least queries") as err:
        WL.validate_problem({"queries": 5, "context": 4}, "c")
    assert "\n" not in str(err.value)


def test_every_verification_shape_holds_its_query_tokens_and_one_is_odd_in_context_and_head_dim():
    for backend in ("c", "cuda"):
        shapes = WL.shapes(WL.default_problem(backend))
        assert all(s["context"] >= s["queries"] for s in shapes)
        assert any(s["context"] % 2 and s["head_dim"] % 2 for s in shapes)
        assert any(s["queries"] > 1 for s in shapes), "the drafted tokens' mask is verified"


def test_timed_launches_permute_the_kv_heads_which_permutes_the_output_alike():
    problem = WL.default_problem("cuda")
    assert WL.perturbation(problem) == "kv_heads" and problem["kv_heads"] > 1
    shape = {"batch": 1, "queries": 2, "kv_heads": 3, "group": 2, "head_dim": 4, "context": 6}
    t = _inputs(shape, 2)
    perm = np.array([2, 0, 1])
    moved = {"q": t["q"][:, :, perm], "k_cache": t["k_cache"][:, perm], "v_cache": t["v_cache"][:, perm]}
    assert np.allclose(WL.reference(np, moved, shape)["out"], WL.reference(np, t, shape)["out"][:, :, perm])


def test_the_copy_roofline_reads_the_kv_cache_once():
    problem = WL.default_problem("cuda")
    main = WL.shapes(problem)[0]
    kv = 2 * main["batch"] * main["kv_heads"] * main["context"] * main["head_dim"] * 2
    q_out = 2 * main["batch"] * main["queries"] * main["kv_heads"] * main["group"] * main["head_dim"] * 2
    assert WL.min_bytes(main, problem) == kv + q_out


@pytest.mark.parametrize("queries", [1, 5])
def test_the_tolerances_admit_sdpa_on_the_cpu_in_bf16_and_fp16_at_the_gpu_heads(queries):
    torch = pytest.importorskip("torch")
    from core.workloads.attention_decode.baselines import _sdpa

    shape = {**WL.shapes(WL.default_problem("cuda"))[0], "queries": queries}
    t = _inputs(shape, 3)
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        tt = {k: torch.from_numpy(v).to(dtype) for k, v in t.items()}
        ref = WL.reference(torch, {k: v.double() for k, v in tt.items()}, shape)["out"]
        out = _sdpa(torch, tt["q"], tt["k_cache"], tt["v_cache"], gqa=True).double()
        atol, rtol = WL.tolerances[name]
        used = ((out - ref).abs() / (atol + rtol * ref.abs())).max().item()
        assert used < 0.5, f"{name}: SDPA uses {used:.0%} of the tolerance"


def test_the_gpu_baselines_are_every_sdpa_backend_and_flashinfer_which_fails_to_import_where_absent():
    import importlib.util

    names = [b.name for b in WL.baselines("torch")]
    assert names == ["sdpa_math", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flashinfer"]
    assert [b.name for b in WL.baselines("numpy")] == ["numpy", "torch_sdpa"]
    if importlib.util.find_spec("flashinfer") is None:  # the protocol and run_kernel.py skip it with this line
        with pytest.raises(ModuleNotFoundError, match="flashinfer"):
            WL.baselines("torch")[-1].fn({}, {})


@pytest.mark.parametrize("combine", ["max_first", "running"])
def test_the_c_kernel_merges_splits_whose_keys_are_all_hidden_from_a_row(combine, compile_cache):
    """16 query tokens over 20 keys in splits of 8: token 0 sees 5 keys, so splits 1 and 2 hold
    nothing it may see, and their partials (max -inf, sum 0) must weigh nothing in the merge."""
    from core.backends import availability, make_backend
    from core.evaluation.harness import Harness
    from core.genome import Genome

    if availability("c"):
        pytest.skip(availability("c"))
    backend = make_backend("c")
    runtime = backend.make_runtime()
    problem = WL.validate_problem({"queries": 16, "context": 20, "head_dim": 16}, "c")
    tpl = WL.template("c", problem, backend.device)
    seed = tpl.gene_space().seed_genomes()[-1].to_dict()
    seed["parallel_config"].update(splits=16)
    seed["memory_pattern"].update(keys_per_tile=8)
    seed["instruction_sequence"].update(combine=combine)
    genome = tpl.gene_space().canonical(Genome(seed))
    kernel = runtime.load(backend.compile(tpl.render(genome), compile_cache))
    harness = Harness(WL, tpl, runtime, problem)
    case = harness.make_case(WL.shapes(problem)[0], 0)
    harness.launch(kernel, case)
    result = harness.check(case)
    assert result.ok, f"{result.cause} {result.detail}"


def test_the_cuda_launch_needs_a_workspace_only_with_several_splits_and_sizes_shared_memory_by_shape():
    from core.workloads.attention_decode import cuda

    problem = WL.default_problem("cuda")
    main = WL.shapes(problem)[0]
    lp = {"splits": 16, "keys_per_tile": 64, "head_split": 1, "stages": 2, "acc": "registers", "vec": 8}
    floats, ints = cuda.workspace(lp, main)
    assert ints == main["kv_heads"] and floats == 16 * main["kv_heads"] * main["group"] * (main["head_dim"] + 2)
    assert cuda.workspace({**lp, "splits": 1}, main) == (0, 0)
    drafted = {**main, "queries": 5}
    assert cuda.shared_bytes_of(lp, problem, drafted) > cuda.shared_bytes_of(lp, problem, main)
    tpl = WL.template("cuda", problem, dataclasses.replace(SIMULATED_GPU, backend="cuda"))
    for g in tpl.gene_space().seed_genomes():
        kernel = tpl.render(g)
        assert kernel.launch["dynamic_shared_bytes"] == max(cuda.shared_bytes_of(kernel.launch, problem, s)
                                                            for s in WL.shapes(problem))


def test_the_h200_check_script_takes_the_seeds_and_valid_variants_of_both_gpu_templates():
    from benchmarks.tools.attention_check import HEADS, genomes, main

    for backend in ("cuda", "triton"):
        problem = WL.validate_problem({**HEADS, "context": 8192, "queries": 5}, backend)
        tpl = WL.template(backend, problem, dataclasses.replace(SIMULATED_GPU, backend=backend))
        gs = genomes(tpl, backend)
        assert gs[:2] == tpl.gene_space().seed_genomes() and len(gs) > 3 and len(set(gs)) == len(gs)
        assert all(tpl.gene_space().validate(g) is None and tpl.resource_violation(tpl.render(g)) is None for g in gs)
    assert main(["--contexts", "8k"]) == 2


LENGTHS_SCRIPT = r'''
import importlib.util, json, sys
import torch
import triton.runtime.interpreter as _I
_orig = _I._patch_lang_tensor
def _patched(tensor, scope):  # NumPy >= 2.4 refuses int() of a 1-element array (as tests/test_conformance.py)
    _orig(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
_I._patch_lang_tensor = _patched
from core.workloads.attention_decode.triton import SEEDS, render_module
B, Q, KVH, G, D, CAP, N = 2, 3, 2, 4, 32, 80, 53
torch.manual_seed(0)
q = torch.randn(B, Q, KVH, G, D) * 2
k, v = torch.randn(B, KVH, CAP, D), torch.randn(B, KVH, CAP, D)
k[:, :, N:], v[:, :, N:] = float("nan"), float("nan")  # beyond the filled keys: never to be read
lengths = (N, N - 7)
errs = []
for i, seed in enumerate(SEEDS):
    path = sys.argv[1] + f"/m{i}.py"
    open(path, "w").write(render_module(seed, "float32"))
    spec = importlib.util.spec_from_file_location(f"m{i}", path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    out = torch.empty_like(q)
    n = mod.workspace_floats(B, Q, KVH, G, D, CAP)
    mod.launch(q, k, v, out, torch.empty(n) if n else None, lengths=torch.tensor(lengths, dtype=torch.int32))
    for b, nb in enumerate(lengths):
        for j in range(Q):  # query j sees the first nb - Q + j + 1 keys
            seen = nb - Q + j + 1
            s = torch.einsum("hgd,hnd->hgn", q[b, j].double(), k[b, :, :seen].double()) / D ** 0.5
            ref = torch.einsum("hgn,hnd->hgd", s.softmax(-1), v[b, :, :seen].double())
            errs.append(float((out[b, j].double() - ref).abs().max()))
print(json.dumps(errs))
'''


def test_the_triton_kernels_read_only_the_keys_a_lengths_tensor_says_are_filled(tmp_path):
    """A model's KV cache has a fixed capacity and a length per step (under a CUDA graph, on the device):
    given ``lengths``, the seeds attend to those keys only -- NaN past them never reaches the output --
    and match the reference over exactly those keys, per sequence (Triton's interpreter, on the CPU)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-c", LENGTHS_SCRIPT, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    errs = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(errs) == 12 and max(errs) < 1e-4, errs
