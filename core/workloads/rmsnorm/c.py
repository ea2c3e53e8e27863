"""RMSNorm on the CPU: a row-parallel C kernel whose stages are the genome.

Each row is two passes: pass 1 loads x (adding and writing back the residual when the problem
has one) and accumulates the sum of squares; REDUCE turns it into 1/rms; pass 2 scales, applies
the weight and stores. The genome picks:

* parallel_config -- OpenMP threads, schedule and rows per chunk;
* memory_pattern -- vectorisation (GCC vector extensions or ``#pragma omp simd``) and width,
  whether pass 2 re-reads the input or a per-thread row buffer written in pass 1, normal or
  streaming (non-temporal) stores, ``restrict``;
* register_allocation -- independent partial-sum accumulators, pass-2 unroll, float or double
  accumulators, multiply by 1/rms or divide by rms;
* instruction_sequence -- the order of LOAD, SQUARE_ACC, WEIGHT, REDUCE, SCALE, STORE and an
  optional PREFETCH_NEXT_ROW. Tokens before REDUCE run in pass 1, after it in pass 2: WEIGHT in
  pass 1 stores x*w, and pass 2 only scales it.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene
from core.workloads.c_kernel import (CConfig, CTemplate, Lanes, align_head, float_vectors, main_loop, prelude,
                                     streaming, tail_loop, vector_type)
from core.workloads.openmp import (compiler_hints, one_thread, pointer_hints_gene, row_parallel_genes, scalar_width,
                                   vector_genes, vector_kind)

ENTRY = "abebot_rmsnorm"
ARGTYPES = ("ptr", "ptr", "ptr", "ptr", "int", "int", "float")  # the entry point's C signature, for ctypes
STAGES = ("LOAD", "SQUARE_ACC", "REDUCE", "SCALE", "WEIGHT", "STORE")
BEFORE = (("LOAD", "SQUARE_ACC"), ("SQUARE_ACC", "REDUCE"), ("REDUCE", "SCALE"), ("SCALE", "STORE"),
          ("LOAD", "WEIGHT"), ("WEIGHT", "STORE"))


class CRmsNormTemplate(CTemplate):
    """The C template of :class:`~core.workloads.rmsnorm.RmsNormWorkload`."""

    def gene_space(self) -> GeneSpace:
        parallel = row_parallel_genes(self.cores)
        memory = (
            *vector_genes(),
            ChoiceGene("row_reuse", ("reload", "row_buffer"), "pass 2 re-reads its input, or a per-thread row copy made in pass 1"),
            ChoiceGene("store", ("normal", "streaming"), "final stores through the cache or non-temporal"),
            pointer_hints_gene("row "),
        )
        registers = (
            MapGene("register_map", (
                ("accumulators", (1, 2, 4, 8)),
                ("unroll", (1, 2, 4)),
                ("acc_type", ("float", "double")),
                ("scale", ("reciprocal", "divide")),
            ), "independent sum-of-squares accumulators, pass-2 unroll, accumulator precision, "
               "multiply by 1/rms or divide by rms"),
        )
        sequence = (SequenceGene("stages", STAGES, ("PREFETCH_NEXT_ROW",), BEFORE,
                                 "per-row stages; those before REDUCE form pass 1, the rest pass 2"),)
        return GeneSpace(groups={"parallel_config": parallel, "memory_pattern": memory,
                                 "register_allocation": registers, "instruction_sequence": sequence},
                         seeds=seed_genomes(self.cores), canonicalisers=CANONICALISERS,
                         hints=compiler_hints("PREFETCH_NEXT_ROW"))

    def render(self, genome: Genome) -> KernelSource:
        cfg = RmsConfig.from_genome(genome, residual=bool(self.problem.get("residual")))
        return self.c_kernel(render_source(cfg), ENTRY, ARGTYPES, cfg.threads,
                             workspace_bytes=cfg.workspace_bytes(self.problem["cols"]), vector_width=cfg.vw,
                             residual=cfg.residual)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        return kernel.bind(t["x"], t["w"], t.get("residual"), t["out"], shape["rows"], shape["cols"],
                           float(self.problem["eps"]))


TEMPLATE = CRmsNormTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

CANONICALISERS = (one_thread(schedule="static", rows_per_chunk=1), scalar_width)


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """A scalar two-pass kernel, and a vectorised, multi-accumulator, row-parallel one."""
    naive = {
        "parallel_config": {"threads": 1, "schedule": "static", "rows_per_chunk": 1},
        "memory_pattern": {"vectorize": "vector_ext", "vector_width": 1, "row_reuse": "reload", "store": "normal", "pointer_hints": "none"},
        "register_allocation": {"register_map": {"accumulators": 1, "unroll": 1, "acc_type": "float", "scale": "divide"}},
        "instruction_sequence": {"stages": ["LOAD", "SQUARE_ACC", "REDUCE", "SCALE", "WEIGHT", "STORE"]},
    }
    fast = {
        "parallel_config": {"threads": cores, "schedule": "static", "rows_per_chunk": 8},
        "memory_pattern": {"vectorize": "vector_ext", "vector_width": 16, "row_reuse": "reload", "store": "normal", "pointer_hints": "restrict"},
        "register_allocation": {"register_map": {"accumulators": 4, "unroll": 2, "acc_type": "float", "scale": "reciprocal"}},
        "instruction_sequence": {"stages": ["PREFETCH_NEXT_ROW", "LOAD", "SQUARE_ACC", "REDUCE", "SCALE", "WEIGHT", "STORE"]},
    }
    return (naive, fast)


class RmsConfig(CConfig):
    """The genome's values for rendering."""

    @classmethod
    def from_genome(cls, g: Genome, residual: bool) -> "RmsConfig":
        p, m, rm = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["register_map"]
        stages = tuple(g["instruction_sequence"]["stages"])
        cut = stages.index("REDUCE")
        return cls(threads=p["threads"], schedule=p["schedule"], chunk=p["rows_per_chunk"],
                   vectorize=m["vectorize"], vw=m["vector_width"], row_buffer=m["row_reuse"] == "row_buffer",
                   streaming=m["store"] == "streaming", restrict=m["pointer_hints"] == "restrict",
                   acc=rm["accumulators"], unroll=rm["unroll"], acc_double=rm["acc_type"] == "double",
                   divide=rm["scale"] == "divide", pass1=stages[:cut], pass2=stages[cut + 1:], residual=residual)

    @property
    def weight_in_pass1(self) -> bool:
        return "WEIGHT" in self.pass1

    def workspace_bytes(self, cols: int) -> int:
        return 4 * self.threads * _round_up(cols, 16) if self.row_buffer else 0


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


