"""The Hopper wgmma GEMM template (core/workloads/gemm/wgmma*.py), checked without a GPU: genomes,
budgets, refusals, the rendered source, the tensor-map arguments and how a run chooses it.
Rendered kernels are compiled for sm_90a where nvcc is installed (no launch)."""
from __future__ import annotations

import dataclasses
import random
import re
import shutil
import subprocess

import pytest

from core.backends.base import CompileError
from core.backends.cuda import arch_options
from core.backends.tensor_map import MAP_BYTES, TensorMap, check_2d, packed_params
from core.genome import Genome
from core.workloads import get_workload
from core.workloads.gemm import wgmma_launch
from core.workloads.gemm.wgmma import SEEDS, WgmmaGemmTemplate
from core.workloads.gemm.wgmma_source import (MAX_ACC, REG_SPLITS, SM_REGISTERS, SMEM_LIMIT, _entry_registers,
                                              derived, render_source, violation)
from tests.helpers import SIMULATED_GPU

H200 = dataclasses.replace(SIMULATED_GPU, backend="cuda")
GEMM = get_workload("gemm")


def template(dtype: str = "bfloat16", **problem) -> WgmmaGemmTemplate:
    p = GEMM.validate_problem({"template": "wgmma", "dtype": dtype, **problem}, "cuda")
    return GEMM.template("cuda", p, H200)


def genome(**changes) -> Genome:
    """The first seed with ``changes`` (gene name -> value) applied."""
    raw = {group: dict(genes) for group, genes in SEEDS[0].items()}
    for name, value in changes.items():
        group = next(g for g, genes in raw.items() if name in genes)
        raw[group][name] = value
    return Genome(raw)


def random_genomes(n: int, seed: int = 7) -> list[Genome]:
    space, rng = template().gene_space(), random.Random(seed)
    return [space.random(rng) for _ in range(n)]


