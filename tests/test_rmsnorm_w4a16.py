"""The fused RMSNorm + W4A16 workload: its reference, the C template verified for real through the
generic harness (seeds, random genomes, kernels that skip part of the norm), and the GPU templates
rendered without a GPU. The registry-wide checks (spec coherence, nvcc, the Triton interpreter,
the exported script) are tests/test_conformance.py's, run with ``-k rmsnorm_w4a16``."""
from __future__ import annotations

import dataclasses
import json
import random
import re

import numpy as np
import pytest

from core.backends import availability, backend_class, make_backend
from core.backends.base import DeviceInfo, KernelSource
from core.evaluation.harness import Harness
from core.genome import Genome
from core.workloads import get_workload
from core.workloads.w4a16 import TOLERANCE as W4A16_TOLERANCE

H200 = DeviceInfo(backend="", index=0, name="NVIDIA H200 (simulated)", memory_bytes=141 << 30, multiprocessors=132,
                  shared_mem_per_block=232448, registers_per_block=65536, registers_per_thread=255,
                  max_threads_per_block=1024, l2_bytes=60 << 20, memory_bandwidth=4.8e12, arch="sm_90")
SMALL = {"m": 2, "n": 64, "k_groups": 16}


@pytest.fixture(scope="module")
def wl():
    return get_workload("rmsnorm_w4a16")


@pytest.fixture(scope="module")
def c_backend():
    reason = availability("c")
    if reason:
        pytest.skip(f"c backend unavailable: {reason}")
    be = make_backend("c")
    return be, be.make_runtime()


def _gpu_template(wl, backend: str, problem: dict | None = None):
    prob = wl.validate_problem(problem or {}, backend)
    return wl.template(backend, prob, dataclasses.replace(H200, backend=backend))


def _verify(wl, tpl, kernel: KernelSource, c_backend, cache) -> list[str]:
    """Causes of failure of ``kernel`` on every verification shape (empty: it verifies)."""
    be, runtime = c_backend
    harness = Harness(wl, tpl, runtime, tpl.problem)
    fn = runtime.load(be.compile(kernel, cache))
    failures = []
    for seed, shape in enumerate(wl.shapes(tpl.problem)):
        case = harness.make_case(shape, seed)
        harness.launch(fn, case)
        result = harness.check(case)
        if not result.ok:
            failures.append(f"{shape}: {result.cause}")
    return failures


# ---- the spec ------------------------------------------------------------------------------------

def test_defaults_are_the_70b_qkv_projection_on_a_gpu_and_small_on_a_cpu(wl):
    gpu = wl.default_problem("cuda")
    assert (gpu["m"], gpu["n"], gpu["k_groups"] * 128, gpu["dtype"]) == (1, 10240, 8192, "bfloat16")
    cpu = wl.default_problem("c")
    assert (cpu["n"], cpu["k_groups"] * 128, cpu["dtype"]) == (4096, 4096, "float32")
    with pytest.raises(ValueError, match="m must be"):
        wl.validate_problem({"m": 17}, "c")
    odd = wl.shapes(gpu)[1:]
    assert any(s["m"] == 3 and s["n"] % 2 == 1 and (s["k_groups"] * 128) % 1024 for s in odd), odd


