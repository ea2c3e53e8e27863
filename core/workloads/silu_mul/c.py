"""SiLU-and-multiply on the CPU: a row-parallel C kernel (float32, OpenMP) whose loop body is the genome.

Each row is a main loop over ``unroll`` slots of ``vector_width`` floats, then a scalar tail, so
every genome is correct for any hidden size. The genome picks:

* parallel_config -- OpenMP threads, schedule and rows per chunk;
* memory_pattern -- vectorisation (GCC vector extensions or ``#pragma omp simd``) and width,
  normal or streaming (non-temporal) stores, ``restrict``;
* register_allocation -- slots per iteration (unroll), the exponential (libm ``expf``, a
  vectorisable exp2 polynomial, or the whole SiLU in double), and the sigmoid as one division or
  a reciprocal and a multiply;
* instruction_sequence -- the order of LOAD_GATE, LOAD_UP, SILU, MUL, STORE and an optional
  PREFETCH (gate and up, ``PF_DIST`` floats ahead), each token emitted for every slot.

The polynomial is 2^f on [-1/2, 1/2] to degree 6 (Taylor, error 1.2e-7) after a round-to-nearest
split of x * log2(e) into n + f, scaled by building 2^n in the exponent bits. Measured against
float64 over g in [-120, 120]: relative error 2e-7 for |g| < 8, growing with the rounding of
x * log2(e) to 4e-6 at |g| = 87 (where SiLU is below 1e-36); libm ``expf`` 2e-7 throughout. The
argument is clamped to 2^+-126, so no genome over- or underflows into NaN.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene
from core.workloads.c_kernel import (CConfig, CTemplate, Lanes, align_head, float_vectors, main_loop, parallel_for,
                                     prelude, streaming, tail_loop, vector_type)
from core.workloads.openmp import (compiler_hints, one_thread, pointer_hints_gene, row_parallel_genes, scalar_width,
                                   vector_genes, vector_kind)

ENTRY = "abebot_silu_mul"
ARGTYPES = ("ptr", "ptr", "ptr", "int", "int")  # gate, up, out, tokens, hidden
STAGES = ("LOAD_GATE", "LOAD_UP", "SILU", "MUL", "STORE")
BEFORE = (("LOAD_GATE", "SILU"), ("SILU", "MUL"), ("LOAD_UP", "MUL"), ("MUL", "STORE"))
PF_DIST = 256  # floats ahead (1 KiB): past what the hardware prefetcher has usually fetched


class CSiluMulTemplate(CTemplate):
    """The C template of :class:`~core.workloads.silu_mul.SiluMulWorkload`."""

    def gene_space(self) -> GeneSpace:
        parallel = row_parallel_genes(self.cores)
        memory = (
            *vector_genes(),
            ChoiceGene("store", ("normal", "streaming"), "output stores through the cache or non-temporal"),
            pointer_hints_gene("row "),
        )
        registers = (
            MapGene("register_map", (
                ("unroll", (1, 2, 4)),
                ("exp", ("expf", "poly", "double")),
                ("sigmoid", ("divide", "reciprocal")),
            ), "vectors per iteration; libm expf, exp2 polynomial or SiLU in double; g / (1 + e) or g * (1 / (1 + e))"),
        )
        sequence = (SequenceGene("stages", STAGES, ("PREFETCH",), BEFORE, "per-slot steps of the main loop"),)

        def meaningful(g: Genome) -> str | None:
            # At width 1 a streaming store is a normal store and a fence: not worth an evaluation.
            # (At width 1 both vectorize spellings render the same loop: see _scalar.)
            m = g["memory_pattern"]
            if m["vector_width"] == 1 and m["store"] == "streaming":
                return "streaming stores need vectors (vector_width > 1)"
            return None

        return GeneSpace(groups={"parallel_config": parallel, "memory_pattern": memory,
                                 "register_allocation": registers, "instruction_sequence": sequence},
                         constraints=(meaningful,), seeds=seed_genomes(self.cores), canonicalisers=CANONICALISERS,
                         hints=compiler_hints("PREFETCH"))

    def render(self, genome: Genome) -> KernelSource:
        cfg = SiluConfig.from_genome(genome)
        return self.c_kernel(render_source(cfg), ENTRY, ARGTYPES, cfg.threads, vector_width=cfg.vw)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        return kernel.bind(t["gate"], t["up"], t["out"], shape["tokens"], shape["hidden"])


TEMPLATE = CSiluMulTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

CANONICALISERS = (one_thread(schedule="static", rows_per_chunk=1), scalar_width)


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """A scalar libm kernel on one thread, and a row-parallel, 16-wide polynomial one."""
    naive = {
        "parallel_config": {"threads": 1, "schedule": "static", "rows_per_chunk": 1},
        "memory_pattern": {"vectorize": "vector_ext", "vector_width": 1, "store": "normal", "pointer_hints": "none"},
        "register_allocation": {"register_map": {"unroll": 1, "exp": "expf", "sigmoid": "divide"}},
        "instruction_sequence": {"stages": list(STAGES)},
    }
    fast = {
        "parallel_config": {"threads": cores, "schedule": "dynamic", "rows_per_chunk": 8},
        "memory_pattern": {"vectorize": "vector_ext", "vector_width": 16, "store": "normal", "pointer_hints": "restrict"},
        "register_allocation": {"register_map": {"unroll": 2, "exp": "poly", "sigmoid": "divide"}},
        "instruction_sequence": {"stages": ["LOAD_GATE", "LOAD_UP", "SILU", "MUL", "STORE"]},
    }
    return (naive, fast)


class SiluConfig(CConfig):
    """The genome's values for rendering."""

    @classmethod
    def from_genome(cls, g: Genome) -> "SiluConfig":
        p, m, rm = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["register_map"]
        kind = vector_kind(m)
        return cls(threads=p["threads"], schedule=p["schedule"], chunk=p["rows_per_chunk"], kind=kind,
                   vw=m["vector_width"], simd_pragma=m["vectorize"] == "omp_simd", streaming=m["store"] == "streaming",
                   restrict=m["pointer_hints"] == "restrict", unroll=rm["unroll"], exp=rm["exp"],
                   reciprocal=rm["sigmoid"] == "reciprocal", stages=tuple(g["instruction_sequence"]["stages"]))


