"""CUDA C SiLU-and-multiply template (header-free: bf16/fp16 travel as 16-bit integers with PTX
conversions, so NVRTC needs no includes and ``nvcc -ptx`` checks the same text).

Every thread handles ``items`` vectors of ``vec`` elements per step of a strided loop; the
computation is in float32 and rounded once to the output dtype.

* parallel_config -- threads per block; one block per group of ``rows_per_block`` rows (vLLM's
  layout: a block per token), a persistent grid of ``waves`` blocks per SM looping over row
  groups, or a flat grid-stride loop over all tokens x hidden elements (vectorised whatever the
  hidden size, since the tensors are contiguous);
* memory_pattern -- elements per load (16-byte ``v4`` down to scalar; rows not aligned to it run
  a scalar twin), load cache hint (plain, non-coherent ``.nc`` as ``__ldg``, streaming ``.cs``,
  L1 evict-first, ``.nc`` without L1 allocation), store hint, store width (``vec`` or narrower);
* register_allocation -- vectors in flight per thread, ``#pragma unroll`` of the step loop,
  accurate ``expf`` or ``__expf`` (ex2.approx), IEEE division, ``__fdividef`` or ``__frcp_rn``;
* instruction_sequence -- the order of load gate, load up, SiLU, multiply, store (all items of a
  step per token: SiLU before loading up overlaps the exp with up's latency).

The CUDA C lies in ``kernels/``: ``silu_mul.cu`` is the frame, the other files the pieces a genome
picks for its slots (see each file's opening comment); this module writes the ``#define``s and
chooses.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.kernel_files import defines, fill, kernel_body, snippet
from core.workloads.template import Template

TOKENS = ("LOAD_GATE", "LOAD_UP", "SILU", "MUL", "STORE")
BEFORE = (("LOAD_GATE", "SILU"), ("SILU", "MUL"), ("LOAD_UP", "MUL"), ("MUL", "STORE"))
LOAD_HINTS = ("", ".nc", ".cs", ".L1::evict_first", ".nc.L1::no_allocate")
STORE_HINTS = ("", ".cs", ".L1::no_allocate")
MAX_FLOATS = 64  # gate and up floats per thread in flight (out reuses up's); beyond this a step spills
THREADS_PER_SM = 2048  # resident threads per SM on sm_80/sm_90: the flat grid's size per wave


class CudaSiluMulTemplate(Template):
    """The CUDA template of :class:`~core.workloads.silu_mul.SiluMulWorkload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        widths = tuple(v for v in (1, 2, 4, 8) if v * elt <= 16)
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512, 1024), "threads per block"),
                ChoiceGene("rows_per_block", (1, 2, 4, 8), "rows a block handles (rows and persistent schedules)"),
                ChoiceGene("schedule", ("rows", "persistent", "flat"),
                           "a block per row group, a persistent grid over row groups, or a grid-stride loop over all elements"),
                ChoiceGene("waves", (1, 2, 4, 8), "blocks per SM (persistent) or full-occupancy waves (flat) of the grid"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", widths, "elements per load (16 bytes at most)"),
                ChoiceGene("load", LOAD_HINTS, "load cache hint"),
                ChoiceGene("store", STORE_HINTS, "store cache hint"),
                ChoiceGene("store_vec", widths, "elements per store (at most vec)"),
            ),
            "register_allocation": (
                MapGene("regs", (("items", (1, 2, 4, 8)), ("unroll", (1, 2, 4)),
                                 ("exp", ("expf", "__expf")), ("div", ("ieee", "__fdividef", "rcp"))),
                        "vectors in flight per thread, step-loop unroll, exponential, division"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, (), BEFORE, "order of a step's operations"),),
        }

        def fits(g: Genome) -> str | None:
            m = g["memory_pattern"]
            if m["store_vec"] > m["vec"]:
                return f"store_vec {m['store_vec']} wider than the loads ({m['vec']})"
            if _floats(g) > MAX_FLOATS:
                return f"{_floats(g)} floats in flight per thread (> {MAX_FLOATS})"
            return None

        # vLLM's layout (a 1024-thread block per token, 16-byte accesses) and a grid-stride loop over
        # the flat tensors; both with __expf and __fdividef: on an H200 (4096 x 14336) 82.7 / 83.4 us
        # in bf16 and 164.6 / 165.5 in fp32 (torch.compile: 82.0, 162.6), where the first with
        # accurate expf and IEEE division took 114 us in bf16.
        fast = {"items": 1, "unroll": 1, "exp": "__expf", "div": "__fdividef"}
        seeds = ({"parallel_config": {"threads": 1024, "rows_per_block": 1, "schedule": "rows", "waves": 1},
                  "memory_pattern": {"vec": 16 // elt, "load": "", "store": "", "store_vec": 16 // elt},
                  "register_allocation": {"regs": fast}, "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"threads": 256, "rows_per_block": 1, "schedule": "flat", "waves": 8},
                  "memory_pattern": {"vec": 16 // elt, "load": ".nc", "store": "", "store_vec": 16 // elt},
                  "register_allocation": {"regs": fast}, "instruction_sequence": {"body": TOKENS}})
        return GeneSpace(groups, (fits,), seeds, canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        p, m, r = genome["parallel_config"], genome["memory_pattern"], genome["register_allocation"]["regs"]
        launch = {"threads": p["threads"], "rows_per_block": p["rows_per_block"], "schedule": p["schedule"],
                  "waves": p["waves"], "per_block": p["threads"] * r["items"] * m["vec"]}
        # __launch_bounds__(THREADS) caps ptxas at 64K / THREADS registers (spilling beyond it)
        resources = {"threads": p["threads"], "shared_bytes": 0,
                     "registers": min(255, 65536 // p["threads"], 24 + _floats(genome))}
        return KernelSource("cuda", render_source(genome, self.problem["dtype"]), "abebot_silu_mul",
                            ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        tokens, hidden = shape["tokens"], shape["hidden"]
        if lp["schedule"] == "flat":
            blocks = min(-(-tokens * hidden // lp["per_block"]),
                         self.device.multiprocessors * lp["waves"] * max(1, THREADS_PER_SM // lp["threads"]))
        else:
            blocks = -(-tokens // lp["rows_per_block"])
            if lp["schedule"] == "persistent":
                blocks = min(blocks, self.device.multiprocessors * lp["waves"])
        return kernel.bind((max(1, blocks), 1, 1), (lp["threads"], 1, 1), (t["gate"], t["up"], t["out"], tokens, hidden))


TEMPLATE = CudaSiluMulTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _waves_sized_grids_only(g: Genome) -> Genome:
    # waves sizes the persistent and flat grids; a block per row group launches one block per group.
    if g["parallel_config"]["schedule"] == "rows":
        g = with_gene(g, "parallel_config", "waves", 1)
    return g


def _row_groups_only(g: Genome) -> Genome:
    # The flat grid-stride loop walks all tokens x hidden elements: there are no row groups.
    if g["parallel_config"]["schedule"] == "flat":
        g = with_gene(g, "parallel_config", "rows_per_block", 1)
    return g


CANONICALISERS = (_waves_sized_grids_only, _row_groups_only)


def _floats(g: Genome) -> int:
    """Floats a thread holds at once: gate and up of every item, of ``unroll`` steps scheduled together."""
    r = g["register_allocation"]["regs"]
    return 2 * r["items"] * g["memory_pattern"]["vec"] * r["unroll"]


# silu's division g / (1 + exp(-g)), by the genome's choice
_DIV = {"ieee": "g / d", "__fdividef": "__fdividef(g, d)", "rcp": "g * __frcp_rn(d)"}

def _main(p: dict) -> str:
    """The kernel body: one span over the whole grid, or the block's row group(s)."""
    if p["schedule"] == "flat":
        return snippet(__file__, "main_flat.cuh")
    loop = ("for (int rb = blockIdx.x; rb < (tokens + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK; rb += gridDim.x)"
            if p["schedule"] == "persistent" else "for (int rb = blockIdx.x; rb < blockIdx.x + 1; ++rb)")
    return fill(snippet(__file__, "main_rows.cuh"), loop=loop)


def _defines(g: Genome, dtype: str) -> str:
    """The genome's choices as the #defines silu_mul.cu expects."""
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    # Only what the schedule reads: rows per block (row groups), waves (grids sized per SM: set at
    # launch, recorded here so that a grid change changes the source).
    schedule = {} if p["schedule"] == "flat" else {"ROWS_PER_BLOCK": p["rows_per_block"]}
    if p["schedule"] != "rows":
        schedule["WAVES"] = f"{p['waves']}  // grid size: set at launch, recorded here"
    return defines({"THREADS": p["threads"], **schedule, "VEC": m["vec"], "STORE_VEC": m["store_vec"],
                    "ITEMS": r["items"], "ELT": dtype_bytes(dtype)})


def render_source(g: Genome, dtype: str) -> str:
    """kernels/silu_mul.cu behind the genome's #defines, its slots filled with the snippets the
    genome picks."""
    m, r = g["memory_pattern"], g["register_allocation"]["regs"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    body = fill(kernel_body(__file__, "silu_mul.cu"), to_f=to_f, from_f=from_f,
                exp="expf" if r["exp"] == "expf" else "__expf", div=_DIV[r["div"]],
                ld=m["load"], st=m["store"], unroll=str(r["unroll"]),
                steps="\n".join(snippet(__file__, f"step_{tok.lower()}.cuh") for tok in g["instruction_sequence"]["body"]),
                main=_main(g["parallel_config"]))
    return f"// AbeBot generated CUDA SiLU-and-multiply ({dtype})\ntypedef {T} T;\n" + _defines(g, dtype) + "\n" + body
