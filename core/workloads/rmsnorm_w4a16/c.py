"""RMSNorm + W4A16 on the CPU: an OpenMP C kernel (float32 activations, gamma and scales).

Each row's ``inv = 1 / sqrt(mean(x^2) + eps)`` is computed once per call before the parallel
loop, or by every tile for its own rows (the GPU kernels' fusion: nothing shared between tasks).
A task is then a tile of ``rows`` rows of x by ``cols`` vectors of ``vector_width`` columns (a
column left over runs as a one-column scalar tile, a row left over as a one-row tile): for every
word of every group it loads the words of its columns, the 8 matching x values of its rows times
gamma (times inv, when the norm is applied at the load), unpacks the 8 nibbles once for all rows
and multiplies them in. The normalised row is never stored. The genome picks:

* parallel_config -- OpenMP threads, schedule and chunk, and what the parallel loop runs over:
  column tiles (rows inside), or (row tile, column tile) pairs;
* memory_pattern -- vector width (GCC vector extensions; 1 is scalar), ``restrict``, a prefetch
  of the words 0, 1 or 2 groups ahead, and whether inv is computed once or per tile;
* register_allocation -- rows and column vectors per tile, the scale on each weight or on a
  per-group partial sum, and inv applied to x as it is loaded or to the finished sums;
* instruction_sequence -- the order in which a word's 8 values are unpacked and accumulated.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.openmp import one_thread, thread_options
from core.workloads.template import Template

ENTRY = "abebot_rmsnorm_w4a16"
# x, gamma, qweight, scales, y, m, n, k_groups, eps
ARGTYPES = ("ptr", "ptr", "ptr", "ptr", "ptr", "int", "int", "int", "float")
NIBBLES = tuple(f"N{b}" for b in range(8))  # the 8 values of a word, b = 0 in the lowest bits


class CRmsNormW4A16Template(Template):
    """The C template of :class:`~core.workloads.rmsnorm_w4a16.RmsNormW4A16Workload`."""

    backend = "c"

    def gene_space(self) -> GeneSpace:
        cores = max(1, int(self.device.multiprocessors or os.cpu_count() or 1))
        parallel = (
            ChoiceGene("threads", thread_options(cores), "OpenMP threads (1 = no parallel region)"),
            ChoiceGene("schedule", ("static", "dynamic", "guided"), "OpenMP schedule of the parallel loop"),
            ChoiceGene("chunk", (1, 2, 4, 8, 16), "iterations handed to a thread at a time"),
            ChoiceGene("split", ("cols", "tiles"), "the parallel loop runs over column tiles, or (row tile, column tile) pairs"),
        )
        memory = (
            ChoiceGene("vector_width", (1, 4, 8, 16), "columns per vector (GCC vector extensions; 1 = scalar)"),
            ChoiceGene("pointer_hints", ("none", "restrict"), "restrict-qualified pointers"),
            ChoiceGene("prefetch", (0, 1, 2), "prefetch the words this many groups ahead (0 = none)"),
            ChoiceGene("norm_pass", ("once", "per_tile"), "each row's 1/rms computed once per call, or by every tile"),
        )
        registers = (MapGene("register_map", (("rows", (1, 2, 4)), ("cols", (1, 2)), ("scale", ("group", "weight")),
                                              ("norm", ("load", "store"))),
                             "rows and column vectors per tile; scale each weight or each group's partial sum; "
                             "1/rms on x as it is loaded or on the finished sums"),)
        sequence = (SequenceGene("nibbles", NIBBLES, (), (), "the order a word's 8 values are unpacked and accumulated"),)
        return GeneSpace(groups={"parallel_config": parallel, "memory_pattern": memory,
                                 "register_allocation": registers, "instruction_sequence": sequence},
                         seeds=seed_genomes(cores), canonicalisers=(one_thread(schedule="static", chunk=1), _scalar_cols),
                         hints=("memory_pattern.pointer_hints",))

    def render(self, genome: Genome) -> KernelSource:
        cfg = Config.from_genome(genome)
        return KernelSource(backend="c", source=render_source(cfg), entry=ENTRY, flags=("-std=gnu11",),
                            launch={"argtypes": ARGTYPES, "threads": cfg.threads, "vector_width": cfg.vw},
                            resources={"workspace_bytes": 0, "threads": cfg.threads})

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        return kernel.bind(t["x"], t["gamma"], t["qweight"], t["scales"], t["y"], shape["m"], shape["n"],
                           shape["k_groups"], float(self.problem["eps"]))


TEMPLATE = CRmsNormW4A16Template


def _scalar_cols(g: Genome) -> Genome:
    # Width 1 runs one-column scalar tiles only: there are no column vectors to group.
    if g["memory_pattern"]["vector_width"] == 1:
        g = with_gene(g, "register_allocation", "register_map", 1, key="cols")
    return g


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """A scalar one-column kernel on one thread, and a vectorised, threaded 2-row one."""
    naive = {
        "parallel_config": {"threads": 1, "schedule": "static", "chunk": 1, "split": "cols"},
        "memory_pattern": {"vector_width": 1, "pointer_hints": "none", "prefetch": 0, "norm_pass": "per_tile"},
        "register_allocation": {"register_map": {"rows": 1, "cols": 1, "scale": "weight", "norm": "load"}},
        "instruction_sequence": {"nibbles": list(NIBBLES)},
    }
    fast = {
        "parallel_config": {"threads": cores, "schedule": "static", "chunk": 1, "split": "cols"},
        "memory_pattern": {"vector_width": 16, "pointer_hints": "restrict", "prefetch": 1, "norm_pass": "once"},
        "register_allocation": {"register_map": {"rows": 2, "cols": 1, "scale": "group", "norm": "store"}},
        "instruction_sequence": {"nibbles": list(NIBBLES)},
    }
    return (naive, fast)


class Config:
    """The genome's values for rendering."""

    def __init__(self, **kw: Any):
        self.__dict__.update(kw)

    @classmethod
    def from_genome(cls, g: Genome) -> "Config":
        p, m, rm = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["register_map"]
        return cls(threads=p["threads"], schedule=p["schedule"], chunk=p["chunk"], split=p["split"],
                   vw=m["vector_width"], restrict=m["pointer_hints"] == "restrict", prefetch=m["prefetch"],
                   per_tile=m["norm_pass"] == "per_tile", rows=rm["rows"], cols=rm["cols"],
                   per_group=rm["scale"] == "group", at_load=rm["norm"] == "load",
                   nibbles=tuple(g["instruction_sequence"]["nibbles"]))