# ---- rendering -----------------------------------------------------------------------------------

_EXP2_POLY = ("1.5403530e-4f", "1.3333558e-3f", "9.6181291e-3f", "5.5504109e-2f", "2.4022651e-1f",
              "6.9314718e-1f", "1.0f")  # ln(2)^k / k!, highest power first (Horner)


def render_source(c: SiluConfig) -> str:
    return "\n".join((_prelude(c), _scalar_silu(c), _vector_silu(c) if c.kind == "vector" else "", _row(c), _entry(c)))


def _prelude(c: SiluConfig) -> str:
    out = prelude("AbeBot SiLU-and-multiply, C backend: out = gate / (1 + exp(-gate)) * up, float32.",
                  ("math.h", "stddef.h", "stdint.h", "string.h", "omp.h"),
                  {"VW": c.vw, "UNROLL": c.unroll, "PF_DIST": PF_DIST, "RESTRICT": "restrict" if c.restrict else ""})
    if c.kind == "vector":
        out += (float_vectors(c.vw) + vector_type("vi", "int32_t", c.vw) + vector_type("vd", "double", c.vw)
                + "#define VSEL(m, a, b) ((vf)(((vi)(a) & (m)) | ((vi)(b) & ~(m))))\n")
    return out + (streaming(c.vw, c.kind == "vector") if c.streaming else "")


def _poly(var: str) -> str:
    """Horner's 2^f in ``var``, as one C expression."""
    expr = _EXP2_POLY[0]
    for coef in _EXP2_POLY[1:]:
        expr = f"({expr} * {var} + {coef})"
    return expr


def _scalar_silu(c: SiluConfig) -> str:
    """``silu1(g)``: the tail's (and the scalar and omp-simd loops') SiLU of one float."""
    out = ""
    if c.exp == "poly":
        out += ("static inline float exp_poly(float x) {\n"
                "  float t = x * 1.44269504088896341f;\n"
                "  t = t < -126.0f ? -126.0f : t;\n  t = t > 126.0f ? 126.0f : t;\n"
                "  const float r = t + 12582912.0f;  /* 1.5 * 2^23: round to nearest, n in the low bits */\n"
                "  const float f = t - (r - 12582912.0f);\n"
                "  int32_t n; memcpy(&n, &r, 4);\n  n = (n - 0x4B400000 + 127) << 23;\n"
                "  float s; memcpy(&s, &n, 4);\n"
                f"  return {_poly('f')} * s;\n}}\n")
    if c.exp == "double":
        body = "const double gd = g, e = exp(-gd);\n  return (float)(" + ("gd * (1.0 / (1.0 + e))" if c.reciprocal else "gd / (1.0 + e)") + ");"
    else:
        e = "exp_poly(-g)" if c.exp == "poly" else "expf(-g)"
        body = f"const float e = {e};\n  return " + ("g * (1.0f / (1.0f + e));" if c.reciprocal else "g / (1.0f + e);")
    return out + f"static inline float silu1(float g) {{\n  {body}\n}}\n"


