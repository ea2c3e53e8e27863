"""W4A16 on the CPU: an OpenMP C kernel (float32 activations and scales, GPTQ int32 words).

A task is a tile of ``rows`` rows of x by ``cols`` vectors of ``vector_width`` columns (a column
left over runs as a one-column scalar tile, a row left over as a one-row tile). For every group of
128 rows of K and every one of its 16 words per column, a tile loads the words of its columns and
the 8 matching x values of its rows, unpacks the 8 nibbles (shift, mask, convert, minus the zero
point) once for all its rows, and multiplies them in. The genome picks:

* parallel_config -- OpenMP threads, schedule and chunk, and what the parallel loop runs over:
  column tiles (rows inside), or (row tile, column tile) pairs;
* memory_pattern -- vector width (GCC vector extensions; 1 is scalar), ``restrict``, a prefetch
  of the words 0, 1 or 2 groups ahead, and the weight layout the kernel reads: GPTQ's own words, or
  ``panels``, the words repacked once (:meth:`CW4A16Template.repack`) so that each tile's columns
  have their words contiguous along K (one sequential stream per tile instead of 16 rows N apart);
* register_allocation -- rows and column vectors per tile (unpacked weights reused from registers
  across rows), and whether the scale multiplies each weight or a per-group partial sum;
* instruction_sequence -- the order in which a word's 8 values are unpacked and accumulated
  (each value is unpacked right before its multiply-adds; without -ffast-math the order of the
  additions is the compiled order).

:mod:`core.workloads.rmsnorm_w4a16`'s C template is this kernel with RMSNorm fused in front: its
:meth:`~CW4A16Template.norm` hook hands :func:`render_source` a :class:`Norm`.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.c_kernel import CConfig, CTemplate, float_vectors, parallel_for, prelude, vector_type
from core.workloads.openmp import one_thread, pointer_hints_gene, split_parallel_genes

ENTRY = "abebot_w4a16"
ARGTYPES = ("ptr", "ptr", "ptr", "ptr", "ptr", "int", "int", "int")  # x, qweight, scales, zeros, y, m, n, k_groups
NIBBLES = tuple(f"N{b}" for b in range(8))  # the 8 values of a word, b = 0 in the lowest bits
LAYOUTS = ("gptq", "panels")
PANELS = "qweight_panels"  # the repacked words' name in bind()'s tensors
REGISTER_KEYS = (("rows", (1, 2, 4)), ("cols", (1, 2)), ("scale", ("group", "weight")))
HINTS = ("memory_pattern.pointer_hints",)


class Norm(NamedTuple):
    """RMSNorm fused in front of the product (:mod:`core.workloads.rmsnorm_w4a16`): x times gamma as
    loaded, and 1 / rms ``at`` "load" (on x as loaded) or "store" (on the finished sums), computed
    by every tile for its rows (``per_tile``) or once per call before the parallel loop."""

    at: str
    per_tile: bool


class CW4A16Template(CTemplate):
    """The C template of :class:`~core.workloads.w4a16.W4A16Workload`."""

    entry, argtypes = ENTRY, ARGTYPES

    def gene_space(self) -> GeneSpace:
        cores = self.cores
        return GeneSpace(groups=gene_groups(cores), seeds=seed_genomes(cores), canonicalisers=canonicalisers(),
                         hints=HINTS)

    def render(self, genome: Genome) -> KernelSource:
        cfg, norm = W4Config.from_genome(genome, bool(self.problem.get("zero_points", False))), self.norm(genome)
        # The fused kernel has no layout gene: it reads GPTQ's words.
        layout = {} if norm else {"layout": cfg.layout, "panel_cols": cfg.panel}
        return self.c_kernel(render_source(cfg, norm), self.entry, self.argtypes, cfg.threads, vector_width=cfg.vw,
                             **layout)

    def norm(self, genome: Genome) -> Norm | None:
        """The RMSNorm fused in front of the product (a subclass's hook); None: W4A16 alone."""
        return None

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        # A panels kernel reads its repacked words through the qweight argument.
        return kernel.bind(t["x"], t.get(PANELS, t["qweight"]), t["scales"], t.get("zeros"), t["y"], shape["m"],
                           shape["n"], shape["k_groups"])

    def repack(self, kernel: Any, arrays: Any, weights: dict, shape: dict) -> dict:
        """``{"qweight_panels": ...}`` for a kernel whose launch says ``layout: panels``, else {}."""
        lp = kernel.launch_params
        if lp.get("layout", "gptq") != "panels":
            return {}
        return {PANELS: panels(weights["qweight"], int(lp["panel_cols"]))}


def panels(qweight: Any, p: int) -> Any:
    """GPTQ words (k_groups, 16, n) as flat int32 column panels: the first ``n // p * p`` columns in
    panels of ``p``, each panel's (16 k_groups, p) words row-major, then every column left over alone
    (a panel of 1). Word ``kw = 16 g + i`` of column ``c0 + j`` of a panel of width W starting at
    column c0 is at ``c0 * 16 k_groups + kw * W + j``: a tile reads its columns' words in one stream."""
    import numpy as np

    g, per, n = qweight.shape
    words = qweight.reshape(g * per, n)
    head = n // p * p
    blocks = words[:, :head].reshape(g * per, n // p, p).transpose(1, 0, 2)
    return np.ascontiguousarray(np.concatenate([blocks.reshape(-1), words[:, head:].T.reshape(-1)]))


TEMPLATE = CW4A16Template


def gene_groups(cores: int) -> dict[str, tuple]:
    """W4A16's C genes by group, for ``cores`` cores."""
    parallel = split_parallel_genes(cores, ("cols", "tiles"),
                                    "the parallel loop runs over column tiles, or (row tile, column tile) pairs",
                                    chunks=(1, 2, 4, 8, 16))
    memory = (
        ChoiceGene("vector_width", (1, 4, 8, 16), "columns per vector (GCC vector extensions; 1 = scalar)"),
        pointer_hints_gene(),
        ChoiceGene("prefetch", (0, 1, 2), "prefetch the words this many groups ahead (0 = none)"),
        ChoiceGene("layout", LAYOUTS, "the words as GPTQ packs them, or repacked once into column panels "
                                      "contiguous along K"),
    )
    registers = (MapGene("register_map", REGISTER_KEYS,
                         "rows and column vectors per tile; scale each weight or each group's partial sum"),)
    sequence = (SequenceGene("nibbles", NIBBLES, (), (), "the order a word's 8 values are unpacked and accumulated"),)
    return {"parallel_config": parallel, "memory_pattern": memory, "register_allocation": registers,
            "instruction_sequence": sequence}


def canonicalisers() -> tuple[Callable[[Genome], Genome], ...]:
    """One thread's schedule fixed; one column per tile when scalar."""
    return (one_thread(schedule="static", chunk=1), _scalar_cols)


def _scalar_cols(g: Genome) -> Genome:
    # Width 1 runs one-column scalar tiles only: there are no column vectors to group.
    if g["memory_pattern"]["vector_width"] == 1:
        g = with_gene(g, "register_allocation", "register_map", 1, key="cols")
    return g


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """A scalar one-column kernel on one thread, and a vectorised, threaded 2-row one."""
    naive = {
        "parallel_config": {"threads": 1, "schedule": "static", "chunk": 1, "split": "cols"},
        "memory_pattern": {"vector_width": 1, "pointer_hints": "none", "prefetch": 0, "layout": "gptq"},
        "register_allocation": {"register_map": {"rows": 1, "cols": 1, "scale": "weight"}},
        "instruction_sequence": {"nibbles": list(NIBBLES)},
    }
    fast = {
        "parallel_config": {"threads": cores, "schedule": "static", "chunk": 1, "split": "cols"},
        "memory_pattern": {"vector_width": 16, "pointer_hints": "restrict", "prefetch": 1, "layout": "gptq"},
        "register_allocation": {"register_map": {"rows": 2, "cols": 1, "scale": "group"}},
        "instruction_sequence": {"nibbles": list(NIBBLES)},
    }
    return (naive, fast)


class W4Config(CConfig):
    """The genome's values for rendering."""
    @classmethod
    def from_genome(cls, g: Genome, zeros: bool) -> "W4Config":
        p, m, rm = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["register_map"]
        return cls(threads=p["threads"], schedule=p["schedule"], chunk=p["chunk"], split=p["split"],
                   vw=m["vector_width"], restrict=m["pointer_hints"] == "restrict", prefetch=m["prefetch"],
                   layout=m.get("layout", "gptq"), panel=m["vector_width"] * rm["cols"] if m["vector_width"] > 1 else 1,
                   rows=rm["rows"], cols=rm["cols"], per_group=rm["scale"] == "group",
                   nibbles=tuple(g["instruction_sequence"]["nibbles"]), zeros=zeros)


# ---- rendering -----------------------------------------------------------------------------------

def render_source(c: W4Config, norm: Norm | None = None) -> str:
    """The C source of ``c``; with ``norm``, RMSNorm fused in front (entry ``abebot_rmsnorm_w4a16``,
    symmetric weights only)."""
    if norm and c.zeros:
        raise ValueError("the fused RMSNorm kernel takes no zero points")
    tiles = []
    for vec in ((True, False) if c.vw > 1 else (False,)):
        for rows in sorted({c.rows, 1}, reverse=True):
            tiles.append(_tile(c, rows, vec, norm))
    return "\n".join([_prelude(c, norm)] + tiles + [_entry(c, norm)])


# 8 float partial sums vectorise; their total in double keeps K's rounding out of 1/rms
_RMS_INV = ("/* 1 / sqrt(mean(x^2) + eps) of one row of K (a multiple of 128) values */\n"
            "static float rms_inv(const float *RESTRICT xr, size_t K, float eps) {\n"
            "  float p[8] = {0};\n"
            "  for (size_t k = 0; k < K; k += 8)\n    for (int l = 0; l < 8; ++l) p[l] += xr[k + l] * xr[k + l];\n"
            "  double ss = 0.0;\n  for (int l = 0; l < 8; ++l) ss += p[l];\n"
            "  return (float)(1.0 / sqrt(ss / (double)K + (double)eps));\n}\n")


def _prelude(c: W4Config, norm: Norm | None) -> str:
    words = "GPTQ words" if c.layout == "gptq" else "GPTQ words repacked in column panels"
    if norm:
        comment = f"AbeBot RMSNorm + W4A16, C backend: y = (x / rms(x) * gamma) . ((q - 8) * s), {words} (8 values along K), float32."
    else:
        comment = f"AbeBot W4A16, C backend: y = x . ((q - z) * s), {words} (8 values along K), float32."
    out = prelude(comment, (("math.h",) if norm else ()) + ("stddef.h", "stdint.h", "omp.h"),
                  {"VW": c.vw, "ROWS": c.rows, "COLS": c.cols, "PF_GROUPS": c.prefetch,
                   "RESTRICT": "restrict" if c.restrict else ""})
    if c.vw > 1:
        out += (float_vectors(c.vw) + vector_type("vi", "int32_t", c.vw, "may_alias")
                + vector_type("viu", "int32_t", c.vw, "aligned(4)", "may_alias"))
    return out + (_RMS_INV if norm else "")


def _tile(c: W4Config, rows: int, vec: bool, norm: Norm | None) -> str:
    """``tile_<v|s><rows>``: ``rows`` rows by COLS vectors (v) or one column (s), all groups."""
    r, cols = "RESTRICT", (c.cols if vec else 1)
    ft, it, width = ("vf", "vi", c.vw) if vec else ("float", "int32_t", 1)
    name = f"tile_{'v' if vec else 's'}{rows}"

    def ld(ptr: str, off: str, t: str) -> str:
        return f"*(const {t}u *)({ptr} + {off})" if vec else f"{ptr}[{off}]"

    def splat(v: str) -> str:
        return f"(({ft}){{0}} + {v})" if vec else v

    fused = f", const float *{r} gm, const float *invs, float eps" if norm else ""
    out = [f"static void {name}(const float *{r} x, const int32_t *{r} qw, const float *{r} sc, const uint8_t *{r} zp,",
           f"                   float *{r} y, int m, int n, int G, int r0, int c0{fused}) {{",
           "  (void)m; (void)zp;"]
    if norm:
        out.append("  (void)invs; (void)eps;")
        for a in range(rows):
            row = f"x + (size_t)(r0 + {a}) * G * 128"
            out.append(f"  const float inv{a} = " + (f"rms_inv({row}, (size_t)G * 128, eps);" if norm.per_tile
                                                   else f"invs[r0 + {a}];"))
    out += [f"  {ft} acc{i}_{j} = {splat('0.0f')};" for i in range(rows) for j in range(cols)]
    out.append("  for (int g = 0; g < G; ++g) {")
    panel = cols * width  # the columns of this tile: one panel of the repacked layout
    if c.prefetch and c.layout == "panels":  # the group's words of the tile: 16 * panel contiguous words
        out.append(f"    if (g + PF_GROUPS < G) for (int i = 0; i < 16 * {panel}; i += 16) "
                   f"__builtin_prefetch(qw + (size_t)c0 * G * 16 + (size_t)(g + PF_GROUPS) * 16 * {panel} + i, 0, 0);")
    elif c.prefetch:
        out.append("    if (g + PF_GROUPS < G) for (int i = 0; i < 16; ++i) "
                   "__builtin_prefetch(qw + ((size_t)(g + PF_GROUPS) * 16 + i) * n + c0, 0, 0);")
    for j in range(cols):
        off = f"(size_t)g * n + c0 + {j * width}"
        out.append(f"    const {ft} s{j} = {ld('sc', off, 'vf' if vec else '')};")
        if c.zeros:
            zs = (f"{{ for (int l = 0; l < VW; ++l) z{j}[l] = (float)zp[{off} + l]; }}" if vec else "")
            out.append(f"    {ft} z{j}" + (f"; {zs}" if vec else f" = (float)zp[{off}];"))
        else:
            out.append(f"    const {ft} z{j} = {splat('8.0f')};")
    if c.per_group:
        out += [f"    {ft} gacc{i}_{j} = {splat('0.0f')};" for i in range(rows) for j in range(cols)]
    out.append("    for (int i = 0; i < 16; ++i) {")
    out.append("      const size_t k = (size_t)g * 128 + (size_t)i * 8;")
    word = ("(size_t)c0 * G * 16 + ((size_t)g * 16 + i) * {p} + {j}" if c.layout == "panels"
            else "((size_t)g * 16 + i) * n + c0 + {j}")
    body = [f"const {it} w{j} = {ld('qw', word.format(p=panel, j=j * width), 'vi' if vec else '')};"
            for j in range(cols)]
    if norm:
        body += [f"const float g{b} = gm[k + {b}];" for b in range(8)]
    at_load = norm is not None and norm.at == "load"

    def x_times(a: int, b: int) -> str:  # x as loaded: times gamma (and 1 / rms) when fused
        return "" if not norm else f" * g{b}" + (f" * inv{a}" if at_load else "")

    body += [f"const float x{a}_{b} = x[(size_t)(r0 + {a}) * G * 128 + k + {b}]{x_times(a, b)};"
             for a in range(rows) for b in range(8)]
    dst = "gacc" if c.per_group else "acc"
    for tok in c.nibbles:  # value b of the word: unpack, then accumulate (the order is the sum's order)
        b = int(tok[1])
        for j in range(cols):
            q = f"((w{j} >> {4 * b}) & 15)"
            conv = f"__builtin_convertvector({q}, vf)" if vec else f"(float){q}"
            body.append(f"const {ft} d{j}_{b} = ({conv} - z{j})" + ("" if c.per_group else f" * s{j}") + ";")
        body += [f"{dst}{a}_{j} += x{a}_{b} * d{j}_{b};" for a in range(rows) for j in range(cols)]
    out += [f"      {ln}" for ln in body]
    out.append("    }")
    if c.per_group:
        out += [f"    acc{i}_{j} += gacc{i}_{j} * s{j};" for i in range(rows) for j in range(cols)]
    out.append("  }")
    for i in range(rows):
        for j in range(cols):
            dst = f"y + (size_t)(r0 + {i}) * n + c0 + {j * width}"
            val = f"acc{i}_{j}" + (f" * {splat(f'inv{i}')}" if norm and not at_load else "")
            out.append(f"  *(vfu *)({dst}) = {val};" if vec else f"  *({dst}) = {val};")
    return "\n".join(out) + "\n}\n"


def _entry(c: W4Config, norm: Norm | None) -> str:
    vec_tiles = "n / (VW * COLS)" if c.vw > 1 else "0"
    zp, fused = ("NULL", ", gamma, invs, eps") if norm else ("zeros", "")

    def call(kind: str, c0: str) -> str:
        def args(r0: str) -> str:
            return f"x, qweight, scales, {zp}, y, m, n, G, {r0}, {c0}{fused}"
        return (f"if (rt == ROWS) tile_{kind}{c.rows}({args('r0')}); "
                f"else for (int a = 0; a < rt; ++a) tile_{kind}1({args('r0 + a')});")

    task = ("    const int rt = m - r0 < ROWS ? m - r0 : ROWS;\n"
            + ("    if (ct < NV) { " + call("v", "ct * VW * COLS") + " continue; }\n" if c.vw > 1 else "")
            + "    const int cs = NV * VW * COLS + (ct - NV);\n    " + call("s", "cs") + "\n")
    if norm:
        out = ("void abebot_rmsnorm_w4a16(const float *x, const float *gamma, const int32_t *qweight, const float *scales,\n"
               "                          float *y, int m, int n, int G, float eps) {\n")
    else:
        out = ("void abebot_w4a16(const float *x, const int32_t *qweight, const float *scales, const uint8_t *zeros,\n"
               "                  float *y, int m, int n, int G) {\n")
    out += ("  if (m <= 0 || n <= 0) return;\n"
            f"  const int NV = {vec_tiles};  /* full vector tiles; the columns after them run one by one */\n"
            "  const int CT = NV + (n - NV * VW * COLS), RT = (m + ROWS - 1) / ROWS;\n  (void)RT;\n")
    if norm:
        out += "  float invs[m];  /* 1/rms of each row (m <= 16) */\n" + (
            "  (void)invs;\n" if norm.per_tile else
            "  for (int r = 0; r < m; ++r) invs[r] = rms_inv(x + (size_t)r * G * 128, (size_t)G * 128, eps);\n")
    pragma = parallel_for(c.threads, c.schedule, c.chunk)
    if c.split == "cols":
        return out + pragma + ("  for (int ct = 0; ct < CT; ++ct)\n  for (int r0 = 0; r0 < m; r0 += ROWS) {\n"
                               + task + "  }\n}\n")
    return out + pragma + ("  for (long w = 0; w < (long)RT * CT; ++w) {\n"
                           "    const int r0 = (int)(w / CT) * ROWS, ct = (int)(w % CT);\n" + task + "  }\n}\n")