def defines(source: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^#define (\w+) (-?\d+)$", source, re.M)}


# ---- how a run chooses it ----------------------------------------------------------------------

def test_a_gemm_problem_without_the_setting_keeps_the_mma_sync_template_and_its_hashes():
    problem = GEMM.validate_problem({}, "cuda")
    assert "template" not in problem
    mma = GEMM.template("cuda", problem, H200)
    assert type(mma).__module__ == "core.workloads.gemm.cuda"
    assert [g.hash for g in mma.gene_space().seed_genomes()] == ["0935546bd35185fe"]


def test_the_template_setting_picks_the_wgmma_template_on_cuda():
    assert isinstance(template(), WgmmaGemmTemplate)
    assert template().problem["template"] == "wgmma"


@pytest.mark.parametrize("problem, backend, words", [
    ({"template": "wgmma"}, "c", "cuda backend only"),
    ({"template": "wgmma", "dtype": "float32"}, "cuda", "bfloat16 or float16"),
    ({"template": "tcgen05"}, "cuda", "must be one of wgmma"),
])
def test_a_template_setting_the_backend_or_dtype_cannot_run_is_refused_in_one_line(problem, backend, words):
    with pytest.raises(ValueError, match=words) as err:
        GEMM.validate_problem(problem, backend)
    assert "\n" not in str(err.value)


# ---- genomes and budgets -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_seed_genomes_are_valid_and_render(dtype):
    t = template(dtype)
    seeds = t.gene_space().seed_genomes()
    assert len(seeds) == len(SEEDS)
    for g in seeds:
        k = t.render(g)
        assert k.entry == "abebot_wgmma_gemm" and "--gpu-architecture=sm_90a" in k.flags
        assert t.resource_violation(k) is None
        assert f".f32.{'bf16' if dtype == 'bfloat16' else 'f16'}." in k.source


def test_random_genomes_keep_the_shared_memory_register_and_tile_rules():
    for g in random_genomes(300):
        d, src = derived(g), render_source(g, "bfloat16")
        assert d["smem"] <= SMEM_LIMIT
        assert d["acc"] <= MAX_ACC and d["wg_m"] in (64, 128) and d["bm"] == d["wg_m"] * d["consumers"]
        assert d["bk"] % d["sw_e"] == 0 and d["bn"] % d["sw_e"] == 0 and d["bn"] % 8 == 0
        assert d["a_stage"] % 1024 == 0 and d["b_stage"] % 1024 == 0 and d["c_bytes"] % 1024 == 0
        assert d["smem"] == 1024 + d["stages"] * (d["a_stage"] + d["b_stage"]) + d["c_bytes"] + 16 * d["stages"]
        got = defines(src)
        assert got["STAGE_TX"] == (d["bm"] * d["bk"] + d["bk"] * d["bn"]) * 2  # the bytes the full barrier expects
        assert got["THREADS"] == 128 * (d["consumers"] + 1)
        if got["REG_SPLIT"]:
            cap = _entry_registers(got["THREADS"])
            assert got["PRODUCER_REGS"] < cap < got["CONSUMER_REGS"]
            assert 128 * (got["PRODUCER_REGS"] + d["consumers"] * got["CONSUMER_REGS"]) <= cap * got["THREADS"] <= SM_REGISTERS
            assert got["PRODUCER_REGS"] % 8 == 0 and got["CONSUMER_REGS"] % 8 == 0
        assert f"m64n{d['bn']}k16" in src and len(re.findall(r'"\+f"\(d\[\d+\]\)', src)) == d["bn"] // 2


def test_the_source_is_a_pure_function_of_the_genome():
    for g in random_genomes(20, seed=3):
        assert render_source(g, "bfloat16") == render_source(Genome.from_json(g.to_json()), "bfloat16")


def test_every_gene_changes_the_source_where_it_applies():
    space = template().gene_space()
    for base in space.seed_genomes():
        for group, gene in space.genes():
            for value in gene.options:
                other = space.canonical(base.replace(group, gene.name, value))
                if other == base or space.validate(other):
                    continue
                assert render_source(other, "bfloat16") != render_source(base, "bfloat16"), f"{group}.{gene.name}={value}"


def test_one_consumer_warpgroup_canonicalises_the_register_split_away():
    space = template().gene_space()
    g = space.canonical(genome(block_m=64, block_n=128, consumers=1, reg_split="40/232"))
    assert g["register_allocation"]["reg_split"] == "none"
    assert "setmaxnreg" in render_source(g, "bfloat16")  # the text is there, behind REG_SPLIT 0
    assert defines(render_source(g, "bfloat16"))["REG_SPLIT"] == 0


@pytest.mark.parametrize("changes, words", [
    ({"block_m": 64, "consumers": 2}, "64 or 128"),
    ({"block_m": 256, "consumers": 1}, "64 or 128"),
    ({"block_m": 128, "consumers": 1, "block_n": 256}, "accumulators"),
    ({"block_k": 32, "swizzle": 128}, "narrower than one 128-byte swizzled row"),
    ({"stages": 6, "block_k": 128}, "shared memory"),
    ({"stages": 4, "epilogue": "tma"}, "shared memory"),
    ({"stages": 2, "inflight": 1, "block_k": 32, "swizzle": 64}, None),
])
def test_invalid_combinations_are_refused_with_a_reason(changes, words):
    why = violation(genome(**changes), "bfloat16")
    if words is None:
        assert why is None
    else:
        assert why and words in why and "\n" not in why
        with pytest.raises(ValueError, match="wgmma genome refused"):
            template().render(genome(**changes))


def test_a_register_split_that_does_not_fit_the_sm_is_refused(monkeypatch):
    monkeypatch.setitem(REG_SPLITS, "40/232", (40, 248))
    assert "does not fit 384 threads entering with 168 registers" in violation(genome(), "bfloat16")


def test_float32_is_refused_by_the_rules_too():
    assert "bfloat16 or float16" in violation(genome(), "float32")


# ---- the tensor-map arguments ----------------------------------------------------------------------

def kernel_params(src: str) -> list[str]:
    """The entry's parameters, SPLIT_PARAMS expanded as the preprocessor would for the rendered SPLIT_K
    (the kernel defines it twice: under ``#if SPLIT_K > 1``, then empty under ``#else``)."""
    signature = re.search(r"abebot_wgmma_gemm\(([^)]*)\)", src).group(1)
    split, plain = re.findall(r"^#define SPLIT_PARAMS(.*)$", src, re.M)
    signature = signature.replace("SPLIT_PARAMS", split if defines(src)["SPLIT_K"] > 1 else plain)
    return [" ".join(p.split()) for p in signature.split(",")]


def test_the_kernel_takes_three_by_value_tensor_maps_then_c_and_the_sizes():
    src = render_source(genome(), "bfloat16")
    assert "struct __align__(64) TmaMap { unsigned long long v[16]; };" in src
    assert kernel_params(src) == ["const __grid_constant__ TmaMap tmA", "const __grid_constant__ TmaMap tmB",
                                  "const __grid_constant__ TmaMap tmC", "T *__restrict__ C", "int M", "int N", "int K",
                                  "int c_tma"]


def test_a_split_k_kernel_takes_the_workspace_and_the_counters_after_the_sizes():
    src = render_source(genome(split_k=4), "bfloat16")
    assert defines(src)["SPLIT_K"] == 4 and "split_reduce(" in src
    assert kernel_params(src)[-3:] == ["int c_tma", "float *__restrict__ ws", "int *__restrict__ sems"]


def test_packed_launch_arguments_keep_each_value_at_its_own_size():
    import numpy as np

    args = (TensorMap(bytes(range(128))), TensorMap.unused(), TensorMap.unused(), np.uint64(0xABC), np.int32(5),
            np.int32(6), np.int32(7), np.int32(1))
    buffers, array = packed_params(args)
    assert [len(b.raw) for b in buffers] == [MAP_BYTES] * 3 + [8, 4, 4, 4, 4]
    assert buffers[0].raw == bytes(range(128)) and int.from_bytes(buffers[3].raw, "little") == 0xABC
    assert len(array) == 8
    with pytest.raises(ValueError, match="128 bytes"):
        TensorMap(bytes(64))


@pytest.mark.parametrize("args, words", [
    ((0x1008, 64, 64, 128, 64, 64, 2, 128), "16-byte aligned"),
    ((0x1000, 4095, 1023, 2046, 128, 64, 2, 128), "row pitch 2046"),
    ((0x1000, 64, 64, 128, 64, 128, 2, 128), "wider than the 128 B swizzle"),
    ((0x1000, 64, 64, 128, 512, 64, 2, 128), "outside 1..256"),
    ((0x1000, 4096, 4096, 8192, 128, 64, 2, 128), None),
])
def test_tensor_maps_the_driver_would_refuse_are_refused_first(args, words):
    why = check_2d(*args)
    assert (why is None) if words is None else (words in why)


def test_shapes_tma_cannot_map_stage_their_operands_and_store_c_from_registers():
    lp = template().render(genome(epilogue="tma", stages=3, persistent="grid")).launch
    odd = wgmma_launch.plan(lp, 4095, 4097, 1023, 132)
    assert (odd.stage_a, odd.stage_b, odd.c_tma) == (True, True, False)
    even = wgmma_launch.plan(lp, 4096, 4096, 4096, 132)
    assert (even.stage_a, even.stage_b, even.c_tma) == (False, False, True)
    assert even.tiles == 32 * 16 and even.grid == 32 * 16  # 128 x 256 tiles, one block each
    assert wgmma_launch.staging_bytes(4095, 4097, 1023) == 2 * (4095 * 1024 + 1023 * 4104)
    assert wgmma_launch.staging_bytes(4096, 4096, 4096) == 0


def test_a_cluster_grid_is_a_whole_number_of_clusters_and_b_is_copied_in_halves():
    t = template()
    lp = t.render(genome(cluster_m=2, persistent="grid")).launch
    assert lp["cluster_m"] == 2
    odd = wgmma_launch.plan(lp, 3 * 128 + 1, 512, 512, 132)  # 4 tile rows: 2 clusters, 2 tile columns
    assert odd.grid == 2 * 2 * 2 and odd.grid % 2 == 0
    persistent = t.render(genome(cluster_m=2)).launch
    assert wgmma_launch.plan(persistent, 4096, 4096, 4096, 132).grid == 132
    src = render_source(genome(cluster_m=2), "bfloat16")
    assert "__cluster_dims__(CLUSTER_M, 1, 1)" in src and defines(src)["B_SLICE"] == 32 * 128
    assert defines(render_source(genome(), "bfloat16"))["CLUSTER_M"] == 1


def test_a_persistent_grid_has_one_block_per_sm_at_most():
    lp = template().render(genome(persistent="persistent")).launch
    assert wgmma_launch.plan(lp, 4096, 4096, 4096, 132).grid == 132
    assert wgmma_launch.plan(lp, 128, 8192, 8192, 132).grid == 32  # 1 x 32 tiles of 128 x 256
    assert template().extra_bytes(None, None, {"m": 4095, "n": 4097, "k": 1023}) > 0


# ---- split-K ----------------------------------------------------------------------------------------

def test_a_genome_saved_before_split_k_loads_with_one_slice_and_renders_the_same_kernel():
    space = template().gene_space()
    old = {group: {k: v for k, v in genes.items() if k != "split_k"} for group, genes in SEEDS[2].items()}
    assert "split_k" not in old["parallel_config"]
    g = space.from_json(old)
    assert g["parallel_config"]["split_k"] == 1 and g == space.from_json(SEEDS[2])
    src = render_source(g, "bfloat16")
    assert defines(src)["SPLIT_K"] == 1 and "int *__restrict__ sems" not in " ".join(kernel_params(src))


def test_split_k_multiplies_the_work_units_and_sizes_the_workspace():
    t = template()
    lp = t.render(genome(block_m=64, block_n=128, consumers=1, reg_split="none", split_k=4)).launch
    assert lp["split_k"] == 4
    p = wgmma_launch.plan(lp, 64, 8192, 8192, 132)
    assert (p.tiles, p.units, p.grid) == (64, 256, 132)  # 64 tiles of 64 x 128 fill 132 SMs only split
    assert p.workspace == 4 * 64 * 4 * 64 * 128 and p.counters == 64
    one = wgmma_launch.plan(t.render(genome(block_m=64, block_n=128, consumers=1, reg_split="none")).launch,
                            64, 8192, 8192, 132)
    assert (one.units, one.grid, one.workspace, one.counters) == (64, 64, 0, 0)
    grid = t.render(genome(persistent="grid", split_k=2, cluster_m=2)).launch  # 128 x 256 tiles, two consumers
    q = wgmma_launch.plan(grid, 3 * 128 + 1, 512, 1024, 132)
    assert q.tiles == 8 and q.units == 16 and q.grid == 16 and q.counters == 8 * 2
    assert q.workspace == 4 * 8 * 2 * 128 * 256
    assert t.extra_bytes(None, None, {"m": 64, "n": 8192, "k": 8192}) == 0
    assert wgmma_launch.extra_bytes(lp, 64, 8192, 8192) == p.workspace + 4 * p.counters


def test_the_workspace_holds_one_partial_of_every_consumer_thread_per_tile_and_slice():
    for g in random_genomes(200, seed=5):
        d = derived(g)
        lp = template().render(g).launch
        ws, counters = wgmma_launch.split_workspace(lp, 1000, 3000)
        tiles = -(-1000 // (d["bm"] * d["cluster_m"])) * d["cluster_m"] * -(-3000 // d["bn"])
        acc_f = d["mi"] * d["bn"] // 2  # the kernel's ACC_F: a slot is 128 threads x ACC_F floats
        assert acc_f % 4 == 0  # whole 16-byte chunks
        if d["split_k"] == 1:
            assert (ws, counters) == (0, 0)
        else:
            assert ws == 4 * tiles * d["consumers"] * d["split_k"] * 128 * acc_f and counters == tiles * d["consumers"]


def test_split_k_keeps_the_shared_memory_of_its_tile():
    assert derived(genome(split_k=8))["smem"] == derived(genome())["smem"]


# ---- the arch option -------------------------------------------------------------------------------

def test_the_kernel_names_sm_90a_and_replaces_the_device_arch_option():
    assert arch_options("sm_90", ("-std=c++17",)) == ["--gpu-architecture=sm_90", "-std=c++17"]
    assert arch_options("sm_90", ("-std=c++17", "--gpu-architecture=sm_90a")) == ["-std=c++17", "--gpu-architecture=sm_90a"]
    with pytest.raises(CompileError, match="sm_90a, which this sm_80 device cannot run"):
        arch_options("sm_80", ("--gpu-architecture=sm_90a",))


# ---- compiled where nvcc is installed ------------------------------------------------------------

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_seed_and_random_sources_compile_for_sm_90a_without_spills(tmp_path):
    space = template().gene_space()
    split = [space.canonical(genome(split_k=8, reg_split="none", inflight=0)),  # 168 registers, 128 accumulators
             space.canonical(genome(block_m=64, block_n=128, consumers=1, split_k=4, epilogue="tma", stages=4))]
    genomes = space.seed_genomes() + split + random_genomes(3, seed=11)
    for i, g in enumerate(genomes):
        dtype = "float16" if i == len(genomes) - 1 else "bfloat16"
        path = tmp_path / f"k{i}.cu"
        path.write_text(render_source(g, dtype))
        res = subprocess.run(["nvcc", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v",
                              "-o", str(tmp_path / f"k{i}.cubin"), str(path)], capture_output=True, text=True, timeout=120)
        log = res.stdout + res.stderr
        assert res.returncode == 0, log[-3000:]
        assert "0 bytes spill stores" in log and "warning" not in log.lower(), log[-3000:]
        if defines(path.read_text())["REG_SPLIT"]:
            assert f"Used {_entry_registers(defines(path.read_text())['THREADS'])} registers" in log


def test_an_operand_tma_can_map_is_used_in_place_and_another_is_staged_with_padded_rows():
    import torch

    aligned = torch.randn(16, 64).to(torch.bfloat16)
    x, pitch, copy = wgmma_launch.operand(aligned, 16, 64)
    assert x is aligned and pitch == 128 and copy is None
    odd = torch.randn(16, 1023).to(torch.bfloat16)
    x, pitch, copy = wgmma_launch.operand(odd, 16, 1023)
    assert x.shape == (16, 1024) and pitch == 2048 and copy is not None
    copy()
    assert torch.equal(x[:, :1023], odd)
    odd.add_(1.0)  # a later launch copies the inputs as they are then
    copy()
    assert torch.equal(x[:, :1023], odd)
