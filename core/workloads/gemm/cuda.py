"""CUDA C GEMM template (header-free; NVRTC or ``nvcc -ptx``), bounds-safe for any M, N, K.

Genes and what they change in the code:

* parallel_config -- block tile BM x BN x BK, warp grid WARPS_M x WARPS_N (threads), GROUP_M
  rasterisation of blocks, ``__launch_bounds__`` minimum blocks per SM (a register cap);
* memory_pattern -- global load vector width, shared-memory layout (plain, padded rows, or an
  XOR swizzle of 16-byte chunks), pipelining depth (stages of the shared-memory ring), and
  ``cp.async`` copies vs loads through registers;
* register_allocation -- tensor-core path (``ldmatrix`` + ``mma.sync`` m16n8k16, bf16/fp16) vs
  FFMA path (thread tile in registers), the lane layout and the contiguous or strided ownership
  of the FFMA thread tile, unrolling of the k loop;
* instruction_sequence -- the order of the main loop's stages (issue next tile, wait+barrier,
  math, optional extra barrier). Whatever the order, the renderer inserts the barrier a ring
  slot needs before it is overwritten and derives the ``cp.async.wait_group`` depth, so every
  order is correct and only its overlap changes.

The kernel text is in ``kernels/``: ``gemm.cu`` (the frame), ``mma.cuh`` / ``ffma.cuh`` (the math
paths) and ``step_*.cuh`` (main-loop statements). This module picks and fills them and puts the
genome's choices in front as ``#define``s.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable

from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.backends.arrays import dtype_bytes
from core.workloads.kernel_files import defines, fill, kernel_body, snippet
from core.workloads.template import Template

LOOP = ("LOAD", "WAIT", "MATH")


def _derived(g: Genome, dtype: str) -> dict:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    elt = dtype_bytes(dtype)
    wm, wn = p["warps_m"], p["warps_n"]
    d = {"elt": elt, "threads": 32 * wm * wn, "wtm": p["block_m"] // wm, "wtn": p["block_n"] // wn}
    lm, ln = (4, 8) if r["lanes"] == "4x8" else (8, 4)
    d.update(lm=lm, ln=ln, tm=d["wtm"] // lm, tn=d["wtn"] // ln)
    ch = 16 // elt
    pad = ch if m["smem_layout"] == "pad" else 0
    d.update(ch=ch, lda=p["block_k"] + pad, ldb=p["block_n"] + pad)
    d["smem"] = m["stages"] * (p["block_m"] * d["lda"] + p["block_k"] * d["ldb"]) * elt
    d["acc"] = (d["wtm"] // 16) * (d["wtn"] // 8) * 4 if r["math"] == "mma" else d["tm"] * d["tn"]
    return d


class CudaGemmTemplate(Template):
    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        dtype = self.problem["dtype"]
        elt = dtype_bytes(dtype)
        maths = ("mma", "ffma") if dtype != "float32" else ("ffma",)  # fp32 stays exact: no TF32
        groups = {
            "parallel_config": (
                ChoiceGene("block_m", (32, 64, 128, 256), "rows of C per block"),
                ChoiceGene("block_n", (32, 64, 128, 256), "columns of C per block"),
                ChoiceGene("block_k", (16, 32, 64), "K depth of a shared-memory tile"),
                ChoiceGene("warps_m", (1, 2, 4), "warps along M"),
                ChoiceGene("warps_n", (1, 2, 4), "warps along N"),
                ChoiceGene("group_m", (1, 8), "GROUP_M rasterisation of blocks (L2 reuse)"),
                ChoiceGene("min_blocks", (1, 2), "__launch_bounds__ minimum resident blocks (caps registers)"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per global load"),
                ChoiceGene("smem_layout", ("plain", "pad", "xor"), "shared tiles: plain rows, rows padded 16 B, XOR-swizzled chunks"),
                ChoiceGene("stages", (2, 3, 4), "shared-memory ring depth (tiles in flight)"),
                ChoiceGene("copy", ("async", "sync"), "cp.async global->shared, or loads through registers"),
            ),
            "register_allocation": (
                MapGene("regs", (("math", maths), ("lanes", ("4x8", "8x4")), ("assign", ("contiguous", "strided")),
                                 ("unroll", (1, 2, 0))),
                        "math path, FFMA lane layout and thread-tile ownership, k-loop unroll (0 = full)"),
            ),
            "instruction_sequence": (LOOP_GENE,),
        }
        smem_limit = self.device.shared_mem_per_block or 232448

        def structure(g: Genome) -> str | None:
            p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
            d = _derived(g, dtype)
            if d["threads"] > 1024:
                return "more than 1024 threads"
            if p["block_m"] % p["warps_m"] or p["block_n"] % p["warps_n"]:
                return "tile not divisible by the warp grid"
            if r["math"] == "mma" and (d["wtm"] % 16 or d["wtn"] % 16):
                return f"mma warp tile {d['wtm']}x{d['wtn']} not a multiple of 16x16"
            if r["math"] == "ffma" and (d["wtm"] % d["lm"] or d["wtn"] % d["ln"]):
                return "ffma warp tile not divisible by the lane layout"
            if d["acc"] > 128:
                return f"{d['acc']} accumulators per thread (> 128)"
            if m["vec"] > p["block_k"] or m["vec"] > p["block_n"]:
                return "vector wider than a tile row"
            if m["copy"] == "async" and m["vec"] * elt < 4:
                return "cp.async copies 4, 8 or 16 bytes"
            if d["smem"] > smem_limit:
                return f"shared memory {d['smem']} B > {smem_limit} B"
            return None

        seed = {"parallel_config": {"block_m": 128, "block_n": 128, "block_k": 32, "warps_m": 2, "warps_n": 2,
                                    "group_m": 8, "min_blocks": 1},
                "memory_pattern": {"vec": 8 if elt == 2 else 4, "smem_layout": "pad", "stages": 3, "copy": "async"},
                "register_allocation": {"regs": {"math": maths[0], "lanes": "4x8", "assign": "strided", "unroll": 0}},
                "instruction_sequence": {"loop": ("WAIT", "MATH", "LOAD")}}
        return GeneSpace(groups, (structure,), (seed,), canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        dtype = self.problem["dtype"]
        d = _derived(genome, dtype)
        source = render_source(genome, dtype)
        launch = {"block_m": genome.get("parallel_config", "block_m"), "block_n": genome.get("parallel_config", "block_n"),
                  "threads": d["threads"], "dynamic_shared_bytes": d["smem"]}
        resources = {"threads": d["threads"], "shared_bytes": d["smem"], "registers": min(255, d["acc"] + 40)}
        return KernelSource("cuda", source, "abebot_gemm", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        m, n, k = shape["m"], shape["n"], shape["k"]
        tiles = -(-m // lp["block_m"]) * -(-n // lp["block_n"])
        return kernel.bind((tiles, 1, 1), (lp["threads"], 1, 1), (t["a"], t["b"], t["c"], m, n, k), lp["dynamic_shared_bytes"])


LOOP_GENE = SequenceGene("loop", LOOP, ("SYNC",), (("WAIT", "MATH"),), "main-loop stage order; SYNC is an extra barrier")
# Every legal main-loop order, shortest first: the canonical order of a loop is the first that renders it.
_ORDERS = sorted((o for n in (3, 4) for o in itertools.permutations(LOOP + ("SYNC",), n) if LOOP_GENE.validate(o) is None),
                 key=lambda o: (len(o), [(LOOP + ("SYNC",)).index(t) for t in o]))


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _mma_lanes(g: Genome) -> Genome:
    # The tensor-core path takes its fragments with ldmatrix in the mma.sync layout: the FFMA lane
    # layout (LM x LN) and thread-tile ownership (STRIDED) are only read on the FFMA path.
    if g["register_allocation"]["regs"]["math"] == "mma":
        g = with_gene(g, "register_allocation", "regs", "4x8", key="lanes")
        g = with_gene(g, "register_allocation", "regs", "strided", key="assign")
    return g


def _short_k_loop(g: Genome) -> Genome:
    # compute_tile's k loop runs BK/16 steps on the tensor-core path: one step is the same loop
    # whatever the unroll, and unrolling 2 of 2 steps is the full unroll (0).
    r = g["register_allocation"]["regs"]
    steps = g["parallel_config"]["block_k"] // 16 if r["math"] == "mma" else g["parallel_config"]["block_k"]
    if steps == 1 or (steps == 2 and r["unroll"] == 2):
        g = with_gene(g, "register_allocation", "regs", 0, key="unroll")
    return g


def _loop_order(g: Genome) -> Genome:
    # Orders that render the same main loop are one order: a SYNC right before a LOAD whose ring slot
    # the previous MATH read is the barrier the renderer writes there anyway, and with synchronous
    # copies WAIT is a bare barrier, interchangeable with SYNC.
    copy_async = g["memory_pattern"]["copy"] == "async"
    body = _loop_body(g["instruction_sequence"]["loop"], copy_async)
    first = next(o for o in _ORDERS if _loop_body(o, copy_async) == body)
    return with_gene(g, "instruction_sequence", "loop", first)


CANONICALISERS = (_mma_lanes, _short_k_loop, _loop_order)



MMA_TYPES = {"bfloat16": "bf16", "float16": "f16", "float32": ""}  # the mma.sync operand type
UNROLL = {0: "#pragma unroll", 1: "#pragma unroll 1", 2: "#pragma unroll 2"}  # the k loop's, by gene value


def _step(name: str, **slots: str) -> str:
    """One main-loop statement: kernels/step_<name>.cuh, filled."""
    return fill(snippet(__file__, f"step_{name}.cuh"), **slots)


def _loop_body(seq: tuple, copy_async: bool) -> list[str]:
    """Main-loop statements in the genome's order, plus the barriers correctness needs."""
    pos = {t: i for i, t in enumerate(seq)}
    n = len(seq)
    # Is there a barrier on the way from MATH (iteration kt-1) round to LOAD (iteration kt)?
    between = [seq[(pos["MATH"] + j) % n] for j in range(1, (pos["LOAD"] - pos["MATH"]) % n)]
    guard = not any(t in ("WAIT", "SYNC") for t in between)
    # with LOAD before WAIT, this iteration's copy group is one more that may stay in flight
    pending = "STAGES - 1" if pos["LOAD"] < pos["WAIT"] else "STAGES - 2"
    out = []
    for tok in seq:
        if tok == "LOAD":
            if guard:  # the slot LOAD overwrites was read by the previous MATH (the same statement as SYNC)
                out.append(_step("sync"))
            out.append(_step("load"))
        elif tok == "WAIT":
            # with synchronous copies the data is in shared memory once every thread passes a barrier
            out.append(_step("wait", pending=pending) if copy_async else _step("sync"))
        else:
            out.append(_step(tok.lower()))
    return out


