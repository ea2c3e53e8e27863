"""CUDA C decode attention template (header-free: bf16/fp16 as 16-bit integers, PTX conversions).

``kernels/attention_decode.cu`` is the kernel (its opening comment describes it); this module
writes its ``#define``s, sizes its shared memory and workspace and binds its launch. A block takes
one split of the context of one (sequence, KV head) and every query row (query token x query
head) of its share of the KV head's group; with several splits the last block of a share to
finish merges the splits' partials in split order, in the same launch (a ticket counter per share,
reset by that block), so one kernel does both passes.

* parallel_config -- threads per block, splits of the context (flash-decoding), blocks sharing a
  KV head's query heads (1: the whole group in one block, each KV byte read once);
* memory_pattern -- keys per tile, the tile load (cp.async or through registers), bytes per
  access (4, 8, 16), one or two tile buffers (the next tile loads during this one; cp.async only);
* register_allocation -- query rows a thread scores against each key row it reads, the output accumulators (units of ``vec`` columns of a row, read from V
  ``vec`` at a time) in registers or shared memory, unroll of the P.V loop;
* instruction_sequence -- expf or ex2.approx (log2(e) folded into q), rescaling every tile or only
  when a row's max grew, and the merge of the splits (largest max first, or one by one).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, with_gene
from core.workloads.attention_decode.c import refuse_lengths, splits_used
from core.workloads.kernel_files import defines, fill, kernel_body
from core.workloads.template import Template

ENTRY = "abebot_attention_decode"
MAX_ACC_REGS = 64  # output floats a thread holds in registers; beyond this they spill


class CudaAttentionTemplate(Template):
    """The CUDA template of :class:`~core.workloads.attention_decode.AttentionDecodeWorkload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512), "threads per block"),
                ChoiceGene("splits", (1, 2, 4, 8, 16, 32, 64), "splits of the context per (sequence, KV head)"),
                ChoiceGene("head_split", (1, 2, 4), "blocks sharing one KV head's query heads"),
            ),
            "memory_pattern": (
                ChoiceGene("keys_per_tile", (16, 32, 64, 128), "keys per tile staged in shared memory"),
                ChoiceGene("load", ("plain", "cp_async"), "tile load: through registers, or cp.async"),
                ChoiceGene("vec_bytes", (4, 8, 16), "bytes per access of the tile load"),
                ChoiceGene("stages", (1, 2), "tile buffers (2: the next tile loads during this one)"),
            ),
            "register_allocation": (
                ChoiceGene("acc", ("registers", "shared"), "where the output accumulators live"),
                ChoiceGene("unroll", (1, 2, 4, 8), "unroll of the P.V loop over a tile's keys"),
                ChoiceGene("score_rows", (1, 2, 4, 8), "query rows a thread scores against one key row"),
            ),
            "instruction_sequence": (
                ChoiceGene("exp", ("expf", "ex2_approx"), "expf, or ex2.approx with log2(e) folded into q"),
                ChoiceGene("rescale", ("every_tile", "lazy"), "rescale the outputs every tile, or when the max grew"),
                ChoiceGene("combine", ("max_first", "running"), "merge the splits: largest max first, or one by one"),
            ),
        }
        return GeneSpace(groups, (self._fits,), SEEDS, canonicalisers=CANONICALISERS)

    def _fits(self, g: Genome) -> str | None:
        n = acc_per_thread(g, self.workload, self.problem) * vec_of(g, self.problem)
        if g["register_allocation"]["acc"] == "registers" and n > MAX_ACC_REGS:
            return f"{n} accumulators per thread in registers (> {MAX_ACC_REGS})"
        return None

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        most = max(shared_bytes(genome, self.problem, s) for s in self.workload.shapes(self.problem))
        launch = {"threads": p["threads"], "splits": p["splits"], "head_split": p["head_split"],
                  "keys_per_tile": genome["memory_pattern"]["keys_per_tile"],
                  "stages": genome["memory_pattern"]["stages"], "acc": genome["register_allocation"]["acc"],
                  "vec": vec_of(genome, self.problem), "dynamic_shared_bytes": most}
        regs = 40 + (acc_per_thread(genome, self.workload, self.problem) * launch["vec"]
                     if launch["acc"] == "registers" else 0)
        resources = {"threads": p["threads"], "shared_bytes": most + 4, "registers": min(255, regs)}
        return KernelSource("cuda", render_source(genome, self.workload, self.problem), ENTRY, ("-std=c++17",),
                            launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        refuse_lengths(t)
        lp = kernel.launch_params
        ns = splits_used(shape["context"], lp["splits"], lp["keys_per_tile"])
        split_len = _split_len(shape["context"], lp)
        grid = (ns, shape["kv_heads"] * lp["head_split"], shape["batch"])
        floats, ints = workspace(lp, shape)
        out = t["out"]
        if floats:
            import torch

            rows = rows_total(lp, shape)
            wo = out.new_empty((rows * shape["head_dim"],), dtype=torch.float32)  # partial rows
            wml = out.new_empty((2 * rows,), dtype=torch.float32)  # their max, then their sum
            tickets = out.new_zeros((ints,), dtype=torch.int32)
        else:  # one split: the workspace is never touched
            wo = wml = tickets = out
        launch = kernel.bind(grid, (lp["threads"], 1, 1),
                             (t["q"], t["k_cache"], t["v_cache"], out, wo, wml, tickets, shape["queries"],
                              shape["kv_heads"], shape["group"], shape["head_dim"], shape["context"], split_len),
                             shared_bytes_of(lp, self.problem, shape))

        def run() -> None:
            launch()

        run.tensors = (wo, wml, tickets)  # type: ignore[attr-defined]  # a bound launch holds raw pointers only
        return run

    def extra_bytes(self, kernel: Any, artifact: Any, shape: dict) -> int:
        """The partials (output rows, max and sum per split) and the ticket counters, with several splits."""
        floats, ints = workspace(artifact.launch, shape)
        return 4 * (floats + ints)


TEMPLATE = CudaAttentionTemplate

SEEDS = (
    {"parallel_config": {"threads": 128, "splits": 1, "head_split": 1},
     "memory_pattern": {"keys_per_tile": 32, "load": "plain", "vec_bytes": 16, "stages": 1},
     "register_allocation": {"acc": "shared", "unroll": 1, "score_rows": 1},
     "instruction_sequence": {"exp": "expf", "rescale": "every_tile", "combine": "max_first"}},
    {"parallel_config": {"threads": 256, "splits": 16, "head_split": 1},
     "memory_pattern": {"keys_per_tile": 64, "load": "cp_async", "vec_bytes": 16, "stages": 2},
     "register_allocation": {"acc": "registers", "unroll": 4, "score_rows": 4},
     "instruction_sequence": {"exp": "ex2_approx", "rescale": "lazy", "combine": "max_first"}},
)


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _per_context(g: Genome) -> Genome:
    # a second tile buffer is filled by cp.async alone; one split has nothing to merge
    if g["memory_pattern"]["load"] == "plain":
        g = with_gene(g, "memory_pattern", "stages", 1)
    if g["parallel_config"]["splits"] == 1:
        g = with_gene(g, "instruction_sequence", "combine", "max_first")
    return g


CANONICALISERS = (_per_context,)


# ---- sizes -----------------------------------------------------------------------------------------

def _split_len(context: int, lp: dict) -> int:
    tile = lp["keys_per_tile"]
    return -(-(-(-context // lp["splits"])) // tile) * tile


def _rows(shape: dict, head_split: int) -> int:
    """Query rows of a block: query tokens x its share of the group."""
    return shape["queries"] * -(-shape["group"] // head_split)


def rows_total(lp: dict, shape: dict) -> int:
    """Rows of the whole workspace: every block's share of rows, for every split."""
    ns = splits_used(shape["context"], lp["splits"], lp["keys_per_tile"])
    return shape["batch"] * shape["kv_heads"] * lp["head_split"] * ns * _rows(shape, lp["head_split"])


def workspace(lp: dict, shape: dict) -> tuple[int, int]:
    """(floats, ints) of the workspace: partial rows, then max and sum, and the ticket counters;
    none with one split."""
    if splits_used(shape["context"], lp["splits"], lp["keys_per_tile"]) == 1:
        return 0, 0
    rows = rows_total(lp, shape)
    return rows * (shape["head_dim"] + 2), shape["batch"] * shape["kv_heads"] * lp["head_split"]


def shared_bytes_of(lp: dict, problem: dict, shape: dict) -> int:
    """Dynamic shared memory of a launch on ``shape``: two tiles (K and V) per stage with padded
    rows, q in float, the scores, max, sum and rescale factors, and the accumulators if there
    (whole units of ``vec`` columns per row)."""
    elt = dtype_bytes(problem["dtype"])
    step = 16 // elt
    ks = -(-shape["head_dim"] // step) * step + step
    rows, d, tile, vec = _rows(shape, lp["head_split"]), shape["head_dim"], lp["keys_per_tile"], lp["vec"]
    floats = rows * d + rows * tile + 3 * rows + (rows * -(-d // vec) * vec if lp["acc"] == "shared" else 0)
    return 2 * lp["stages"] * tile * ks * elt + 4 * floats


def shared_bytes(g: Genome, problem: dict, shape: dict) -> int:
    p, m = g["parallel_config"], g["memory_pattern"]
    lp = {"head_split": p["head_split"], "keys_per_tile": m["keys_per_tile"], "stages": m["stages"],
          "acc": g["register_allocation"]["acc"], "vec": vec_of(g, problem)}
    return shared_bytes_of(lp, problem, shape)


def vec_of(g: Genome, problem: dict) -> int:
    """Elements per access: of the tile loads, of the dot products' key reads and of the output units."""
    return max(1, g["memory_pattern"]["vec_bytes"] // dtype_bytes(problem["dtype"]))


def acc_per_thread(g: Genome, workload: Any, problem: dict) -> int:
    """Output units (a row's ``vec`` columns) a thread owns: the most of any verification shape
    (rows x column groups), over the threads."""
    hs, threads, vec = g["parallel_config"]["head_split"], g["parallel_config"]["threads"], vec_of(g, problem)
    most = max(_rows(s, hs) * -(-s["head_dim"] // vec) for s in workload.shapes(problem))
    return -(-most // threads)


def render_source(g: Genome, workload: Any, problem: dict) -> str:
    """kernels/attention_decode.cu behind the genome's #defines."""
    p, m, r, s = g["parallel_config"], g["memory_pattern"], g["register_allocation"], g["instruction_sequence"]
    dtype = problem["dtype"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    elt = dtype_bytes(dtype)
    values = {"THREADS": p["threads"], "SPLITS": f"{p['splits']}  // the grid's x: set at launch, recorded here",
              "HEAD_SPLIT": p["head_split"], "TILE": m["keys_per_tile"],
              "STAGES": m["stages"], "CP_ASYNC": m["load"] == "cp_async", "VEC": vec_of(g, problem),
              "ELT": elt, "SROWS": r["score_rows"], "ACC_REGS": r["acc"] == "registers",
              **({"ACC_N": acc_per_thread(g, workload, problem)} if r["acc"] == "registers" else {}),
              "EXP2": s["exp"] == "ex2_approx", "LAZY": s["rescale"] == "lazy",
              "COMBINE_RUNNING": s["combine"] == "running"}
    body = fill(kernel_body(__file__, "attention_decode.cu"), to_f=to_f, from_f=from_f, unroll=str(r["unroll"]))
    return f"// AbeBot generated CUDA decode attention ({dtype})\ntypedef {T} T;\n" + defines(values) + "\n" + body
