"""CUDA C RMSNorm template (header-free), optionally fused with the residual add (vLLM's
``fused_add_rms_norm``: the sum x + residual is written back into ``residual``).

* parallel_config -- threads per block, rows per block (a group, normalised together: its loads in
  flight at once, its sums in one reduction), one block per group or a persistent grid of
  ``waves`` blocks per SM; on sm_90 and later, a group split over the ``split`` blocks of a thread
  block cluster, each on its own SM with a slice of every row, their partial sums meeting in
  distributed shared memory (a decode-sized row is otherwise read and written by one SM alone);
* memory_pattern -- vector width of loads/stores (a scalar twin runs when a row is not aligned to
  it), load cache hint (plain, non-coherent ``.nc``, streaming ``.cs``), streaming store;
* register_allocation -- where the row waits between the reduction and the output: registers
  (one read of x), shared memory, or a second read from global; warp-shuffle or shared-memory
  tree reduction, or every warp summing the warp totals itself after one barrier;
* instruction_sequence -- order of load x, load w, reduce, store (w may be fetched before the
  reduction to overlap its latency, or after it to save registers).

The CUDA C lies in ``kernels/``: ``rmsnorm.cu`` is the frame, the other files the pieces a genome
picks for its slots (see each file's opening comment); this module writes the ``#define``s and
chooses.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES, hopper_features
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.template import Template
from core.backends.arrays import dtype_bytes
from core.workloads.kernel_files import defines, fill, kernel_body, snippet
from core.workloads.rmsnorm.cuda_cluster import CLUSTER_ROW, CLUSTER_SUM

TOKENS = ("LOAD_X", "LOAD_W", "REDUCE", "STORE")
MAX_ITEMS = 64  # floats of the row group per thread held in registers, beyond that the rows spill
SMEM_ROW_BYTES = 40 * 1024  # the rows' static shared memory, leaving room under 48 KB for the reduction


def _cols_max(problem: dict) -> int:
    return max(problem["cols"], 1031)


class CudaRmsNormTemplate(Template):
    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        cols = _cols_max(self.problem)
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512, 1024), "threads per block"),
                ChoiceGene("rows_per_block", (1, 2, 4), "consecutive rows a block normalises together (a group)"),
                ChoiceGene("schedule", ("rows", "persistent"), "a block per row group, or a persistent grid"),
                ChoiceGene("waves", (1, 2, 4, 8), "blocks per SM of the persistent grid"),
                ChoiceGene("split", (1, 2, 4, 8) if hopper_features(self.device.arch) else (1,),
                           "blocks of a cluster sharing a row group, a slice each (sm_90 on)", legacy=1),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per load/store"),
                ChoiceGene("load", ("", ".nc", ".cs"), "load cache hint: plain, non-coherent, streaming"),
                ChoiceGene("store", ("", ".cs"), "store cache hint: plain or streaming"),
            ),
            "register_allocation": (
                MapGene("regs", (("row", ("registers", "smem", "reread")), ("reduce", ("shuffle", "smem", "all_warps"))),
                        "where the row waits for its norm; how the block sums"),
            ),
            "instruction_sequence": (
                SequenceGene("body", TOKENS, (), (("LOAD_X", "REDUCE"), ("REDUCE", "STORE"), ("LOAD_W", "STORE")),
                             "order of the row's steps"),
            ),
        }

        def fits(g: Genome) -> str | None:
            p, r = g["parallel_config"], g["register_allocation"]["regs"]
            split, group = p["split"], p["rows_per_block"]
            if split > 1 and p["schedule"] != "rows":
                return "a row group split over a cluster takes a cluster of its own: no persistent grid"
            per_thread = group * -(-cols // (split * p["threads"]))
            if r["row"] == "registers" and per_thread > MAX_ITEMS:
                return f"{per_thread} row elements per thread in registers (> {MAX_ITEMS})"
            if r["row"] == "smem" and 4 * srow_floats(g, self.problem) > SMEM_ROW_BYTES:
                return f"the row group's slices do not fit in {SMEM_ROW_BYTES // 1024} KB of static shared memory"
            return None

        seed = {"parallel_config": {"threads": 1024, "rows_per_block": 1, "schedule": "rows", "waves": 1, "split": 1},
                "memory_pattern": {"vec": 16 // elt, "load": "", "store": ""},
                "register_allocation": {"regs": {"row": "registers", "reduce": "shuffle"}},
                "instruction_sequence": {"body": ("LOAD_X", "LOAD_W", "REDUCE", "STORE")}}
        seeds = [seed]
        if hopper_features(self.device.arch):  # decode rows over a cluster: one row over 8 SMs or 2, 4 rows over 8
            seeds += [{**seed, "parallel_config": {**seed["parallel_config"], "threads": threads, "split": split,
                                                   "rows_per_block": group}}
                      for threads, split, group in ((128, 8, 1), (512, 2, 1), (256, 8, 4))]
        return GeneSpace(groups, (fits,), tuple(seeds), canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        source = render_source(genome, self.problem)
        threads = p["threads"]
        row = genome["register_allocation"]["regs"]["row"]
        group = p["rows_per_block"]
        shared = 4 * red_floats(p) + (4 * srow_floats(genome, self.problem) if row == "smem" else 0)
        shared += 4 * group * p["split"] if p["split"] > 1 else 0
        per_thread = group * -(-_cols_max(self.problem) // (threads * p["split"]))
        launch = {"threads": threads, "rows_per_block": p["rows_per_block"], "persistent": p["schedule"] == "persistent",
                  "waves": p["waves"], "split": p["split"]}
        resources = {"threads": threads, "shared_bytes": shared,
                     "registers": min(255, 32 + (2 * per_thread if row == "registers" else 8))}
        return KernelSource("cuda", source, "abebot_rmsnorm", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        rows, cols = shape["rows"], shape["cols"]
        blocks = -(-rows // lp["rows_per_block"])
        if lp["persistent"]:
            blocks = min(blocks, self.device.multiprocessors * lp["waves"])
        blocks *= lp["split"]  # a cluster of ``split`` blocks per row group (the kernel's __cluster_dims__)
        res = t["residual"] if self.problem["residual"] else t["x"]
        return kernel.bind((blocks, 1, 1), (lp["threads"], 1, 1),
                           (t["x"], t["w"], res, t["out"], rows, cols, float(self.problem["eps"])))



# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _waves_persistent_only(g: Genome) -> Genome:
    # waves sizes the persistent grid (blocks per SM); a block per row group launches one block
    # per group whatever it says.
    if g["parallel_config"]["schedule"] != "persistent":
        g = with_gene(g, "parallel_config", "waves", 1)
    return g


CANONICALISERS = (_waves_persistent_only,)


def _row_norm(body: tuple, mode: str) -> str:
    """row_norm.cuh for the genome: its steps in the genome's order (every step covers all the
    group's rows, so their loads are in flight together and their sums meet in one reduction),
    the row cache's KEEP / FETCH macros of ``mode``."""
    return fill(snippet(__file__, "row_norm.cuh"),
                keep_fetch=snippet(__file__, f"row_{mode}.cuh"),
                row_cache="    float row[ROWS_PER_BLOCK][ITEMS][V];\n" if mode == "registers" else "",
                steps="\n".join(snippet(__file__, f"step_{token.lower()}.cuh") for token in body))