def _vector_silu(c: SiluConfig) -> str:
    """``vsilu(g)`` on a GCC vector: the polynomial in vector operations, libm or double lane by lane."""
    if c.exp == "poly":
        out = ("static inline vf vexp_poly(vf x) {\n"
               "  vf t = x * 1.44269504088896341f;\n"
               "  t = VSEL(t < -126.0f, (vf){0} - 126.0f, t);\n  t = VSEL(t > 126.0f, (vf){0} + 126.0f, t);\n"
               "  const vf r = t + 12582912.0f;\n  const vf f = t - (r - 12582912.0f);\n"
               "  const vi s = ((vi)r - 0x4B400000 + 127) << 23;\n"
               f"  return {_poly('f')} * (vf)s;\n}}\n")
        e = "vexp_poly(-g)"
    elif c.exp == "expf":
        out, e = "", "ve"
    else:
        div = "gd * (1.0 / (1.0 + e))" if c.reciprocal else "gd / (1.0 + e)"
        return ("static inline vf vsilu(vf g) {\n  const vd gd = __builtin_convertvector(g, vd);\n  vd e;\n"
                "  for (int l = 0; l < VW; ++l) e[l] = exp(-gd[l]);\n"
                f"  return __builtin_convertvector({div}, vf);\n}}\n")
    lanes = "  vf ve;\n  for (int l = 0; l < VW; ++l) ve[l] = expf(-g[l]);\n" if c.exp == "expf" else ""
    div = "g * (1.0f / (1.0f + e))" if c.reciprocal else "g / (1.0f + e)"
    return out + f"static inline vf vsilu(vf g) {{\n{lanes}  const vf e = {e};\n  return {div};\n}}\n"


def _body(c: SiluConfig, slots: int, scalar: bool, stream: bool) -> str:
    """The stages in genome order, each for every slot (token-major)."""
    lanes = Lanes("scalar" if scalar else c.kind, c.vw)
    vec, vt = lanes.vtype == "vf", lanes.vtype
    lines = []
    for tok in c.stages:
        for s in range(slots):
            if tok == "LOAD_GATE":
                lines.append(f"const {vt} g{s} = {lanes.load('gr', s)};")
            elif tok == "LOAD_UP":
                lines.append(f"const {vt} u{s} = {lanes.load('ur', s)};")
            elif tok == "SILU":
                lines.append(f"const {vt} a{s} = {'vsilu' if vec else 'silu1'}(g{s});")
            elif tok == "MUL":
                lines.append(f"const {vt} o{s} = a{s} * u{s};")
            elif tok == "STORE":
                lines.append(lanes.stream("orow", s, f"o{s}") if stream else lanes.store("orow", s, f"o{s}"))
            elif tok == "PREFETCH" and not scalar:
                i = lanes.idx(s)
                lines.append(f"__builtin_prefetch(gr + {i} + PF_DIST, 0, 0); __builtin_prefetch(ur + {i} + PF_DIST, 0, 0);")
    return lanes.lines(lines)


def _row(c: SiluConfig) -> str:
    """One row: (an alignment head for vector streaming stores,) the main loop, the scalar tail."""
    r = "RESTRICT"
    out = (f"static void row(const float *{r} gr, const float *{r} ur, float *{r} orow, int n) {{\n"
           "  int j = 0;\n")
    step = c.unroll * (1 if c.kind == "scalar" else c.vw)
    if c.streaming and c.kind == "vector":
        out += align_head("orow", "n", c.vw, _body(c, 1, scalar=True, stream=False))
    # omp simd streams through the loop's nontemporal clause, a vector loop through STREAM
    out += main_loop(Lanes(c.kind, c.vw), step, "n", _body(c, c.unroll, scalar=False, stream=c.streaming and c.kind != "simd"),
                     nontemporal="orow" if c.streaming else "")
    out += tail_loop("n", _body(c, 1, scalar=True, stream=False))
    if c.streaming:
        out += "  FENCE();\n"
    return out + "}\n"


def _entry(c: SiluConfig) -> str:
    return ("void abebot_silu_mul(const float *gate, const float *up, float *out, int tokens, int hidden) {\n"
            "  if (tokens <= 0 || hidden <= 0) return;\n" + parallel_for(c.threads, c.schedule, c.chunk)
            + "  for (int i = 0; i < tokens; ++i) {\n    const size_t o = (size_t)i * hidden;\n"
            "    row(gate + o, up + o, out + o, hidden);\n  }\n}\n")
