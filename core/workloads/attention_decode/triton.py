"""Triton decode attention template: flash-decoding in two kernels.

``abebot_attention_decode`` takes one split of the context of one (sequence, KV head) and the query
rows (query token x query head) of a share of its group as one [rows, head_dim] tile, so that all
query heads of a KV head read each key and value tile once: scores by ``tl.dot``, an online softmax
over tiles of keys, P.V by ``tl.dot``. With one split it writes the output; with several it writes
its partials (unnormalised rows, max, sum) to a workspace, which a second kernel,
``abebot_attention_merge``, merges per row in split order (the reduction is a second kernel).

* parallel_config -- splits of the context, programs sharing a KV head's query heads, warps;
* memory_pattern -- keys per tile, the K/V load (block pointers or plain pointers with masks), their
  L2 eviction policy, software-pipelining stages;
* register_allocation -- P.V in the input dtype (P rounded, tensor cores, as FlashAttention does)
  or in float32 (IEEE);
* instruction_sequence -- ``tl.exp`` or ``tl.exp2`` with log2(e) folded into the scale, the online
  softmax's rescale (to every new max, or FlashAttention-4's lazy one: only when some row's max grew
  past a threshold, the others keeping a stale max), and how the merge reduces the splits (``tl.sum`` over all of them after their largest max, or one by one).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, with_gene
from core.workloads.triton_common import TritonTemplate, eviction, next_pow2, num_warps_gene

ENTRY = "abebot_attention_decode"
MAX_ACC_PER_THREAD = 128  # floats of the [rows, head_dim] accumulator per thread


class TritonAttentionTemplate(TritonTemplate):
    """The Triton template of :class:`~core.workloads.attention_decode.AttentionDecodeWorkload`."""

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("splits", (1, 2, 4, 8, 16, 32), "splits of the context per (sequence, KV head)"),
                ChoiceGene("head_split", (1, 2, 4), "programs sharing one KV head's query heads"),
                num_warps_gene((2, 4, 8)),
            ),
            "memory_pattern": (
                ChoiceGene("keys_per_tile", (16, 32, 64, 128), "keys per tile"),
                ChoiceGene("kv_load", ("plain", "block_ptr"), "K/V tiles through masked pointers or block pointers"),
                ChoiceGene("kv_eviction", ("", "evict_first"), "L2 eviction policy of the K/V loads"),
                ChoiceGene("num_stages", (1, 2, 3), "software-pipelining stages of the key loop"),
            ),
            "register_allocation": (
                ChoiceGene("pv", ("input", "fp32"), "P.V with P rounded to the input dtype, or in float32"),
            ),
            "instruction_sequence": (
                ChoiceGene("exp", ("exp", "exp2"), "tl.exp, or tl.exp2 with log2(e) folded into the scale"),
                ChoiceGene("rescale", ("every_tile", "lazy"), "online softmax: rescale to every new max, or only "
                                                              "when a max grew past a threshold"),
                ChoiceGene("combine", ("max_first", "running"), "merge: the splits' largest max then tl.sum, or one by one"),
            ),
        }
        canon = CANONICALISERS + ((_fp32_pv,) if self.problem["dtype"] == "float32" else ())
        return GeneSpace(groups, (self._fits,), SEEDS, canonicalisers=canon)

    def _fits(self, g: Genome) -> str | None:
        p = g["parallel_config"]
        rows = max(block_rows(s, p["head_split"]) * block_dim(s) for s in self.workload.shapes(self.problem))
        per_thread = rows // (32 * p["num_warps"])
        if per_thread > MAX_ACC_PER_THREAD:
            return f"{per_thread} accumulator floats per thread (> {MAX_ACC_PER_THREAD})"
        return None

    def render(self, genome: Genome) -> KernelSource:
        p, m = genome["parallel_config"], genome["memory_pattern"]
        launch = {"splits": p["splits"], "head_split": p["head_split"], "num_warps": p["num_warps"],
                  "keys_per_tile": m["keys_per_tile"], "num_stages": m["num_stages"]}
        return self.kernel_source(render_module(genome, self.problem["dtype"]), ENTRY, launch, 32 * p["num_warps"],
                                  min(255, 40 + MAX_ACC_PER_THREAD))

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        q, k, v, out = t["q"], t["k_cache"], t["v_cache"], t["out"]
        floats = kernel.module.workspace_floats(*(shape[n] for n in ("batch", "queries", "kv_heads", "group",
                                                                      "head_dim", "context")))
        ws = out.new_empty((floats,), dtype=_float32()) if floats else None
        lengths = t.get("lengths")  # the library's decode attention: keys filled, on the device
        if lengths is not None:
            return lambda: kernel(q, k, v, out, ws, lengths=lengths)
        return lambda: kernel(q, k, v, out, ws)

    def extra_bytes(self, kernel: Any, artifact: Any, shape: dict) -> int:
        s = shape
        return 4 * int(kernel.module.workspace_floats(s["batch"], s["queries"], s["kv_heads"], s["group"],
                                                      s["head_dim"], s["context"]))


TEMPLATE = TritonAttentionTemplate


def _float32() -> Any:
    import torch

    return torch.float32


def block_rows(shape: dict, head_split: int) -> int:
    """The rows tile of a program: query tokens x its share of the group, a power of two >= 16 (tl.dot)."""
    return max(16, next_pow2(shape["queries"] * -(-shape["group"] // head_split)))


def block_dim(shape: dict) -> int:
    return max(16, next_pow2(shape["head_dim"]))


SEEDS = (
    {"parallel_config": {"splits": 1, "head_split": 1, "num_warps": 4},
     "memory_pattern": {"keys_per_tile": 32, "kv_load": "plain", "kv_eviction": "", "num_stages": 1},
     "register_allocation": {"pv": "fp32"},
     "instruction_sequence": {"exp": "exp", "rescale": "every_tile", "combine": "max_first"}},
    {"parallel_config": {"splits": 16, "head_split": 1, "num_warps": 4},
     "memory_pattern": {"keys_per_tile": 64, "kv_load": "block_ptr", "kv_eviction": "evict_first", "num_stages": 2},
     "register_allocation": {"pv": "input"},
     "instruction_sequence": {"exp": "exp2", "rescale": "lazy", "combine": "max_first"}},
)


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _one_split(g: Genome) -> Genome:
    # one split: nothing to merge, the merge kernel is never launched
    if g["parallel_config"]["splits"] == 1:
        g = with_gene(g, "instruction_sequence", "combine", "max_first")
    return g


def _fp32_pv(g: Genome) -> Genome:
    # float32 tensors: P "in the input dtype" is P in float32
    return with_gene(g, "register_allocation", "pv", "fp32")


CANONICALISERS = (_one_split,)


# ---- rendering -----------------------------------------------------------------------------------

def _kv_tile(m: dict, which: str) -> str:
    """The load of one [BLOCK_N, BLOCK_D] K or V tile at keys t0.. (zeros past the cache or head dim)."""
    ev = eviction(m["kv_eviction"])
    if m["kv_load"] == "block_ptr":
        return (f"tl.load(tl.make_block_ptr({which}_ptr + kv_base, (n_keys, D), (D, 1), (t0, 0), (BLOCK_N, BLOCK_D), (1, 0)), "
                f"boundary_check=(0, 1), padding_option=\"zero\"{ev})")
    return f"tl.load({which}_ptr + kv_base + nn[:, None] * D + dd[None, :], mask=kvmask{ev}, other=0.0)"


def _rescale(rescale: str) -> str:
    """The online softmax's update of the running max m_i, with l_i and acc rescaled to it; m_safe
    is the max the tile's probabilities are taken against (0 for a row that has seen nothing)."""
    update = """m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing yet
alpha = EXP(m_i - m_safe)
l_i = l_i * alpha
acc = acc * alpha[:, None]
m_i = m_new"""
    if rescale == "every_tile":
        return update
    # lazy (FlashAttention-4): keep a stale max while no row's max grew by more than TAU (the
    # probabilities then stay below e^TAU, exact in float32); l and acc share the stale max
    return ("grow = tl.where(m_new > m_i, m_new - m_i, 0.0)\nif tl.max(grow, 0) > TAU:\n"
            + "\n".join("    " + ln for ln in update.split("\n"))
            + '\nm_safe = tl.where(m_i == float("-inf"), 0.0, m_i)')


