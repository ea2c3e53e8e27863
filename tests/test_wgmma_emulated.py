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
    return store_tile(g, accumulate(g, a, b, m0, n0, range(-(-a.shape[1] // derived(g)["bk"]))), m0, n0,
                      a.shape[0], b.shape[1], epilogue)


def accumulate(g: Genome, a: np.ndarray, b: np.ndarray, m0: int, n0: int, kts: range) -> np.ndarray:
    """The consumers' accumulators (consumer, mi, thread, register) after k-tiles ``kts`` of the tile
    at (m0, n0): the producer's TMA copies into the ring, the wgmma operands read back through the
    kernel's descriptors (zeros when ``kts`` is empty: a split-K slice without k-tiles)."""
    d = derived(g)
    bm, bn, bk, s, swe, wg_m = d["bm"], d["bn"], d["bk"], d["swizzle"], d["sw_e"], d["wg_m"]
    stages, a_stage_b, b_stage_b = d["stages"], d["a_stage"], d["b_stage"]
    sa, sb = 0, stages * a_stage_b
    sc = sb + stages * b_stage_b
    smem = Smem(sc + d["c_bytes"] + 1024)
    acc = np.zeros((d["consumers"], d["mi"], 128, bn // 2))
    rows, cols = fragment(bn)
    for kt in kts:
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
    return acc


def store_tile(g: Genome, acc: np.ndarray, m0: int, n0: int, m: int, n: int, epilogue: str) -> np.ndarray:
    """The tile as the epilogue (``direct`` or ``tma``) stores accumulators ``acc`` into an M x N C."""
    d = derived(g)
    bm, bn, wg_m = d["bm"], d["bn"], d["wg_m"]
    rows, cols = fragment(bn)
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


# ---- split-K: slices of K, partials through the workspace, the last slice adds them ----------------

class SplitTile:
    """One tile's split-K protocol as kernels/wgmma_splitk.cuh runs it: each slice's consumer
    warpgroups store their fp32 partials into the workspace at the kernel's offsets, count on the
    tile's counter, and the warpgroup that counts last reads the partials back in slice order."""

    def __init__(self, g: Genome, tile_slot: int, tiles: int):
        d = derived(g)
        self.g, self.d, self.sk, self.tile_slot = g, d, d["split_k"], tile_slot
        self.acc_f = d["mi"] * d["bn"] // 2
        self.ws = np.full(tiles * d["consumers"] * self.sk * 128 * self.acc_f, np.nan, dtype=np.float32)
        self.sems = np.zeros(tiles * d["consumers"], dtype=np.int64)

    def offsets(self, slot: int, ks: int) -> np.ndarray:
        """floats of chunk c of thread t's partial: (thread, register) -> workspace index."""
        t, r = np.meshgrid(np.arange(128), np.arange(self.acc_f), indexing="ij")
        c = r // 4  # chunk c holds registers 4c..4c+3 of the flat acc[MI][BN/2]
        return (slot * self.sk + ks) * (128 * self.acc_f) + (c * 128 + t) * 4 + r % 4

    def finish(self, acc: np.ndarray, ks: int) -> np.ndarray | None:
        """Slice ``ks`` leaves its accumulators ``acc`` (consumer, mi, thread, register); the sum of
        every slice when it counted last (None otherwise)."""
        out = np.empty_like(acc, dtype=np.float32)
        last = []
        for wg in range(self.d["consumers"]):
            slot = self.tile_slot * self.d["consumers"] + wg
            flat = acc[wg].astype(np.float32).transpose(1, 0, 2).reshape(128, self.acc_f)  # thread, mi * BN/2 + j
            self.ws[self.offsets(slot, ks)] = flat
            before, self.sems[slot] = self.sems[slot], self.sems[slot] + 1
            last.append(before == self.sk - 1)
            if last[-1]:
                self.sems[slot] = 0
                total = self.ws[self.offsets(slot, 0)].copy()
                for s in range(1, self.sk):
                    total += self.ws[self.offsets(slot, s)]
                out[wg] = total.reshape(128, self.d["mi"], -1).transpose(1, 0, 2)
        assert len(set(last)) == 1  # the warpgroups of a CTA finish together in this emulation
        return out if last[0] else None


def slices(kt_count: int, sk: int) -> list[range]:
    """The k-tiles of each slice: [s * KT / SPLIT_K, (s + 1) * KT / SPLIT_K), as TILE_ORIGIN has them."""
    return [range(s * kt_count // sk, (s + 1) * kt_count // sk) for s in range(sk)]


def test_slices_cover_every_k_tile_once_and_differ_by_one_at_most():
    for kt_count in (1, 3, 8, 17, 448):
        for sk in (1, 2, 4, 8):
            parts = slices(kt_count, sk)
            assert [kt for r in parts for kt in r] == list(range(kt_count))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


SPLIT_CASES = [
    dict(split_k=2),
    dict(split_k=4, block_m=64, block_n=128, consumers=1, epilogue="tma", stages=4),
    dict(split_k=8, block_n=128, block_k=64, cluster_m=2),  # 3 k-tiles for 8 slices: 5 add zeros
    dict(split_k=4, block_m=256, block_n=64, consumers=2, swizzle=64, block_k=128, stages=2, epilogue="tma"),
]


@pytest.mark.parametrize("changes", SPLIT_CASES, ids=[",".join(f"{k}={v}" for k, v in c.items()) for c in SPLIT_CASES])
def test_split_k_partials_added_by_the_last_slice_give_a_times_b_in_any_finishing_order(changes):
    g = genome(**changes)
    assert violation(g, "bfloat16") is None
    d = derived(g)
    rng = np.random.default_rng(2)
    m, n, k = d["bm"] + 37, d["bn"] + 29, 2 * d["bk"] + 13
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    epilogue = g["memory_pattern"]["epilogue"]
    kt_count = -(-k // d["bk"])
    for m0, n0 in ((0, 0), (d["bm"], d["bn"])):
        tile_slot = (m0 // d["bm"]) * 2 + n0 // d["bn"]
        partials = [accumulate(g, a, b, m0, n0, r) for r in slices(kt_count, d["split_k"])]
        results = []
        for order in (range(d["split_k"]), reversed(range(d["split_k"])), rng.permutation(d["split_k"])):
            tile = SplitTile(g, tile_slot, 4)
            sums = [tile.finish(partials[ks], int(ks)) for ks in order]
            assert [s is not None for s in sums] == [False] * (d["split_k"] - 1) + [True]  # one adds, the last
            assert not tile.sems.any()  # the counters are back at zero for the next launch
            results.append(store_tile(g, sums[-1], m0, n0, m, n, epilogue))
        want = (a @ b)[m0:m0 + d["bm"], n0:n0 + d["bn"]]
        np.testing.assert_allclose(results[0][:want.shape[0], :want.shape[1]], want, rtol=1e-4, atol=1e-4)
        assert np.isnan(results[0][want.shape[0]:, :]).all() and np.isnan(results[0][:, want.shape[1]:]).all()
        for other in results[1:]:  # the same bits whichever slice finished last
            np.testing.assert_array_equal(other, results[0])


def test_the_workspace_slots_of_a_tile_do_not_overlap_and_fill_the_workspace():
    g = genome(split_k=4, block_m=256, block_n=64, consumers=2, swizzle=64, block_k=128, stages=2)
    tile = SplitTile(g, 0, 3)
    seen = np.concatenate([tile.offsets(slot, ks).ravel() for slot in range(3 * 2) for ks in range(4)])
    assert len(np.unique(seen)) == len(seen) == len(tile.ws)
