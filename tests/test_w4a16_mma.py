"""The W4A16 CUDA template's tensor-core path: the repacked layout, the genes it reads, its source.

The kernel itself runs on the GPU only (benchmarks/reports/DECODE_H200.md); here the layout the kernel's
fragments assume is checked value by value, in numpy and in torch."""
import numpy as np
import pytest

from core.genome import GeneSpace
from core.workloads.w4a16 import cuda, cuda_genes, cuda_mma, cuda_ring
from core.workloads.rmsnorm_w4a16 import cuda as fused_cuda


def _qweight(g: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    nib = rng.integers(0, 16, size=(g, 16, n, 8), dtype=np.int64)
    return (nib << (4 * np.arange(8))).sum(-1).astype(np.uint32).view(np.int32)


def _values(qweight: np.ndarray) -> np.ndarray:
    """(K, N) 4-bit values of GPTQ words: value b of word [g, i, c] is k = 128 g + 8 i + b."""
    g, _, n = qweight.shape
    words = qweight.view(np.uint32).reshape(16 * g, 1, n)
    return ((words >> (4 * np.arange(8, dtype=np.uint32)).reshape(1, 8, 1)) & 15).reshape(128 * g, n)


@pytest.mark.parametrize("n, cols", [(67, 32), (64, 64), (130, 128)])
def test_every_value_is_where_the_fragments_read_it(n, cols):
    qweight = _qweight(2, n)
    packed = cuda_mma.repack(qweight, cols)
    npad = -(-n // cols) * cols
    assert packed.shape == (npad // 32, 8, 32, 4) and packed.dtype == np.int32
    q = _values(qweight)
    words = packed.view(np.uint32)
    for nb in range(npad // 32):
        for ks in range(8):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for j in range(4):
                    col = 32 * nb + 8 * j + g
                    for s in range(2):
                        for h in range(2):
                            for i in range(2):
                                got = (int(words[nb, ks, lane, j]) >> (4 * (2 * s + h) + 16 * i)) & 15
                                k = 32 * ks + 8 * t + 4 * s + 2 * h + i
                                assert got == (q[k, col] if col < n else 0), (nb, ks, lane, j, s, h, i)


def test_torch_and_numpy_repack_alike():
    torch = pytest.importorskip("torch")
    qweight = _qweight(3, 96, seed=1)
    assert np.array_equal(cuda_mma.repack(torch.from_numpy(qweight), 96).numpy(), cuda_mma.repack(qweight, 96))


def _space(dtype="bfloat16"):
    groups = cuda.gene_groups(dtype)
    return GeneSpace(groups, (cuda.fits,), cuda.seeds(dtype), canonicalisers=(cuda_mma.canonical,))


def test_the_tensor_core_path_is_for_16_bit_activations_only():
    def math(dtype):
        return next(gene.options for gene in cuda.gene_groups(dtype)["instruction_sequence"] if gene.name == "math")

    assert math("float16") == math("bfloat16") == ("fma", "mma", "mma_w") and math("float32") == ("fma",)
    assert all(s["instruction_sequence"]["math"] == "fma" for s in cuda.seeds("float32"))


def test_mma_genomes_are_canonical_and_render_an_mma_kernel():
    import random

    space, rng = _space(), random.Random(3)
    problem = {"dtype": "bfloat16", "zero_points": True, "m": 16, "n": 8192, "k_groups": 224}
    seen = 0
    for _ in range(300):
        g = space.random(rng)
        if g["instruction_sequence"]["math"] != "mma":
            continue
        seen += 1
        assert g["parallel_config"]["rows_per_block"] == 1 and g["instruction_sequence"]["dequant"] == "half2"
        assert g["parallel_config"]["ksplit"] <= g["parallel_config"]["threads"] // 32
        assert cuda_mma.fits(g) is None
        src = cuda.render_source(g, problem)
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src and "zp[" in src
        assert ("mul2(dq(" in src) == (g["register_allocation"]["regs"]["scale"] == "weight")
        lp = cuda_mma.launch(g)
        kb = g["parallel_config"]["kblocks"]
        assert cuda.grid(lp, 16, 8192) == (-(-8192 // lp["cols"]), 1, kb)
        floats, ints = cuda_mma.workspace(lp, 33, 8192)  # 3 row tiles
        assert (floats, ints) == ((0, 0) if kb == 1 else (kb * 3 * 8192 // lp["cols"] * lp["cols"] * 16, 3 * 8192 // lp["cols"]))
        assert ("#define KB " + str(kb)) in src
    assert seen > 20


def test_the_gemv_path_has_one_block_along_k():
    import random

    space, rng = _space(), random.Random(4)
    fma = [g for g in (space.random(rng) for _ in range(200)) if g["instruction_sequence"]["math"] == "fma"]
    assert fma and all(g["parallel_config"]["kblocks"] == 1 for g in fma)


def test_the_fused_template_renders_the_norm_on_the_tensor_core_path():
    g = [s for s in _space().seed_genomes() if s["instruction_sequence"]["math"] == "mma"][-1]
    d = g.to_dict()
    problem = {"dtype": "float16", "zero_points": False, "m": 4, "n": 10240, "k_groups": 64, "eps": 1e-5}
    for norm in ("load", "store"):
        d["instruction_sequence"] = {**d["instruction_sequence"], "norm": norm}
        src = cuda.render_source(g, problem, norm=norm)
        assert "abebot_rmsnorm_w4a16" in src and "block_inv(" in src and "gm + 8 * t" in src
        assert ("inv[g + 8]" in src) == (norm == "load") and ("* inv[row - m0]" in src) == (norm == "store")
        assert "f16.f16.f32" in src
    assert fused_cuda._shared_bytes(g) >= 4 * 17


def test_registers_and_shared_memory_bound_the_tiles():
    from core.genome import Genome

    seed = Genome(cuda_genes.MMA_SEEDS[1])
    assert cuda_mma.fits(seed) is None
    big = Genome.from_json({**seed.to_dict(),
                           "memory_pattern": {"vec": 4, "w_load": "", "x_load": "", "layout": "gptq", "stages": 0},
                           "register_allocation": {"batch": 8, "pipeline": "next", "regs": {"scale": "word", "unroll": 1},
                                                   "min_blocks": 1}})
    assert "registers" in cuda_mma.fits(big)
    # the same words through a cp.async ring: no registers for them, but 8 stages x 8 steps x 4 uint4 a lane
    ring = big.replace("memory_pattern", "stages", 8).replace("register_allocation", "pipeline", "off")
    assert cuda_ring.ring_bytes(ring) == 8 * 8 * (4 + 2) * 256 * 16 and "ring" in cuda_mma.fits(ring)
    wide = Genome.from_json({**seed.to_dict(), "parallel_config": {"threads": 1024, "ksplit": 32, "rows_per_block": 1, "kblocks": 1}})
    assert cuda_mma.shared_bytes(wide) == 31 * 4 * 512 and "shared memory" in cuda_mma.fits(wide)


# -- the weights-as-A path (cuda_mma_w) -------------------------------------------------------------

@pytest.mark.parametrize("n, cols", [(67, 32), (64, 64), (130, 128)])
def test_weights_as_a_every_value_and_scale_is_where_the_fragments_read_it(n, cols):
    from core.workloads.w4a16 import cuda_mma_w

    qweight = _qweight(2, n)
    scales = np.random.default_rng(1).standard_normal((2, n)).astype(np.float32)
    packed, sc = cuda_mma_w.repack(qweight, scales, cols)
    npad = -(-n // cols) * cols
    assert packed.shape == (npad // 32, 8, 32, 4) and packed.dtype == np.int32 and sc.shape == (npad // 32, 2, 8, 4)
    q, words = _values(qweight), packed.view(np.uint32)
    for cb in range(npad // 32):
        for ks in range(8):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                for e in range(2):
                    for s in range(2):
                        w = int(words[cb, ks, lane, 2 * e + s])
                        for r in range(4):  # the A fragment's registers: columns g, g + 8 by K pairs 2t, 2t + 8
                            col = 32 * cb + 16 * e + g + 8 * (r & 1)
                            for i in range(2):
                                k = 32 * ks + 8 * t + 4 * s + 2 * (r >> 1) + i
                                assert (w >> (4 * r + 16 * i)) & 15 == (q[k, col] if col < n else 0), (cb, ks, lane, e, s, r, i)
        for grp in range(2):
            for g in range(8):
                for e in range(2):
                    for h in range(2):
                        col = 32 * cb + 16 * e + 8 * h + g
                        assert sc[cb, grp, g, 2 * e + h] == (scales[grp, col] if col < n else 0)


def test_weights_as_a_fragments_multiply_like_the_reference():
    """The kernel's index arithmetic replayed in numpy: A fragments from the repacked words, B
    fragments from x with K permuted inside each step of 32, the mma's D fragment back to y, the
    group's scales on the sums. It must equal x . dequant(W)."""
    from core.workloads.w4a16 import cuda_mma_w

    g_groups, n, m = 2, 64, 5
    qweight = _qweight(g_groups, n, seed=2)
    rng = np.random.default_rng(3)
    scales, x = rng.standard_normal((g_groups, n)), rng.standard_normal((m, 128 * g_groups))
    packed, sc = cuda_mma_w.repack(qweight, scales, 32)
    words = packed.view(np.uint32)
    y = np.zeros((m, n))
    for cb in range(n // 32):
        for e in range(2):
            for grp in range(g_groups):
                part = np.zeros((16, 8))  # D: 16 columns by 8 rows of x
                for ks in range(4 * grp, 4 * grp + 4):
                    for s in range(2):
                        a, b = np.zeros((16, 16)), np.zeros((16, 8))
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            w = int(words[cb, ks, lane, 2 * e + s])
                            for r in range(4):
                                for i in range(2):  # register r, half i: A[g + 8 (r & 1)][2t + 8 (r >> 1) + i]
                                    a[g + 8 * (r & 1), 2 * t + 8 * (r >> 1) + i] = ((w >> (4 * r + 16 * i)) & 15) - 8
                            for h in range(2):  # b_h: B[2t + 8h + i][g] = x[g][32 ks + 8 t + 4 s + 2 h + i]
                                for i in range(2):
                                    if g < m:
                                        b[2 * t + 8 * h + i, g] = x[g, 32 * ks + 8 * t + 4 * s + 2 * h + i]
                        part += a @ b
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    for r in range(4):  # d_r: D[g + 8 (r >> 1)][2t + (r & 1)]
                        row, col = 2 * t + (r & 1), 32 * cb + 16 * e + g + 8 * (r >> 1)
                        if row < m:
                            y[row, col] += part[g + 8 * (r >> 1), 2 * t + (r & 1)] * sc[cb, grp, g, 2 * e + (r >> 1)]
    w_ref = (_values(qweight).astype(np.float64) - 8) * np.repeat(scales, 128, axis=0)
    assert np.allclose(y, x @ w_ref)


def test_weights_as_a_genomes_are_canonical_fit_and_render():
    import random

    from core.workloads.w4a16 import cuda_mma_w

    space = GeneSpace(cuda.gene_groups("bfloat16"), (cuda.fits,), cuda.seeds("bfloat16"),
                      canonicalisers=cuda_genes.CANONICALISERS)
    rng, seen, bulks, stages_3 = random.Random(5), 0, 0, False
    for _ in range(400):
        g = space.random(rng)
        if not cuda_mma_w.applies(g):
            continue
        seen += 1
        assert g["register_allocation"]["regs"]["scale"] == "word"
        assert g["register_allocation"]["pipeline"] == "off" or (g["register_allocation"]["batch"] > 2 and not g["memory_pattern"]["stages"])
        assert cuda_mma_w.x_ahead(g) == (min(2, g["register_allocation"]["batch"]) if g["register_allocation"]["pipeline"] == "next"
                                         else 1 if g["memory_pattern"]["stages"] else g["register_allocation"]["batch"])
        assert g["memory_pattern"]["stages"] in ((2, 3, 4, 6, 8) if cuda_mma_w.bulk(g) else (0, 2, 4, 8)) and cuda_mma_w.fits(g) is None
        stages_3 |= cuda_mma_w.bulk(g) and g["memory_pattern"]["stages"] in (3, 6)
        if g["memory_pattern"]["stages"]:
            assert g["register_allocation"]["batch"] in ((1, 2, 4) if cuda_mma_w.bulk(g) else (1,))
            assert g["memory_pattern"]["w_load"] == ""
        else:
            assert g["memory_pattern"]["copy"] == "lanes"
        bulks += cuda_mma_w.bulk(g)
        for m, rows in ((1, 8), (16, 16)):
            problem = {"dtype": "bfloat16", "zero_points": m == 16, "m": m, "n": 8192, "k_groups": 224}
            src = cuda.render_source(g, problem)
            assert f"#define ROWS {rows}" in src and "const uint2 *__restrict__ sp" in src
            assert f"#define DX {cuda_mma_w.x_ahead(g)}" in src
            bulk = cuda_mma_w.bulk(g)
            assert ("zp[" in src) == (m == 16) and ("extern __shared__ uint4 ring[]" in src) == (g["memory_pattern"]["stages"] and not bulk)
            assert ("cp.async.bulk.shared" in src) == bulk and ("mbarrier.try_wait.parity" in src) == bulk
            lp = cuda_mma_w.launch(g, problem)
            assert cuda.grid(lp, 33, 8192) == (8192 // lp["cols"], -(-33 // rows), g["parallel_config"]["kblocks"])
            assert lp["dynamic_shared_bytes"] == cuda_mma_w.ring_bytes(g, rows)
    assert seen > 20 and bulks > 3 and stages_3
    # the fused template offers the weights-as-A path too (the norm at load or at store:
    # tests/test_rmsnorm_w4a16.py), and bulk copies only where the device has them
    from types import SimpleNamespace

    for arch, copies in (("sm_90", ("lanes", "bulk")), ("sm_80", ("lanes",))):
        fused = fused_cuda.CudaRmsNormW4A16Template.gene_space(
            SimpleNamespace(problem={"dtype": "bfloat16"}, device=SimpleNamespace(arch=arch)))
        assert cuda_mma_w.MATH in fused.gene("instruction_sequence", "math").options
        assert fused.gene("memory_pattern", "copy").options == copies


def test_bulk_copies_fill_slots_of_x_rows_and_the_blocks_words():
    """The bulk ring: ``stages`` slots per warp along K, each a chunk of 4 / batch steps: its x rows
    (apart by 64 bytes a step, plus 64 when that is a multiple of 128: rows g and g + 1 of a quarter
    warp in different banks) and every column block's 512 bytes of words a step; ``copy`` means
    nothing without the ring, or on the other paths."""
    from core.workloads.w4a16 import cuda_mma_w, cuda_mma_w_bulk

    space = GeneSpace(cuda.gene_groups("bfloat16"), (cuda.fits,), cuda.seeds("bfloat16"),
                      canonicalisers=cuda_genes.CANONICALISERS)
    d = space.from_json(cuda_genes.MMA_SEEDS[-2]).to_dict()  # 2 warps along K by 4 along N, 32 columns a warp
    assert cuda_mma_w.bulk(space.seed_genomes()[-1])
    d["memory_pattern"].update(stages=4, copy="bulk")
    d["register_allocation"].update(batch=1)
    g = space.canonical(space.from_json(d))
    assert cuda_mma_w.bulk(g) and space.validate(g) is None and cuda_mma_w.slot_steps(g) == 4
    assert cuda_mma_w.ring_bytes(g, 16) == 2 * 4 * (16 * 320 + 4 * 1 * 2048)
    assert cuda_mma_w.ring_bytes(g, 8) == 2 * 4 * (8 * 320 + 4 * 2048)
    assert [cuda_mma_w_bulk.x_row(s) % 128 for s in (1, 2, 4)] == [64, 64, 64]
    src = cuda.render_source(g, {"dtype": "bfloat16", "zero_points": False, "m": 16, "n": 8192, "k_groups": 224})
    assert f"#define SLOT {16 * 320 + 4 * 2048}" in src and "#error" in src and "__CUDA_ARCH__ < 900" in src
    assert cuda_mma_w.launch(g, {"m": 16})["dynamic_shared_bytes"] == cuda_mma_w.ring_bytes(g, 16)
    # a group in 2 or 4 slots (batch); 8 is read as 4
    for batch, steps in ((2, 2), (4, 1), (8, 1)):
        h = space.canonical(space.from_json({**d, "register_allocation": {**d["register_allocation"], "batch": batch}}))
        assert cuda_mma_w.slot_steps(h) == steps and cuda_mma_w.registers(h) == cuda_mma_w.registers(g)
        assert cuda_mma_w.ring_bytes(h, 16) == 2 * 4 * (16 * (64 * steps + 64 * (steps % 2 == 0)) + 4 * steps * 512)
        assert f"#define SG {steps}" in cuda.render_source(h, {"dtype": "bfloat16", "zero_points": False, "m": 16,
                                                               "n": 8192, "k_groups": 224})
    # eight groups in flight for four warps along K do not fit the ring's limit
    with pytest.raises(ValueError, match="ring of 294912 B"):
        space.from_json({**d, "memory_pattern": {**d["memory_pattern"], "stages": 8},
                         "parallel_config": {**d["parallel_config"], "ksplit": 4}})
    h = space.canonical(space.from_json({**d, "memory_pattern": {**d["memory_pattern"], "stages": 0}}))
    assert h["memory_pattern"]["copy"] == "lanes"
    other = space.canonical(space.from_json({**d, "instruction_sequence": {**d["instruction_sequence"], "math": "mma"}}))
    assert other["memory_pattern"]["copy"] == "lanes"
    # genomes saved before the gene existed load with every lane's copies
    old = {grp: {k: v for k, v in genes.items() if k != "copy"} for grp, genes in d.items()}
    assert space.from_json(old)["memory_pattern"]["copy"] == "lanes"


def test_static_shared_memory_counts_the_split_k_flag_and_the_bulk_barriers():
    """ptxas refuses a byte of static shared memory over 48 KB: a 48 KB reduction fits with one block
    along K, not with the split-K flag of several (compile errors of calls 25 and 26, now refused first)."""
    from core.genome import Genome
    from core.workloads.w4a16 import cuda_mma_w

    d = Genome.from_json(cuda_genes.MMA_SEEDS[-1]).to_dict()
    d["parallel_config"].update(threads=512, ksplit=4, kblocks=1)
    d["memory_pattern"].update(vec=2, stages=2, copy="lanes")
    d["register_allocation"].update(min_blocks=1)
    assert cuda_mma_w.shared_bytes(Genome(d)) == 48 * 1024 and cuda_mma_w.fits(Genome(d)) is None
    d["parallel_config"]["kblocks"] = 2
    assert "49156 B of static shared memory" in cuda_mma_w.fits(Genome(d))
    d["memory_pattern"]["copy"] = "bulk"
    assert cuda_mma_w.shared_bytes(Genome(d)) == 48 * 1024 + 4 + 16 * 4 * 2
    old = Genome.from_json({**cuda_genes.MMA_SEEDS[0], "parallel_config": {"threads": 256, "ksplit": 4, "rows_per_block": 1, "kblocks": 2},
                            "memory_pattern": {**cuda_genes.MMA_SEEDS[0]["memory_pattern"], "vec": 4}})
    assert cuda_mma.shared_bytes(old) == 3 * 2 * cuda_mma.shape_of(old)["nt"] * 512 + 4


def test_bulk_copies_are_offered_on_sm_90_only():
    """An A100 (sm_80) gets no bulk-copy gene value and no seed using it: its kernels would stop at
    the source's #error, one wasted compile each; an unknown arch keeps them."""
    import dataclasses

    from core.workloads import get_workload
    from tests.helpers import SIMULATED_GPU

    for arch, offered in (("sm_90", True), ("sm_90a", True), ("sm_100", True), ("sm_80", False), ("sm_89", False), ("", True)):
        tpl = get_workload("w4a16").template("cuda", {"m": 16, "n": 8192, "k_groups": 224, "dtype": "bfloat16",
                                                      "zero_points": False}, dataclasses.replace(SIMULATED_GPU, arch=arch))
        space = tpl.gene_space()
        assert ("bulk" in space.gene("memory_pattern", "copy").options) == offered, arch
        assert any(s["memory_pattern"]["copy"] == "bulk" for s in space.seed_genomes()) == offered, arch