def _merge(combine: str) -> str:
    if combine == "running":
        return '''    m = tl.load(wm_ptr + base)
    l = tl.load(wl_ptr + base)
    x = tl.load(wo_ptr + base * D + dd, mask=dmask, other=0.0)
    for t in range(1, NS):
        mt = tl.load(wm_ptr + base + t * R)
        if mt > float("-inf"):  # else the split's keys are all hidden from this row
            mn = tl.maximum(m, mt)
            a = EXP(m - mn)
            w = EXP(mt - mn)
            l = l * a + tl.load(wl_ptr + base + t * R) * w
            x = x * a + tl.load(wo_ptr + (base + t * R) * D + dd, mask=dmask, other=0.0) * w
            m = mn'''
    return '''    ss = tl.arange(0, BLOCK_S)
    smask = ss < NS
    ms = tl.load(wm_ptr + base + ss * R, mask=smask, other=float("-inf"))
    w = EXP(ms - tl.max(ms, 0))
    l = tl.sum(w * tl.load(wl_ptr + base + ss * R, mask=smask, other=0.0), 0)
    o = tl.load(wo_ptr + (base + ss[:, None] * R) * D + dd[None, :], mask=smask[:, None] & dmask[None, :], other=0.0)
    x = tl.sum(w[:, None] * o, 0)'''


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.split("\n"))