def test_reference_is_rmsnorm_times_gamma_then_the_gptq_product(wl):
    """Against a direct loop over GPTQ's packing: W[k, c] = (nibble k % 8 of word [k // 8, c] - 8) * s."""
    rng = np.random.default_rng(3)
    m, n, groups, eps = 2, 3, 2, 1e-5
    K = 128 * groups
    q = rng.integers(0, 16, (K, n))
    words = np.zeros((K // 8, n), dtype=np.int64)
    for k in range(K):
        words[k // 8] |= q[k] << (4 * (k % 8))
    words = words.astype(np.uint32).view(np.int32).astype(np.float64)  # as the reference receives int32 words
    scales = rng.uniform(0.5, 1.5, (groups, n))
    x, gamma = rng.normal(size=(m, K)), rng.normal(1.0, 0.5, K)
    t = {"x": x.reshape(m, groups, 128), "gamma": gamma.reshape(groups, 128),
         "qweight": words.reshape(groups, 16, n), "scales": scales}
    y = wl.reference(np, t, {"eps": eps})["y"]
    want = np.zeros((m, n))
    for r in range(m):
        xn = x[r] / np.sqrt(np.mean(x[r] ** 2) + eps) * gamma
        for c in range(n):
            want[r, c] = sum(xn[k] * (q[k, c] - 8) * scales[k // 128, c] for k in range(K))
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_tolerance_is_w4a16s_with_a_wider_atol_for_16_bit_types(wl):
    assert wl.tolerance("float32", {}) == W4A16_TOLERANCE["float32"]
    for dtype in ("bfloat16", "float16"):
        atol, rtol = wl.tolerance(dtype, {})
        assert rtol == W4A16_TOLERANCE[dtype][1] and atol == pytest.approx(3 * W4A16_TOLERANCE[dtype][0])


def test_baselines_rmsnorm_then_dequantise_on_both_array_libraries(wl):
    assert {b.name for b in wl.baselines("numpy")} == {"numpy_rmsnorm_dequant_matmul", "torch_rmsnorm_dequant_matmul"}
    assert {b.name for b in wl.baselines("torch")} == {"torch_int4pack_mm", "rmsnorm_dequant_matmul_eager",
                                                       "rmsnorm_dequant_matmul_compile"}


# ---- the C template, for real --------------------------------------------------------------------

@pytest.mark.parametrize("problem", [SMALL, {"m": 4, "n": 96, "k_groups": 8}], ids=["m2", "m4"])
def test_c_seeds_and_random_genomes_verify_on_every_shape(wl, c_backend, tmp_path, problem):
    tpl = wl.template("c", wl.validate_problem(problem, "c"), backend_class("c").devices()[0])
    space = tpl.gene_space()
    rng = random.Random(f"rmsnorm_w4a16/{problem}")
    genomes = space.seed_genomes() + [space.random(rng) for _ in range(3)]
    failures = [f"{g.to_json()} {why}" for g in genomes for why in _verify(wl, tpl, tpl.render(g), c_backend, tmp_path)]
    assert not failures, "\n".join(failures)


NORM = "return (float)(1.0 / sqrt(ss / (double)K + (double)eps));"


@pytest.mark.parametrize("fault,old,new", [
    ("no normalisation", NORM, "return 1.0f;"),
    ("no eps", NORM, "return (float)(1.0 / sqrt(ss / (double)K));"),
    ("no gamma", re.compile(r"gm\[k \+ (\d)\]"), "1.0f"),
], ids=["no_norm", "no_eps", "no_gamma"])
def test_a_kernel_skipping_part_of_the_norm_fails_verification(wl, c_backend, tmp_path, fault, old, new):
    problem = {**SMALL, "eps": 0.5} if fault == "no eps" else SMALL  # a large eps, so that leaving it out shows
    tpl = wl.template("c", wl.validate_problem(problem, "c"), backend_class("c").devices()[0])
    for genome in tpl.gene_space().seed_genomes():
        good = tpl.render(genome)
        source = old.sub(new, good.source) if isinstance(old, re.Pattern) else good.source.replace(old, new)
        assert source != good.source, f"{fault}: nothing replaced"
        assert not _verify(wl, tpl, good, c_backend, tmp_path), "the untouched kernel must verify"
        failures = _verify(wl, tpl, dataclasses.replace(good, source=source), c_backend, tmp_path)
        assert failures and all("wrong_result" in f for f in failures), f"{fault}: {failures}"


def test_c_norm_genes_move_the_norm(wl):
    tpl = wl.template("c", wl.validate_problem(SMALL, "c"), backend_class("c").devices()[0])
    seed = tpl.gene_space().seed_genomes()[1]
    once = tpl.render(seed.replace("memory_pattern", "norm_pass", "once")).source
    per_tile = tpl.render(seed.replace("memory_pattern", "norm_pass", "per_tile")).source
    assert "invs[r] = rms_inv(" in once and "invs[r] = rms_inv(" not in per_tile
    assert "const float inv0 = rms_inv(" in per_tile
    regs = dict(seed["register_allocation"]["register_map"])
    at_load = tpl.render(seed.replace("register_allocation", "register_map", {**regs, "norm": "load"})).source
    at_store = tpl.render(seed.replace("register_allocation", "register_map", {**regs, "norm": "store"})).source
    assert "* g0 * inv0;" in at_load and "* g0;" in at_store and "acc0_0 * " in at_store


@pytest.mark.parametrize("backend", ["c", "triton"])
def test_c_and_triton_genes_are_w4a16s_plus_the_norms(wl, backend):
    """The fused templates render W4A16's kernels (``norm=``): W4A16's genes by group, plus the
    norm's; the C one without ``layout`` (the workload declares no weights to repack into panels)."""
    prob = wl.validate_problem(SMALL if backend == "c" else {}, backend)
    dev = backend_class("c").devices()[0] if backend == "c" else dataclasses.replace(H200, backend=backend)
    base = get_workload("w4a16")
    ours = wl.template(backend, prob, dev).gene_space().groups
    theirs = base.template(backend, base.validate_problem({}, backend), dev).gene_space().groups
    added = {"c": {"norm_pass"}, "triton": {"norm_chunk", "norm"}}[backend]
    removed = {"layout"} if backend == "c" else set()
    for group, genes in theirs.items():
        names = {g.name for g in ours[group]}
        assert names == ({g.name for g in genes} - removed) | (names & added), group
    assert {g.name for gs in ours.values() for g in gs} >= added
    if backend == "c":
        (regs,) = ours["register_allocation"]
        assert dict(regs.keys)["norm"] == ("load", "store")


# ---- the GPU templates, rendered without a GPU ---------------------------------------------------

@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_gpu_seeds_and_random_genomes_render_and_fit(wl, backend, dtype):
    tpl = _gpu_template(wl, backend, {"dtype": dtype})
    space = tpl.gene_space()
    rng = random.Random(f"{backend}/{dtype}")
    for g in space.seed_genomes() + [space.random(rng) for _ in range(8)]:
        kernel = tpl.render(g)
        assert kernel.entry == "abebot_rmsnorm_w4a16" and kernel.entry in kernel.source
        assert tpl.resource_violation(kernel) is None, g.to_json()
        if backend == "triton":
            compile(kernel.source, "<triton>", "exec")


def test_cuda_batch_vec_and_norm_genes_shape_the_kernel(wl):
    """The fused template is W4A16's kernel with the norm: its genes still shape it, and the norm gene
    puts 1 / rms before the stream (on x as loaded) or after it (on the sums)."""
    tpl = _gpu_template(wl, "cuda")
    seed = tpl.gene_space().seed_genomes()[0]
    src = tpl.render(seed).source
    assert "#define B 4" in src and "#define KSPLIT 64" in src and "ld.global.nc.L1::no_allocate.v4.u32" in src
    assert "#define B 8" in tpl.render(seed.replace("register_allocation", "batch", 8)).source
    first = tpl.render(seed.replace("instruction_sequence", "norm", "load")).source
    last = tpl.render(seed.replace("instruction_sequence", "norm", "store")).source
    assert first.index("block_inv(x, M,") < first.index("run<VEC>(") and "gv[b] * inv[a]" in first
    assert "from_f(acc[a][e] * inv[a])" not in first
    assert last.index("block_inv(x, M,") > last.index("run<VEC>(") and "from_f(acc[a][e] * inv[a])" in last
    big = seed.replace("parallel_config", "rows_per_block", 8).replace("register_allocation", "batch", 8)
    assert "per thread" in tpl.gene_space().validate(big.replace("instruction_sequence", "first", "x"))


def test_triton_norm_gene_orders_the_norm_and_the_product(wl):
    tpl = _gpu_template(wl, "triton")
    seed = tpl.gene_space().seed_genomes()[0]
    first = tpl.render(seed.replace("instruction_sequence", "norm", "load")).source
    last = tpl.render(seed.replace("instruction_sequence", "norm", "store")).source
    assert first.index("ss += tl.sum") < first.index("for g in tl.range") and "* inv[:, None]" in first
    assert last.index("ss += tl.sum") > last.index("for g in tl.range") and "acc = acc * inv[:, None]" in last


def test_cuda_weights_as_a_path_takes_the_norm_at_load_or_at_store(wl):
    """The weights-as-A tensor-core path is offered fused (seeded from W4A16's QKV champion): gamma on
    every x fragment before its mma, 1 / rms on the finished sums, computed before the stream (once
    the ring's first loads are issued) with ``load`` and after the K reduction with ``store``; the
    norm gathered from the stream is refused, since its warps along N share x."""
    tpl = _gpu_template(wl, "cuda")
    space = tpl.gene_space()
    seeds = [s for s in space.seed_genomes() if s["instruction_sequence"]["math"] == "mma_w"]
    assert sorted(s["instruction_sequence"]["norm"] for s in seeds) == ["load", "load", "store"]
    for seed in seeds:
        assert space.validate(seed) is None
        assert "norm" in space.validate(seed.replace("instruction_sequence", "norm", "stream"))
    seed = seeds[0]
    for stages, copy in ((4, "lanes"), (0, "lanes"), (2, "bulk")):
        g = seed.replace("memory_pattern", "stages", stages).replace("memory_pattern", "copy", copy)
        first = tpl.render(g.replace("instruction_sequence", "norm", "load")).source
        last = tpl.render(g.replace("instruction_sequence", "norm", "store")).source
        for src in (first, last):
            assert src.count("block_inv(x, M,") == 1 and "xn[h] = make_uint4(mul2(xx.x, gv.x)" in src
            assert "mma(part[c * TH + h], a, ss ? xn[h].z : xn[h].x" in src
            assert "from_f(acc[c * TH + h][r] * inv[row - m0])" in src
        loop = "for (int s0 = 0; s0 < steps; s0 += U)"
        ring = "bulk_issue(myring + q * SLOT" if copy == "bulk" else "ring_issue(ring, r," if stages else "load_words(w[u]"
        assert first.index(ring) < first.index("block_inv(x, M,") < first.index(loop)
        assert last.index("if (wk != 0) return;") > last.index("block_inv(x, M,") > last.index(loop)
    plain = get_workload("w4a16")
    w_tpl = plain.template("cuda", plain.validate_problem({"n": 10240, "k_groups": 64}, "cuda"), H200)
    genes = json.loads(seed.to_json())
    del genes["instruction_sequence"]["norm"]
    unfused = w_tpl.render(Genome.from_json(genes)).source
    assert "block_inv" not in unfused and "xn[h]" not in unfused and "inv[row - m0]" not in unfused
