"""The wgmma GEMM's source: sizes that follow from a genome, the rules a genome must keep, and the
rendered ``kernels/wgmma.cu`` (see :mod:`core.workloads.gemm.wgmma` for the genes).

Kept apart from the template class so the tests (and the GPU check script) can render and check
a genome without a device: :func:`derived` gives every size the kernel and its launch use,
:func:`violation` the first rule a genome breaks (None when it renders a correct kernel), and
:func:`render_source` the text.
"""
from __future__ import annotations

from core.workloads.kernel_files import defines, fill, kernel_body

#: Shared memory a block may opt in to on Hopper (227 KB)
SMEM_LIMIT = 232448
#: registers of one SM, shared by a block's warpgroups (setmaxnreg moves them between roles)
SM_REGISTERS = 65536
#: accumulators a consumer thread may hold (the rest of its registers address and convert)
MAX_ACC = 128
#: the producer/consumer register counts each ``reg_split`` gene value names (None: no setmaxnreg)
REG_SPLITS = {"none": None, "24/240": (24, 240), "40/232": (40, 232), "56/224": (56, 224)}
RASTERS = {"row": 0, "column": 1, "grouped": 2}
SWIZZLE_MODES = {128: 1, 64: 2, 32: 3}  # the descriptor's layout type per swizzle width in bytes
WGMMA_TYPES = {"bfloat16": ("bf16", "cvt.rn.bf16x2.f32"), "float16": ("f16", "cvt.rn.f16x2.f32")}
GROUP_M = 8
ENTRY = "abebot_wgmma_gemm"


def derived(g) -> dict:
    """Every size the kernel and its launch use, from genome ``g`` (bytes unless named otherwise)."""
    p, m = g["parallel_config"], g["memory_pattern"]
    bm, bn, bk, cons, sw = p["block_m"], p["block_n"], p["block_k"], p["consumers"], m["swizzle"]
    d = {"bm": bm, "bn": bn, "bk": bk, "consumers": cons, "swizzle": sw, "sw_e": sw // 2,
         "wg_m": bm // cons, "threads": 128 * (cons + 1), "stages": m["stages"], "cluster_m": p["cluster_m"],
         "split_k": p.get("split_k", 1)}
    d["mi"] = max(1, d["wg_m"] // 64)
    d["acc"] = d["mi"] * bn // 2
    d["a_box"], d["b_box"] = bm * sw, bk * sw  # bytes of one TMA box of A (BM rows) and of B (BK rows)
    d["a_stage"], d["b_stage"] = bm * bk * 2, bk * bn * 2
    d["c_bytes"] = bm * bn * 2 if m["epilogue"] == "tma" else 0
    # 1024 B of slack to align the ring (the 128-byte swizzle repeats every 1024 B), then 2 barriers a stage
    d["smem"] = 1024 + d["stages"] * (d["a_stage"] + d["b_stage"]) + d["c_bytes"] + 16 * d["stages"]
    d["tma_copies"] = bk // d["sw_e"] + bn // d["sw_e"]
    return d


def violation(g, dtype: str, smem_limit: int = SMEM_LIMIT) -> str | None:
    """The first rule genome ``g`` breaks for ``dtype`` (one line), or None."""
    if dtype not in WGMMA_TYPES:
        return f"the wgmma template multiplies bfloat16 or float16, not {dtype}"
    d, p = derived(g), g["parallel_config"]
    split = _split(g)
    if d["wg_m"] not in (64, 128):
        return f"{d['bm']} rows over {d['consumers']} consumer warpgroups is {d['wg_m']} each; wgmma m64 needs 64 or 128"
    if d["acc"] > MAX_ACC:
        return f"{d['acc']} fp32 accumulators per consumer thread (> {MAX_ACC}): a smaller BN or more consumers"
    if d["bk"] % d["sw_e"]:
        return f"BK {d['bk']} is narrower than one {d['swizzle']}-byte swizzled row ({d['sw_e']} elements) of A"
    if d["bn"] % d["sw_e"] or d["bn"] % 64 and g["memory_pattern"]["epilogue"] == "tma":
        return f"BN {d['bn']} is not a whole number of swizzled rows of B or of the epilogue's 64-column panels"
    if d["stages"] - 1 < g["instruction_sequence"]["inflight"]:
        return f"{d['stages']} stages cannot keep {g['instruction_sequence']['inflight']} wgmma groups in flight and load"
    if split is not None:
        prod, cons = split
        cap = _entry_registers(d["threads"])
        if not prod < cap < cons or 128 * (prod + d["consumers"] * cons) > cap * d["threads"]:
            return (f"setmaxnreg {prod}/{cons} does not fit {d['threads']} threads entering with {cap} registers "
                    f"({SM_REGISTERS} per SM)")
    if d["smem"] > smem_limit:
        return f"shared memory {d['smem']} B > {smem_limit} B (fewer stages, a smaller tile or the direct epilogue)"
    if p["block_m"] > 256 or p["block_n"] > 256:
        return "a TMA box side is at most 256 elements"
    return None


def _split(g) -> tuple[int, int] | None:
    """(producer, consumer) registers setmaxnreg sets, None for none: with one consumer warpgroup
    the block enters with all the registers it can use and nothing is moved, whatever the gene."""
    if g["parallel_config"]["consumers"] < 2:
        return None
    return REG_SPLITS[g["register_allocation"]["reg_split"]]


def _entry_registers(threads: int) -> int:
    """Registers per thread a block of ``threads`` gets under ``__launch_bounds__(threads, 1)``:
    the SM's file split evenly, rounded down to the allocation unit of 8, at most 255."""
    return min(255 // 8 * 8, SM_REGISTERS // threads // 8 * 8)


def wgmma_wrapper(bn: int, dtype: str) -> str:
    """``wgmma_m64(d, desc_a, desc_b, scale_d)``: one m64n<bn>k16 wgmma, A K-major and B MN-major
    from shared memory, accumulating into the ``bn / 2`` floats ``d`` (scale_d 0: overwrite)."""
    n, t = bn // 2, WGMMA_TYPES[dtype][0]
    regs = ", ".join(f"%{i}" for i in range(n))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n))
    return (f"static __device__ __forceinline__ void wgmma_m64(float (&d)[BN / 2], unsigned long long da,\n"
            f"                                                 unsigned long long db, int scale_d) {{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 2}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{t}.{t} {{{regs}}}, %{n}, %{n + 1}, p, 1, 1, 0, 1;\\n}}\\n"\n'
            f"                 : {outs}\n"
            f'                 : "l"(da), "l"(db), "r"(scale_d));\n'
            f"}}")


