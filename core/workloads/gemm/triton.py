"""Triton GEMM template: every gene group changes the generated module.

* parallel_config -- tile sizes, warps, GROUP_M swizzle, tile vs persistent schedule, split-K
  (deterministic: fp32 partials in a workspace, then a reduction kernel);
* memory_pattern -- BLOCK_K, pipelining stages, pointer loads vs TMA (host tensor descriptors),
  edge handling (masks vs modulo-wrapped indices), contiguity hints;
* register_allocation -- one fp32 accumulator vs two interleaved ones (shorter dependency chain),
  and a register cap (``maxnreg``);
* instruction_sequence -- the order of the loop body's statements (load A, load B, dot, pointer
  advance) and whether the next tile is prefetched into registers before the current dot.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.triton_common import TritonTemplate, gene_groups_of, in_order, indent
from core.backends.arrays import dtype_bytes

LOOP_TOKENS = ("LOAD_A", "LOAD_B", "DOT", "ADVANCE")
TL_DTYPE = {"float32": "tl.float32", "float16": "tl.float16", "bfloat16": "tl.bfloat16"}


def _acc_regs(g: Genome) -> int:
    p = g["parallel_config"]
    per_thread = p["block_m"] * p["block_n"] // (32 * p["num_warps"])
    return per_thread * (2 if g["register_allocation"]["regs"]["acc"] == "split2" else 1)


class TritonGemmTemplate(TritonTemplate):
    """The Triton template of :class:`~core.workloads.gemm.GemmWorkload`."""

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("block_m", (16, 32, 64, 128, 256), "rows of C per program (16: decode-sized M)"),
                ChoiceGene("block_n", (32, 64, 128, 256), "columns of C per program"),
                ChoiceGene("num_warps", (4, 8), "warps per program"),
                ChoiceGene("group_m", (1, 4, 8, 16), "GROUP_M swizzle of the program order (L2 reuse)"),
                ChoiceGene("schedule", ("tile", "persistent"), "one program per tile, or one per SM looping over tiles"),
                ChoiceGene("split_k", (1, 2, 4, 8), "K split across programs, reduced deterministically"),
            ),
            "memory_pattern": (
                ChoiceGene("block_k", (32, 64, 128), "K depth of one tile"),
                ChoiceGene("num_stages", (2, 3, 4, 5), "software-pipelining depth (shared-memory buffers)"),
                ChoiceGene("loads", ("pointer", "tma"), "tile loads through pointers or TMA tensor descriptors"),
                ChoiceGene("edge", ("mask", "wrap"), "M/N edges: masked loads, or indices wrapped modulo M/N"),
                ChoiceGene("hints", ("none", "contiguous"), "tl.multiple_of / max_contiguous hints on offsets"),
            ),
            "register_allocation": (
                MapGene("regs", (("acc", ("fp32", "split2")), ("maxnreg", (0, 128, 168, 232))),
                        "accumulators (one, or two interleaved) and the register cap (0 = compiler's choice)"),
            ),
            "instruction_sequence": (
                SequenceGene("loop", LOOP_TOKENS, ("PREFETCH",),
                             (("LOAD_A", "DOT"), ("LOAD_B", "DOT"), ("LOAD_A", "ADVANCE"), ("LOAD_B", "ADVANCE")),
                             "main-loop order; PREFETCH loads the next tile into registers before the dot"),
            ),
        }
        smem_limit = self.device.shared_mem_per_block or 232448
        elt = dtype_bytes(self.problem["dtype"])

        def fits(g: Genome) -> str | None:
            if _acc_regs(g) > 128:
                return f"accumulator needs {_acc_regs(g)} registers per thread (> 128)"
            if self._smem(g) > smem_limit:
                return f"shared memory {self._smem(g)} B > {smem_limit} B"
            cap = g["register_allocation"]["regs"]["maxnreg"]
            if cap and cap < _acc_regs(g) + 96:  # ptxas aborted (C7602) at 128 for a dot that needed 154
                return f"maxnreg {cap} too low for {_acc_regs(g)} accumulator registers"
            return None

        def combos(g: Genome) -> str | None:
            p, m = g["parallel_config"], g["memory_pattern"]
            if p["split_k"] > 1 and p["schedule"] == "persistent":
                return "split-K is only rendered for the tile schedule"
            if p["split_k"] > 1 and m["loads"] == "tma":
                return "TMA tiles past a K split are real data, not zeros: TMA needs split_k = 1"
            if elt == 4 and m["block_k"] * max(p["block_m"], p["block_n"]) > 128 * 64 and m["num_stages"] > 3:
                return "fp32 tiles this large leave no room for that many stages"
            return None

        seed = {"parallel_config": {"block_m": 128, "block_n": 128, "num_warps": 8, "group_m": 8, "schedule": "tile", "split_k": 1},
                "memory_pattern": {"block_k": 64, "num_stages": 3, "loads": "pointer", "edge": "mask", "hints": "none"},
                "register_allocation": {"regs": {"acc": "fp32", "maxnreg": 0}},
                "instruction_sequence": {"loop": ("LOAD_A", "LOAD_B", "DOT", "ADVANCE")}}
        seed2 = {**seed, "parallel_config": {**seed["parallel_config"], "block_n": 256},
                 "memory_pattern": {**seed["memory_pattern"], "loads": "tma", "num_stages": 4}}
        return GeneSpace(groups, (fits, combos), (seed, seed2) if elt == 2 else (seed,), canonicalisers=CANONICALISERS,
                         # where the pointer advance stands against the dot: the two are independent, and
                         # Triton sometimes keeps the written order, sometimes not
                         hints=("instruction_sequence.loop:ADVANCE",))

    def _smem(self, g: Genome) -> int:
        p, m = g["parallel_config"], g["memory_pattern"]
        elt = dtype_bytes(self.problem["dtype"])
        # Triton keeps num_stages buffers of both tiles (measured: 128x256x64 at 4 stages asked 245800 B)
        # (block_m below 64 is padded to a warpgroup's 64 rows: 16x256x128 at 5 stages asked 393280 B)
        return m["num_stages"] * (max(p["block_m"], 64) + p["block_n"]) * m["block_k"] * elt + 1024

    def render(self, genome: Genome) -> KernelSource:
        p, m, regs, loop = gene_groups_of(genome, "loop")
        launch = {"block_m": p["block_m"], "block_n": p["block_n"], "block_k": m["block_k"], "split_k": p["split_k"],
                  "num_warps": p["num_warps"], "num_stages": m["num_stages"]}
        return self.kernel_source(render_module(p, m, regs, loop, self.problem["dtype"]), "abebot_gemm", launch,
                                  32 * p["num_warps"], max(32, min(255, _acc_regs(genome) + 40)),
                                  shared_bytes=self._smem(genome))

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        a, b, c = t["a"], t["b"], t["c"]
        ws_bytes = kernel.module.workspace_bytes(shape["m"], shape["n"], shape["k"])
        ws = a.new_empty(ws_bytes // 4, dtype=_float32()) if ws_bytes else None
        return lambda: kernel(a, b, c, ws)

    def extra_bytes(self, kernel: Any, artifact: Any, shape: dict) -> int:
        return int(kernel.module.workspace_bytes(shape["m"], shape["n"], shape["k"]))



# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _masked_edges_need_no_hints(g: Genome) -> Genome:
    # With masked edges the rows and columns are pid * BLOCK + arange(BLOCK), which Triton's axis
    # analysis already knows to be contiguous and BLOCK-aligned; the hints only restore what the
    # modulo of wrapped edges hides.
    if g["memory_pattern"]["edge"] == "mask":
        g = with_gene(g, "memory_pattern", "hints", "none")
    return g


def _prefetch_is_not_pipelined(g: Genome) -> Genome:
    # With PREFETCH and one accumulator every load of an iteration goes to the next iteration in
    # registers, so Triton's software pipeliner has no load to stage: num_stages changes nothing
    # (measured: the same PTX at 2-5). With two accumulators the second half's loads feed a dot of
    # the same iteration, and are staged.
    if "PREFETCH" in g["instruction_sequence"]["loop"] and g["register_allocation"]["regs"]["acc"] == "fp32":
        g = with_gene(g, "memory_pattern", "num_stages", 2)
    return g


def _prefetch_is_a_flag(g: Genome) -> Genome:
    # PREFETCH writes no statement where it stands (it makes every LOAD fetch the next tile): its
    # place in the loop is not written anywhere, so it goes last.
    loop = tuple(g["instruction_sequence"]["loop"])
    if "PREFETCH" in loop:
        g = with_gene(g, "instruction_sequence", "loop", tuple(t for t in loop if t != "PREFETCH") + ("PREFETCH",))
    return g


CANONICALISERS = (_masked_edges_need_no_hints, _prefetch_is_not_pipelined, _prefetch_is_a_flag)


def _body(loop: tuple, prefetch: bool, tma: bool, acc: str, k_expr: str, pad: str, wrap: bool = False,
          ieee: bool = False) -> list[str]:
    """The loop statements in the genome's order for one K tile accumulated into ``acc``."""
    mm = "" if wrap else "mask_m[:, None] & "
    mn = "" if wrap else " & mask_n[None, :]"
    nxt = "_n" if prefetch else ""
    koff = f"({k_expr} + 1) * BLOCK_K" if prefetch else f"{k_expr} * BLOCK_K"

    def load(x: str, coords: str, mask: str) -> list[str]:
        """The load of operand ``x``'s tile (the next one with PREFETCH): TMA coordinates, or pointers."""
        if tma:
            return [f"{x}{nxt} = {x}_desc.load([{coords}])"]
        step = f" + BLOCK_K * stride_{x}k" if prefetch else ""
        return [f"{x}{nxt} = tl.load({x}_ptrs{step}, mask={mask}, other=0.0)"]

    prec = ", input_precision='ieee'" if ieee else ""
    lines = in_order(loop, {
        "LOAD_A": load("a", f"off_m, {koff}", f"{mm}(offs_k[None, :] < k_end - {koff})"),
        "LOAD_B": load("b", f"{koff}, off_n", f"(offs_k[:, None] < k_end - {koff}){mn}"),
        "DOT": [f"{acc} = tl.dot(a, b, {acc}{prec})"],
        "ADVANCE": (["pass  # TMA tiles are addressed by coordinates: nothing to advance"] if tma
                    else ["a_ptrs += BLOCK_K * stride_ak", "b_ptrs += BLOCK_K * stride_bk"]),
        "PREFETCH": [],  # a flag, not a statement: every load above fetches the next tile
    })
    if prefetch:
        lines.append("a, b = a_n, b_n")
    return [pad + ln for ln in lines]