# ---- rendering -----------------------------------------------------------------------------------

class _Lanes(Lanes):
    """:class:`~core.workloads.c_kernel.Lanes` with the sum of squares' accumulators."""

    def __init__(self, cfg: RmsConfig, kind: str):
        super().__init__(kind, cfg.vw)
        self.cfg = cfg

    def acc(self, slot: int) -> str:
        if self.kind == "scalar":
            return "st"
        return f"acc{slot}" if self.kind == "vector" else f"acc[{slot}][l]"

    def square_acc(self, slot: int, v: str) -> str:
        a = self.acc(slot)
        if not self.cfg.acc_double:
            return f"{a} += {v} * {v};"
        if self.vtype == "vf":
            return f"{{ const vd d = __builtin_convertvector({v}, vd); {a} += d * d; }}"
        return f"{a} += (double){v} * (double){v};"


def render_source(c: RmsConfig) -> str:
    return "\n".join((_prelude(c), _row_function(c), _entry(c)))


def _prelude(c: RmsConfig) -> str:
    out = prelude("AbeBot RMSNorm, C backend: out = x / sqrt(mean(x^2) + eps) * w per row, float32.",
                  ("math.h", "stddef.h", "stdint.h", "stdlib.h", "omp.h"),
                  {"VW": c.vw, "NACC": c.acc, "UNROLL": c.unroll, "ACCT": "double" if c.acc_double else "float",
                   "RESTRICT": "restrict" if c.restrict else ""})
    vector = c.vectorize == "vector_ext" and c.vw > 1
    if vector:
        out += float_vectors(c.vw) + vector_type("vd", "double", c.vw)
    return out + (streaming(c.vw, vector) if c.streaming else "")


def _row_function(c: RmsConfig) -> str:
    """One row: pass 1, REDUCE, pass 2, each a main loop over slots plus a scalar tail."""
    kind = vector_kind({"vectorize": c.vectorize, "vector_width": c.vw})
    main, tail = _Lanes(c, kind), _Lanes(c, "scalar")
    r = "RESTRICT"
    out = (f"static void row(const float *{r} xr, const float *{r} w, float *{r} rr, float *{r} orow, float *{r} buf,\n"
           f"                const float *xn, const float *rn, int cols, float eps) {{\n"
           "  (void)rr; (void)buf; (void)xn; (void)rn;\n  int j = 0;\n  ACCT st = 0;\n")
    out += _acc_decl(c, main)
    step1 = c.vw * c.acc if kind != "scalar" else c.acc
    out += main_loop(main, step1, "cols", _pass1(c, main, c.acc)) + tail_loop("cols", _pass1(c, tail, 1))
    out += _reduce(c, main)
    step2 = (c.vw if kind != "scalar" else 1) * c.unroll
    body2 = _pass2(c, main, c.unroll, stream=c.streaming)
    out += "  j = 0;\n"
    if c.streaming and kind == "vector":
        out += align_head("orow", "cols", c.vw, _pass2(c, tail, 1, stream=False))
    out += main_loop(main, step2, "cols", body2, nontemporal="orow" if c.streaming else "")
    out += tail_loop("cols", _pass2(c, tail, 1, stream=False))
    if c.streaming:
        out += "  FENCE();\n"
    return out + "}\n"


def _acc_decl(c: RmsConfig, lanes: _Lanes) -> str:
    if lanes.kind == "vector":
        t = "vd" if c.acc_double else "vf"
        return "".join(f"  {t} acc{a} = {{0}};\n" for a in range(c.acc))
    if lanes.kind == "simd":
        return "  ACCT acc[NACC][VW];\n  for (int a = 0; a < NACC; ++a) for (int l = 0; l < VW; ++l) acc[a][l] = 0;\n"
    return "".join(f"  ACCT acc{a} = 0;\n" for a in range(c.acc))


