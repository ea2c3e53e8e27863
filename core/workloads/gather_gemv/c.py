"""Gathered GEMV on the CPU: an OpenMP C kernel (float32) of dot products with gathered rows of W.

A token's candidates are taken in groups of ``rows`` (a short last group runs row by row): one
pass over the hidden size loads each chunk of ``h`` once and multiplies it into every row of the
group, ``accumulators`` independent partial sums per row, then a scalar tail, so every genome is
right for any hidden size. The genome picks:

* parallel_config -- OpenMP threads, schedule and chunk, and what the parallel loop runs over:
  tokens, or (token, candidate group) pairs (a single token still spreads over the threads);
* memory_pattern -- vectorisation (GCC vector extensions or ``#pragma omp simd``) and width,
  ``restrict`` on the row pointers;
* register_allocation -- rows per pass (h reused from registers), accumulators per row, and
  float or double accumulators;
* instruction_sequence -- the order of LOAD_H, LOAD_W and FMA and an optional PREFETCH of the rows
  ``PF_DIST`` floats ahead, each emitted for every slot (and row).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import GeneSpace, Genome, MapGene, SequenceGene
from core.workloads.c_kernel import (CConfig, CTemplate, Lanes, float_vectors, main_loop, over_token_groups,
                                     parallel_for, prelude, tail_loop, vector_type)
from core.workloads.openmp import (compiler_hints, one_thread, pointer_hints_gene, scalar_width,
                                   split_parallel_genes, vector_genes, vector_kind)

ENTRY = "abebot_gather_gemv"
ARGTYPES = ("ptr", "ptr", "ptr", "ptr", "int", "int", "int", "int")  # h, W, ids, logits, tokens, cands, vocab, hidden
STAGES = ("LOAD_H", "LOAD_W", "FMA")
BEFORE = (("LOAD_H", "FMA"), ("LOAD_W", "FMA"))
PF_DIST = 256  # floats ahead (1 KiB)


class CGatherGemvTemplate(CTemplate):
    """The C template of :class:`~core.workloads.gather_gemv.GatherGemvWorkload`."""

    def gene_space(self) -> GeneSpace:
        parallel = split_parallel_genes(self.cores, ("tokens", "row_groups"),
                                        "the parallel loop runs over tokens or (token, row group) pairs")
        memory = (*vector_genes(), pointer_hints_gene())
        registers = (MapGene("register_map", (("rows", (1, 2, 4)), ("accumulators", (1, 2, 4)), ("acc_type", ("float", "double"))),
                             "gathered rows per pass (sharing h), partial sums per row, accumulator precision"),)
        sequence = (SequenceGene("stages", STAGES, ("PREFETCH",), BEFORE, "per-slot steps of the main loop"),)
        return GeneSpace(groups={"parallel_config": parallel, "memory_pattern": memory,
                                 "register_allocation": registers, "instruction_sequence": sequence},
                         seeds=seed_genomes(self.cores), canonicalisers=CANONICALISERS, hints=compiler_hints("PREFETCH"))

    def render(self, genome: Genome) -> KernelSource:
        cfg = GatherConfig.from_genome(genome)
        return self.c_kernel(render_source(cfg), ENTRY, ARGTYPES, cfg.threads, vector_width=cfg.vw)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        return kernel.bind(t["h"], t["W"], t["ids"], t["logits"], shape["tokens"], shape["cands"], shape["vocab"],
                           shape["hidden"])


TEMPLATE = CGatherGemvTemplate

CANONICALISERS = (one_thread(schedule="static", chunk=1), scalar_width)


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """A scalar dot product per candidate on one thread, and a vectorised, threaded, 2-row one."""
    naive = {
        "parallel_config": {"threads": 1, "schedule": "static", "chunk": 1, "split": "tokens"},
        "memory_pattern": {"vectorize": "vector_ext", "vector_width": 1, "pointer_hints": "none"},
        "register_allocation": {"register_map": {"rows": 1, "accumulators": 1, "acc_type": "float"}},
        "instruction_sequence": {"stages": list(STAGES)},
    }
    fast = {
        "parallel_config": {"threads": cores, "schedule": "static", "chunk": 1, "split": "row_groups"},
        "memory_pattern": {"vectorize": "vector_ext", "vector_width": 16, "pointer_hints": "restrict"},
        "register_allocation": {"register_map": {"rows": 2, "accumulators": 2, "acc_type": "float"}},
        "instruction_sequence": {"stages": list(STAGES)},
    }
    return (naive, fast)


class GatherConfig(CConfig):
    """The genome's values for rendering."""

    @classmethod
    def from_genome(cls, g: Genome) -> "GatherConfig":
        p, m, rm = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["register_map"]
        kind = vector_kind(m)
        return cls(threads=p["threads"], schedule=p["schedule"], chunk=p["chunk"], split=p["split"], kind=kind,
                   vw=m["vector_width"], restrict=m["pointer_hints"] == "restrict", rows=rm["rows"],
                   acc=rm["accumulators"], double=rm["acc_type"] == "double",
                   stages=tuple(g["instruction_sequence"]["stages"]))


# ---- rendering -----------------------------------------------------------------------------------

