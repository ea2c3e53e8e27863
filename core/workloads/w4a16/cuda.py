"""CUDA C W4A16 template (header-free: bf16/fp16 travel as 16-bit integers; GPTQ int32 words).

At M = 1 the kernel is a stream of 4-bit weights, so what decides its speed is how many bytes are
in flight and how few instructions each weight costs. A block is ``threads / ksplit`` column
threads by ``ksplit`` K lanes (column threads fastest, so a warp reads whole 32-byte sectors of
several adjacent word rows); a column thread owns ``vec`` adjacent columns, and its K lane takes
words ``ks, ks + ksplit, ...`` of the column's K / 8 words. It issues the loads of ``batch`` words
before any of their math, multiplies each word's 8 values by x in float32 and adds the word's
partial sum times its group's scale. The K lanes add up by warp shuffles, then across warps
through shared memory, in a fixed order (deterministic). Rows of x are tiled ``rows_per_block`` to
a block. Columns when N is not a multiple of ``vec`` (or a misaligned tensor) run one at a time.

* parallel_config -- threads per block, K lanes per column (split-K inside the block), rows per block;
* memory_pattern -- columns per thread (words per access), cache hints of the word loads (each
  word is read once: streaming, no L1 allocation, non-coherent) and of the x loads; the layout:
  GPTQ's rows of N, or ``strips`` (:func:`strips`, made once by the repack and counted as memory):
  the words and scales of each block's columns contiguous along K, so that a block streams one
  region instead of a narrow column of every row;
* register_allocation -- words in flight per thread, whether the next batch's loads are issued
  before this batch's math (double buffering), the scale on each word's partial sum or on each
  weight, ``#pragma unroll`` of the batch loop, and the blocks per SM ``__launch_bounds__`` must
  leave registers for (``min_blocks``);
* instruction_sequence -- the order of a word's 8 values, whether a batch's x values are loaded
  before its words or at each word's math, and the dequantisation: ``cvt`` of the shifted
  nibble; the magic number (``0x4B000000 | q`` read as a float is 2^23 + q); or ``mask``: the
  nibble masked in place (``0x4B000000 | (w & 15 << 4p)`` is 2^23 + q 16^p, exact for p <= 4;
  the top three nibbles come from ``w >> 12``) with x pre-scaled by 16^-p, one instruction fewer
  per weight than the magic number; or ``half2``: two values at a time into fp16x2 (lop3 makes
  1024 + q, the way FasterTransformer and Marlin dequantise), multiplied by x rounded to fp16 into
  an fp16x2 partial sum of the word that goes to float32 once. It halves the instructions per
  weight; its range is fp16's (|x| < 65504), and verification decides whether its rounding passes.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import GeneSpace, Genome
from core.workloads.kernel_files import fill, kernel_body
from core.workloads.template import Template
from core.workloads.w4a16 import cuda_mma, cuda_mma_w, cuda_norm
from core.workloads.w4a16.cuda_genes import (CANONICALISERS, fits, gene_groups, launch_bounds, register_cap, seeds,
                                             shared_bytes, thread_floats)


class CudaW4A16Template(Template):
    """The CUDA template of :class:`~core.workloads.w4a16.W4A16Workload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        dtype, arch = self.problem["dtype"], self.device.arch
        return GeneSpace(gene_groups(dtype, arch), (fits,), seeds(dtype, arch), canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        path = _path(genome["instruction_sequence"]["math"])
        if path:  # a tensor-core path; its cp.async ring is dynamic shared memory
            launch = path.launch(genome, self.problem)
            resources = {"threads": genome["parallel_config"]["threads"],
                         "shared_bytes": shared_bytes(genome) + launch["dynamic_shared_bytes"],
                         "registers": min(register_cap(genome), 40 + path.registers(genome))}
            return KernelSource("cuda", render_source(genome, self.problem), "abebot_w4a16", ("-std=c++17",), launch, resources)
        p, v = genome["parallel_config"], genome["memory_pattern"]["vec"]
        col_threads = p["threads"] // p["ksplit"]
        launch = {"threads": p["threads"], "col_threads": col_threads, "vec": v, "rows_per_block": p["rows_per_block"],
                  "layout": genome["memory_pattern"]["layout"], "cols": col_threads * v}
        resources = {"threads": p["threads"], "shared_bytes": shared_bytes(genome),
                     "registers": min(register_cap(genome), 40 + thread_floats(genome))}
        return KernelSource("cuda", render_source(genome, self.problem), "abebot_w4a16", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        m, n = shape["m"], shape["n"]
        zeros = t["zeros"] if self.problem["zero_points"] else t["qweight"]  # (not read without zero points)
        ws = workspace(lp, t, shape)
        return keeping(kernel.bind(grid(lp, m, n), (lp["threads"], 1, 1),
                                   (t["x"], words(lp, t), scales(lp, t), zeros, t["y"], m, n, shape["k_groups"], *ws),
                                   lp.get("dynamic_shared_bytes", 0)), ws)

    def extra_bytes(self, kernel: Any, artifact: Any, shape: dict) -> int:
        """The tensor-core path's partial tiles and counters when it splits K over blocks."""
        path = _path(kernel.launch_params.get("math"))
        if not path:
            return super().extra_bytes(kernel, artifact, shape)
        floats, ints = path.workspace(kernel.launch_params, shape["m"], shape["n"])
        return 4 * (floats + ints)

    def repack(self, kernel: Any, arrays: Any, weights: dict, shape: dict) -> dict:
        """A tensor-core path's words (:func:`cuda_mma.repack`; with the weights as A, its scales too:
        :func:`cuda_mma_w.repack`); the GEMV path's words and scales
        in strips (:func:`strips`) when its layout gene says so; else nothing."""
        lp = kernel.launch_params
        if lp.get("math") == cuda_mma_w.MATH:
            return dict(zip(cuda_mma_w.PACKED, cuda_mma_w.repack(weights["qweight"], weights["scales"], int(lp["cols"]))))
        if lp.get("math") == "mma":
            return {cuda_mma.PACKED: cuda_mma.repack(weights["qweight"], int(lp["cols"]))}
        if lp.get("layout") == "strips":
            qweight = weights["qweight"]
            return {STRIPS[0]: strips(qweight.reshape(-1, qweight.shape[-1]), int(lp["cols"])),
                    STRIPS[1]: strips(weights["scales"], int(lp["cols"]))}
        return {}


def grid(lp: dict, m: int, n: int) -> tuple[int, int, int]:
    """The launch grid of a kernel with launch parameters ``lp`` for an m x n output."""
    path = _path(lp.get("math"))
    if path:
        return path.grid(lp, m, n)
    return (-(-(-(-n // lp["vec"])) // lp["col_threads"]), -(-m // lp["rows_per_block"]), 1)


def workspace(lp: dict, t: dict, shape: dict) -> tuple:
    """The tensor-core path's last two arguments: its partial tiles and zeroed tile counters (the
    output twice when it needs none: never touched); nothing for the GEMV path."""
    path = _path(lp.get("math"))
    if not path:
        return ()
    floats, ints = path.workspace(lp, shape["m"], shape["n"])
    if not floats:
        return t["y"], t["y"]
    import torch

    return t["y"].new_empty((floats,), dtype=torch.float32), t["y"].new_zeros((ints,), dtype=torch.int32)


def _path(math: str | None) -> Any:
    """The module of the tensor-core path ``math`` (a genome's gene or a kernel's launch parameter),
    or None for the GEMV."""
    return {"mma": cuda_mma, cuda_mma_w.MATH: cuda_mma_w}.get(math)


def keeping(launch: Callable[[], None], tensors: tuple) -> Callable[[], None]:
    """``launch`` holding ``tensors`` alive: a bound launch keeps raw pointers only, so a workspace
    nothing else references would go back to the allocator and be handed to the next tensor. With no
    tensors to keep, ``launch`` itself (so that the library calls it directly, core/library/launch.py)."""
    if not tensors:
        return launch

    def run() -> None:
        launch()

    run.tensors = tensors  # type: ignore[attr-defined]
    return run


STRIPS = ("qweight_strips", "scales_strips")  # the strips layout's words and scales in bind()'s tensors


def words(lp: dict, t: dict) -> Any:
    """The words the kernel reads: GPTQ's, a tensor-core path's or the strips layout's."""
    if lp.get("math") == cuda_mma_w.MATH:
        return t[cuda_mma_w.PACKED[0]]
    if lp.get("math") == "mma":
        return t[cuda_mma.PACKED]
    return t[STRIPS[0]] if lp.get("layout") == "strips" else t["qweight"]


def scales(lp: dict, t: dict) -> Any:
    """The scales the kernel reads: the workload's, the strips layout's or the weights-as-A path's."""
    if lp.get("math") == cuda_mma_w.MATH:
        return t[cuda_mma_w.PACKED[1]]
    return t[STRIPS[1]] if lp.get("layout") == "strips" else t["scales"]


def strips(rows: Any, cols: int) -> Any:
    """A (r, n) matrix as strips of ``cols`` columns, each strip's r rows contiguous, N padded with
    zeros to a multiple of ``cols``: (n_pad / cols, r, cols), in the input's library (torch or numpy).
    Element (i, c) lands at ((c / cols) * r + i) * cols + c % cols."""
    r, n = rows.shape
    npad = -(-n // cols) * cols
    lib, torch_like = cuda_mma.array_library(rows)
    if torch_like:
        padded = lib.nn.functional.pad(rows, (0, npad - n)) if npad != n else rows
        return padded.reshape(r, npad // cols, cols).permute(1, 0, 2).contiguous()
    padded = lib.pad(rows, ((0, 0), (0, npad - n))) if npad != n else rows
    return lib.ascontiguousarray(padded.reshape(r, npad // cols, cols).transpose(1, 0, 2))


TEMPLATE = CudaW4A16Template


def _load(hint: str, what: str) -> str:
    """A 4/8/16-byte load of ``p`` into ``u`` by byte count, with ``hint``."""
    return f"""    if constexpr (BYTES == 16) asm volatile("ld.global{hint}.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"({what}));
    else if constexpr (BYTES == 8) asm volatile("ld.global{hint}.v2.u32 {{%0,%1}}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"({what}));
    else asm volatile("ld.global{hint}.u32 %0, [%1];" : "=r"(u[0]) : "l"({what}));"""


def _dequant(method: str, b: int) -> str:
    """(q - z) of value ``b`` of word ``wv`` (``wh`` = wv >> 12), times 16^p for ``mask`` (x is pre-scaled)."""
    if method == "cvt":
        return f"(float)((wv >> {4 * b}) & 15u) - z[e]"
    if method == "magic":
        return f"__int_as_float(0x4B000000u | ((wv >> {4 * b}) & 15u)) - zc[0][e]"
    src, pos = ("wv", b) if b < 5 else ("wh", b - 3)
    return f"__int_as_float(0x4B000000u | ({src} & {hex(15 << 4 * pos)}u)) - zc[{pos}][e]"


def _load_batch(name: str, start: str) -> str:
    """The loads of the B words from ``start`` (an index past the end loads the last word, never used)."""
    decl = f"            unsigned {name}[B][V];\n" if name == "wn" else ""
    return f"""{decl}#pragma unroll
            for (int u = 0; u < B; ++u) {{
                const int kw = min({start} + u * KSPLIT, KW - 1);
                load_words<V>(qw + WORD(kw, c), {name}[u]);
            }}
"""


def _copy_batch() -> str:
    return """
#pragma unroll
            for (int u = 0; u < B; ++u)
#pragma unroll
                for (int e = 0; e < V; ++e) w[u][e] = wn[u][e];"""


def _word_math(method: str, per_word: bool, order: tuple) -> str:
    """One word's 8 values times x into ``part`` (float32 FMAs), or with ``half2`` two values at a
    time: lop3 into fp16 1024 + q, minus 1024 + z, times a pair of x in an fp16x2 partial sum that
    goes to float once per word."""
    if method != "half2":
        return "".join(f"""
#pragma unroll
                for (int e = 0; e < V; ++e) {{  // value {tok[1]}
                    const unsigned wv = w[u][e]{", wh = wv >> 12" if method == "mask" and int(tok[1]) >= 5 else ""};
                    const float d = ({_dequant(method, int(tok[1]))}){'' if per_word else ' * s[e]'};
#pragma unroll
                    for (int a = 0; a < MT; ++a) part[a][e] = fmaf(xw[a][{tok[1]}], d, part[a][e]);
                }}""" for tok in order)
    pairs = list(dict.fromkeys(int(tok[1]) % 4 for tok in order))
    body = "".join(f"""
                    {{  // values {i} and {i + 4}
                        const unsigned d2 = hsub2(lop3_and_or(wv{f" >> {4 * i}" if i else ""}, 0x000F000Fu, 0x64006400u), c2);
#pragma unroll
                        for (int a = 0; a < MT; ++a) p2[a] = hfma2(xh[a][{i}], d2, p2[a]);
                    }}""" for i in pairs)
    return f"""
                unsigned xh[MT][4];
#pragma unroll
                for (int a = 0; a < MT; ++a)
#pragma unroll
                    for (int i = 0; i < 4; ++i) xh[a][i] = pack_h2(xw[a][i], xw[a][i + 4]);
#pragma unroll
                for (int e = 0; e < V; ++e) {{
                    const unsigned wv = w[u][e], c2 = pack_h2(1024.f + z[e], 1024.f + z[e]);
                    unsigned p2[MT] = {{}};{body}
#pragma unroll
                    for (int a = 0; a < MT; ++a) part[a][e] = h2_sum(p2[a]);
                }}"""


def _raw8(hint: str) -> str:
    """``load_raw8``: the 8 values of one word's rows of K as floats."""
    return fill(kernel_body(__file__, "gemv_load_raw8.cuh"), load=_load(hint, "p + h * 16 / ELT"))


def _layout(layout: str) -> str:
    """Where word (kw, c) and scale (grp, c) are: GPTQ's rows of N, or strips of the block's CB
    columns, each KW words (G scales) long (:func:`strips`)."""
    return kernel_body(__file__, "gemv_layout_strips.cuh" if layout == "strips" else "gemv_layout_gptq.cuh")


def _mask_pos(b: int) -> int:
    return b if b < 5 else b - 3


def render_source(g: Genome, problem: dict, norm: str | None = None) -> str:
    """The kernel of genome ``g`` (``kernels/gemv.cu``, or a tensor-core path's); with ``norm``
    ("load" or "store"), RMSNorm fused in front (:mod:`core.workloads.rmsnorm_w4a16`): gamma on x
    as loaded, 1 / rms there or on the sums."""
    prologue = (_raw8(g["memory_pattern"]["x_load"]) + cuda_norm.PROLOGUE) if norm else ""
    if cuda_mma_w.applies(g):
        return cuda_mma_w.render_source(g, problem, cuda_norm.entry(norm, call_first=False), launch_bounds(g),
                                        norm, prologue, cuda_norm.NORM_CALL)
    if g["instruction_sequence"]["math"] == "mma":
        return cuda_mma.render_source(g, problem, norm, prologue, cuda_norm.entry(norm), cuda_norm.NORM_CALL,
                                      launch_bounds(g))
    p, m = g["parallel_config"], g["memory_pattern"]
    ra, seq = g["register_allocation"], g["instruction_sequence"]
    dtype, method = problem["dtype"], seq["dequant"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    per_word = ra["regs"]["scale"] == "word"
    prefetch = ra["pipeline"] == "next"
    x_first = seq["first"] == "x"
    prescale = ("".join(f"o[{b}] *= {1.0 / 16 ** _mask_pos(b)!r}f; " for b in range(8) if _mask_pos(b))
                if method == "mask" else "")
    steps = _word_math(method, per_word, seq["nibbles"])
    zero_of = ("(float)zp[(long long)grp * N + c + e]" if problem.get("zero_points") else "8.f")
    load_x = ("#pragma unroll\n            for (int a = 0; a < MT; ++a) load_x8(xr[a] + (long long)kw * 8, {dst}[a]);")
    stream = norm == "stream"
    if norm:  # x times gamma (and 1 / rms when the norm comes first) as it is loaded
        square = "if ({valid}) ssq[a] = fmaf({dst}[a][b], {dst}[a][b], ssq[a]); " if stream else ""
        load_x = ("{{ float gv[8]; load_raw8(gm + (long long)kw * 8, gv);\n#pragma unroll\n"
                  "            for (int a = 0; a < MT; ++a) {{ load_x8(xr[a] + (long long)kw * 8, {dst}[a]);\n#pragma unroll\n"
                  "                for (int b = 0; b < 8; ++b) {{ " + square + "{dst}[a][b] *= gv[b]"
                  + (" * inv[a]" if norm == "load" else "") + "; }} }} }}")
    x_batch = ("""            float xb[B][MT][8];
#pragma unroll
            for (int u = 0; u < B; ++u) {
                const int kw = min(j + u * KSPLIT, KW - 1);
""" + load_x.format(dst="xb[u]", valid="j + u * KSPLIT < KW") + "\n            }\n") if x_first else ""
    x_word = ("                float (*xw)[8] = xb[u];" if x_first else
              "                float xw[MT][8];\n    " + load_x.format(dst="xw", valid="true"))
    ssq = ", float *ssq" if stream else ""
    nz = 5 if method == "mask" else 1
    return fill(kernel_body(__file__, "gemv.cu"), **{name: str(v) for name, v in {
        "title": "RMSNorm + " if norm else "", "dtype": dtype, "zero_points": problem.get("zero_points", False),
        "y_of": "rmsnorm(x) * gamma" if norm else "x", "T": T, "threads": p["threads"], "ksplit": p["ksplit"],
        "mt": p["rows_per_block"], "vec": m["vec"], "b": ra["batch"], "elt": dtype_bytes(dtype),
        "layout": _layout(m["layout"]), "to_f": to_f, "from_f": from_f, "load_words": _load(m["w_load"], "p"),
        "load_raw8": _raw8(m["x_load"]), "prescale": prescale, "norm_prologue": cuda_norm.PROLOGUE if norm else "",
        "ssq_param": ssq, "unroll": ra["regs"]["unroll"], "x_batch": x_batch, "nz": nz, "zero_of": zero_of,
        "first_loads": "    unsigned w[B][V];\n" + _load_batch("w", "ks") if prefetch else "",
        "batch_loads": (_load_batch("wn", "j + KSPLIT * B") if prefetch
                        else "            unsigned w[B][V];\n" + _load_batch("w", "j")),
        "x_word": x_word, "steps": steps, "acc_term": "part[a][e] * s[e]" if per_word else "part[a][e]",
        "copy_batch": _copy_batch() if prefetch else "", "bounds": launch_bounds(g), "entry": cuda_norm.entry(norm),
        "ssq_decl": "\n    float ssq[MT] = {}, junk[MT];" if stream else "", "ssq_arg": ", ssq" if stream else "",
        "ssq_arg1": ", e == 0 ? ssq : junk" if stream else "",
        "norm_tail": cuda_norm.NORM_CALL if norm == "store" else cuda_norm.STREAM_INV if stream else "",
        "inv_y": " * inv[a]" if norm in ("store", "stream") else ""}.items()})
