"""CUDA C gathered GEMV template (header-free: bf16/fp16 travel as 16-bit integers).

A *task* is a group of ``rows`` candidates of one token. A team of ``split`` warps takes a task:
its lanes stride over the hidden size, ``vec`` elements per access, each lane keeping one float32
partial sum per row; warp shuffles, then (split > 1) shared memory, add them up. A row group past
the last candidate computes on a valid row and stores nothing. Hidden sizes that are not a
multiple of ``vec`` (or a misaligned tensor) run a scalar twin.

* parallel_config -- threads per block, warps per task (split-K over the hidden size), a block per
  ``threads / 32 / split`` tasks or a persistent grid of ``waves`` blocks per SM;
* memory_pattern -- elements per access (16 bytes down to one element), cache hints on the W rows
  (plain, non-coherent, streaming, no L1 allocation: each row is read once) and on h (reused by
  every task of its token);
* register_allocation -- rows per task (h loaded once for all of them), ``#pragma unroll`` of the
  hidden loop;
* instruction_sequence -- the order of LOAD_H, LOAD_W and FMA, and an optional PREFETCH of the W
  rows' next chunk into L2.

The CUDA C lies in ``kernels/``: ``gather_gemv.cu`` is the frame, the other files the pieces a genome
picks for its slots (see each file's opening comment); this module writes the ``#define``s and
chooses.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.kernel_files import COMMON, defines, fill, kernel_body, snippet
from core.workloads.template import Template

TOKENS = ("LOAD_H", "LOAD_W", "FMA")
BEFORE = (("LOAD_H", "FMA"), ("LOAD_W", "FMA"))
MAX_FLOATS = 80  # h and W floats per lane in flight, of the unrolled steps
WAVES = (1, 2, 4, 8)  # blocks per SM of a persistent grid


class CudaGatherGemvTemplate(Template):
    """The CUDA template of :class:`~core.workloads.gather_gemv.GatherGemvWorkload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512), "threads per block"),
                ChoiceGene("split", (1, 2, 4, 8), "warps sharing one task (split-K over the hidden size)"),
                ChoiceGene("schedule", ("tasks", "persistent"), "a block per group of tasks, or a persistent grid"),
                ChoiceGene("waves", WAVES, "blocks per SM of the persistent grid"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per access (16 bytes at most)"),
                ChoiceGene("w_load", ("", ".nc", ".cs", ".L1::no_allocate", ".nc.L1::no_allocate"), "cache hint of the W loads"),
                ChoiceGene("h_load", ("", ".nc", ".L1::evict_last"), "cache hint of the h loads"),
            ),
            "register_allocation": (
                MapGene("regs", (("rows", (1, 2, 4, 8)), ("unroll", (1, 2, 4))), "rows per task, hidden-loop unroll"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, ("PREFETCH",), BEFORE, "order of a step's operations"),),
        }

        def fits(g: Genome) -> str | None:
            p = g["parallel_config"]
            if p["split"] > p["threads"] // 32:
                return f"split {p['split']} warps > {p['threads'] // 32} warps per block"
            if _floats(g) > MAX_FLOATS:
                return f"{_floats(g)} floats in flight per lane (> {MAX_FLOATS})"
            return None

        wide = 16 // elt
        seeds = ({"parallel_config": {"threads": 256, "split": 1, "schedule": "tasks", "waves": 1},
                  "memory_pattern": {"vec": wide, "w_load": "", "h_load": ""},
                  "register_allocation": {"regs": {"rows": 1, "unroll": 1}}, "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"threads": 256, "split": 4, "schedule": "tasks", "waves": 1},
                  "memory_pattern": {"vec": wide, "w_load": ".nc.L1::no_allocate", "h_load": ".nc"},
                  "register_allocation": {"regs": {"rows": 2, "unroll": 2}}, "instruction_sequence": {"body": TOKENS}})
        return GeneSpace(groups, (fits,), seeds, canonicalisers=CANONICALISERS + (self._fewest_waves,))

    def _blocks(self, g: Genome, shape: dict) -> int:
        p = g["parallel_config"]
        tasks = shape["tokens"] * -(-shape["cands"] // g["register_allocation"]["regs"]["rows"])
        return -(-tasks // (p["threads"] // 32 // p["split"]))

    def _fewest_waves(self, g: Genome) -> Genome:
        # The persistent grid is min(blocks, SMs x waves) on every verification shape: the fewest
        # waves that give the same grids everywhere (a decode problem has fewer tasks than SMs).
        p = g["parallel_config"]
        if p["schedule"] != "persistent" or p["threads"] // 32 < p["split"]:
            return g
        blocks = [self._blocks(g, s) for s in self.workload.shapes(self.problem)]
        sms = self.device.multiprocessors
        grids = lambda w: [min(b, sms * w) for b in blocks]  # noqa: E731
        fewest = next(w for w in WAVES if grids(w) == grids(p["waves"]))
        return with_gene(g, "parallel_config", "waves", fewest)

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        rows = genome["register_allocation"]["regs"]["rows"]
        launch = {"threads": p["threads"], "teams": p["threads"] // 32 // p["split"], "rows": rows,
                  "schedule": p["schedule"], "waves": p["waves"]}
        resources = {"threads": p["threads"], "shared_bytes": 4 * (p["threads"] // 32) * rows if p["split"] > 1 else 0,
                     "registers": min(255, 65536 // p["threads"], 32 + _floats(genome) + rows)}
        return KernelSource("cuda", render_source(genome, self.problem["dtype"]), "abebot_gather_gemv", ("-std=c++17",),
                            launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        tasks = shape["tokens"] * -(-shape["cands"] // lp["rows"])
        blocks = -(-tasks // lp["teams"])
        if lp["schedule"] == "persistent":
            blocks = min(blocks, self.device.multiprocessors * lp["waves"])
        return kernel.bind((blocks, 1, 1), (lp["threads"], 1, 1), (t["h"], t["W"], t["ids"], t["logits"], shape["tokens"],
                                                                   shape["cands"], shape["vocab"], shape["hidden"]))


TEMPLATE = CudaGatherGemvTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _waves_persistent_only(g: Genome) -> Genome:
    # waves sizes the persistent grid; a block per task group launches one block per group.
    if g["parallel_config"]["schedule"] != "persistent":
        g = with_gene(g, "parallel_config", "waves", 1)
    return g


CANONICALISERS = (_waves_persistent_only,)


def _floats(g: Genome) -> int:
    r = g["register_allocation"]["regs"]
    return (1 + r["rows"]) * g["memory_pattern"]["vec"] * r["unroll"]


def _defines(g: Genome, dtype: str) -> str:
    """The genome's choices as the #defines gather_gemv.cu expects."""
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    waves = {"WAVES": f"{p['waves']}  // grid size: set at launch, recorded here"} if p["schedule"] == "persistent" else {}
    return defines({"THREADS": p["threads"], "SPLIT": p["split"], "TEAMS": "(THREADS / 32 / SPLIT)", **waves,
                    "VEC": m["vec"], "ROWS": r["rows"], "ELT": dtype_bytes(dtype)})


def render_source(g: Genome, dtype: str) -> str:
    """kernels/gather_gemv.cu behind the genome's #defines, its slots filled with the snippets the
    genome picks."""
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    split = p["split"] > 1
    loop = ("for (long long base = (long long)blockIdx.x * TEAMS; base < tasks; base += (long long)gridDim.x * TEAMS)"
            if p["schedule"] == "persistent" else "for (long long base = (long long)blockIdx.x * TEAMS; base < tasks; base = tasks)")
    ld = snippet(COMMON, "access_ld.cuh")
    body = fill(kernel_body(__file__, "gather_gemv.cu"), to_f=to_f, from_f=from_f,
                ld_0=fill(ld, hint=m["h_load"]), ld_1=fill(ld, hint=m["w_load"]), unroll=str(r["unroll"]),
                steps="\n".join(snippet(__file__, f"step_{tok.lower()}.cuh") for tok in g["instruction_sequence"]["body"]),
                red="__shared__ float red[THREADS / 32 * ROWS];" if split else "", loop=loop,
                combine="\n" + snippet(__file__, "combine_split.cuh") if split else "")
    return (f"// AbeBot generated CUDA gathered GEMV: logits[t, j] = h[t] . W[ids[t, j]] ({dtype})\ntypedef {T} T;\n"
            + _defines(g, dtype) + "\n" + body)
