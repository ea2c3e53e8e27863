"""CUDA C RoPE template (header-free: bf16/fp16 travel as 16-bit integers with PTX conversions).

A block rotates the heads of one token at a time (query heads, then key heads, as one index space),
``vec`` pairs per access: a work item is ``vec`` elements of x1, the matching ``vec`` of x2, and the
token's ``vec`` cos and sin values; the rotation is computed in float32 and rounded once. A token
whose half width is not a multiple of ``vec`` (or a misaligned tensor) runs a scalar twin.

* parallel_config -- threads per block; a block per group of ``tokens_per_block`` tokens, a
  persistent grid of ``waves`` blocks per SM looping over token groups, or a 2-D grid of
  (token, group of ``heads_per_block`` heads), which spreads a decode step of one token over the GPU;
* memory_pattern -- elements per access (16 bytes down to one element), cache hints on the x loads
  (plain, streaming ``.cs``, no L1 allocation; never ``.nc``, since x is written), on the cos/sin
  loads (plain, non-coherent ``.nc``, L1 evict-last) and on the stores, and whether the token's cos
  and sin are first staged in shared memory as floats;
* register_allocation -- work items in flight per thread, ``#pragma unroll`` of the step loop;
* instruction_sequence -- the order of the three loads of a step (x1, x2, cos/sin) before the
  rotation and the store.

The CUDA C lies in ``kernels/``: ``rope.cu`` is the frame, the other files the pieces a genome picks
for its slots (see each file's opening comment); this module writes the ``#define``s and chooses.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.kernel_files import COMMON, defines, fill, kernel_body, snippet
from core.workloads.template import Template

TOKENS = ("LOAD_X1", "LOAD_X2", "LOAD_CS", "ROTATE", "STORE")
BEFORE = (("LOAD_X1", "ROTATE"), ("LOAD_X2", "ROTATE"), ("LOAD_CS", "ROTATE"), ("ROTATE", "STORE"))
MAX_FLOATS = 96  # x1, x2, cos, sin floats per thread in flight; beyond this a step spills


def _half_max(problem: dict) -> int:
    """The widest half a verification shape has (the spec's odd shape uses 33)."""
    return max(problem["half_dim"], 33)


class CudaRopeTemplate(Template):
    """The CUDA template of :class:`~core.workloads.rope.RopeWorkload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512, 1024), "threads per block"),
                ChoiceGene("schedule", ("tokens", "persistent", "head_split"),
                           "a block per token group, a persistent grid over token groups, or (token, head group) blocks"),
                ChoiceGene("tokens_per_block", (1, 2, 4, 8), "tokens a block rotates (tokens, persistent)"),
                ChoiceGene("heads_per_block", (1, 2, 4, 8, 16), "heads of one token a block rotates (head_split)"),
                ChoiceGene("waves", (1, 2, 4, 8), "blocks per SM of the persistent grid"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per access (16 bytes at most)"),
                ChoiceGene("x_load", ("", ".cs", ".L1::no_allocate"), "cache hint of the q/k loads"),
                ChoiceGene("cs_load", ("", ".nc", ".L1::evict_last"), "cache hint of the cos/sin loads"),
                ChoiceGene("store", ("", ".cs"), "cache hint of the q/k stores"),
                ChoiceGene("cs_stage", ("global", "shared"), "cos/sin read from the cache, or staged as floats in shared memory"),
            ),
            "register_allocation": (
                MapGene("regs", (("items", (1, 2, 4)), ("unroll", (1, 2, 4))), "work items in flight per thread, step-loop unroll"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, (), BEFORE, "order of a step's operations"),),
        }

        def fits(g: Genome) -> str | None:
            if _floats(g) > MAX_FLOATS:
                return f"{_floats(g)} floats in flight per thread (> {MAX_FLOATS})"
            return None

        wide = 16 // elt
        seeds = ({"parallel_config": {"threads": 256, "schedule": "tokens", "tokens_per_block": 1, "heads_per_block": 1, "waves": 1},
                  "memory_pattern": {"vec": wide, "x_load": "", "cs_load": "", "store": "", "cs_stage": "global"},
                  "register_allocation": {"regs": {"items": 1, "unroll": 1}}, "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"threads": 128, "schedule": "head_split", "tokens_per_block": 1, "heads_per_block": 8, "waves": 1},
                  "memory_pattern": {"vec": wide, "x_load": ".cs", "cs_load": ".nc", "store": ".cs", "cs_stage": "global"},
                  "register_allocation": {"regs": {"items": 1, "unroll": 1}}, "instruction_sequence": {"body": TOKENS}})
        return GeneSpace(groups, (fits,), seeds, canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        p, m = genome["parallel_config"], genome["memory_pattern"]
        launch = {"threads": p["threads"], "schedule": p["schedule"], "tokens_per_block": p["tokens_per_block"],
                  "heads_per_block": p["heads_per_block"], "waves": p["waves"]}
        shared = 8 * _half_max(self.problem) if m["cs_stage"] == "shared" else 0
        resources = {"threads": p["threads"], "shared_bytes": shared,
                     "registers": min(255, 65536 // p["threads"], 32 + _floats(genome))}
        return KernelSource("cuda", render_source(genome, self.problem), "abebot_rope", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        tokens = shape["tokens"]
        if lp["schedule"] == "head_split":
            grid = (tokens, -(-(shape["q_heads"] + shape["kv_heads"]) // lp["heads_per_block"]), 1)
        else:
            blocks = -(-tokens // lp["tokens_per_block"])
            if lp["schedule"] == "persistent":
                blocks = min(blocks, self.device.multiprocessors * lp["waves"])
            grid = (blocks, 1, 1)
        return kernel.bind(grid, (lp["threads"], 1, 1), (t["positions"], t["cos_sin_cache"], t["q"], t["k"], tokens,
                                                         shape["q_heads"], shape["kv_heads"], shape["half_dim"]))


TEMPLATE = CudaRopeTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _per_schedule(g: Genome) -> Genome:
    # head_split blocks take one token and a head group; the others take token groups of all heads;
    # waves sizes only the persistent grid.
    s = g["parallel_config"]["schedule"]
    if s == "head_split":
        g = with_gene(g, "parallel_config", "tokens_per_block", 1)
    else:
        g = with_gene(g, "parallel_config", "heads_per_block", 1)
    if s != "persistent":
        g = with_gene(g, "parallel_config", "waves", 1)
    return g


CANONICALISERS = (_per_schedule,)


def _floats(g: Genome) -> int:
    """Floats a thread holds at once: x1, x2, cos and sin of every item, of the unrolled steps."""
    r = g["register_allocation"]["regs"]
    return 4 * r["items"] * g["memory_pattern"]["vec"] * r["unroll"]


def _access(kind: str, hint: str) -> str:
    """PTX of a 2/4/8/16-byte global load (kind "ld", the shared kernels' file) or store ("st")
    with ``hint``, by byte count."""
    return fill(snippet(COMMON if kind == "ld" else __file__, f"access_{kind}.cuh"), hint=hint)


def _main(p: dict) -> str:
    """The block's loop over its tokens (and head range)."""
    run = snippet(__file__, "token_call.cuh")
    if p["schedule"] == "head_split":
        return fill(snippet(__file__, "main_head_split.cuh"), run=run)
    loop = ("for (int rb = blockIdx.x; rb < (tokens + TOKENS_PER_BLOCK - 1) / TOKENS_PER_BLOCK; rb += gridDim.x)"
            if p["schedule"] == "persistent" else "for (int rb = blockIdx.x; rb < blockIdx.x + 1; ++rb)")
    return fill(snippet(__file__, "main_tokens.cuh"), loop=loop, run=run)


def _defines(g: Genome, problem: dict) -> str:
    """The genome's (and the problem's) choices as the #defines rope.cu expects."""
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    sched = ({"HEADS_PER_BLOCK": p["heads_per_block"]} if p["schedule"] == "head_split"
             else {"TOKENS_PER_BLOCK": p["tokens_per_block"]})
    if p["schedule"] == "persistent":
        sched["WAVES"] = f"{p['waves']}  // grid size: set at launch, recorded here"
    return defines({"THREADS": p["threads"], **sched, "VEC": m["vec"], "ITEMS": r["items"],
                    "ELT": dtype_bytes(problem["dtype"]), "HALF_MAX": _half_max(problem)})


def render_source(g: Genome, problem: dict) -> str:
    """kernels/rope.cu behind the genome's #defines, its slots filled with the snippets the genome
    picks."""
    m, r = g["memory_pattern"], g["register_allocation"]["regs"]
    dtype = problem["dtype"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    shared = m["cs_stage"] == "shared"
    body = fill(kernel_body(__file__, "rope.cu"), to_f=to_f, from_f=from_f,
                ld_0=_access("ld", m["x_load"]), ld_1=_access("ld", m["cs_load"]), st=_access("st", m["store"]),
                cs_from=snippet(__file__, "cs_shared.cuh" if shared else "cs_global.cuh"),
                stage=kernel_body(__file__, "stage_shared.cuh") if shared else "",
                unroll=str(r["unroll"]),
                steps="\n".join(snippet(__file__, f"step_{tok.lower()}.cuh") for tok in g["instruction_sequence"]["body"]),
                scs="__shared__ __align__(16) float scs[2 * HALF_MAX];" if shared else "float *scs = nullptr;",
                main=_main(g["parallel_config"]))
    return (f"// AbeBot generated CUDA RoPE, NeoX style, in place ({dtype})\ntypedef {T} T;\n"
            + _defines(g, problem) + "\n" + body)