# ---- rendering -----------------------------------------------------------------------------------

def render_source(c: Config) -> str:
    tiles = []
    for vec in ((True, False) if c.vw > 1 else (False,)):
        for rows in sorted({c.rows, 1}, reverse=True):
            tiles.append(_tile(c, rows, vec))
    return "\n".join([_prelude(c)] + tiles + [_entry(c)])


def _prelude(c: Config) -> str:
    out = ("/* AbeBot RMSNorm + W4A16, C backend: y = (x / rms(x) * gamma) . ((q - 8) * s), GPTQ words, float32. */\n"
           "#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <omp.h>\n"
           f"#define VW {c.vw}\n#define ROWS {c.rows}\n#define COLS {c.cols}\n#define PF_GROUPS {c.prefetch}\n"
           f"#define RESTRICT {'restrict' if c.restrict else ''}\n")
    if c.vw > 1:
        out += (f"typedef float vf __attribute__((vector_size({4 * c.vw}), may_alias));\n"
                f"typedef float vfu __attribute__((vector_size({4 * c.vw}), aligned(4), may_alias));\n"
                f"typedef int32_t vi __attribute__((vector_size({4 * c.vw}), may_alias));\n"
                f"typedef int32_t viu __attribute__((vector_size({4 * c.vw}), aligned(4), may_alias));\n")
    # 8 float partial sums vectorise; their total in double keeps K's rounding out of 1/rms
    out += ("/* 1 / sqrt(mean(x^2) + eps) of one row of K (a multiple of 128) values */\n"
            "static float rms_inv(const float *RESTRICT xr, size_t K, float eps) {\n"
            "  float p[8] = {0};\n"
            "  for (size_t k = 0; k < K; k += 8)\n    for (int l = 0; l < 8; ++l) p[l] += xr[k + l] * xr[k + l];\n"
            "  double ss = 0.0;\n  for (int l = 0; l < 8; ++l) ss += p[l];\n"
            "  return (float)(1.0 / sqrt(ss / (double)K + (double)eps));\n}\n")
    return out


