"""Triton RMSNorm template (optionally fused with the residual add, as vLLM's fused_add_rms_norm).

* parallel_config -- rows per program, warps, one program per row block or a persistent grid
  (``waves`` programs per SM looping over row blocks);
* memory_pattern -- the row held whole in registers (one read of x) or in column chunks (x read
  twice, the second time mostly from L2), eviction hints on loads, a streaming store;
* register_allocation -- x kept in fp32 or in the input dtype between the two uses, the weight
  hoisted out of the persistent loop or not, and the order of the output math (fp32 throughout,
  or vLLM's ``(x * rstd).to(dtype) * w``);
* instruction_sequence -- the order of load x, load w, reduce, store (w may be loaded before x,
  between, or after the reduction, which changes how its latency overlaps).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.triton_common import (TritonTemplate, cache_modifier, eviction, gene_groups_of, in_order, indent,
                                          next_pow2, num_warps_gene, per_thread_violation)

TOKENS = ("LOAD_X", "LOAD_W", "REDUCE", "STORE")
MAX_ELEMS_PER_THREAD = 64  # more than this per thread spills on every variant


class TritonRmsNormTemplate(TritonTemplate):
    """The Triton template of :class:`~core.workloads.rmsnorm.RmsNormWorkload`."""

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("rows_per_program", (1, 2, 4, 8), "rows normalised by one program"),
                num_warps_gene((1, 2, 4, 8, 16)),
                ChoiceGene("schedule", ("rows", "persistent"), "one program per row block, or a persistent grid"),
                ChoiceGene("waves", (1, 2, 4, 8), "programs per SM of the persistent grid"),
            ),
            "memory_pattern": (
                ChoiceGene("block_cols", (0, 1024, 2048, 4096), "0: whole row in registers (one read); else chunk width (two reads)"),
                ChoiceGene("x_eviction", ("", "evict_first"), "L2 eviction hint on x (w is always evict_last)"),
                ChoiceGene("store", ("", ".cs"), "output store cache modifier (.cs = streaming)"),
            ),
            "register_allocation": (
                MapGene("regs", (("x_keep", ("fp32", "input")), ("w_hoist", ("no", "yes")), ("out_math", ("fp32", "vllm"))),
                        "x between its two uses, weight hoisted out of the persistent loop, output rounding order"),
            ),
            "instruction_sequence": (
                SequenceGene("body", TOKENS, (), (("LOAD_X", "REDUCE"), ("REDUCE", "STORE"), ("LOAD_W", "STORE")),
                             "order of the row's steps"),
            ),
        }
        cols = max(self.problem["cols"], 1031)

        def fits(g: Genome) -> str | None:
            p, m = g["parallel_config"], g["memory_pattern"]
            width = m["block_cols"] or next_pow2(cols)
            per_thread = p["rows_per_program"] * min(width, next_pow2(cols)) // (32 * p["num_warps"])
            return per_thread_violation(per_thread, MAX_ELEMS_PER_THREAD, least=1)

        seed = {"parallel_config": {"rows_per_program": 1, "num_warps": 8, "schedule": "rows", "waves": 1},
                "memory_pattern": {"block_cols": 0, "x_eviction": "evict_first", "store": ""},
                "register_allocation": {"regs": {"x_keep": "fp32", "w_hoist": "no", "out_math": "fp32"}},
                "instruction_sequence": {"body": TOKENS}}
        canonicalisers = (CANONICALISERS + ((_fp32_casts,) if self.problem["dtype"] == "float32" else ())
                          + (() if self.problem["residual"] else (_chunked_x_is_reloaded,)))
        # Without a residual, x held in its own dtype over whole rows is exact: Triton usually keeps
        # the round trip, but may fold it (seen once in the sm_90 PTX), so it is a hint there
        hints = () if self.problem["residual"] else ("register_allocation.regs.x_keep",)
        return GeneSpace(groups, (fits,), (seed,), canonicalisers=canonicalisers, hints=hints)

    def render(self, genome: Genome) -> KernelSource:
        p, m, regs, body = gene_groups_of(genome)
        source = render_module(p, m, regs, body, bool(self.problem["residual"]))
        width = m["block_cols"] or next_pow2(self.problem["cols"])
        threads = 32 * p["num_warps"]
        per_thread = max(1, p["rows_per_program"] * width // threads)
        launch = {"rows_per_program": p["rows_per_program"], "num_warps": p["num_warps"], "block_cols": m["block_cols"]}
        return self.kernel_source(source, "abebot_rmsnorm", launch, threads,
                                  min(255, 24 + per_thread * (2 if regs["x_keep"] == "fp32" else 1)),
                                  shared_bytes=4 * 32 * p["rows_per_program"])

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        x, w, out, res, eps = t["x"], t["w"], t["out"], t.get("residual"), self.problem["eps"]
        return lambda: kernel(x, w, out, res, eps)



# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _persistent_only(g: Genome) -> Genome:
    # waves sizes the persistent grid and w_hoist moves the weight load out of its loop: one program
    # per row block has neither.
    if g["parallel_config"]["schedule"] != "persistent":
        g = with_gene(g, "parallel_config", "waves", 1)
        g = with_gene(g, "register_allocation", "regs", "no", key="w_hoist")
    return g


def _whole_row_only(g: Genome) -> Genome:
    # Chunked rows load a weight chunk per column block: there is no whole-row weight to hoist.
    if g["memory_pattern"]["block_cols"] > 0:
        g = with_gene(g, "register_allocation", "regs", "no", key="w_hoist")
    return g


def _body_order(g: Genome) -> Genome:
    # Where the body order is not written: a hoisted weight is loaded before the loop, so LOAD_W has
    # no place in the body; chunked rows reduce and store in fixed places, only whether x or w is
    # loaded first in the second pass is the genome's.
    body, chunked = tuple(g["instruction_sequence"]["body"]), g["memory_pattern"]["block_cols"] > 0
    hoisted = (g["parallel_config"]["schedule"] == "persistent" and not chunked
               and g["register_allocation"]["regs"]["w_hoist"] == "yes")
    if hoisted:
        g = with_gene(g, "instruction_sequence", "body", TOKENS)
    elif chunked:
        w_first = body.index("LOAD_W") < body.index("LOAD_X")
        g = with_gene(g, "instruction_sequence", "body", ("LOAD_W", "LOAD_X", "REDUCE", "STORE") if w_first else TOKENS)
    return g


def _fp32_casts(g: Genome) -> Genome:
    # float32 tensors: holding x in the input dtype and vLLM's rounding to the input dtype before the
    # weight are casts from float32 to float32, which Triton drops.
    g = with_gene(g, "register_allocation", "regs", "fp32", key="x_keep")
    return with_gene(g, "register_allocation", "regs", "fp32", key="out_math")


def _chunked_x_is_reloaded(g: Genome) -> Genome:
    # Chunked rows without a residual load x again from memory in the second pass, in its own dtype:
    # nothing is held between the passes, so how x would be held changes nothing (seen in the
    # sm_90 PTX). Whole rows keep x in registers, where the choice usually changes the kernel.
    if g["memory_pattern"]["block_cols"] > 0:
        g = with_gene(g, "register_allocation", "regs", "fp32", key="x_keep")
    return g


CANONICALISERS = (_persistent_only, _whole_row_only, _body_order)


def _load_x(res: bool, evict: str, keep: str, offs: str, mask: str) -> list[str]:
    hint = eviction(evict)
    lines = [f"x = tl.load(x_ptr + {offs}, mask={mask}, other=0.0{hint}).to(tl.float32)"]
    if res:
        lines += [f"x += tl.load(r_ptr + {offs}, mask={mask}, other=0.0{hint}).to(tl.float32)",
                  f"tl.store(r_ptr + {offs}, x.to(r_ptr.dtype.element_ty), mask={mask})"]
    if keep == "input":  # hold the row in the narrow dtype; widen again at each use
        lines.append("x = x.to(o_ptr.dtype.element_ty)")
    return lines


def render_module(p: dict, m: dict, regs: dict, body: tuple, res: bool) -> str:
    chunked = m["block_cols"] > 0
    persistent = p["schedule"] == "persistent"
    hoist = persistent and regs["w_hoist"] == "yes" and not chunked
    xf = "x.to(tl.float32)" if regs["x_keep"] == "input" else "x"
    store_mod = cache_modifier(m["store"])
    if regs["out_math"] == "vllm":
        out_expr = "(xf * rstd[:, None]).to(o_ptr.dtype.element_ty) * w"
    else:
        out_expr = "xf * rstd[:, None] * w.to(tl.float32)"
    w_load = 'w = tl.load(w_ptr + cols, mask=cmask, other=0.0, eviction_policy="evict_last")[None, :]'

    k = []  # kernel body for one row block (indented later)
    k += ["rows = blk * ROWS + tl.arange(0, ROWS)", "rmask = rows < n_rows"]
    if not chunked:
        k += ["cols = tl.arange(0, BLOCK)", "cmask = cols < n_cols",
              "mask = rmask[:, None] & cmask[None, :]", "offs = rows[:, None] * stride + cols[None, :]"]
        k += in_order(body, {
            "LOAD_X": _load_x(res, m["x_eviction"], regs["x_keep"], "offs", "mask"),
            "LOAD_W": [] if hoist else [w_load],
            "REDUCE": [f"xf = {xf}", "rstd = tl.rsqrt(tl.sum(xf * xf, axis=1) / n_cols + eps)"],
            "STORE": [f"xf = {xf}", f"tl.store(o_ptr + offs, ({out_expr}).to(o_ptr.dtype.element_ty), mask=mask{store_mod})"]})
    else:  # two passes over column chunks; the second re-reads x (or the residual sum just written)
        k += ["acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)",
              "for c0 in range(0, n_cols, BLOCK):",
              "    cols = c0 + tl.arange(0, BLOCK)", "    cmask = cols < n_cols",
              "    mask = rmask[:, None] & cmask[None, :]", "    offs = rows[:, None] * stride + cols[None, :]"]
        k += indent(_load_x(res, m["x_eviction"], regs["x_keep"], "offs", "mask"))
        k += [f"    xf = {xf}", "    acc += xf * xf",
              "rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)",
              "for c0 in range(0, n_cols, BLOCK):",
              "    cols = c0 + tl.arange(0, BLOCK)", "    cmask = cols < n_cols",
              "    mask = rmask[:, None] & cmask[None, :]", "    offs = rows[:, None] * stride + cols[None, :]"]
        src = "r_ptr" if res else "x_ptr"  # reduce and store stand in fixed places; only the loads are ordered
        k += indent(in_order(body, {"LOAD_X": [f"xf = tl.load({src} + offs, mask=mask, other=0.0).to(tl.float32)"],
                                    "LOAD_W": [w_load], "REDUCE": [], "STORE": []}))
        k += [f"    tl.store(o_ptr + offs, ({out_expr}).to(o_ptr.dtype.element_ty), mask=mask{store_mod})"]

    lines = ["@triton.jit",
             "def abebot_rmsnorm(x_ptr, w_ptr, r_ptr, o_ptr, n_rows, n_cols, stride, eps,",
             "                   ROWS: tl.constexpr, BLOCK: tl.constexpr):"]
    if persistent:
        if hoist:
            lines += ["    cols = tl.arange(0, BLOCK)", "    cmask = cols < n_cols", "    " + w_load]
        lines += ["    for blk in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):"]
        lines += indent(k, 2)
    else:
        lines += ["    blk = tl.program_id(0)"] + indent(k)
    kernel = "\n".join(lines)
    return f'''"""AbeBot generated Triton RMSNorm (residual={res})."""
import torch
import triton
import triton.language as tl

ROWS, NUM_WARPS, BLOCK_COLS = {p["rows_per_program"]}, {p["num_warps"]}, {m["block_cols"]}
PERSISTENT, WAVES, HAS_RESIDUAL = {persistent}, {p["waves"]}, {res}
_SMS = {{}}


{kernel}


def launch(x, w, out, residual=None, eps=1e-6):
    """out = rmsnorm(x [+ residual]) * w; with a residual, the sum is written back into it."""
    R, C = x.shape
    block = min(BLOCK_COLS, triton.next_power_of_2(C)) if BLOCK_COLS else triton.next_power_of_2(C)
    blocks = triton.cdiv(R, ROWS)
    if PERSISTENT:
        dev = x.device.index or 0
        if dev not in _SMS:  # (the interpreter runs on CPU tensors: pretend 4 SMs)
            _SMS[dev] = torch.cuda.get_device_properties(dev).multi_processor_count if x.is_cuda else 4
        grid = (min(blocks, _SMS[dev] * WAVES),)
    else:
        grid = (blocks,)
    r = residual if HAS_RESIDUAL else x
    return abebot_rmsnorm[grid](x, w, r, out, R, C, x.stride(0), eps, ROWS, block, num_warps=NUM_WARPS)
'''


TEMPLATE = TritonRmsNormTemplate
