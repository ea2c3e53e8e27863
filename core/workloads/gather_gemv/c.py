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

import os
from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene
from core.workloads.openmp import one_thread, scalar_width, thread_options, vector_genes, vector_kind
from core.workloads.template import Template

ENTRY = "abebot_gather_gemv"
ARGTYPES = ("ptr", "ptr", "ptr", "ptr", "int", "int", "int", "int")  # h, W, ids, logits, tokens, cands, vocab, hidden
STAGES = ("LOAD_H", "LOAD_W", "FMA")
BEFORE = (("LOAD_H", "FMA"), ("LOAD_W", "FMA"))
PF_DIST = 256  # floats ahead (1 KiB)


class CGatherGemvTemplate(Template):
    """The C template of :class:`~core.workloads.gather_gemv.GatherGemvWorkload`."""

    backend = "c"

    def gene_space(self) -> GeneSpace:
        cores = max(1, int(self.device.multiprocessors or os.cpu_count() or 1))
        parallel = (
            ChoiceGene("threads", thread_options(cores), "OpenMP threads (1 = no parallel region)"),
            ChoiceGene("schedule", ("static", "dynamic", "guided"), "OpenMP schedule of the parallel loop"),
            ChoiceGene("chunk", (1, 2, 4, 8, 16, 32), "iterations handed to a thread at a time"),
            ChoiceGene("split", ("tokens", "row_groups"), "the parallel loop runs over tokens or (token, row group) pairs"),
        )
        memory = (*vector_genes(), ChoiceGene("pointer_hints", ("none", "restrict"), "restrict-qualified pointers"))
        registers = (MapGene("register_map", (("rows", (1, 2, 4)), ("accumulators", (1, 2, 4)), ("acc_type", ("float", "double"))),
                             "gathered rows per pass (sharing h), partial sums per row, accumulator precision"),)
        sequence = (SequenceGene("stages", STAGES, ("PREFETCH",), BEFORE, "per-slot steps of the main loop"),)
        return GeneSpace(groups={"parallel_config": parallel, "memory_pattern": memory,
                                 "register_allocation": registers, "instruction_sequence": sequence},
                         seeds=seed_genomes(cores), canonicalisers=CANONICALISERS,
                         # restrict and a prefetch's place among independent statements: gcc may have
                         # no use for them in a given loop
                         hints=("memory_pattern.pointer_hints", "instruction_sequence.stages:PREFETCH"))

    def render(self, genome: Genome) -> KernelSource:
        cfg = GatherConfig.from_genome(genome)
        return KernelSource(backend="c", source=render_source(cfg), entry=ENTRY, flags=("-std=gnu11",),
                            launch={"argtypes": ARGTYPES, "threads": cfg.threads, "vector_width": cfg.vw},
                            resources={"workspace_bytes": 0, "threads": cfg.threads})

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


class GatherConfig:
    """The genome's values for rendering."""

    def __init__(self, **kw: Any):
        self.__dict__.update(kw)

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
    acct = "double" if c.double else "float"
    out = ("/* AbeBot gathered GEMV, C backend: logits[t, j] = h[t] . W[ids[t, j]], float32. */\n"
           "#include <stddef.h>\n#include <omp.h>\n"
           f"#define VW {c.vw}\n#define NACC {c.acc}\n#define ROWS {c.rows}\n#define ACCT {acct}\n#define PF_DIST {PF_DIST}\n"
           f"#define RESTRICT {'restrict' if c.restrict else ''}\n")
    if c.kind == "vector":
        out += (f"typedef float vf __attribute__((vector_size({4 * c.vw}), may_alias));\n"
                f"typedef float vfu __attribute__((vector_size({4 * c.vw}), aligned(4), may_alias));\n"
                f"typedef double vd __attribute__((vector_size({8 * c.vw})));\n")
    return out


def _body(c: GatherConfig, n: int, slots: int, scalar: bool) -> str:
    """The stages in genome order, each for every slot (and row), token-major."""
    vec = c.kind == "vector" and not scalar
    simd = c.kind == "simd" and not scalar
    vt, ind = ("vf" if vec else "float"), ("      " if simd else "    ")
    width = 1 if scalar or c.kind == "scalar" else c.vw

    def idx(s: int) -> str:
        base = f"j + {s * width}" if s else "j"
        return f"{base} + l" if simd else base

    def load(ptr: str, s: int) -> str:
        return f"*(const vfu *)({ptr} + {idx(s)})" if vec else f"{ptr}[{idx(s)}]"

    def acc(r: int, s: int) -> str:
        if scalar:
            return f"t{r}"
        return f"acc{r}_{s}[l]" if simd else f"acc{r}_{s}"

    lines = []
    for tok in c.stages:
        for s in range(slots):
            if tok == "LOAD_H":
                lines.append(f"const {vt} h{s} = {load('hr', s)};")
            for r in range(n):
                if tok == "LOAD_W":
                    lines.append(f"const {vt} w{r}_{s} = {load(f'w{r}', s)};")
                elif tok == "FMA" and c.double and vec:
                    lines.append(f"{acc(r, s)} += __builtin_convertvector(h{s}, vd) * __builtin_convertvector(w{r}_{s}, vd);")
                elif tok == "FMA" and c.double:
                    lines.append(f"{acc(r, s)} += (double)h{s} * (double)w{r}_{s};")
                elif tok == "FMA":
                    lines.append(f"{acc(r, s)} += h{s} * w{r}_{s};")
                elif tok == "PREFETCH" and not scalar:
                    lines.append(f"__builtin_prefetch(w{r} + {idx(s)} + PF_DIST, 0, 0);")
    return "".join(f"{ind}{ln}\n" for ln in lines)


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
    out += f"  for (; j + {step} <= K; j += {step}) {{\n"
    if c.kind == "simd":
        out += "#pragma omp simd simdlen(VW)\n    for (int l = 0; l < VW; ++l) {\n" + _body(c, n, c.acc, False) + "    }\n"
    else:
        out += _body(c, n, c.acc, False)
    out += "  }\n  for (; j < K; ++j) {\n" + _body(c, n, 1, True) + "  }\n"
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
    out = ("void abebot_gather_gemv(const float *h, const float *W, const int *ids, float *logits, int tokens,\n"
           "                        int cands, int vocab, int hidden) {\n"
           "  (void)vocab;\n  if (tokens <= 0 || cands <= 0) return;\n"
           "  const int G = (cands + ROWS - 1) / ROWS;\n")
    pragma = (f"  #pragma omp parallel for num_threads({c.threads}) schedule({c.schedule}, {c.chunk})\n"
              if c.threads > 1 else "")
    if c.split == "tokens":
        return out + pragma + ("  for (int t = 0; t < tokens; ++t)\n    for (int g = 0; g < G; ++g)\n"
                               "      group(h, W, ids, logits, t, g, cands, hidden);\n}\n")
    return out + pragma + ("  for (long w = 0; w < (long)tokens * G; ++w)\n"
                           "    group(h, W, ids, logits, (int)(w / G), (int)(w % G), cands, hidden);\n}\n")