def _tile(c: Config, rows: int, vec: bool) -> str:
    """``tile_<v|s><rows>``: ``rows`` rows by COLS vectors (v) or one column (s), all groups."""
    r, cols = "RESTRICT", (c.cols if vec else 1)
    ft, it, width = ("vf", "vi", c.vw) if vec else ("float", "int32_t", 1)
    name = f"tile_{'v' if vec else 's'}{rows}"

    def ld(ptr: str, off: str, t: str) -> str:
        return f"*(const {t}u *)({ptr} + {off})" if vec else f"{ptr}[{off}]"

    def splat(v: str) -> str:
        return f"(({ft}){{0}} + {v})" if vec else v

    out = [f"static void {name}(const float *{r} x, const float *{r} gm, const int32_t *{r} qw, const float *{r} sc,",
           f"                   float *{r} y, const float *invs, int n, int G, int r0, int c0, float eps) {{",
           "  const size_t K = (size_t)G * 128;", "  (void)invs; (void)eps;"]
    for a in range(rows):
        src = f"rms_inv(x + (size_t)(r0 + {a}) * K, K, eps)" if c.per_tile else f"invs[r0 + {a}]"
        out.append(f"  const float inv{a} = {src};")
    out += [f"  {ft} acc{i}_{j} = {splat('0.0f')};" for i in range(rows) for j in range(cols)]
    out.append(f"  const {ft} z = {splat('8.0f')};")
    out.append("  for (int g = 0; g < G; ++g) {")
    if c.prefetch:
        out.append("    if (g + PF_GROUPS < G) for (int i = 0; i < 16; ++i) "
                   "__builtin_prefetch(qw + ((size_t)(g + PF_GROUPS) * 16 + i) * n + c0, 0, 0);")
    for j in range(cols):
        out.append(f"    const {ft} s{j} = {ld('sc', f'(size_t)g * n + c0 + {j * width}', 'vf' if vec else '')};")
    if c.per_group:
        out += [f"    {ft} gacc{i}_{j} = {splat('0.0f')};" for i in range(rows) for j in range(cols)]
    out.append("    for (int i = 0; i < 16; ++i) {")
    out.append("      const size_t k = (size_t)g * 128 + (size_t)i * 8;")
    body = [f"const {it} w{j} = {ld('qw', f'((size_t)g * 16 + i) * n + c0 + {j * width}', 'vi' if vec else '')};"
            for j in range(cols)]
    body += [f"const float g{b} = gm[k + {b}];" for b in range(8)]
    inv = (lambda a: f" * inv{a}") if c.at_load else (lambda a: "")
    body += [f"const float x{a}_{b} = x[(size_t)(r0 + {a}) * K + k + {b}] * g{b}{inv(a)};"
             for a in range(rows) for b in range(8)]
    dst = "gacc" if c.per_group else "acc"
    for tok in c.nibbles:  # value b of the word: unpack, then accumulate (the order is the sum's order)
        b = int(tok[1])
        for j in range(cols):
            q = f"((w{j} >> {4 * b}) & 15)"
            conv = f"__builtin_convertvector({q}, vf)" if vec else f"(float){q}"
            body.append(f"const {ft} d{j}_{b} = ({conv} - z)" + ("" if c.per_group else f" * s{j}") + ";")
        body += [f"{dst}{a}_{j} += x{a}_{b} * d{j}_{b};" for a in range(rows) for j in range(cols)]
    out += [f"      {ln}" for ln in body]
    out.append("    }")
    if c.per_group:
        out += [f"    acc{i}_{j} += gacc{i}_{j} * s{j};" for i in range(rows) for j in range(cols)]
    out.append("  }")
    for i in range(rows):
        for j in range(cols):
            dst = f"y + (size_t)(r0 + {i}) * n + c0 + {j * width}"
            val = f"acc{i}_{j}" if c.at_load else f"acc{i}_{j} * {splat(f'inv{i}')}"
            out.append(f"  *(vfu *)({dst}) = {val};" if vec else f"  *({dst}) = {val};")
    return "\n".join(out) + "\n}\n"


def _entry(c: Config) -> str:
    args = "x, gamma, qweight, scales, y, invs, n, G"
    call_v = (f"if (rt == ROWS) tile_v{c.rows}({args}, r0, ct * VW * COLS, eps); "
              f"else for (int a = 0; a < rt; ++a) tile_v1({args}, r0 + a, ct * VW * COLS, eps);")
    call_s = (f"if (rt == ROWS) tile_s{c.rows}({args}, r0, cs, eps); "
              f"else for (int a = 0; a < rt; ++a) tile_s1({args}, r0 + a, cs, eps);")
    task = ("    const int rt = m - r0 < ROWS ? m - r0 : ROWS;\n"
            + (f"    if (ct < NV) {{ {call_v} continue; }}\n" if c.vw > 1 else "")
            + f"    const int cs = NV * VW * COLS + (ct - NV);\n    {call_s}\n")
    out = ("void abebot_rmsnorm_w4a16(const float *x, const float *gamma, const int32_t *qweight, const float *scales,\n"
           "                          float *y, int m, int n, int G, float eps) {\n"
           "  if (m <= 0 || n <= 0) return;\n"
           f"  const int NV = {'n / (VW * COLS)' if c.vw > 1 else '0'};  /* full vector tiles; the columns after them run one by one */\n"
           "  const int CT = NV + (n - NV * VW * COLS), RT = (m + ROWS - 1) / ROWS;\n  (void)RT;\n"
           "  float invs[m];  /* 1/rms of each row (m <= 16) */\n")
    if c.per_tile:
        out += "  (void)invs;\n"
    else:
        out += "  for (int r = 0; r < m; ++r) invs[r] = rms_inv(x + (size_t)r * G * 128, (size_t)G * 128, eps);\n"
    pragma = (f"  #pragma omp parallel for num_threads({c.threads}) schedule({c.schedule}, {c.chunk})\n"
              if c.threads > 1 else "")
    if c.split == "cols":
        return out + pragma + ("  for (int ct = 0; ct < CT; ++ct)\n  for (int r0 = 0; r0 < m; r0 += ROWS) {\n"
                               + task + "  }\n}\n")
    return out + pragma + ("  for (long w = 0; w < (long)RT * CT; ++w) {\n"
                           "    const int r0 = (int)(w / CT) * ROWS, ct = (int)(w % CT);\n" + task + "  }\n}\n")