def render_module(g: Genome, dtype: str) -> str:
    p, m, r, s = g["parallel_config"], g["memory_pattern"], g["register_allocation"], g["instruction_sequence"]
    exp2 = s["exp"] == "exp2"
    pv = "p.to(v.dtype), v" if r["pv"] == "input" else 'p, v.to(tl.float32), input_precision="ieee"'
    qk_prec = ', input_precision="ieee"' if dtype == "float32" else ""
    plain = m["kv_load"] == "plain"
    return f'''"""AbeBot generated Triton decode attention (flash-decoding, GQA, K+1 causal queries)."""
import triton
import triton.language as tl

SPLITS, HEAD_SPLIT, BLOCK_N, NUM_WARPS, NUM_STAGES = {p["splits"]}, {p["head_split"]}, {m["keys_per_tile"]}, {p["num_warps"]}, {m["num_stages"]}
LOG2E = {1.4426950408889634 if exp2 else 1.0}
TAU = tl.constexpr({8.0 if exp2 else 5.5})  # lazy rescale: the growth of a row's max tolerated (2^8 or e^5.5)


@triton.jit
def EXP(x):
    return tl.{"exp2" if exp2 else "exp"}(x)


@triton.jit
def abebot_attention_decode(q_ptr, k_ptr, v_ptr, out_ptr, wo_ptr, wm_ptr, wl_ptr, len_ptr, Q, KVH, G, D, L, split_len,
                            qk_scale, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                            HEAD_SPLIT: tl.constexpr, ONE_SPLIT: tl.constexpr, STAGES: tl.constexpr,
                            HAS_LEN: tl.constexpr):
    s = tl.program_id(0)
    h = tl.program_id(1) // HEAD_SPLIT
    hs = tl.program_id(1) % HEAD_SPLIT
    b = tl.program_id(2)
    hpb = (G + HEAD_SPLIT - 1) // HEAD_SPLIT
    cnt = tl.minimum(hpb, G - hs * hpb)
    rr = tl.arange(0, BLOCK_R)
    dd = tl.arange(0, BLOCK_D)
    j = rr // tl.maximum(cnt, 1)
    rows = (((b * Q + j) * KVH + h) * G + hs * hpb + rr % tl.maximum(cnt, 1)).to(tl.int64) * D
    rmask = rr < Q * cnt
    dmask = dd < D
    qo_mask = rmask[:, None] & dmask[None, :]
    q = tl.load(q_ptr + rows[:, None] + dd[None, :], mask=qo_mask, other=0.0)
    n_keys = tl.load(len_ptr + b) if HAS_LEN else L  # keys filled in the cache (a model's: its step's length)
    lim = n_keys - Q + j + 1  # keys row r sees
    kv_base = (b * KVH + h).to(tl.int64) * L * D
    k0 = s * split_len
    k1 = tl.minimum(k0 + split_len, n_keys)
    m_i = tl.full([BLOCK_R], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
    for t0 in tl.range(k0, k1, BLOCK_N, num_stages=STAGES):
        nn = t0 + tl.arange(0, BLOCK_N)
{"        kvmask = (nn[:, None] < k1) & dmask[None, :]" if plain else ""}
        k = {_kv_tile(m, "k")}
        qk = tl.dot(q, tl.trans(k){qk_prec}) * qk_scale
        seen = (nn[None, :] < lim[:, None]) & (nn[None, :] < k1)
        qk = tl.where(seen, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
{_indent(_indent(_rescale(s["rescale"])))}
        p = EXP(qk - m_safe[:, None])
        l_i = l_i + tl.sum(p, 1)
        v = {_kv_tile(m, "v")}
        acc = tl.dot({pv}, acc=acc)
    if ONE_SPLIT:
        tl.store(out_ptr + rows[:, None] + dd[None, :], (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=qo_mask)
    else:
        R = Q * hpb  # rows of every program of a share in the workspace
        part = ((b * KVH + h) * HEAD_SPLIT + hs).to(tl.int64) * tl.num_programs(0) + s
        tl.store(wo_ptr + (part * R + rr)[:, None] * D + dd[None, :], acc, mask=qo_mask)
        tl.store(wm_ptr + part * R + rr, m_i, mask=rmask)
        tl.store(wl_ptr + part * R + rr, l_i, mask=rmask)


@triton.jit
def abebot_attention_merge(wo_ptr, wm_ptr, wl_ptr, out_ptr, Q, KVH, G, D, NS,
                           BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_SPLIT: tl.constexpr):
    r = tl.program_id(0)
    h = tl.program_id(1) // HEAD_SPLIT
    hs = tl.program_id(1) % HEAD_SPLIT
    b = tl.program_id(2)
    hpb = (G + HEAD_SPLIT - 1) // HEAD_SPLIT
    cnt = tl.minimum(hpb, G - hs * hpb)
    if r < Q * cnt:
        R = Q * hpb
        base = ((b * KVH + h) * HEAD_SPLIT + hs).to(tl.int64) * NS * R + r  # split 0's row r; split t's + t * R
        dd = tl.arange(0, BLOCK_D)
        dmask = dd < D
{_indent(_merge(s["combine"]))}
        row = ((b * Q + r // cnt) * KVH + h) * G + hs * hpb + r % cnt
        tl.store(out_ptr + row.to(tl.int64) * D + dd, (x / l).to(out_ptr.dtype.element_ty), mask=dmask)


def _sizes(B, Q, KVH, G, D, L):
    tile = BLOCK_N
    split_len = triton.cdiv(triton.cdiv(L, SPLITS), tile) * tile
    ns = triton.cdiv(L, split_len)
    hpb = triton.cdiv(G, HEAD_SPLIT)
    return split_len, ns, Q * hpb


def workspace_floats(B, Q, KVH, G, D, L):
    """fp32 partials (rows, then max and sum) with several splits; 0 with one."""
    _, ns, rows = _sizes(B, Q, KVH, G, D, L)
    return 0 if ns == 1 else B * KVH * HEAD_SPLIT * ns * rows * (D + 2)


def launch(q, k_cache, v_cache, out, workspace=None, lengths=None):
    """out = attention of q (B, Q, KVH, G, D) over the caches (B, KVH, L, D); ``lengths`` (B,) int32 on the
    device, if given, counts the keys filled in each sequence's cache (the others are never read): a model's
    cache of fixed capacity, read under a CUDA graph at the step's own length."""
    B, Q, KVH, G, D = q.shape
    L = k_cache.shape[2]
    split_len, ns, rows = _sizes(B, Q, KVH, G, D, L)
    block_r = max(16, triton.next_power_of_2(rows))
    block_d = max(16, triton.next_power_of_2(D))
    scale = LOG2E / D ** 0.5
    n = B * KVH * HEAD_SPLIT * ns * rows
    wo = workspace if ns > 1 else out
    wm = workspace[n * D:] if ns > 1 else out
    wl = workspace[n * (D + 1):] if ns > 1 else out
    lens = q if lengths is None else lengths  # (an unread pointer without lengths)
    h = abebot_attention_decode[(ns, KVH * HEAD_SPLIT, B)](q, k_cache, v_cache, out, wo, wm, wl, lens, Q, KVH, G, D, L,
                                                          split_len, scale, block_r, block_d, BLOCK_N, HEAD_SPLIT,
                                                          ns == 1, NUM_STAGES, lengths is not None,
                                                          num_warps=NUM_WARPS)
    if ns > 1:
        abebot_attention_merge[(rows, KVH * HEAD_SPLIT, B)](wo, wm, wl, out, Q, KVH, G, D, ns,
                                                           triton.next_power_of_2(ns), block_d, HEAD_SPLIT,
                                                           num_warps=4)
    return h
'''
