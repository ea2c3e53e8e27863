"""The wgmma GEMM's address arithmetic, emulated in NumPy against the hardware's documented layouts.

No GPU here, so this follows one tile through the kernel's own formulas (kernels/wgmma.cu, with the
rendered #defines): TMA boxes written into shared memory with the swizzle (zeros past the edges),
wgmma operands read back through the kernel's descriptors (start address, LBO, SBO, mode) by the
canonical layouts CUTLASS documents for sm90 GMMA (cute/atom/mma_traits_sm90_gmma.hpp:
K-major ((8,m),(T,2k)):((S/16 T,SBO),(1,T)), MN-major ((S/16,n),(8,k)):((1,LBO),(S/16,SBO)) in
16-byte units, the swizzle applied to the byte address), the accumulator fragment of
wgmma.m64nNk16 (PTX ISA), and both epilogues. The product must equal A @ B on that tile. It
checks that the kernel's formulas agree with those layouts; the H200 run
(benchmarks/tools/wgmma_gpu_check.py) checks that the layouts are the hardware's.
"""
from __future__ import annotations

import numpy as np
import pytest

from core.genome import Genome
from core.workloads.gemm.wgmma import SEEDS
from core.workloads.gemm.wgmma_source import derived, violation

BITS = {128: 3, 64: 2, 32: 1}


def swizzle(addr: np.ndarray, s: int) -> np.ndarray:
    """Swizzle<B,4,3> on byte addresses: bits [7, 7+B) XOR-ed into bits [4, 4+B)."""
    return addr ^ (((addr >> 7) & ((1 << BITS[s]) - 1)) << 4)