def _defines(g: Genome, d: dict) -> str:
    """The genome's choices (and what follows from them) as the #defines kernels/gemm.cu expects."""
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    return defines({
        "BM": p["block_m"], "BN": p["block_n"], "BK": p["block_k"], "WARPS_M": p["warps_m"], "WARPS_N": p["warps_n"],
        "THREADS": d["threads"], "GROUP_M": p["group_m"], "MIN_BLOCKS": p["min_blocks"], "VEC": m["vec"],
        "STAGES": m["stages"], "COPY_ASYNC": m["copy"] == "async", "SWIZZLE": m["smem_layout"] == "xor",
        "LDA": d["lda"], "LDB": d["ldb"], "CH": d["ch"],
        # 16-byte chunks of a tile row the XOR swizzle permutes (at most 8: a 128-byte line)
        "NCH_A": max(1, min(p["block_k"] // d["ch"], 8)), "NCH_B": max(1, min(p["block_n"] // d["ch"], 8)),
        "A_STAGE": "(BM * LDA)", "B_STAGE": "(BK * LDB)", "WTM": "(BM / WARPS_M)", "WTN": "(BN / WARPS_N)",
        "USE_MMA": r["math"] == "mma", "LM": d["lm"], "LN": d["ln"], "TM": "(WTM / LM)", "TN": "(WTN / LN)",
        "STRIDED": r["assign"] == "strided"})


def render_source(g: Genome, dtype: str) -> str:
    """kernels/gemm.cu behind the genome's #defines, its slots filled: both math paths (USE_MMA
    picks one), the copy width, and the main loop in the genome's order."""
    m, r = g["memory_pattern"], g["register_allocation"]["regs"]
    d = _derived(g, dtype)
    T, to_f, from_f = SCALAR_TYPES[dtype]
    unroll = UNROLL[r["unroll"]]
    body = fill(kernel_body(__file__, "gemm.cu"), to_f=to_f, from_f=from_f,
                cp_cache="cg" if m["vec"] * d["elt"] == 16 else "ca",  # 16-byte copies may bypass L1
                elt=str(d["elt"]),
                mma=fill(snippet(__file__, "mma.cuh"), unroll=unroll, mma_t=MMA_TYPES[dtype]),
                ffma=fill(snippet(__file__, "ffma.cuh"), unroll=unroll),
                body="\n        ".join(_loop_body(g["instruction_sequence"]["loop"], m["copy"] == "async")))
    return f"// AbeBot generated CUDA GEMM ({dtype})\ntypedef {T} T;\n" + _defines(g, d) + "\n" + body


TEMPLATE = CudaGemmTemplate
