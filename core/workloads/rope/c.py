"""RoPE on the CPU: an OpenMP C kernel (float32) rotating query and key heads in place.

The heads of a token are taken in groups of ``heads`` (query heads, then key heads; a short last
group runs head by head). A group shares one load of the token's cos and sin across its heads:
each pair index ``j`` runs a main loop of ``unroll`` slots of ``vector_width`` floats and a scalar
tail, so every genome is right for any half width. The genome picks:

* parallel_config -- OpenMP threads, schedule and chunk, and what the parallel loop runs over:
  tokens (each thread whole tokens) or (token, head group) pairs (a decode step of one token still
  spreads over the threads);
* memory_pattern -- vectorisation (GCC vector extensions or ``#pragma omp simd``) and width,
  ``restrict`` on the head pointers;
* register_allocation -- slots per iteration (unroll) and heads per group (cos and sin held in
  registers across them);
* instruction_sequence -- the order of LOAD_CS, LOAD_X1, LOAD_X2, ROTATE, STORE_X1, STORE_X2 and an
  optional PREFETCH (the head's data ``PF_DIST`` floats ahead), each emitted for every slot and head.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import GeneSpace, Genome, MapGene, SequenceGene
from core.workloads.c_kernel import (CConfig, CTemplate, Lanes, float_vectors, main_loop, over_token_groups,
                                     parallel_for, prelude, tail_loop)
from core.workloads.openmp import (compiler_hints, one_thread, pointer_hints_gene, scalar_width,
                                   split_parallel_genes, vector_genes, vector_kind)

ENTRY = "abebot_rope"
ARGTYPES = ("ptr", "ptr", "ptr", "ptr", "int", "int", "int", "int")  # positions, cache, q, k, tokens, q_heads, kv_heads, half_dim
STAGES = ("LOAD_CS", "LOAD_X1", "LOAD_X2", "ROTATE", "STORE_X1", "STORE_X2")
BEFORE = (("LOAD_CS", "ROTATE"), ("LOAD_X1", "ROTATE"), ("LOAD_X2", "ROTATE"), ("ROTATE", "STORE_X1"),
          ("ROTATE", "STORE_X2"))
PF_DIST = 256  # floats ahead (1 KiB): the next heads of the token


class CRopeTemplate(CTemplate):
    """The C template of :class:`~core.workloads.rope.RopeWorkload`."""

    def gene_space(self) -> GeneSpace:
        parallel = split_parallel_genes(self.cores, ("tokens", "head_groups"),
                                        "the parallel loop runs over tokens or (token, head group) pairs")
        memory = (*vector_genes(), pointer_hints_gene("head "))
        registers = (MapGene("register_map", (("unroll", (1, 2, 4)), ("heads", (1, 2, 4))),
                             "slots per iteration; heads sharing one load of cos and sin"),)
        sequence = (SequenceGene("stages", STAGES, ("PREFETCH",), BEFORE, "per-slot steps of the main loop"),)
        return GeneSpace(groups={"parallel_config": parallel, "memory_pattern": memory,
                                 "register_allocation": registers, "instruction_sequence": sequence},
                         seeds=seed_genomes(self.cores), canonicalisers=CANONICALISERS, hints=compiler_hints("PREFETCH"))

    def render(self, genome: Genome) -> KernelSource:
        cfg = RopeConfig.from_genome(genome)
        return self.c_kernel(render_source(cfg), ENTRY, ARGTYPES, cfg.threads, vector_width=cfg.vw)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        return kernel.bind(t["positions"], t["cos_sin_cache"], t["q"], t["k"], shape["tokens"], shape["q_heads"],
                           shape["kv_heads"], shape["half_dim"])


TEMPLATE = CRopeTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

CANONICALISERS = (one_thread(schedule="static", chunk=1), scalar_width)


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """A scalar head-by-head kernel on one thread, and a vectorised, threaded one over head groups."""
    naive = {
        "parallel_config": {"threads": 1, "schedule": "static", "chunk": 1, "split": "tokens"},
        "memory_pattern": {"vectorize": "vector_ext", "vector_width": 1, "pointer_hints": "none"},
        "register_allocation": {"register_map": {"unroll": 1, "heads": 1}},
        "instruction_sequence": {"stages": list(STAGES)},
    }
    fast = {
        "parallel_config": {"threads": cores, "schedule": "static", "chunk": 4, "split": "head_groups"},
        "memory_pattern": {"vectorize": "vector_ext", "vector_width": 16, "pointer_hints": "restrict"},
        "register_allocation": {"register_map": {"unroll": 1, "heads": 2}},
        "instruction_sequence": {"stages": list(STAGES)},
    }
    return (naive, fast)


class RopeConfig(CConfig):
    """The genome's values for rendering."""

    @classmethod
    def from_genome(cls, g: Genome) -> "RopeConfig":
        p, m, rm = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["register_map"]
        kind = vector_kind(m)
        return cls(threads=p["threads"], schedule=p["schedule"], chunk=p["chunk"], split=p["split"], kind=kind,
                   vw=m["vector_width"], restrict=m["pointer_hints"] == "restrict", unroll=rm["unroll"],
                   heads=rm["heads"], stages=tuple(g["instruction_sequence"]["stages"]))