def render_module(p: dict, m: dict, regs: dict, loop: tuple, dtype: str) -> str:
    """The full Python module text for one genome (also used for the pointer twin of a TMA genome)."""
    tma = m["loads"] == "tma"
    ieee = dtype == "float32"  # fp32 must not silently run as TF32
    kern = _render_kernel("abebot_gemm", p, m, regs, loop, tma, ieee)
    twin = _render_kernel("abebot_gemm_ptr", p, {**m, "loads": "pointer"}, regs, loop, False, ieee) if tma else ""
    maxnreg = regs["maxnreg"]
    return f'''"""AbeBot generated Triton GEMM ({dtype})."""
import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = {p["block_m"]}, {p["block_n"]}, {m["block_k"]}
GROUP_M, SPLIT_K = {p["group_m"]}, {p["split_k"]}
NUM_WARPS, NUM_STAGES, MAXNREG = {p["num_warps"]}, {m["num_stages"]}, {maxnreg or None}
PERSISTENT, TMA = {p["schedule"] == "persistent"}, {tma}
_SMS = {{}}


@triton.jit
def _tile_ids(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_pid_n
    group = tile // width
    first_m = group * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((tile % width) % size_m)
    pid_n = (tile % width) // size_m
    return pid_m, pid_n

{kern}
{twin}

@triton.jit
def abebot_splitk_reduce(ws_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def workspace_bytes(M, N, K):
    """fp32 partial products of a split-K launch (0 without split-K)."""
    return SPLIT_K * M * N * 4 if SPLIT_K > 1 else 0


def _tma_ok(*ts):
    return all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 for t in ts)


def launch(a, b, c, workspace=None):
    """C = A @ B; returns Triton's compiled-kernel handle."""
    M, K = a.shape
    N = b.shape[1]
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    if PERSISTENT:
        dev = a.device.index or 0
        if dev not in _SMS:  # (the interpreter runs on CPU tensors: pretend 4 SMs)
            _SMS[dev] = torch.cuda.get_device_properties(dev).multi_processor_count if a.is_cuda else 4
        grid = (min(tiles, _SMS[dev]), 1)
    else:
        grid = (tiles, SPLIT_K)
    out = workspace if SPLIT_K > 1 else c
    opts = dict(num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    if MAXNREG:
        opts["maxnreg"] = MAXNREG
    if TMA and _tma_ok(a, b):
        from triton.tools.tensor_descriptor import TensorDescriptor
        a_desc = TensorDescriptor(a, [M, K], [a.stride(0), 1], [BLOCK_M, BLOCK_K])
        b_desc = TensorDescriptor(b, [K, N], [b.stride(0), 1], [BLOCK_K, BLOCK_N])
        h = abebot_gemm[grid](a_desc, b_desc, out, M, N, K, c.stride(0), BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, **opts)
    else:
        fn = abebot_gemm_ptr if TMA else abebot_gemm
        h = fn[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                     BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, **opts)
    if SPLIT_K > 1:
        abebot_splitk_reduce[(triton.cdiv(M * N, 1024),)](workspace, c, M * N, SPLIT_K, 1024, num_warps=4)
    return h
'''