def _pass1(c: RmsConfig, lanes: _Lanes, slots: int) -> str:
    """Token-major: each pass-1 stage for every slot, then the row store pass 2 will read."""
    vt = lanes.vtype
    scalar_acc = lanes.kind == "scalar" and slots > 1  # scalar main loop: one accumulator per slot
    lines = []
    for tok in c.pass1:
        for s in range(slots):
            if tok == "LOAD":
                lines.append(f"{vt} v{s} = {lanes.load('xr', s)};")
                if c.residual:
                    lines.append(f"v{s} = v{s} + {lanes.load('rr', s)}; {lanes.store('rr', s, f'v{s}')}")
            elif tok == "SQUARE_ACC":
                sq = lanes.square_acc(s, f"v{s}")
                lines.append(sq.replace("st +=", f"acc{s} +=") if scalar_acc else sq)
            elif tok == "WEIGHT":
                lines.append(f"{vt} t{s} = v{s} * {lanes.load('w', s)};")
            elif tok == "PREFETCH_NEXT_ROW":
                lines.append(f"__builtin_prefetch(xn + {lanes.idx(s)}, 0, 3);"
                             + (f" __builtin_prefetch(rn + {lanes.idx(s)}, 1, 3);" if c.residual else ""))
    for s in range(slots):
        if c.weight_in_pass1:
            lines.append(lanes.store("buf" if c.row_buffer else "orow", s, f"t{s}"))
        elif c.row_buffer:
            lines.append(lanes.store("buf", s, f"v{s}"))
    return lanes.lines(lines)


def _reduce(c: RmsConfig, lanes: _Lanes) -> str:
    if lanes.kind == "vector":
        out = "".join(f"  for (int l = 0; l < VW; ++l) st += acc{a}[l];\n" for a in range(c.acc))
    elif lanes.kind == "simd":
        out = "  for (int a = 0; a < NACC; ++a) for (int l = 0; l < VW; ++l) st += acc[a][l];\n"
    else:
        out = "".join(f"  st += acc{a};\n" for a in range(c.acc))
    if c.divide:
        return out + "  const float rms = (float)sqrt((double)st / cols + eps);\n"
    return out + "  const float inv = (float)(1.0 / sqrt((double)st / cols + eps));\n"


def _pass2(c: RmsConfig, lanes: _Lanes, slots: int, stream: bool) -> str:
    """Load pass 2's input, then the stages after REDUCE in genome order."""
    if c.row_buffer:
        src = "buf"
    elif c.weight_in_pass1:
        src = "orow"
    else:
        src = "rr" if c.residual else "xr"
    vt = lanes.vtype
    lines = [f"{vt} u{s} = {lanes.load(src, s)};" for s in range(slots)]
    for tok in c.pass2:
        for s in range(slots):
            if tok == "SCALE":
                lines.append(f"u{s} = u{s} / rms;" if c.divide else f"u{s} = u{s} * inv;")
            elif tok == "WEIGHT":
                lines.append(f"u{s} = u{s} * {lanes.load('w', s)};")
            elif tok == "STORE":
                lines.append(lanes.stream("orow", s, f"u{s}") if stream else lanes.store("orow", s, f"u{s}"))
            elif tok == "PREFETCH_NEXT_ROW":
                lines.append(f"__builtin_prefetch(xn + {lanes.idx(s)}, 0, 3);")
    return lanes.lines(lines)


def _entry(c: RmsConfig) -> str:
    res = "residual + (size_t)i * cols" if c.residual else "NULL"
    rnext = "residual + (size_t)nx * cols" if c.residual else "NULL"
    out = ("void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps) {\n"
           "  (void)residual;\n  if (rows <= 0 || cols <= 0) return;\n"
           f"  const int T = {c.threads};\n  const size_t ld = ((size_t)cols + 15) & ~(size_t)15;\n  (void)T; (void)ld;\n")
    if c.row_buffer:
        out += "  float *bufs = (float *)aligned_alloc(64, ld * T * sizeof(float));\n  if (!bufs) return;\n"
    else:
        out += "  float *bufs = NULL;\n"
    if c.threads > 1:
        sched = {"static": "static", "dynamic": "dynamic", "guided": "guided"}[c.schedule]
        out += ("  #pragma omp parallel num_threads(T)\n  {\n"
                "    float *buf = bufs ? bufs + ld * omp_get_thread_num() : NULL;\n"
                f"    #pragma omp for schedule({sched}, {c.chunk})\n")
    else:
        out += "  {\n    float *buf = bufs;\n"
    out += ("    for (int i = 0; i < rows; ++i) {\n      const int nx = i + 1 < rows ? i + 1 : i;\n"
            f"      row(x + (size_t)i * cols, w, {res}, out + (size_t)i * cols, buf,\n"
            f"          x + (size_t)nx * cols, {rnext}, cols, eps);\n    }}\n  }}\n  free(bufs);\n}}\n")
    return out