# ---- rendering -----------------------------------------------------------------------------------

def render_source(c: RopeConfig) -> str:
    groups = sorted({c.heads, 1}, reverse=True)
    return "\n".join([_prelude(c)] + [_rot(c, n) for n in groups] + [_group(c), _entry(c)])


def _prelude(c: RopeConfig) -> str:
    out = prelude("AbeBot RoPE (NeoX), C backend: x1' = x1 c - x2 s, x2' = x2 c + x1 s per head, float32, in place.",
                  ("stddef.h", "omp.h"), {"VW": c.vw, "UNROLL": c.unroll, "HEADS": c.heads, "PF_DIST": PF_DIST,
                                          "RESTRICT": "restrict" if c.restrict else ""})
    return out + (float_vectors(c.vw) if c.kind == "vector" else "")


def _body(c: RopeConfig, n: int, slots: int, scalar: bool) -> str:
    """The stages in genome order, each for every slot and head (token-major)."""
    lanes = Lanes("scalar" if scalar else c.kind, c.vw)
    vt, load = lanes.vtype, lanes.load
    lines = []
    for tok in c.stages:
        for s in range(slots):
            if tok == "LOAD_CS":
                lines.append(f"const {vt} c{s} = {load('cr', s)}, s{s} = {load('sr', s)};")
            for h in range(n):
                a, b = f"a{h}_{s}", f"b{h}_{s}"
                if tok == "LOAD_X1":
                    lines.append(f"const {vt} {a} = {load(f'x{h}', s)};")
                elif tok == "LOAD_X2":
                    lines.append(f"const {vt} {b} = {load(f'y{h}', s)};")
                elif tok == "ROTATE":
                    lines.append(f"const {vt} o{h}_{s} = {a} * c{s} - {b} * s{s}, p{h}_{s} = {b} * c{s} + {a} * s{s};")
                elif tok == "STORE_X1":
                    lines.append(lanes.store(f"x{h}", s, f"o{h}_{s}"))
                elif tok == "STORE_X2":
                    lines.append(lanes.store(f"y{h}", s, f"p{h}_{s}"))
                elif tok == "PREFETCH" and not scalar:
                    lines.append(f"__builtin_prefetch(x{h} + {lanes.idx(s)} + PF_DIST, 1, 0);")
    return lanes.lines(lines)


def _rot(c: RopeConfig, n: int) -> str:
    """``rot<n>``: rotate ``n`` heads with one token's cos and sin."""
    r = "RESTRICT"
    heads = ", ".join(f"float *{r} x{h}" for h in range(n))
    out = (f"static void rot{n}({heads}, const float *{r} cr, const float *{r} sr, int H) {{\n"
           + "".join(f"  float *{r} y{h} = x{h} + H;\n" for h in range(n)) + "  int j = 0;\n")
    step = c.unroll * (1 if c.kind == "scalar" else c.vw)
    out += main_loop(Lanes(c.kind, c.vw), step, "H", _body(c, n, c.unroll, False)) + tail_loop("H", _body(c, n, 1, True))
    return out + "}\n"


def _group(c: RopeConfig) -> str:
    """Head group ``g`` of token ``t``: query groups first, then key groups."""
    call = ", ".join(f"x + {h} * 2 * (size_t)H" for h in range(c.heads))
    return ("static void group(const int *positions, const float *cache, float *q, float *k, int t, int g,\n"
            "                  int nq, int nk, int H) {\n"
            "  const int gq = (nq + HEADS - 1) / HEADS;\n"
            "  const float *cr = cache + (size_t)positions[t] * 2 * H, *sr = cr + H;\n"
            "  const int nh = g < gq ? nq : nk, h0 = (g < gq ? g : g - gq) * HEADS;\n"
            "  float *x = (g < gq ? q + (size_t)t * nq * 2 * H : k + (size_t)t * nk * 2 * H) + (size_t)h0 * 2 * H;\n"
            f"  if (h0 + HEADS <= nh) {{ rot{c.heads}({call}, cr, sr, H); return; }}\n"
            "  for (int h = h0; h < nh; ++h, x += 2 * (size_t)H) rot1(x, cr, sr, H);\n}\n")


def _entry(c: RopeConfig) -> str:
    return ("void abebot_rope(const int *positions, const float *cache, float *q, float *k, int tokens, int q_heads,\n"
            "                 int kv_heads, int half_dim) {\n"
            "  if (tokens <= 0 || half_dim <= 0) return;\n"
            "  const int G = (q_heads + HEADS - 1) / HEADS + (kv_heads + HEADS - 1) / HEADS;\n"
            + parallel_for(c.threads, c.schedule, c.chunk)
            + over_token_groups(c.split, "group(positions, cache, q, k, {t}, {g}, q_heads, kv_heads, half_dim);"))