def _render_kernel(name: str, p: dict, m: dict, regs: dict, loop: tuple, tma: bool, ieee: bool) -> str:
    persistent = p["schedule"] == "persistent"
    prefetch = "PREFETCH" in loop
    split2 = regs["acc"] == "split2"
    wrap = m["edge"] == "wrap"
    hints = m["hints"] == "contiguous"
    if tma:
        args = "a_desc, b_desc, c_ptr, M, N, K, stride_cm"
    else:
        args = "a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm"
    L = ["@triton.jit",
         f"def {name}({args},",
         "        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr):"]
    if persistent:
        L += ["    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)",
              "    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):"]
    else:
        L += ["    tile = tl.program_id(0)"]
    b = [
        "pid_m, pid_n = _tile_ids(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)",
        "pid_k = tl.program_id(1)",
        "k_tiles = tl.cdiv(K, BLOCK_K)",
        "per_split = tl.cdiv(k_tiles, SPLIT_K)",
        "kt0 = pid_k * per_split",
        "kt1 = kt0 + per_split",
        "if kt1 > k_tiles:",
        "    kt1 = k_tiles",
        "k_end = tl.minimum(K, kt1 * BLOCK_K)",
        "off_m = pid_m * BLOCK_M",
        "off_n = pid_n * BLOCK_N",
        "offs_m = off_m + tl.arange(0, BLOCK_M)",
        "offs_n = off_n + tl.arange(0, BLOCK_N)",
        "offs_k = tl.arange(0, BLOCK_K)",
    ]
    if not tma:
        if wrap:  # indices wrapped modulo M/N: every load in bounds, no M/N masks (the tutorial's trick)
            b += ["rows = offs_m % M", "cols = offs_n % N"]
        else:
            b += ["rows = offs_m", "cols = offs_n", "mask_m = offs_m < M", "mask_n = offs_n < N"]
        if hints:
            b += ["rows = tl.max_contiguous(tl.multiple_of(rows, BLOCK_M), BLOCK_M)",
                  "cols = tl.max_contiguous(tl.multiple_of(cols, BLOCK_N), BLOCK_N)"]
        b += ["a_ptrs = a_ptr + rows[:, None] * stride_am + (kt0 * BLOCK_K + offs_k)[None, :] * stride_ak",
              "b_ptrs = b_ptr + (kt0 * BLOCK_K + offs_k)[:, None] * stride_bk + cols[None, :] * stride_bn"]
    b += ["acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]
    if split2:
        b += ["acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]
    inner = "    "
    kw = dict(wrap=wrap, ieee=ieee)
    if prefetch:  # first tile before the loop; each iteration loads the next one
        b += _body(("LOAD_A", "LOAD_B"), False, tma, "acc0", "kt0", "", **kw)
    if split2:
        b += ["for kk in range(kt0, kt1, 2):"]
        b += _body(loop, prefetch, tma, "acc0", "kk", inner, **kw)
        b += _body(loop, prefetch, tma, "acc1", "(kk + 1)", inner, **kw)
        b += ["acc = acc0 + acc1"]
    else:
        b += ["for kk in range(kt0, kt1):"]
        b += _body(loop, prefetch, tma, "acc0", "kk", inner, **kw)
        b += ["acc = acc0"]
    b += ["mask_c = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
          "if SPLIT_K > 1:",
          "    tl.store(c_ptr + pid_k * M * N + offs_m[:, None] * N + offs_n[None, :], acc, mask=mask_c)",
          "else:",
          "    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask_c)"]
    L += indent(b, 2 if persistent else 1)
    return "\n".join(L) + "\n"


TEMPLATE = TritonGemmTemplate


def _float32():
    import torch

    return torch.float32