_LOADS = {
    "A": "for (int j = 0; j < BK / SW_E; ++j) tma_load(sA + s * A_STAGE + j * A_BOX, tmA, kt * BK + j * SW_E, m0, bar);",
    "B": "for (int j = 0; j < BN / SW_E; ++j) LOAD_B(sB + s * B_STAGE + j * B_BOX, n0 + j * SW_E, kt * BK);",
}


def _defines(g, d: dict) -> str:
    p, r, i = g["parallel_config"], g["register_allocation"], g["instruction_sequence"]
    split = _split(g)
    return defines({
        "BM": d["bm"], "BN": d["bn"], "BK": d["bk"], "CONSUMERS": d["consumers"], "WG_M": d["wg_m"], "MI": d["mi"],
        "THREADS": d["threads"], "STAGES": d["stages"], "SWIZZLE": d["swizzle"], "SW_E": d["sw_e"],
        "SWZ_MODE": SWIZZLE_MODES[d["swizzle"]], "A_BOX": d["a_box"], "B_BOX": d["b_box"], "A_STAGE": d["a_stage"],
        "B_STAGE": d["b_stage"], "STAGE_TX": d["a_stage"] + d["b_stage"], "C_BYTES": d["c_bytes"],
        "EPI_TMA": g["memory_pattern"]["epilogue"] == "tma", "PERSISTENT": p["persistent"] == "persistent",
        "RASTER": RASTERS[p["raster"]], "GROUP_M": GROUP_M, "REG_SPLIT": split is not None,
        "PRODUCER_REGS": split[0] if split else 0, "CONSUMER_REGS": split[1] if split else 0,
        "INFLIGHT": i["inflight"], "CLUSTER_M": d["cluster_m"], "B_SLICE": d["bk"] // d["cluster_m"] * d["swizzle"],
        "SPLIT_K": d["split_k"]})


def render_source(g, dtype: str) -> str:
    """``kernels/wgmma.cu`` behind the genome's ``#define`` s, its slots filled."""
    d = derived(g)
    loads = "\n            ".join(_LOADS[x] for x in g["instruction_sequence"]["load_order"])
    body = fill(kernel_body(__file__, "wgmma.cu"), wgmma=wgmma_wrapper(d["bn"], dtype),
                cvt=WGMMA_TYPES[dtype][1], loads=loads)
    return f"// AbeBot generated wgmma GEMM ({dtype}, sm_90a)\ntypedef unsigned short T;\n" + _defines(g, d) + "\n" + body
