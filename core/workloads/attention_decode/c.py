"""Decode attention on the CPU: an OpenMP C kernel (float32), flash-decoding.

``kernels/attention_decode.c`` is the kernel; this module writes its ``#define``s. The context of
each (sequence, KV head) is cut into ``splits`` splits of whole tiles; OpenMP threads take the
(sequence, KV head, split) items, each computing every query row of the KV head's group (all query
heads and query tokens) over its keys with an online softmax, ``rows`` rows per pass over a tile
(each key and value row is read once per pass, for all its rows). The partials (unnormalised
output rows, running max and sum) go to a workspace; a second parallel loop merges each row's
splits in split order (deterministic), so the reduction is two passes in one call.

* parallel_config -- OpenMP threads, schedule and chunk of both loops, splits of the context;
* memory_pattern -- floats per GCC vector (1: scalar), keys per tile, prefetch of the next tile;
* register_allocation -- query rows per pass over a tile, independent accumulators of a dot product;
* instruction_sequence -- the online softmax's rescale (every tile, or only when the max grew),
  ``expf`` or ``exp2f`` with log2(e) folded into q, and how the splits are merged (the largest max
  first then one weighted sum, or a running merge).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, with_gene
from core.workloads.c_kernel import CTemplate, prelude
from core.workloads.kernel_files import kernel_body
from core.workloads.openmp import one_thread, thread_options

ENTRY = "abebot_attention_decode"
# q, k_cache, v_cache, out, batch, queries, kv_heads, group, head_dim, context
ARGTYPES = ("ptr", "ptr", "ptr", "ptr", "int", "int", "int", "int", "int", "int")


def refuse_lengths(t: dict) -> None:
    """The C and CUDA C kernels attend to every key of the cache: a call that counts the filled keys
    on the device (the library's decode attention, :mod:`core.library.attention`) is not theirs."""
    if t.get("lengths") is not None:
        raise NotImplementedError("this attention_decode template takes no lengths (the Triton template does)")


class CAttentionTemplate(CTemplate):
    """The C template of :class:`~core.workloads.attention_decode.AttentionDecodeWorkload`."""

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("threads", thread_options(self.cores), "OpenMP threads (1 = no parallel region)"),
                ChoiceGene("schedule", ("static", "dynamic"), "OpenMP schedule of the item and merge loops"),
                ChoiceGene("chunk", (1, 2, 4), "items handed to a thread at a time"),
                ChoiceGene("splits", (1, 2, 4, 8, 16), "splits of the context per (sequence, KV head)"),
            ),
            "memory_pattern": (
                ChoiceGene("vector_width", (1, 4, 8, 16), "floats per GCC vector (1 = scalar)"),
                ChoiceGene("keys_per_tile", (8, 32, 128), "keys per tile of scores"),
                ChoiceGene("prefetch", ("none", "next_tile"), "prefetch the next tile's key and value rows"),
            ),
            "register_allocation": (
                ChoiceGene("rows", (1, 2, 4, 8, 16), "query rows (token x head) per pass over a tile"),
                ChoiceGene("unroll", (1, 2, 4), "independent accumulators of a dot product"),
            ),
            "instruction_sequence": (
                ChoiceGene("rescale", ("every_tile", "lazy"), "online softmax: rescale every tile, or when the max grew"),
                ChoiceGene("exp", ("expf", "exp2f"), "expf, or exp2f with log2(e) folded into q"),
                ChoiceGene("combine", ("max_first", "running"), "merge the splits: global max then a sum, or one by one"),
            ),
        }
        return GeneSpace(groups, (), seed_genomes(self.cores), canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        return self.c_kernel(render_source(genome), ENTRY, ARGTYPES, p["threads"], splits=p["splits"],
                             keys_per_tile=genome["memory_pattern"]["keys_per_tile"])

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        refuse_lengths(t)
        return kernel.bind(t["q"], t["k_cache"], t["v_cache"], t["out"], shape["batch"], shape["queries"],
                           shape["kv_heads"], shape["group"], shape["head_dim"], shape["context"])

    def extra_bytes(self, kernel: Any, artifact: Any, shape: dict) -> int:
        """The partials' workspace: per (sequence, KV head, split), every row's output, max and sum."""
        lp = artifact.launch
        return workspace_bytes(shape, lp["splits"], lp["keys_per_tile"])


TEMPLATE = CAttentionTemplate


def splits_used(context: int, splits: int, tile: int) -> int:
    """Splits a context of ``context`` keys gets: ``splits`` of whole tiles, fewer when short."""
    length = -(-(-(-context // splits)) // tile) * tile
    return -(-context // length)


def workspace_bytes(shape: dict, splits: int, tile: int) -> int:
    rows = shape["queries"] * shape["group"]
    items = shape["batch"] * shape["kv_heads"] * splits_used(shape["context"], splits, tile)
    return 4 * items * rows * (shape["head_dim"] + 2)


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _one_split(g: Genome) -> Genome:
    # one split: each row's merge takes a single partial, whichever the method
    if g["parallel_config"]["splits"] == 1:
        g = with_gene(g, "instruction_sequence", "combine", "max_first")
    return g


CANONICALISERS = (one_thread(schedule="static", chunk=1), _one_split)


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """A scalar, single-threaded kernel without splits, row by row; and a vectorised, threaded one
    with splits, all rows of a group per pass."""
    naive = {"parallel_config": {"threads": 1, "schedule": "static", "chunk": 1, "splits": 1},
             "memory_pattern": {"vector_width": 1, "keys_per_tile": 32, "prefetch": "none"},
             "register_allocation": {"rows": 1, "unroll": 1},
             "instruction_sequence": {"rescale": "every_tile", "exp": "expf", "combine": "max_first"}}
    fast = {"parallel_config": {"threads": cores, "schedule": "static", "chunk": 1, "splits": 4},
            "memory_pattern": {"vector_width": 16, "keys_per_tile": 32, "prefetch": "none"},
            "register_allocation": {"rows": 4, "unroll": 2},
            "instruction_sequence": {"rescale": "lazy", "exp": "exp2f", "combine": "max_first"}}
    return (naive, fast)


def render_source(g: Genome) -> str:
    """kernels/attention_decode.c behind the genome's #defines."""
    p, m, r, s = g["parallel_config"], g["memory_pattern"], g["register_allocation"], g["instruction_sequence"]
    values = {"THREADS": p["threads"], "SCHEDULE": p["schedule"], "CHUNK": p["chunk"], "SPLITS": p["splits"],
              "TILE": m["keys_per_tile"], "VW": m["vector_width"], "UNROLL": r["unroll"],
              "PREFETCH": m["prefetch"] == "next_tile", "ROWS": r["rows"], "LAZY": s["rescale"] == "lazy",
              "EXP2": s["exp"] == "exp2f", "COMBINE_RUNNING": s["combine"] == "running"}
    return prelude("AbeBot decode attention (flash-decoding, GQA, K+1 causal queries), C backend, float32.",
                   ("omp.h",), values) + kernel_body(__file__, "attention_decode.c")
