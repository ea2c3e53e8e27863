"""The C source of a GEMM genome: a BLIS-style loop nest around a register-tiled micro-kernel.

:class:`GemmConfig` reads the genome's values; :func:`render_source` writes the C. The template
(``c.py``) holds the gene space and the launch; this module only turns a configuration into code.
"""
from __future__ import annotations

import math
from typing import Callable

from core.genome import Genome
from core.workloads.c_kernel import CConfig, float_vectors, prelude

LOOPS = ("JC", "KC", "IC", "JR", "IR")
BLOCKING = ("JC", "KC", "IC")
PREFETCHES = ("PREFETCH_A", "PREFETCH_B")
MAX_ACC_VECTORS = 64  # beyond this the "register" tile is an array on the stack and gcc crawls

# Loop variable, extent, step constant and the bound's name, per loop token.
_LOOP = {
    "JC": ("jc", "N", "NC_", "nc"),
    "KC": ("pc", "K", "KC_", "kc"),
    "IC": ("ic", "M", "MC_", "mc"),
    "JR": ("jr", "nc", "NR", "nr"),
    "IR": ("ir", "mc", "MR", "mr"),
}


class GemmConfig(CConfig):
    """The genome's values, with block sizes rounded to whole micro-tiles."""

    @classmethod
    def from_genome(cls, g: Genome) -> "GemmConfig":
        p, m, rm = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["register_map"]
        mr, nr = rm["mr"], rm["nr"]
        threads = p["threads"]
        return cls(
            threads=threads, schedule=p["schedule"], parallel_loop=p["parallel_loop"].upper() if threads > 1 else None,
            mc=_round_up(p["mc"], mr), nc=_round_up(p["nc"], nr), kc=p["kc"],
            pack_a=m["pack_a"] == "panels", pack_b=m["pack_b"] == "panels", vectorize=m["vectorize"],
            vw=m["vector_width"], restrict=m["pointer_hints"] != "none", aligned=m["pointer_hints"] == "restrict_aligned",
            mr=mr, nr=nr, acc_in_registers=rm["acc"] == "registers", preload_a=rm["a_values"] == "preload",
            ku=rm["k_unroll"], order=tuple(g["instruction_sequence"]["loop_order"]),
        )

    @property
    def loops(self) -> tuple[str, ...]:
        return tuple(t for t in self.order if t in LOOPS)

    def pack_point(self, operand: str) -> str:
        """The blocking loop at the top of whose body the operand's panel is packed."""
        deps = ("JC", "KC") if operand == "B" else ("IC", "KC")
        return max(deps, key=self.loops.index)

    def private(self, operand: str) -> bool:
        """Packed inside the work-shared loop: each thread packs its own copy."""
        par = self.parallel_loop
        return par is not None and self.loops.index(par) <= self.loops.index(self.pack_point(operand))

    def sizes(self, m: int, n: int, k: int) -> dict[str, int]:
        """Floats of each workspace buffer for one thread (packed panels, edge panels, edge tile)."""
        kc = min(self.kc, k)
        return {
            "Ap": math.ceil(min(self.mc, m) / self.mr) * _round_up(kc * self.mr, 16) if self.pack_a else 0,
            "Bp": math.ceil(min(self.nc, n) / self.nr) * _round_up(kc * self.nr, 16) if self.pack_b else 0,
            "edge": _round_up(self.kc * self.mr, 16) + _round_up(self.kc * self.nr, 16) + _round_up(self.mr * self.nr, 16),
        }

    def workspace_bytes(self, m: int, n: int, k: int) -> int:
        s, t = self.sizes(m, n, k), self.threads
        copies = {"Ap": t if self.private("A") else 1, "Bp": t if self.private("B") else 1, "edge": t}
        return 4 * sum(s[name] * copies[name] for name in s)


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


# ---- rendering -----------------------------------------------------------------------------------

def render_source(c: GemmConfig) -> str:
    """The whole translation unit for one configuration."""
    parts = [_prelude(c), _microkernel(c, "ukr_main", c.pack_a, c.pack_b)]
    if not (c.pack_a and c.pack_b):
        parts.append(_microkernel(c, "ukr_packed", True, True))
    parts += [_edge_tile(c), _entry(c)]
    return "\n".join(parts)


