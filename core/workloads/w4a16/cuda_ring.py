"""The tensor-core path's cp.async ring (``memory_pattern.stages`` > 0, :mod:`cuda_mma`): ``stages``
chunks of every lane's words (and of its two rows of x when the x fragments come with the words and
no norm is fused: the fused kernel puts gamma and 1 / rms on x as it loads it) in flight through
dynamic shared memory, so the bytes in flight cost no registers. Its size, and the kernel's pieces:
``START`` before the chunk loop, ``READ`` (and ``READ_X``) at a chunk's top, ``NEXT`` at its end."""
from __future__ import annotations

from core.genome import Genome

RING_LIMIT = 160 * 1024  # with the reduction's 48 KB, under the 227 KB a block may opt in to


def x_in_ring(g: Genome) -> bool:
    """Whether the x rows go through the ring too (a fused template's genome has a ``norm`` gene)."""
    return bool(g["memory_pattern"]["stages"]) and g["instruction_sequence"]["first"] == "x" \
        and not g["instruction_sequence"].get("norm")


def ring_bytes(g: Genome) -> int:
    """The ring's dynamic shared memory: per stage, step and lane, ``vec`` words of 16 bytes (and 2 x rows)."""
    if g["instruction_sequence"]["math"] != "mma":
        return 0
    per_step = g["memory_pattern"]["vec"] + (2 if x_in_ring(g) else 0)
    return g["memory_pattern"]["stages"] * g["register_allocation"]["batch"] * per_step * g["parallel_config"]["threads"] * 16


# ring[slot][u][i][thread] is uint4 i of step u of the chunk in ``slot``: its
# NB4 words, then (XR = 2) its x rows g and g + 8 (zeros past M). Each lane reads back only what it
# copied itself, so no barrier: the wait for its own copies is enough. The S first chunks are
# issued before the loop; chunk c + S * stride goes, after chunk c's math, to the slot chunk c has
# left; a group is committed even when empty, so the wait counts stay exact.
_ISSUE = """if ({c} < chunks)
#pragma unroll
        for (int u = 0; u < B; ++u) {
#pragma unroll
            for (int i = 0; i < NB4; ++i)
                cp_async16(ring + (({slot} * B + u) * (NB4 + XR) + i) * THREADS + threadIdx.x,
                           wp + ((long long)i * KS + min({c} * B + u, KS - 1)) * 32);
#if XR
#pragma unroll
            for (int h = 0; h < 2; ++h)
                cp_async16(ring + (({slot} * B + u) * (NB4 + XR) + NB4 + h) * THREADS + threadIdx.x,
                           xr[h] + (long long)min({c} * B + u, KS - 1) * 32, ok[h]);
#endif
        }
    asm volatile("cp.async.commit_group;" ::: "memory");"""
START = ("""    extern __shared__ uint4 ring[];
    int slot = 0, ahead = first;
#pragma unroll
    for (int r = 0; r < S; ++r, ahead += stride) {
        """ + _ISSUE.replace("{c}", "ahead").replace("{slot}", "r") + """
    }
""")
READ = """#pragma unroll
        for (int u = 0; u < B; ++u)
#pragma unroll
            for (int i = 0; i < NB4; ++i) w[u][i] = ring[((slot * B + u) * (NB4 + XR) + i) * THREADS + threadIdx.x];
"""
READ_X = """#pragma unroll
        for (int u = 0; u < B; ++u) {
            const uint4 x0 = ring[((slot * B + u) * (NB4 + XR) + NB4) * THREADS + threadIdx.x],
                        x1 = ring[((slot * B + u) * (NB4 + XR) + NB4 + 1) * THREADS + threadIdx.x];
            xf[u][0] = x0.x; xf[u][1] = x1.x; xf[u][2] = x0.y; xf[u][3] = x1.y;
            xf[u][4] = x0.z; xf[u][5] = x1.z; xf[u][6] = x0.w; xf[u][7] = x1.w;
        }
"""
NEXT = ("""
        """ + _ISSUE.replace("{c}", "ahead").replace("{slot}", "slot") + """
        ahead += stride;
        slot = slot + 1 == S ? 0 : slot + 1;""")