class Smem:
    def __init__(self, nbytes: int):
        self.v = np.full(nbytes // 2, np.nan)  # one slot per 16-bit element; NaN = never written

    def tma_load(self, dst: int, g: np.ndarray, c0: int, c1: int, rows: int, cols: int, s: int) -> None:
        r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        gr, gc = c1 + r, c0 + c
        inside = (gr < g.shape[0]) & (gc < g.shape[1])
        vals = np.where(inside, g[np.minimum(gr, g.shape[0] - 1), np.minimum(gc, g.shape[1] - 1)], 0.0)
        self.v[swizzle(dst + r * s + c * 2, s) // 2] = vals

    def a_operand(self, start: int, sbo: int, s: int) -> np.ndarray:
        """64 x 16, K-major: row i at (i%8)*S + (i//8)*SBO, k j at (j%8)*2 + (j//8)*16."""
        i, j = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
        return self.v[swizzle(start + (i % 8) * s + (i // 8) * sbo + (j % 8) * 2 + (j // 8) * 16, s) // 2]

    def b_operand(self, start: int, lbo: int, sbo: int, s: int, n: int) -> np.ndarray:
        """16 x N, MN-major: 16-byte chunk c of N at (c % (S/16))*16 + (c // (S/16))*LBO, k at (k%8)*S + (k//8)*SBO."""
        k, col = np.meshgrid(np.arange(16), np.arange(n), indexing="ij")
        w, chunk = s // 16, col // 8
        return self.v[swizzle(start + (chunk % w) * 16 + (col % 8) * 2 + (chunk // w) * lbo + (k % 8) * s + (k // 8) * sbo, s) // 2]


def fragment(bn: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) in the m64 x bn tile of accumulator v of thread t (wgmma.m64nNk16 D fragment)."""
    t, v = np.meshgrid(np.arange(128), np.arange(bn // 2), indexing="ij")
    warp, lane, j, q = t // 32, t % 32, v // 4, v % 4
    return 16 * warp + lane // 4 + 8 * (q // 2), 8 * j + 2 * (lane % 4) + q % 2


def run_tile(g: Genome, a: np.ndarray, b: np.ndarray, m0: int, n0: int, epilogue: str) -> np.ndarray:
    """C's BM x BN tile at (m0, n0) as the kernel computes and stores it (NaN where it writes nothing)."""
    d = derived(g)
    bm, bn, bk, s, swe, wg_m = d["bm"], d["bn"], d["bk"], d["swizzle"], d["sw_e"], d["wg_m"]
    stages, a_stage_b, b_stage_b = d["stages"], d["a_stage"], d["b_stage"]
    m, k = a.shape
    n = b.shape[1]
    sa, sb = 0, stages * a_stage_b
    sc = sb + stages * b_stage_b
    smem = Smem(sc + d["c_bytes"] + 1024)
    kt_count = -(-k // bk)
    acc = np.zeros((d["consumers"], d["mi"], 128, bn // 2))
    rows, cols = fragment(bn)
    for kt in range(kt_count):
        st = kt % stages
        for j in range(bk // swe):  # the producer's loads ({{loads}} in wgmma_source._LOADS)
            smem.tma_load(sa + st * a_stage_b + j * d["a_box"], a, kt * bk + j * swe, m0, bm, swe, s)
        rows_b = bk // d["cluster_m"]  # in a cluster each CTA multicasts its slice of B's rows to all
        for j in range(bn // swe):
            for rank in range(d["cluster_m"]):
                smem.tma_load(sb + st * b_stage_b + j * d["b_box"] + rank * rows_b * s, b, n0 + j * swe,
                              kt * bk + rank * rows_b, rows_b, swe, s)
        for wg in range(d["consumers"]):
            a_stage, b_stage = sa + st * a_stage_b + wg * wg_m * s, sb + st * b_stage_b
            for kk in range(bk // 16):
                a_k = a_stage + ((kk * 16) // swe) * d["a_box"] + ((kk * 16) % swe) * 2
                bop = smem.b_operand(b_stage + kk * 16 * s, d["b_box"], 8 * s, s, bn)
                for mi in range(d["mi"]):
                    prod = smem.a_operand(a_k + mi * 64 * s, 8 * s, s) @ bop  # 64 x bn
                    acc[wg, mi] += prod[rows, cols]
    out = np.full((bm, bn), np.nan)
    for wg in range(d["consumers"]):
        for mi in range(d["mi"]):
            r = wg * wg_m + mi * 64 + rows
            if epilogue == "direct":
                keep = (m0 + r < m) & (n0 + cols < n)
                out[r[keep], cols[keep]] = acc[wg, mi][keep]
            else:  # swizzled panels of WG_M rows x 64 columns, then a TMA store of each (clipped at the edges)
                panel = Smem(wg_m * bn * 2)
                rr = mi * 64 + rows
                addr = (cols // 64) * (wg_m * 128) + rr * 128 + (((cols % 64) // 8) ^ (rr % 8)) * 16 + (cols % 8) * 2
                panel.v[addr // 2] = acc[wg, mi]
                for p in range(bn // 64):
                    br, bc = np.meshgrid(np.arange(wg_m), np.arange(64), indexing="ij")
                    vals = panel.v[swizzle(p * wg_m * 128 + br * 128 + bc * 2, 128) // 2]
                    gr, gc = m0 + wg * wg_m + br, n0 + p * 64 + bc
                    keep = (gr < m) & (gc < n) & (br >= mi * 64) & (br < mi * 64 + 64)
                    out[(gr - m0)[keep], (gc - n0)[keep]] = vals[keep]
    return out


def genome(**changes) -> Genome:
    raw = {group: dict(genes) for group, genes in SEEDS[0].items()}
    for name, value in changes.items():
        group = next(g for g, genes in raw.items() if name in genes)
        raw[group][name] = value
    return Genome(raw)


CASES = [
    dict(),  # 128 x 256 x 64, two consumers, 128 B swizzle
    dict(block_n=128, block_k=128, stages=2, epilogue="tma"),
    dict(block_m=64, block_n=128, consumers=1, swizzle=64, block_k=32, epilogue="tma"),
    dict(block_m=128, block_n=128, consumers=1, swizzle=32, block_k=64, stages=3),  # two m64 per consumer
    dict(block_m=256, block_n=64, consumers=2, swizzle=64, block_k=128, stages=2, epilogue="tma"),
    dict(cluster_m=2),
    dict(block_n=80, swizzle=32, block_k=64, consumers=1, block_m=64, stages=4),
    dict(block_n=192, stages=3, inflight=0),
    dict(block_n=96, swizzle=64, block_k=32, stages=6),
    dict(block_m=64, block_n=64, consumers=1, swizzle=32, block_k=32, stages=4, cluster_m=2),
]


@pytest.mark.parametrize("changes", CASES, ids=[",".join(f"{k}={v}" for k, v in c.items()) or "seed" for c in CASES])
def test_one_tile_through_the_kernels_formulas_is_a_times_b(changes):
    g = genome(**changes)
    assert violation(g, "bfloat16") is None
    d = derived(g)
    rng = np.random.default_rng(0)
    m, n, k = d["bm"] + 37, d["bn"] + 29, 2 * d["bk"] + 13  # the second tile row and column are ragged
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    epilogue = g["memory_pattern"]["epilogue"]
    for m0, n0 in ((0, 0), (d["bm"], d["bn"])):
        got = run_tile(g, a, b, m0, n0, epilogue)
        want = (a @ b)[m0:m0 + d["bm"], n0:n0 + d["bn"]]
        inside = got[:want.shape[0], :want.shape[1]]
        np.testing.assert_allclose(inside, want, rtol=1e-9, atol=1e-9)
        assert np.isnan(got[want.shape[0]:, :]).all() and np.isnan(got[:, want.shape[1]:]).all()  # nothing past C


def test_the_emulation_notices_a_wrong_stride_byte_offset():
    g = genome(block_n=128)
    d = derived(g)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((128, 64)), rng.standard_normal((64, 128))
    smem = Smem(1 << 17)
    for j in range(d["bn"] // d["sw_e"]):
        smem.tma_load(j * d["b_box"], b, j * d["sw_e"], 0, d["bk"], d["sw_e"], 128)
    right = smem.b_operand(0, d["b_box"], 8 * 128, 128, 128)
    swapped = smem.b_operand(0, 8 * 128, d["b_box"], 128, 128)  # LBO and SBO exchanged
    np.testing.assert_allclose(right, b[:16, :128])
    assert not np.allclose(swapped, b[:16, :128])