def _prelude(c: GemmConfig) -> str:
    out = prelude("AbeBot GEMM, C backend: C[M,N] = A[M,K] @ B[K,N], row-major float32.",
                  ("stddef.h", "stdlib.h", "string.h", "omp.h"),
                  {"MR": c.mr, "NR": c.nr, "VW": c.vw, "MC_": c.mc, "NC_": c.nc, "KC_": c.kc,
                   "MIN(a, b)": "((a) < (b) ? (a) : (b))", "RESTRICT": "restrict" if c.restrict else ""})
    return out + (float_vectors(c.vw) if c.vectorize == "vector_ext" and c.vw > 1 else "")


def _a_expr(packed: bool, i: int | str, k: str) -> str:
    return f"a[({k}) * MR + {i}]" if packed else f"a[(size_t)({i}) * lda + ({k})]"


def _b_ptr(packed: bool, k: str, col: str) -> str:
    return f"b + ({k}) * NR + {col}" if packed else f"b + (size_t)({k}) * ldb + {col}"


def _microkernel(c: GemmConfig, name: str, a_packed: bool, b_packed: bool) -> str:
    """C[MR x NR] (+)= A panel @ B panel over kc steps; ``first`` stores instead of accumulating."""
    head = (f"static inline void {name}(int kc, const float *RESTRICT a, long lda, const float *RESTRICT b, "
            f"long ldb, float *RESTRICT c, long ldc, int first) {{\n  (void)lda; (void)ldb;\n")
    if c.aligned:
        if a_packed:
            head += "  a = (const float *)__builtin_assume_aligned(a, 64);\n"
        if b_packed:
            head += "  b = (const float *)__builtin_assume_aligned(b, 64);\n"
    if c.acc_in_registers and c.vectorize == "vector_ext":
        body = _ukr_vector_registers(c, a_packed, b_packed)
    elif c.acc_in_registers:
        body = _ukr_array_registers(c, a_packed, b_packed)
    else:
        body = _ukr_memory(c, a_packed, b_packed)
    return head + body + "}\n"


def _k_loop(c: GemmConfig, step: Callable[[str], str]) -> str:
    """The k loop unrolled ``ku`` times, then its remainder."""
    out = "  int k = 0;\n"
    if c.ku > 1:
        out += f"  for (; k + {c.ku} <= kc; k += {c.ku}) {{\n"
        out += "".join(step(f"k + {u}" if u else "k") for u in range(c.ku)) + "  }\n"
    out += "  for (; k < kc; ++k) {\n" + step("k") + "  }\n"
    return out


def _ukr_vector_registers(c: GemmConfig, a_packed: bool, b_packed: bool) -> str:
    nv, vw = c.nr // c.vw, c.vw
    vt = "vf" if vw > 1 else "float"
    bload = (lambda k, v: f"*(const {'vf' if b_packed and c.aligned else 'vfu'} *)({_b_ptr(b_packed, k, str(v * vw))})") if vw > 1 \
        else (lambda k, v: f"*({_b_ptr(b_packed, k, str(v))})")
    out = "".join(f"  {vt} " + ", ".join(f"c{i}_{v} = {{0}}" for v in range(nv)) + ";\n" for i in range(c.mr))

    def step(k: str) -> str:
        s = "    {\n" + "".join(f"      const {vt} b{v} = {bload(k, v)};\n" for v in range(nv))
        if c.preload_a:
            s += "".join(f"      const float a{i} = {_a_expr(a_packed, i, k)};\n" for i in range(c.mr))
            s += "".join(f"      c{i}_{v} += a{i} * b{v};\n" for i in range(c.mr) for v in range(nv))
        else:
            for i in range(c.mr):
                s += f"      {{ const float ai = {_a_expr(a_packed, i, k)}; " + " ".join(f"c{i}_{v} += ai * b{v};" for v in range(nv)) + " }\n"
        return s + "    }\n"

    out += _k_loop(c, step)
    cref = (lambda i, v: f"*(vfu *)(c + {i} * ldc + {v * vw})") if vw > 1 else (lambda i, v: f"c[{i} * ldc + {v}]")
    out += "  if (first) {\n" + "".join(f"    {cref(i, v)} = c{i}_{v};\n" for i in range(c.mr) for v in range(nv))
    out += "  } else {\n" + "".join(f"    {cref(i, v)} += c{i}_{v};\n" for i in range(c.mr) for v in range(nv)) + "  }\n"
    return out


def _simd(c: GemmConfig) -> str:
    return f"#pragma omp simd simdlen({c.vw})\n" if c.vw > 1 else ""


