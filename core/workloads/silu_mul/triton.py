"""Triton SiLU-and-multiply template.

* parallel_config -- ``BLOCK`` elements per program along a row (or of the flat array), warps,
  rows per program, and the layout: a 2-D grid of (row block, column block) programs, or the
  tensors as one flat array (contiguous, so vectorised whatever the hidden size);
* memory_pattern -- eviction policy of the loads, contiguity hints (``tl.multiple_of`` /
  ``tl.max_contiguous``), masks on every access or only when the problem is not a multiple of the
  block (``EVEN``, decided at launch), the store's cache modifier;
* register_allocation -- the multiply in fp32 or in the input dtype (SiLU rounded first, as
  torch's eager ``F.silu(gate) * up``), and the sigmoid as ``1 / (1 + exp(-g))``, ``tl.sigmoid``
  or ``exp2`` with a reciprocal;
* instruction_sequence -- the order of load gate, load up, SiLU, multiply, store.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.triton_common import (TritonTemplate, cache_modifier, eviction, even_twin, gene_groups_of, in_order,
                                          indent, masks_gene, num_warps_gene, per_thread_violation)

TOKENS = ("LOAD_GATE", "LOAD_UP", "SILU", "MUL", "STORE")
BEFORE = (("LOAD_GATE", "SILU"), ("SILU", "MUL"), ("LOAD_UP", "MUL"), ("MUL", "STORE"))
MAX_ELEMS_PER_THREAD = 32  # of each tensor: gate, up and the result live together
SILU = {
    "exp": "g / (1.0 + tl.exp(-g))",
    "sigmoid": "g * tl.sigmoid(g)",
    "exp2_rcp": "g * (1.0 / (1.0 + tl.exp2(g * -1.4426950408889634)))",
}


def _elements(p: dict) -> int:
    """Elements of each tensor one program handles."""
    return p["block"] * (1 if p["layout"] == "flat" else p["rows_per_program"])


class TritonSiluMulTemplate(TritonTemplate):
    """The Triton template of :class:`~core.workloads.silu_mul.SiluMulWorkload`."""

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("block", (256, 512, 1024, 2048, 4096), "elements per program along a row (2-D) or of the flat array"),
                num_warps_gene((1, 2, 4, 8, 16)),
                ChoiceGene("rows_per_program", (1, 2, 4), "rows per program (2-D layout)"),
                ChoiceGene("layout", ("2d", "flat"), "(row block, column block) grid, or one flat array"),
            ),
            "memory_pattern": (
                ChoiceGene("eviction", ("", "evict_first", "evict_last"), "L2 eviction policy of the loads"),
                ChoiceGene("hints", ("none", "contiguous"), "tl.multiple_of / tl.max_contiguous on the offsets"),
                masks_gene("mask every access, or only when the shape is not a multiple of the block"),
                ChoiceGene("store", ("", ".cs"), "store cache modifier (.cs = streaming)"),
            ),
            "register_allocation": (
                MapGene("regs", (("mul", ("fp32", "input")), ("silu", tuple(SILU))),
                        "precision of the multiply; how the sigmoid is computed"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, (), BEFORE, "order of the program's operations"),),
        }

        def fits(g: Genome) -> str | None:
            p = g["parallel_config"]
            return per_thread_violation(_elements(p) // (32 * p["num_warps"]), MAX_ELEMS_PER_THREAD, least=1)

        # A plain 2-D kernel (16 bytes per thread), and a flat one like torch.compile's generated
        # kernel: on an H200 (4096 x 14336) 81.7 us in bf16 and 161.5 in fp32 against its 82.0 and
        # 162.6; the same with evict_first, a plain store and the multiply in fp32 took 86.2 / 182.6.
        seeds = ({"parallel_config": {"block": 1024, "num_warps": 4, "rows_per_program": 1, "layout": "2d"},
                  "memory_pattern": {"eviction": "", "hints": "none", "masks": "always", "store": ""},
                  "register_allocation": {"regs": {"mul": "fp32", "silu": "exp"}},
                  "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"block": 2048, "num_warps": 8, "rows_per_program": 1, "layout": "flat"},
                  "memory_pattern": {"eviction": "evict_last", "hints": "none", "masks": "even", "store": ".cs"},
                  "register_allocation": {"regs": {"mul": "input", "silu": "sigmoid"}},
                  "instruction_sequence": {"body": TOKENS}})
        canonicalisers = CANONICALISERS + ((_fp32_multiply,) if self.problem["dtype"] == "float32" else ())
        return GeneSpace(groups, (fits,), seeds, canonicalisers=canonicalisers)

    def render(self, genome: Genome) -> KernelSource:
        p, m, regs, body = gene_groups_of(genome)
        threads = 32 * p["num_warps"]
        per_thread = max(1, _elements(p) // threads)
        launch = {"block": p["block"], "num_warps": p["num_warps"], "rows_per_program": p["rows_per_program"],
                  "layout": p["layout"]}
        return self.kernel_source(render_module(p, m, regs, body), "abebot_silu_mul", launch, threads,
                                  min(255, 24 + 3 * per_thread))

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        gate, up, out = t["gate"], t["up"], t["out"]
        return lambda: kernel(gate, up, out)


TEMPLATE = TritonSiluMulTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _rows_2d_only(g: Genome) -> Genome:
    # The flat layout launches programs over the flat array (ROWS = 1): there are no row blocks.
    if g["parallel_config"]["layout"] == "flat":
        g = with_gene(g, "parallel_config", "rows_per_program", 1)
    return g


def _fp32_multiply(g: Genome) -> Genome:
    # float32 tensors: multiplying "in the input dtype" is multiplying in float32 (the casts are dropped).
    return with_gene(g, "register_allocation", "regs", "fp32", key="mul")


def _hints_are_implied(g: Genome) -> Genome:
    # Both layouts index pid * BLOCK + arange(BLOCK), which Triton's axis analysis already knows to be
    # contiguous and BLOCK-aligned (and it specialises n_cols divisible by 16 itself): the hints add
    # nothing, in any context (measured: the same PTX everywhere). Kept as a gene so that stored
    # genomes still load.
    return with_gene(g, "memory_pattern", "hints", "none")


CANONICALISERS = (_rows_2d_only, _hints_are_implied)


def render_module(p: dict, m: dict, regs: dict, body: tuple) -> str:
    flat = p["layout"] == "flat"
    ev, st = eviction(m["eviction"]), cache_modifier(m["store"])
    k = []
    if flat:
        k += ["offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)"]
        if m["hints"] == "contiguous":
            k += ["offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)"]
        k += ["mask = offs < n_rows * n_cols"]
    else:
        k += ["rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)",
              "cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)"]
        if m["hints"] == "contiguous":
            k += ["cols = tl.max_contiguous(tl.multiple_of(cols, BLOCK), BLOCK)"]
        k += ["offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]",
              "mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)"]
    mask = ", mask=mask, other=0.0" if m["masks"] == "always" else ""
    smask = ", mask=mask" if m["masks"] == "always" else ""
    if m["masks"] == "even":  # two instances of the body: masked, and unmasked when the shape divides
        k_even = _body(body, regs, ev, st, "", "")
        k_mask = _body(body, regs, ev, st, ", mask=mask, other=0.0", ", mask=mask")
        k += even_twin(k_even, k_mask)
    else:
        k += _body(body, regs, ev, st, mask, smask)
    kernel = "\n".join(["@triton.jit",
                        "def abebot_silu_mul(g_ptr, u_ptr, o_ptr, n_rows, n_cols,",
                        "                    ROWS: tl.constexpr, BLOCK: tl.constexpr, EVEN: tl.constexpr):"]
                       + indent(k))
    return f'''"""AbeBot generated Triton SiLU-and-multiply."""
import triton
import triton.language as tl

BLOCK, NUM_WARPS, ROWS, FLAT = {p["block"]}, {p["num_warps"]}, {p["rows_per_program"]}, {flat}


{kernel}


def launch(gate, up, out):
    """out = silu(gate) * up for contiguous (tokens, hidden) tensors."""
    R, C = gate.shape
    if FLAT:
        grid, rows = (triton.cdiv(R * C, BLOCK),), 1
        even = (R * C) % BLOCK == 0
    else:
        grid, rows = (triton.cdiv(R, ROWS), triton.cdiv(C, BLOCK)), ROWS
        even = R % ROWS == 0 and C % BLOCK == 0
    return abebot_silu_mul[grid](gate, up, out, R, C, rows, BLOCK, even, num_warps=NUM_WARPS)
'''


def _body(body: tuple, regs: dict, ev: str, st: str, mask: str, smask: str) -> list[str]:
    """The program's steps in genome order; the result is computed in fp32 unless ``mul`` says input."""
    # multiplying in the input dtype rounds SiLU to it first, as torch's eager path does
    return in_order(body, {"LOAD_GATE": [f"g = tl.load(g_ptr + offs{mask}{ev}).to(tl.float32)"],
                           "LOAD_UP": [f"u = tl.load(u_ptr + offs{mask}{ev})"],
                           "SILU": [f"s = {SILU[regs['silu']]}"],
                           "MUL": ["r = s * u.to(tl.float32)" if regs["mul"] == "fp32" else "r = s.to(u.dtype) * u"],
                           "STORE": [f"tl.store(o_ptr + offs, r.to(o_ptr.dtype.element_ty){smask}{st})"]})