def render_source(c: GatherConfig) -> str:
    groups = sorted({c.rows, 1}, reverse=True)
    return "\n".join([_prelude(c)] + [_dot(c, n) for n in groups] + [_group(c), _entry(c)])


def _prelude(c: GatherConfig) -> str:
    out = prelude("AbeBot gathered GEMV, C backend: logits[t, j] = h[t] . W[ids[t, j]], float32.", ("stddef.h", "omp.h"),
                  {"VW": c.vw, "NACC": c.acc, "ROWS": c.rows, "ACCT": "double" if c.double else "float",
                   "PF_DIST": PF_DIST, "RESTRICT": "restrict" if c.restrict else ""})
    if c.kind == "vector":
        out += float_vectors(c.vw) + vector_type("vd", "double", c.vw)
    return out


def _body(c: GatherConfig, n: int, slots: int, scalar: bool) -> str:
    """The stages in genome order, each for every slot (and row), token-major."""
    lanes = Lanes("scalar" if scalar else c.kind, c.vw)
    vec, vt = lanes.vtype == "vf", lanes.vtype

    def acc(r: int, s: int) -> str:
        if scalar:
            return f"t{r}"
        return f"acc{r}_{s}[l]" if lanes.kind == "simd" else f"acc{r}_{s}"

    lines = []
    for tok in c.stages:
        for s in range(slots):
            if tok == "LOAD_H":
                lines.append(f"const {vt} h{s} = {lanes.load('hr', s)};")
            for r in range(n):
                if tok == "LOAD_W":
                    lines.append(f"const {vt} w{r}_{s} = {lanes.load(f'w{r}', s)};")
                elif tok == "FMA" and c.double and vec:
                    lines.append(f"{acc(r, s)} += __builtin_convertvector(h{s}, vd) * __builtin_convertvector(w{r}_{s}, vd);")
                elif tok == "FMA" and c.double:
                    lines.append(f"{acc(r, s)} += (double)h{s} * (double)w{r}_{s};")
                elif tok == "FMA":
                    lines.append(f"{acc(r, s)} += h{s} * w{r}_{s};")
                elif tok == "PREFETCH" and not scalar:
                    lines.append(f"__builtin_prefetch(w{r} + {lanes.idx(s)} + PF_DIST, 0, 0);")
    return lanes.lines(lines)


def _dot(c: GatherConfig, n: int) -> str:
    """``dot<n>``: ``n`` dot products of ``hr`` with rows ``w0..``, one pass over the hidden size."""
    r = "RESTRICT"
    rows = ", ".join(f"const float *{r} w{i}" for i in range(n))
    out = f"static void dot{n}(const float *{r} hr, {rows}, float *{r} o, int K) {{\n  int j = 0;\n"
    if c.kind == "vector":
        at = "vd" if c.double else "vf"
        out += "".join(f"  {at} acc{i}_{s} = {{0}};\n" for i in range(n) for s in range(c.acc))
    elif c.kind == "simd":
        out += "".join(f"  ACCT acc{i}_{s}[VW] = {{0}};\n" for i in range(n) for s in range(c.acc))
    else:
        out += "".join(f"  ACCT acc{i}_{s} = 0;\n" for i in range(n) for s in range(c.acc))
    out += "".join(f"  ACCT t{i} = 0;\n" for i in range(n))
    step = c.acc * (1 if c.kind == "scalar" else c.vw)
    out += main_loop(Lanes(c.kind, c.vw), step, "K", _body(c, n, c.acc, False)) + tail_loop("K", _body(c, n, 1, True))
    for i in range(n):
        for s in range(c.acc):
            out += (f"  for (int l = 0; l < VW; ++l) t{i} += acc{i}_{s}[l];\n" if c.kind != "scalar"
                    else f"  t{i} += acc{i}_{s};\n")
        out += f"  o[{i}] = (float)t{i};\n"
    return out + "}\n"


def _group(c: GatherConfig) -> str:
    """Candidate group ``g`` of token ``t``."""
    rows = ", ".join(f"W + (size_t)id[{i}] * K" for i in range(c.rows))
    return ("static void group(const float *h, const float *W, const int *ids, float *logits, int t, int g,\n"
            "                  int J, int K) {\n"
            "  const int j0 = g * ROWS;\n"
            "  const int *id = ids + (size_t)t * J + j0;\n"
            "  const float *hr = h + (size_t)t * K;\n"
            "  float *o = logits + (size_t)t * J + j0;\n"
            f"  if (j0 + ROWS <= J) {{ dot{c.rows}(hr, {rows}, o, K); return; }}\n"
            "  for (int i = 0; j0 + i < J; ++i) dot1(hr, W + (size_t)id[i] * K, o + i, K);\n}\n")


def _entry(c: GatherConfig) -> str:
    return ("void abebot_gather_gemv(const float *h, const float *W, const int *ids, float *logits, int tokens,\n"
            "                        int cands, int vocab, int hidden) {\n"
            "  (void)vocab;\n  if (tokens <= 0 || cands <= 0) return;\n"
            "  const int G = (cands + ROWS - 1) / ROWS;\n"
            + parallel_for(c.threads, c.schedule, c.chunk)
            + over_token_groups(c.split, "group(h, W, ids, logits, {t}, {g}, cands, hidden);"))