def _ukr_array_registers(c: GemmConfig, a_packed: bool, b_packed: bool) -> str:
    simd = _simd(c)
    out = "  float acc[MR][NR] __attribute__((aligned(64)));\n"
    out += f"  for (int i = 0; i < MR; ++i) {{\n{simd}    for (int j = 0; j < NR; ++j) acc[i][j] = 0.f;\n  }}\n"

    def step(k: str) -> str:
        s = "    {\n"
        if c.preload_a:
            s += f"      float av[MR];\n      for (int i = 0; i < MR; ++i) av[i] = {_a_expr(a_packed, 'i', k)};\n"
            s += f"      const float *bk = {_b_ptr(b_packed, k, '0')};\n"
            s += f"      for (int i = 0; i < MR; ++i) {{\n{simd}        for (int j = 0; j < NR; ++j) acc[i][j] += av[i] * bk[j];\n      }}\n"
        else:
            s += f"      const float *bk = {_b_ptr(b_packed, k, '0')};\n"
            s += (f"      for (int i = 0; i < MR; ++i) {{\n        const float ai = {_a_expr(a_packed, 'i', k)};\n"
                  f"{simd}        for (int j = 0; j < NR; ++j) acc[i][j] += ai * bk[j];\n      }}\n")
        return s + "    }\n"

    out += _k_loop(c, step)
    out += (f"  for (int i = 0; i < MR; ++i) {{\n    float *ci = c + i * ldc;\n"
            f"    if (first) {{\n{simd}      for (int j = 0; j < NR; ++j) ci[j] = acc[i][j];\n"
            f"    }} else {{\n{simd}      for (int j = 0; j < NR; ++j) ci[j] += acc[i][j];\n    }}\n  }}\n")
    return out