def red_floats(p: dict) -> int:
    """Floats of the block reduction's shared buffer: a tree's one per thread, or 32 warp totals
    and a result for each row of the group."""
    return max(p["threads"] + 1, 33 * p["rows_per_block"])


def full_fit(g: Genome, problem: dict) -> bool:
    """Whether a row of the problem's widest shape is exactly whole vectors of every thread of the
    cluster: then the kernel has a second vector path for such rows, without bound checks."""
    p = g["parallel_config"]
    return _cols_max(problem) % (p["split"] * p["threads"] * g["memory_pattern"]["vec"]) == 0


def srow_floats(g: Genome, problem: dict) -> int:
    """Floats of shared memory that hold the row group's slices (``row = smem``)."""
    p, vec = g["parallel_config"], g["memory_pattern"]["vec"]
    per_block = p["split"] * p["threads"] * vec
    return p["rows_per_block"] * -(-_cols_max(problem) // per_block) * p["threads"] * vec


def _defines(g: Genome, problem: dict) -> str:
    """The genome's (and the problem's) choices as the #defines rmsnorm.cu expects."""
    p, m = g["parallel_config"], g["memory_pattern"]
    persistent = p["schedule"] == "persistent"
    # the grid is set at launch: what sizes it is recorded here, so a grid change changes the source
    waves = {"WAVES": f"{p['waves']}  // blocks per SM of the persistent grid"} if persistent else {}
    return defines({"THREADS": p["threads"], "ROWS_PER_BLOCK": p["rows_per_block"], **waves,
                    "SPLIT": f"{p['split']}  // blocks of a cluster sharing a row group",
                    "PERSISTENT": f"{int(persistent)}  // a block goes on to further row groups",
                    "RED": f"{red_floats(p)}  // floats of the block reduction's shared memory",
                    "VEC": m["vec"], "COLS_MAX": _cols_max(problem),
                    "FULL_FIT": f"{int(full_fit(g, problem))}  // a row of COLS_MAX is whole vectors of every thread",
                    "HAS_RES": bool(problem["residual"]), "ELT": dtype_bytes(problem["dtype"])})


def _rows(g: Genome) -> str:
    """The kernel body that hands the block its row group(s): a slice of each over a cluster, or
    whole groups, one per block or a persistent grid's share."""
    if g["parallel_config"]["split"] > 1:
        return CLUSTER_ROW
    rb = ("for (int rb = blockIdx.x; rb < (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK; rb += gridDim.x)"
          if g["parallel_config"]["schedule"] == "persistent" else "const int rb = blockIdx.x;")
    return fill(snippet(__file__, "row_group.cuh"), rb=rb)


def render_source(g: Genome, problem: dict) -> str:
    """kernels/rmsnorm.cu behind the genome's #defines, its slots filled with the snippets the
    genome picks."""
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    dtype = problem["dtype"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    cluster = p["split"] > 1
    body = fill(kernel_body(__file__, "rmsnorm.cu"), to_f=to_f, from_f=from_f, ld=m["load"], st=m["store"],
                block_sums=snippet(__file__, f"reduce_{r['reduce']}.cuh"),
                row_sums=CLUSTER_SUM if cluster else "#define row_sums block_sums",
                row_norm=_row_norm(g["instruction_sequence"]["body"], r["row"]),
                cluster_dims=" __cluster_dims__(SPLIT, 1, 1)" if cluster else "",
                srow=f"__shared__ float srow[{srow_floats(g, problem)}];" if r["row"] == "smem"
                else "float *srow = nullptr;",
                rows=_rows(g))
    return (f"// AbeBot generated CUDA RMSNorm ({dtype}, residual={problem['residual']})\ntypedef {T} T;\n"
            + _defines(g, problem) + "\n" + body)


TEMPLATE = CudaRmsNormTemplate