def _ukr_memory(c: GemmConfig, a_packed: bool, b_packed: bool) -> str:
    """The naive end of the register map: C itself is the accumulator."""
    vector = c.vectorize == "vector_ext" and c.vw > 1
    simd = "" if vector else _simd(c)
    out = f"  if (first)\n    for (int i = 0; i < MR; ++i)\n{simd}      for (int j = 0; j < NR; ++j) c[i * ldc + j] = 0.f;\n"

    def row(k: str, ai: str) -> str:
        if vector:
            return "".join(f"        *(vfu *)(c + i * ldc + {v * c.vw}) += {ai} * *(const vfu *)({_b_ptr(b_packed, k, str(v * c.vw))});\n"
                           for v in range(c.nr // c.vw))
        return f"{simd}        for (int j = 0; j < NR; ++j) c[i * ldc + j] += {ai} * ({_b_ptr(b_packed, k, 'j')})[0];\n"

    def step(k: str) -> str:
        if c.preload_a:
            return (f"    {{\n      float av[MR];\n      for (int i = 0; i < MR; ++i) av[i] = {_a_expr(a_packed, 'i', k)};\n"
                    f"      for (int i = 0; i < MR; ++i) {{\n{row(k, 'av[i]')}      }}\n    }}\n")
        return (f"    for (int i = 0; i < MR; ++i) {{\n      const float ai = {_a_expr(a_packed, 'i', k)};\n"
                f"{row(k, 'ai')}    }}\n")

    return out + _k_loop(c, step)


def _edge_tile(c: GemmConfig) -> str:
    """A partial tile: zero-padded panels (packed already, or packed here), a full micro-kernel into
    a local tile, and only the valid mr x nr part written to C."""
    a_src = "a" if c.pack_a else "ea"
    b_src = "b" if c.pack_b else "eb"
    out = ("static void edge_tile(int kc, int mr, int nr, const float *a, long lda, const float *b, long ldb,\n"
           "                      float *c, long ldc, int first, float *ea, float *eb, float *ct) {\n"
           "  (void)lda; (void)ldb; (void)ea; (void)eb;\n")
    if not c.pack_a:
        out += ("  for (int k = 0; k < kc; ++k)\n    for (int i = 0; i < MR; ++i)\n"
                "      ea[k * MR + i] = i < mr ? a[(size_t)i * lda + k] : 0.f;\n")
    if not c.pack_b:
        out += ("  for (int k = 0; k < kc; ++k)\n    for (int j = 0; j < NR; ++j)\n"
                "      eb[k * NR + j] = j < nr ? b[(size_t)k * ldb + j] : 0.f;\n")
    kernel = "ukr_main" if c.pack_a and c.pack_b else "ukr_packed"
    out += f"  {kernel}(kc, {a_src}, MR, {b_src}, NR, ct, NR, 1);\n"
    out += ("  for (int i = 0; i < mr; ++i)\n    for (int j = 0; j < nr; ++j)\n"
            "      c[(size_t)i * ldc + j] = first ? ct[i * NR + j] : c[(size_t)i * ldc + j] + ct[i * NR + j];\n}\n")
    return out


def _entry(c: GemmConfig) -> str:
    """``abebot_gemm``: workspace, the parallel region and the loop nest."""
    threads = c.threads
    out = ("void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {\n"
           "  if (M <= 0 || N <= 0) return;\n"
           "  const int kcx = MIN(KC_, K > 0 ? K : 1);\n"
           "  const size_t szA = (size_t)((MIN(MC_, M) + MR - 1) / MR) * ((kcx * MR + 15) & ~15);\n"
           "  const size_t szB = (size_t)((MIN(NC_, N) + NR - 1) / NR) * ((kcx * NR + 15) & ~15);\n"
           "  const size_t szE = ((KC_ * MR + 15) & ~15) + ((KC_ * NR + 15) & ~15) + ((MR * NR + 15) & ~15);\n"
           f"  const int T = {threads};\n  (void)szA; (void)szB;\n")
    nA = "T" if c.private("A") else "1"
    nB = "T" if c.private("B") else "1"
    bufs = [("E", "szE * T")]
    if c.pack_a:
        bufs.append(("Ap_all", f"szA * {nA}"))
    if c.pack_b:
        bufs.append(("Bp_all", f"szB * {nB}"))
    for name, size in bufs:
        out += f"  float *{name} = (float *)aligned_alloc(64, ({size}) * sizeof(float));\n"
    # Allocation happens before the parallel region: a thread that failed inside it would skip
    # work-sharing constructs the others wait in.
    out += "  if (" + " || ".join(f"!{n}" for n, _ in bufs) + ") { " + " ".join(f"free({n});" for n, _ in bufs) + " return; }\n"
    out += "  if (K <= 0) {\n    for (size_t i = 0; i < (size_t)M * N; ++i) C[i] = 0.f;\n    " + " ".join(f"free({n});" for n, _ in bufs) + " return;\n  }\n"
    if threads > 1:
        out += "  #pragma omp parallel num_threads(T)\n  {\n  const int tid = omp_get_thread_num();\n"
    else:
        out += "  {\n  const int tid = 0;\n"
    out += ("  float *ea = E + szE * tid, *eb = ea + ((KC_ * MR + 15) & ~15), *ct = eb + ((KC_ * NR + 15) & ~15);\n")
    if c.pack_a:
        out += f"  float *Ap = Ap_all + szA * {'tid' if c.private('A') else '0'};\n"
    if c.pack_b:
        out += f"  float *Bp = Bp_all + szB * {'tid' if c.private('B') else '0'};\n"
    out += _nest(c)
    out += "  }\n" + "".join(f"  free({n});\n" for n, _ in bufs) + "}\n"
    return out


def _nest(c: GemmConfig) -> str:
    """The five loops in genome order with packing, prefetches and the tile at the bottom."""
    out, depth = "", 1
    pending = [t for t in c.order]
    # Prefetch tokens before the first loop go at the top of the region.
    while pending and pending[0] in PREFETCHES:
        out += _prefetch(c, pending.pop(0), None, depth)
    opened: list[str] = []
    while pending:
        tok = pending.pop(0)
        var, extent, step, bound = _LOOP[tok]
        ind = "  " * depth
        if tok == c.parallel_loop:
            sched = "static" if c.schedule == "static" else "dynamic, 1"
            out += f"{ind}#pragma omp for schedule({sched})\n"
        out += f"{ind}for (int {var} = 0; {var} < {extent}; {var} += {step}) {{\n"
        depth += 1
        ind = "  " * depth
        out += f"{ind}const int {bound} = MIN({step}, {extent} - {var});\n"
        opened.append(tok)
        for operand in ("B", "A"):
            if _packed(c, operand) and c.pack_point(operand) == tok:
                out += _pack(c, operand, depth, opened)
        while pending and pending[0] in PREFETCHES:
            out += _prefetch(c, pending.pop(0), tok, depth)
    out += _tile(c, depth)
    for d in range(depth - 1, 0, -1):
        out += "  " * d + "}\n"
    return out


def _packed(c: GemmConfig, operand: str) -> bool:
    return c.pack_a if operand == "A" else c.pack_b


def _pack(c: GemmConfig, operand: str, depth: int, opened: list[str]) -> str:
    """Copy the current block into zero-padded panels; shared buffers are packed cooperatively."""
    ind = "  " * depth
    coop = c.parallel_loop is not None and not c.private(operand)
    pragma = f"{ind}#pragma omp for schedule(static)\n" if coop else ""
    if operand == "B":
        return (f"{ind}const int sb = (kc * NR + 15) & ~15;\n"
                f"{pragma}{ind}for (int p = 0; p < (nc + NR - 1) / NR; ++p) {{\n"
                f"{ind}  float *dst = Bp + (size_t)p * sb;\n{ind}  const int nv = MIN(NR, nc - p * NR);\n"
                f"{ind}  for (int k = 0; k < kc; ++k) {{\n"
                f"{ind}    const float *src = B + (size_t)(pc + k) * N + jc + p * NR;\n"
                f"{ind}    int j = 0;\n{ind}    for (; j < nv; ++j) dst[k * NR + j] = src[j];\n"
                f"{ind}    for (; j < NR; ++j) dst[k * NR + j] = 0.f;\n{ind}  }}\n{ind}}}\n")
    return (f"{ind}const int sa = (kc * MR + 15) & ~15;\n"
            f"{pragma}{ind}for (int p = 0; p < (mc + MR - 1) / MR; ++p) {{\n"
            f"{ind}  float *dst = Ap + (size_t)p * sa;\n{ind}  const int mv = MIN(MR, mc - p * MR);\n"
            f"{ind}  for (int i = 0; i < MR; ++i) {{\n"
            f"{ind}    if (i < mv) {{\n{ind}      const float *src = A + (size_t)(ic + p * MR + i) * K + pc;\n"
            f"{ind}      for (int k = 0; k < kc; ++k) dst[k * MR + i] = src[k];\n"
            f"{ind}    }} else {{\n{ind}      for (int k = 0; k < kc; ++k) dst[k * MR + i] = 0.f;\n{ind}    }}\n"
            f"{ind}  }}\n{ind}}}\n")


def _prefetch(c: GemmConfig, token: str, loop: str | None, depth: int) -> str:
    """Prefetch four cache lines of the operand the next iteration of ``loop`` will read.

    Inside a micro loop over packed panels that is the next panel; otherwise the source matrix at
    the next block's corner (indices clamped; a prefetch never faults but the address stays sane).
    """
    ind = "  " * depth
    operand = token[-1]
    defined = set()
    if loop is not None:
        order = c.loops
        defined = set(order[: order.index(loop) + 1])
    nxt = {t: (f"({_LOOP[t][0]} + {_LOOP[t][2]})" if t == loop else _LOOP[t][0]) if t in defined else "0" for t in LOOPS}
    if operand == "A" and loop == "IR" and c.pack_a:
        addr = f"Ap + (size_t)({nxt['IR']} / MR) * sa"
    elif operand == "B" and loop == "JR" and c.pack_b:
        addr = f"Bp + (size_t)({nxt['JR']} / NR) * sb"
    elif operand == "A":
        addr = f"A + (size_t)MIN(M - 1, {nxt['IC']} + {nxt['IR']}) * K + MIN(K - 1, {nxt['KC']})"
    else:
        addr = f"B + (size_t)MIN(K - 1, {nxt['KC']}) * N + MIN(N - 1, {nxt['JC']} + {nxt['JR']})"
    return f"{ind}for (int q = 0; q < 4; ++q) __builtin_prefetch({addr} + 16 * q, 0, 3);\n"


def _tile(c: GemmConfig, depth: int) -> str:
    ind = "  " * depth
    a = "Ap + (size_t)(ir / MR) * sa" if c.pack_a else "A + (size_t)(ic + ir) * K + pc"
    b = "Bp + (size_t)(jr / NR) * sb" if c.pack_b else "B + (size_t)pc * N + jc + jr"
    return (f"{ind}const float *a_ = {a};\n{ind}const float *b_ = {b};\n"
            f"{ind}float *c_ = C + (size_t)(ic + ir) * N + jc + jr;\n"
            f"{ind}if (mr == MR && nr == NR) ukr_main(kc, a_, K, b_, N, c_, N, pc == 0);\n"
            f"{ind}else edge_tile(kc, mr, nr, a_, K, b_, N, c_, N, pc == 0, ea, eb, ct);\n")
